#include "server/prompt_limits.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "server/api_types.h"
#include "tokenizer/token_byte_bound.h"
#include "tokenizer/tokenizer.h"

namespace refit {

namespace {

[[noreturn]] void too_long(const std::string& param, const std::string& message) {
  throw HttpError{400, message, "invalid_request_error", param, "context_length_exceeded"};
}

}  // namespace

PromptLimits prompt_limits(const Tokenizer* tokenizer, int64_t context) {
  PromptLimits limits;
  limits.context = context;
  if (tokenizer && context > 0) {
    const size_t per_token = max_text_bytes_per_token(tokenizer->vocab());
    const auto ctx = static_cast<size_t>(context);
    if (per_token > 0 && per_token <= std::numeric_limits<size_t>::max() / ctx)
      limits.max_text_bytes = ctx * per_token;
  }
  return limits;
}

void check_prompt_text_fits(size_t bytes, const PromptLimits& limits, const std::string& param) {
  if (limits.max_text_bytes == 0 || bytes <= limits.max_text_bytes) return;
  too_long(param, fmt::format("this model's maximum context length is {} tokens; the prompt's {} "
                              "bytes cannot fit (no token of this vocabulary stands for more than "
                              "{} bytes)",
                              limits.context, bytes,
                              limits.max_text_bytes / static_cast<size_t>(limits.context)));
}

void check_prompt_ids_fit(size_t count, const PromptLimits& limits, const std::string& param) {
  if (limits.context <= 0 || count < static_cast<size_t>(limits.context)) return;
  too_long(param, fmt::format("this model's maximum context length is {} tokens; the prompt has "
                              "{} token ids and leaves no room for output",
                              limits.context, count));
}

int64_t checked_max_tokens(std::optional<int64_t> requested, bool requested_null, bool chat,
                           int64_t n_prompt, int64_t context, const GenerationDefaults& defaults) {
  if (n_prompt == 0)
    throw HttpError{400, "the prompt is empty (no tokens)", "invalid_request_error", "prompt", {}};
  const int64_t rest = std::max<int64_t>(context - n_prompt, 0);
  const int64_t max_tokens = requested || (!chat && !requested_null)
                                 ? defaults.max_tokens_for(requested.value_or(16), 0)
                                 : std::min(defaults.max_tokens_for(std::nullopt, rest), rest);
  // Compared without adding: max_tokens may be 2^63 - 1.
  if (max_tokens > context || n_prompt > context - std::max<int64_t>(max_tokens, 1))
    too_long(requested ? "max_tokens" : (chat ? "messages" : "prompt"),
             fmt::format("this model's maximum context length is {} tokens; the request has {} "
                         "prompt tokens and max_tokens {}",
                         context, n_prompt, max_tokens));
  return max_tokens;
}

}  // namespace refit
