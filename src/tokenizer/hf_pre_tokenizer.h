// tokenizer.json "pre_tokenizer" -> the shape refit's encoder runs: for byte-level BPE, the
// regex sequence the RegexSplitter applies (Split, Digits, Punctuation, ByteLevel's GPT-2
// pattern); for SentencePiece-style BPE, Metaspace. A type, or an arrangement, that refit
// cannot run exactly is refused by name, never skipped.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/vocab.h"

namespace refit {

struct HfPreTokenizer {
  bool byte_level = false;        // a ByteLevel step (bytes mapped to GPT-2 characters)
  bool add_prefix_space = false;  // ByteLevel(add_prefix_space=true)
  std::vector<std::string> regexes;
  std::optional<MetaspaceOptions> metaspace;
  std::string description;  // "Sequence[Split, ByteLevel]", "none"
};

HfPreTokenizer pre_tokenizer_from_hf(const nlohmann::json& pre_tokenizer,
                                     const std::string& source);

}  // namespace refit
