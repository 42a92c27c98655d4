// Text <-> token ids for every vocabulary refit reads (GGUF, llama2.c tokenizer.bin, HF
// tokenizer.json). Behaviour follows llama.cpp's llama_tokenize / llama_detokenize, which
// in turn reproduces the Hugging Face tokenizers on llama.cpp's test vectors:
//
//   encode: cut special/added tokens out of the text (always user-defined added tokens;
//           control tokens such as <s> only when parse_special), then run the vocabulary's
//           algorithm on each text fragment: SentencePiece-style BPE (dummy-prefix space,
//           ' ' -> U+2581, score-ordered merges, <0xXX> byte fallback) or byte-level BPE
//           (pre-tokenizer regexes, GPT-2 byte mapping, rank-ordered merges).
//   decode: concatenate token pieces; byte tokens become raw bytes, so a piece may be a
//           fragment of a UTF-8 character (StreamingDecoder holds such fragments back).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/vocab.h"

namespace refit {

class Normalizer;
class RegexSplitter;

struct DecodeOptions {
  // Control and unknown tokens (<s>, </s>, <|endoftext|>, <unk>) contribute no text.
  bool skip_special = true;
  // llama.cpp's clean-up of tokenizer-inserted spaces (" ," -> ",", " 's" -> "'s", ...);
  // off by default because it does not round-trip text that really contains " ,".
  bool clean_spaces = false;
};

class Tokenizer {
 public:
  explicit Tokenizer(VocabData data);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  const Vocab& vocab() const { return vocab_; }
  size_t size() const { return vocab_.size(); }

  // add_special: add what Hugging Face's encode(add_special_tokens=True) adds: a
  //   tokenizer.json's post-processor tokens (or the "[bos] $A [eos]" template transformers
  //   builds from tokenizer_config.json add_bos_token / add_eos_token); for GGUF
  //   tokenizer.ggml.add_bos_token / add_eos_token or the family default. A chat template's
  //   rendered text already holds its BOS: encode it with add_special=false.
  // parse_special: text spelling a control token ("<s>", "<|im_end|>") becomes that token
  //   (Hugging Face always does this; user-defined added tokens are matched either way).
  std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const;

  // Bytes a token stands for. special=false gives "" for control/unknown tokens.
  std::string token_to_piece(TokenId id, bool special = true) const;
  std::string decode(std::span<const TokenId> ids, const DecodeOptions& options = {}) const;

  // The tokenizer components honoured, one per line, for `refit inspect`: for a
  // tokenizer.json "model BPE (byte-level)", "normalizer NFC", "pre_tokenizer Sequence[Split,
  // ByteLevel]", "post_processor Sequence[ByteLevel, TemplateProcessing(<|begin_of_text|>
  // $A)]", ...; for GGUF / llama2.c the llama.cpp rules the file selects.
  std::vector<std::string> components() const;

 private:
  friend class StreamingDecoder;
  void check_id(TokenId id) const;
  // Text encoding of one fragment that holds no special token.
  void encode_fragment(std::string_view text, bool prefix_space, std::vector<TokenId>& out) const;
  // tokenizer.json vocabularies: Hugging Face's pipeline (added tokens, normalizer,
  // pre-tokenizer, model) for the text between the post-processor's tokens.
  void encode_hf(std::string_view text, bool parse_special, std::vector<TokenId>& out) const;
  void encode_hf_piece(std::string_view text, bool at_start, std::vector<TokenId>& out) const;
  void encode_spm(std::string_view text, std::vector<TokenId>& out) const;
  void encode_bpe(std::string_view text, std::vector<TokenId>& out) const;
  // The piece as decode() emits it at position `index` (leading dummy-prefix space removed
  // for the first text token of an SPM vocabulary).
  std::string piece_for_decode(TokenId id, bool at_text_start, const DecodeOptions& options) const;

  Vocab vocab_;
  std::unique_ptr<RegexSplitter> splitter_;  // byte-level BPE only
  std::unique_ptr<Normalizer> normalizer_;   // hf_pipeline only
  // hf_pipeline: added tokens as matched (text, id), longest first. raw_*: matched in the
  // input; normalized_*: in normalized text. *_user_: user-defined only (parse_special off).
  std::vector<std::pair<std::string, TokenId>> raw_all_, raw_user_, normalized_all_,
      normalized_user_;
};

// Decodes a token stream one id at a time, emitting only complete UTF-8 characters: a
// character split over several byte-fallback tokens (☕ = <0xE2><0x98><0x95>) is held back
// until its last byte arrives. Invariant: the concatenation of every push() result and
// finish() equals Tokenizer::decode() of the same ids.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, DecodeOptions options = {})
      : tokenizer_(tokenizer), options_(options) {}

  // Text that became complete with this token (possibly empty).
  std::string push(TokenId id);
  // Whatever is still held back (an incomplete character at the end of the stream, emitted
  // as its raw bytes so nothing is lost). Resets the decoder.
  std::string finish();
  // Bytes currently held back.
  size_t pending() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  DecodeOptions options_;
  std::string pending_;
  bool at_text_start_ = true;
};

// Splits `bytes` at the end of its last complete UTF-8 character: returns how many leading
// bytes can be emitted now. A trailing sequence is held back only while it could still
// become valid (lead byte followed by fewer continuation bytes than it announces).
size_t utf8_complete_prefix(std::string_view bytes);

}  // namespace refit
