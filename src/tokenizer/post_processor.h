// Hugging Face post-processors: which special tokens encode(text, add_special_tokens=True)
// puts around the ids of one sequence. Only the single-sequence form matters to refit (it
// never encodes pairs), so a post-processor reduces to the ids before and after `$A`.
//
//   TemplateProcessing  the SpecialToken entries of "single" before / after the $A entry, each
//                       contributing the ids its "special_tokens" entry lists
//   BertProcessing,     cls before, sep after
//   RobertaProcessing
//   ByteLevel           nothing (it only adjusts offsets)
//   Sequence            each processor wraps the result of the previous one
//
// Anything else is refused by name. transformers may rebuild the template from
// tokenizer_config.json's add_bos_token / add_eos_token (apply_bos_eos_flags).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/vocab.h"

namespace refit {

struct SpecialTokenWrap {
  std::vector<TokenId> prefix, suffix;
  std::string description;  // "Sequence[ByteLevel, TemplateProcessing(<|begin_of_text|> $A)]"
};

// Reads tokenizer.json's "post_processor" (null: nothing added). `tokens` gives the text of
// each id for the description and the range check. Throws FormatError naming `source`.
SpecialTokenWrap post_processor_from_hf(const nlohmann::json& post_processor,
                                        const std::vector<std::string>& tokens,
                                        const std::string& source);

// transformers' update_post_processor: when tokenizer_config.json sets add_bos_token or
// add_eos_token (transformers 5's TokenizersBackend; LlamaTokenizerFast and its copies do it
// always, with add_bos_token defaulting to true), the single template becomes
// "[bos] $A [eos]". A flag the config leaves out counts as `default_add_bos` / false; a flag
// whose token is undefined is dropped, as transformers 5 drops it.
void apply_bos_eos_flags(std::optional<bool> add_bos, std::optional<bool> add_eos,
                         bool default_add_bos, TokenId bos, TokenId eos,
                         const std::vector<std::string>& tokens, SpecialTokenWrap& wrap);

}  // namespace refit
