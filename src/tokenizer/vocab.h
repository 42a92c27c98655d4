// A tokenizer vocabulary as plain data (VocabData, what every loader fills in) and its
// indexed form (Vocab: text -> id, merge ranks, the special-token list), independent of
// which file it came from. The algorithms (spm_tokenizer.cpp, bpe_tokenizer.cpp) read only
// Vocab, so a GGUF, a llama2.c tokenizer.bin and an HF tokenizer.json that describe the same
// vocabulary tokenize identically.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/normalizer.h"

namespace refit {

using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

// GGUF `tokenizer.ggml.token_type` values (llama.cpp's llama_token_type), kept numerically
// identical so the GGUF array maps directly.
enum class TokenType : uint8_t {
  token_type_undefined = 0,
  token_type_normal = 1,
  token_type_unknown = 2,
  token_type_control = 3,
  token_type_user_defined = 4,
  token_type_unused = 5,
  token_type_byte = 6,
};

// Which merge algorithm the vocabulary uses.
enum class VocabModel : uint8_t {
  // SentencePiece-style BPE over Unicode characters: spaces are escaped to U+2581 (▁),
  // a dummy prefix space is added, the pair whose merged piece has the highest score
  // merges first (or the lowest merge rank, when the vocabulary carries merges, as an HF
  // tokenizer.json does), and characters with no piece fall back to <0xXX> byte tokens.
  // GGUF `tokenizer.ggml.model = "llama"`, llama2.c tokenizer.bin.
  vocab_model_spm,
  // Byte-level BPE (GPT-2): a pre-tokenizer regex splits the text, each byte is mapped to
  // a printable character, and merges apply by rank. GGUF `tokenizer.ggml.model = "gpt2"`.
  vocab_model_bpe,
};

// HF Metaspace's prepend_scheme: where the replacement character is put before a text piece
// that does not start with one already. "first": only before the piece that starts the
// input (not after an added token).
enum class PrependScheme : uint8_t { always, first, never };

// HF Metaspace pre-tokenizer: ' ' becomes `replacement`, which is prepended per `prepend`;
// split=true cuts the text before every replacement and each word merges alone.
struct MetaspaceOptions {
  std::string replacement = "\xE2\x96\x81";
  PrependScheme prepend = PrependScheme::always;
  bool split = true;
};

// Everything a loader knows about a vocabulary. Loaders fill this in; Vocab validates it.
struct VocabData {
  std::string source;  // file the vocabulary came from (for error messages)
  VocabModel model = VocabModel::vocab_model_spm;
  std::vector<std::string> tokens;  // id -> token text, as stored (▁ / Ġ conventions kept)
  std::vector<float> scores;        // empty, or one per token (SPM merge priority)
  std::vector<TokenType> types;     // empty (all normal), or one per token
  // BPE merges in rank order ("left right" split once). Empty for score-based SPM.
  std::vector<std::pair<std::string, std::string>> merges;
  // Pre-tokenizer: either a GGUF `tokenizer.ggml.pre` name ("gpt-2", "llama-bpe", ...), or
  // explicit regexes (from an HF tokenizer.json), applied in sequence. Explicit regexes win.
  std::string pre_name;
  std::vector<std::string> pre_regexes;
  bool pre_add_prefix_space = false;  // HF ByteLevel(add_prefix_space=true)
  // HF tokenizer.json only (hf_pipeline): text between added tokens goes through
  // `normalizer` and then, for SPM, `metaspace`, exactly as Hugging Face tokenizers does,
  // instead of llama.cpp's dummy-prefix rules (add_space_prefix then only tells decode to
  // drop the leading space).
  bool hf_pipeline = false;
  std::vector<NormalizerStep> normalizer;
  std::optional<MetaspaceOptions> metaspace;
  // Added tokens matched in the normalized text (HF "normalized": true) rather than in the
  // raw input.
  std::vector<TokenId> normalized_tokens;
  // What encode(add_special=true) puts around the ids (HF post-processor). Unset: BOS when
  // add_bos, EOS when add_eos.
  std::optional<std::vector<TokenId>> special_prefix, special_suffix;
  // The components honoured, one line each, for `refit inspect` (Tokenizer::components()).
  std::vector<std::string> components;

