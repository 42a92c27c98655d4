// llama2.c checkpoints (karpathy/llama2.c; layouts in ../shared/oracle/FORMATS.md §1–2).
//
// Model .bin, two layouts:
//  * legacy (version 0): 7 × i32 header {dim, hidden_dim, n_layers, n_heads, n_kv_heads,
//    vocab_size, seq_len}, then raw f32 tensors. vocab_size < 0 means the classifier is NOT
//    shared: a separate wcls [vocab, dim] follows the freq_cis tables. No magic: the file
//    size must match the header exactly, which is our only defence against a wrong file.
//  * version 1 (magic "ak42", 256-byte header, shared flag byte, no freq tables).
//  Version 2 (int8 groups, runq.c) is refused with a clear error.
// Tensors use run.c's names and are stacked over layers: wq is [n_layers, dim, dim], etc.,
// each matrix in nn.Linear layout [out_features, in_features].
//
// Tokenizer .bin: u32 max_token_length, then per token {f32 score, i32 len, len bytes}. The
// vocabulary size is not in the file; it comes from the model header.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "formats/byte_source.h"

namespace refit {

struct Llama2cConfig {
  int32_t dim = 0;
  int32_t hidden_dim = 0;
  int32_t n_layers = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t vocab_size = 0;  // always positive here; the sign is in shared_classifier
  int32_t seq_len = 0;
  bool shared_classifier = true;
  int version = 0;  // 0 legacy, 1 "ak42" v1
  int32_t head_size() const { return dim / n_heads; }
  int32_t kv_dim() const { return dim / n_heads * n_kv_heads; }
};

class Llama2cModel {
 public:
  static constexpr int32_t kMaxDim = 1 << 20;  // sanity bound on every header field

  static std::shared_ptr<Llama2cModel> open(const std::string& path);
  static std::shared_ptr<Llama2cModel> parse(ByteSource source);

  const std::string& path() const { return source_.path(); }
  const ByteSource& source() const { return source_; }
  const Llama2cConfig& config() const { return config_; }
  // In file order: token_embedding_table [vocab, dim], rms_att_weight [L, dim],
  // wq [L, dim, dim], wk [L, kv_dim, dim], wv [L, kv_dim, dim], wo [L, dim, dim],
  // rms_ffn_weight [L, dim], w1 [L, hidden, dim], w2 [L, dim, hidden], w3 [L, hidden, dim],
  // rms_final_weight [dim], freq_cis_real / freq_cis_imag [seq_len, head_size/2] (legacy only),
  // wcls [vocab, dim] (only when not shared). All f32, read-only views over the mapping.
  const std::vector<std::pair<std::string, Tensor>>& tensors() const { return tensors_; }
  const Tensor* find_tensor(std::string_view name) const;
  const Tensor& tensor(std::string_view name) const;  // throws when absent
  // The classifier: wcls when present, else token_embedding_table.
  const Tensor& classifier() const;

 private:
  void parse_file();
  ByteSource source_;
  Llama2cConfig config_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
};

// The raw contents of a llama2.c tokenizer .bin; the tokenizer layer builds a tokenizer
// from it.
struct Llama2cTokenizerData {
  uint32_t max_token_length = 0;
  std::vector<std::string> pieces;  // raw bytes, not NUL-terminated in the file
  std::vector<float> scores;
};

// Reads exactly `vocab_size` tokens and requires the file to end there; when vocab_size is
// nullopt, reads tokens until the end of the file. Throws FormatError naming the file.
Llama2cTokenizerData read_llama2c_tokenizer(const std::string& path,
                                            std::optional<int32_t> vocab_size = std::nullopt);
Llama2cTokenizerData parse_llama2c_tokenizer(const ByteSource& source,
                                             std::optional<int32_t> vocab_size = std::nullopt);

}  // namespace refit
