// A synthetic SentencePiece-style vocabulary for synthetic checkpoints, and the tokenizer
// files that describe it in both checkpoint formats:
//   * GGUF: tokenizer.ggml.model "llama" (SPM) with tokens, scores and token types;
//   * Hugging Face: tokenizer.json in the Llama-2 style (BPE with byte_fallback, merges derived
//     from the pieces so that merge rank follows piece score, as transformers' LlamaConverter
//     does) and tokenizer_config.json.
// Both describe the same tokenisation: repeatedly merge the adjacent pair whose union is the
// highest-scored piece, falling back to <0xXX> byte tokens for characters with no piece.
//
// Layout: <unk>=0, <s>=1, </s>=2, <0x00>..<0xFF> = 3..258 (BYTE), then merged pieces in
// decreasing score (common English words and subwords with the ▁ word-boundary marker, then
// frequent letter n-grams), and last the single characters: "▁" and every printable ASCII
// character, so any ASCII text tokenises without byte fallback.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace refit {

class GgufWriter;
class Tokenizer;

// GGUF / llama.cpp token types (llama_token_type).
enum class SyntheticTokenType : int32_t {
  normal = 1,
  unknown = 2,
  control = 3,
  byte = 6,
};

struct SyntheticVocab {
  std::vector<std::string> tokens;  // UTF-8 pieces, "▁" marks a word boundary
  std::vector<float> scores;        // higher merges first; 0 for special and byte tokens
  std::vector<int32_t> types;       // SyntheticTokenType values
  int32_t unk_id = 0;
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  int32_t first_byte_id = 3;  // <0x00>
  size_t size() const { return tokens.size(); }
};

// Smallest vocabulary: 3 specials + 256 bytes + "▁" + the 94 visible ASCII characters.
inline constexpr int64_t kSyntheticVocabMinSize = 3 + 256 + 95;

// Deterministic: the same size always gives the same vocabulary. Throws below the minimum.
SyntheticVocab synthetic_vocab(int64_t vocab_size);

// The SentencePiece tokenizer of synthetic_vocab(vocab_size), BOS added (the demo model's).
std::unique_ptr<Tokenizer> synthetic_tokenizer(int64_t vocab_size);

// BPE merges "left right" in rank order, derived from the pieces (both halves in the vocab,
// ordered by the merged piece's score, then by the ids of the halves).
std::vector<std::string> synthetic_vocab_merges(const SyntheticVocab& vocab);

// tokenizer.ggml.* keys: model "llama", tokens, scores, token_type, special ids,
// add_bos_token = true, add_eos_token = false, add_space_prefix = true.
void add_gguf_tokenizer_metadata(GgufWriter& writer, const SyntheticVocab& vocab);

// Hugging Face tokenizer.json (Llama-2 style) and tokenizer_config.json.
nlohmann::json hf_tokenizer_json(const SyntheticVocab& vocab);
nlohmann::json hf_tokenizer_config_json(const SyntheticVocab& vocab, int64_t model_max_length);

}  // namespace refit
