// Hugging Face `tokenizers` normalizers: the text transformations a tokenizer.json applies to
// every piece of input text between added tokens, before pre-tokenization. They are kept as
// plain data (NormalizerStep, what the tokenizer.json loader fills in) and run by Normalizer,
// so a vocabulary stays copyable and its description printable.
//
// Semantics follow tokenizers 0.23: NFC/NFD/NFKC/NFKD (here through utf8proc), Lowercase (the
// per-character full lowercase mapping Rust's char::to_lowercase gives, so "İ" becomes
// "i̇"), Strip (Unicode White_Space at either end), StripAccents (drops combining marks),
// Replace (every non-overlapping match of a literal or a regex, replaced by literal content),
// Prepend (only to non-empty text). Sequence is flattened into the step list.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace refit {

struct NormalizerStep {
  enum class Kind { nfc, nfd, nfkc, nfkd, lowercase, strip, strip_accents, replace, prepend };
  Kind kind = Kind::nfc;
  std::string pattern;             // replace: the literal, or the regex when `regex`
  bool regex = false;              // replace
  std::string content;             // replace: the replacement; prepend: the prefix
  bool left = true, right = true;  // strip
};

// Reads a tokenizer.json "normalizer" value (null: no steps). A type tokenizers has but refit
// does not run exactly (BertNormalizer, Precompiled, Nmt, ...) is refused by name: a silently
// skipped normalizer would tokenize differently from Hugging Face without any sign.
std::vector<NormalizerStep> normalizer_from_hf(const nlohmann::json& normalizer,
                                               const std::string& source);

// "NFC", "Sequence[Prepend(▁), Replace(' ' -> ▁)]"-style text for `refit inspect`.
std::string describe_normalizer(const std::vector<NormalizerStep>& steps);

// `text` with every occurrence of `from` replaced by `to` (left to right, not overlapping;
// an empty `from` changes nothing): Replace normalizers, Metaspace's escaped space.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

class Normalizer {
 public:
  // Compiles the regexes of Replace steps; throws Error naming a pattern that fails.
  explicit Normalizer(std::vector<NormalizerStep> steps);
  ~Normalizer();
  Normalizer(const Normalizer&) = delete;
  Normalizer& operator=(const Normalizer&) = delete;

  bool empty() const { return steps_.empty(); }
  std::string normalize(std::string_view text) const;

 private:
  struct Compiled;
  std::vector<NormalizerStep> steps_;
  std::vector<std::unique_ptr<Compiled>> regexes_;  // one per step (null unless regex Replace)
};

}  // namespace refit
