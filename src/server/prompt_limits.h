// A prompt and its output against the served context, checked before the work is spent: a
// text prompt's length in bytes before it is tokenized (tokenizer/token_byte_bound.h), a
// token-id prompt's length before its ids are converted, and max_tokens without overflow
// (2^63 - 1 is a number a client may send).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "runtime/generation_defaults.h"

namespace refit {

class Tokenizer;

struct PromptLimits {
  int64_t context = 0;        // tokens; 0: unchecked
  size_t max_text_bytes = 0;  // longest text that can still fit; 0: no bound from bytes
};

// The limits for `context` tokens with this tokenizer (null: token ids only).
PromptLimits prompt_limits(const Tokenizer* tokenizer, int64_t context);

// A 400 (code context_length_exceeded, naming `param`) when a text of `bytes` bytes or a
// list of `count` token ids cannot fit.
void check_prompt_text_fits(size_t bytes, const PromptLimits& limits, const std::string& param);
void check_prompt_ids_fit(size_t count, const PromptLimits& limits, const std::string& param);

// max_tokens of one OpenAI prompt of n_prompt tokens (its default when unset: 16 for
// completions unless null was sent, for chat the model's max_new_tokens, at most the rest of
// the context), or a 400 naming the field when prompt and output do not fit in `context`.
int64_t checked_max_tokens(std::optional<int64_t> requested, bool requested_null, bool chat,
                           int64_t n_prompt, int64_t context, const GenerationDefaults& defaults);

}  // namespace refit
