// Pre-tokenization for byte-level BPE: the text is cut into pieces by a sequence of
// regexes before merges run, so merges never cross a piece boundary.
//
// Each regex splits every current piece into its matches and the text between them, both
// kept (Hugging Face's Split pre-tokenizer with behaviour "Isolated"); the next regex then
// splits those pieces further. A single GPT-2 pattern is just the one-regex case. This is
// why llama.cpp lists several regexes for DeepSeek and Falcon.
//
// Regexes run in PCRE2 with UTF and UCP (Unicode classes for \p{L}, \s, ...), JIT-compiled,
// and PCRE2_MATCH_INVALID_UTF, so invalid UTF-8 input is matched around, never rejected.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace refit {

// What a GGUF `tokenizer.ggml.pre` name implies (llama.cpp's llama-vocab.cpp table).
struct PreTokenizerPreset {
  std::vector<std::string> regexes;
  bool ignore_merges = false;  // look the whole piece up before merging (llama3)
  bool add_bos = false;        // BPE default for tokenizer.ggml.add_bos_token
  bool clean_spaces = true;    // llama.cpp's detokenizer clean-up
};

// The preset for a pre-tokenizer name; an empty name means llama.cpp's "default".
// Throws Error naming the pre-tokenizer and `source` for an unknown name.
PreTokenizerPreset pre_tokenizer_preset(const std::string& name, const std::string& source);

// Hugging Face's GPT-2 pattern, what ByteLevel(use_regex=true) applies.
const char* gpt2_pre_tokenizer_regex();

// The o200k pattern (GPT-4o, gpt-oss), as its tokenizer.json Split writes it: GGUF pre
// "gpt-4o" (or "o200k") runs this.
const char* o200k_pre_tokenizer_regex();

class RegexSplitter {
 public:
  // Compiles every pattern; throws Error with the PCRE2 message and the pattern.
  explicit RegexSplitter(const std::vector<std::string>& patterns);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Splits `text` into consecutive non-empty pieces whose concatenation is `text`.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> regexes_;
};

}  // namespace refit