  TokenId bos = kNoToken, eos = kNoToken, unk = kNoToken, pad = kNoToken;
  std::optional<bool> add_bos, add_eos;  // unset: the model family's default
  std::optional<bool> add_space_prefix;  // SPM dummy prefix; unset: true for SPM
  std::optional<bool> ignore_merges;     // whole pre-token looked up first (llama3)
  std::optional<bool> clean_spaces;      // llama.cpp's decode clean-up (" ," -> ",")
  // Added/special tokens whose neighbouring whitespace is swallowed when they are split
  // out of the text (HF added_tokens lstrip/rstrip).
  std::vector<TokenId> lstrip_tokens, rstrip_tokens;
};

// The indexed, validated vocabulary the tokenizer algorithms use.
class Vocab {
 public:
  // Validates ids (special ids in range, array lengths equal, merges non-empty) and
  // throws FormatError naming data.source on the first problem.
  explicit Vocab(VocabData data);

  size_t size() const { return tokens_.size(); }
  VocabModel model() const { return model_; }
  const std::string& source() const { return source_; }
  const std::string& text(TokenId id) const { return tokens_[static_cast<size_t>(id)]; }
  float score(TokenId id) const {
    return scores_.empty() ? 0.0f : scores_[static_cast<size_t>(id)];
  }
  TokenType type(TokenId id) const { return types_[static_cast<size_t>(id)]; }
  bool contains(TokenId id) const { return id >= 0 && static_cast<size_t>(id) < tokens_.size(); }

  // Exact token text -> id, kNoToken when absent.
  TokenId find(std::string_view text) const;
  // Rank of the merge (left, right), or -1 when the pair does not merge.
  int merge_rank(std::string_view left, std::string_view right) const;
  bool has_merges() const { return !merge_ranks_.empty(); }
  // SPM: the <0xXX> token for a byte (or the single-byte token), kNoToken when neither exists.
  TokenId byte_token(uint8_t byte) const { return byte_tokens_[byte]; }
  // SPM: the byte a <0xXX> token stands for; nullopt for other tokens.
  std::optional<uint8_t> token_byte(TokenId id) const;

  TokenId bos() const { return bos_; }
  TokenId eos() const { return eos_; }
  TokenId unk() const { return unk_; }
  TokenId pad() const { return pad_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  bool ignore_merges() const { return ignore_merges_; }
  bool clean_spaces() const { return clean_spaces_; }
  bool hf_pipeline() const { return hf_pipeline_; }
  const std::vector<NormalizerStep>& normalizer() const { return normalizer_; }
  const std::optional<MetaspaceOptions>& metaspace() const { return metaspace_; }
  bool normalized(TokenId id) const { return flag(id, kNormalized); }
  // The ids encode(add_special=true) adds before / after the text's ids.
  const std::vector<TokenId>& special_prefix() const { return special_prefix_; }
  const std::vector<TokenId>& special_suffix() const { return special_suffix_; }
  const std::vector<std::string>& components() const { return components_; }
  const std::string& pre_name() const { return pre_name_; }
  const std::vector<std::string>& pre_regexes() const { return pre_regexes_; }
  bool pre_add_prefix_space() const { return pre_add_prefix_space_; }

  // Control, user-defined and unknown tokens, longest text first: the tokens that are cut
  // out of the text before the merge algorithm runs.
  const std::vector<TokenId>& special_tokens() const { return special_tokens_; }
  bool lstrip(TokenId id) const { return flag(id, kLstrip); }
  bool rstrip(TokenId id) const { return flag(id, kRstrip); }
  bool is_special(TokenId id) const {  // control or unknown: hidden when decoding by default
    TokenType t = type(id);
    return t == TokenType::token_type_control || t == TokenType::token_type_unknown;
  }

 private:
  static constexpr uint8_t kLstrip = 1, kRstrip = 2, kNormalized = 4;
  bool flag(TokenId id, uint8_t f) const {
    return contains(id) && !flags_.empty() && (flags_[static_cast<size_t>(id)] & f);
  }
  static std::string merge_key(std::string_view left, std::string_view right);

  std::string source_;
  VocabModel model_;
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  std::vector<uint8_t> flags_;
  std::unordered_map<std::string, TokenId> token_to_id_;
  std::unordered_map<std::string, int> merge_ranks_;
  TokenId byte_tokens_[256];
  std::vector<TokenId> special_tokens_;
  std::string pre_name_;
  std::vector<std::string> pre_regexes_;
  bool pre_add_prefix_space_ = false;
  bool hf_pipeline_ = false;
  std::vector<NormalizerStep> normalizer_;
  std::optional<MetaspaceOptions> metaspace_;
  std::vector<TokenId> special_prefix_, special_suffix_;
  std::vector<std::string> components_;
  TokenId bos_, eos_, unk_, pad_;
  bool add_bos_, add_eos_, add_space_prefix_, ignore_merges_, clean_spaces_;
};

}  // namespace refit
