// One entry point for every checkpoint format: "open this path" gives its format, its
// architecture and hyper-parameters as the file states them, a vocabulary summary, and the
// list of named tensors, each readable as a zero-copy view. `refit inspect` prints this; the
// model loader uses it and, for format-specific needs, the underlying reader (gguf(), ...).
//
// Detection: a directory is a Hugging Face folder; otherwise the first bytes decide ("GGUF"
// magic, a safetensors header length followed by '{'); anything else is tried as a llama2.c
// model.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "formats/gguf.h"
#include "formats/hf_folder.h"
#include "formats/llama2c.h"
#include "formats/safetensors.h"

namespace refit {

enum class CheckpointFormat : uint8_t { gguf, safetensors, hf_folder, llama2c };
const char* checkpoint_format_name(CheckpointFormat f);  // "gguf", "safetensors", ...

struct CheckpointTensor {
  std::string name;
  std::string dtype;  // refit dtype name ("f32", "bf16") or ggml type name ("q8_0", "mxfp4")
  Shape shape;        // row-major logical shape
  uint64_t nbytes = 0;
};

struct VocabSummary {
  bool present = false;
  std::string source;  // where the vocabulary comes from (file or metadata)
  std::string model;   // "llama" (SentencePiece), "gpt2" (byte-level BPE), "llama2c", ...
  std::string pre;     // pre-tokenizer name when the file states one
  int64_t size = 0;
  int64_t n_merges = 0;
  std::optional<int64_t> bos_id, eos_id;
  std::string bos_text, eos_text;
};

class Checkpoint {
 public:
  // `access`: how tensor bytes are read (see FileAccess). A refit reads a copy, so that
  // nothing a writer does to the files after staging can reach the commit.
  static std::unique_ptr<Checkpoint> open(const std::string& path,
                                          FileAccess access = FileAccess::mapped);

  CheckpointFormat format() const { return format_; }
  const std::string& path() const { return path_; }
  const std::string& architecture() const { return architecture_; }
  // Hyper-parameters as the file names them (GGUF keys, config.json fields, llama2.c header).
  const nlohmann::ordered_json& hparams() const { return hparams_; }
  const VocabSummary& vocab() const { return vocab_; }
  const std::vector<CheckpointTensor>& tensors() const { return tensors_; }
  uint64_t total_bytes() const;

  // Zero-copy view of a plain-typed tensor (throws for quantized GGUF types: use gguf()).
  Tensor tensor(std::string_view name) const;

  // Throws FormatError "<file>: changed while it was read (...)" when one of the files was
  // truncated under a read or rewritten since it was opened. Call it after reading tensors
  // through views (a mapped read of a truncated file sees zeros, not a crash).
  void check_unchanged() const;

  // The underlying reader; nullptr for other formats.
  const GgufFile* gguf() const { return gguf_.get(); }
  const SafetensorsFile* safetensors() const { return safetensors_.get(); }
  const HfFolder* hf() const { return hf_.get(); }
  const Llama2cModel* llama2c() const { return llama2c_.get(); }

 private:
  void describe_gguf();
  void describe_safetensors(const SafetensorsFile& f);
  void describe_hf();
  void describe_llama2c();
  CheckpointFormat format_ = CheckpointFormat::gguf;
  std::string path_, architecture_;
  nlohmann::ordered_json hparams_ = nlohmann::ordered_json::object();
  VocabSummary vocab_;
  std::vector<CheckpointTensor> tensors_;
  std::shared_ptr<GgufFile> gguf_;
  std::shared_ptr<SafetensorsFile> safetensors_;
  std::shared_ptr<HfFolder> hf_;
  std::shared_ptr<Llama2cModel> llama2c_;
};

}  // namespace refit
