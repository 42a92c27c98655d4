// The OpenAI-compatible request parameters the server accepts, parsed and validated from
// JSON, and the error type every handler converts to an OpenAI-style error body.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/generation_defaults.h"
#include "runtime/sampler.h"
#include "server/chat_template.h"  // ChatInput

namespace refit {

// {"error": {"message", "type", "param", "code"}} with this HTTP status.
struct HttpError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, if any
  std::string code;
  nlohmann::json body() const;
};

struct GenerationParams {
  bool chat = false;
  std::string model;
  std::vector<std::string> prompt_texts;         // completions: text prompts
  std::vector<std::vector<int32_t>> prompt_ids;  // completions: token-id prompts
  ChatInput chat_input;                          // chat: what the template sees
  // Unset: 16 for completions (vLLM's default; null: as chat), for chat the model's
  // generation_config max_new_tokens, else the rest of the context.
  std::optional<int64_t> max_tokens;
  bool max_tokens_null = false;  // completions: "max_tokens": null given
  SamplingParams sampling;
  // The sampling fields the request set itself (explicit 0 and 1.0 included); the others
  // take the model's generation_config.json defaults (runtime/generation_defaults.h).
  SamplingFieldsGiven sampling_given;
  bool seed_given = false;
  std::vector<std::string> stop;
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int logprobs = -1;           // -1 off; completions: top count 0..20; chat: top_logprobs
  bool ignore_eos = false;
  bool echo = false;
  // vLLM's extra sampling fields
  int64_t min_tokens = 0;
  std::vector<int32_t> stop_token_ids;
  bool skip_special_tokens = true;
  bool include_stop_str_in_output = false;
  bool return_tokens_as_token_ids = false;
  int prompt_logprobs = -1;  // -1 off; else the top count per prompt position (0: just the token's)
  // vLLM's return_token_ids: the prompt's ids and each choice's generated ids in the
  // response, so a client sees exactly what ran.
  bool return_token_ids = false;
  // Mixture of experts: the choice's routed_experts (base64 int32 [positions, moe layers, k]).
  bool return_routed_experts = false;
  // Specials the tokenizer adds (BOS) on top of the prompt text: vLLM's default is true
  // for completions and false for chat, whose template writes them.
  bool add_special_tokens = true;
};

// Throws HttpError (400) naming the field for a malformed known field; unknown fields are
// ignored (server/request_fields.h). `max_logprobs` caps logprobs/top_logprobs/prompt_logprobs.
// `ordered_body`, the same body parsed keeping key order, is what a chat's template sees.
// `context` (tokens, 0: unchecked) refuses a token-id prompt that cannot fit before its ids
// are converted.
GenerationParams parse_generation_request(const nlohmann::json& body, bool chat,
                                          int max_logprobs = 20,
                                          const nlohmann::ordered_json* ordered_body = nullptr,
                                          int64_t context = 0);

// A 400 naming the request field `param` (empty: the body as a whole).
[[noreturn]] void bad_request(const std::string& param, const std::string& message);
// The value of field `name` as a number, an integer or a bool; a 400 naming it otherwise.
double json_number(const nlohmann::json& value, const std::string& name);
int64_t json_integer(const nlohmann::json& value, const std::string& name);
bool json_boolean(const nlohmann::json& value, const std::string& name);
// The same within [lo, hi], checked before any narrowing (a double beyond float's range is
// refused, never cast to inf); the 400 names the field and the range.
float json_float_in(const nlohmann::json& value, const std::string& name, double lo, double hi);
int64_t json_integer_in(const nlohmann::json& value, const std::string& name, int64_t lo,
                        int64_t hi);

// Parses a request body; HttpError 400 with the parser's message when it is not JSON.
nlohmann::json parse_json_body(const std::string& body);
// The same, keeping every object's key order (what a chat template is given).
nlohmann::ordered_json parse_json_body_ordered(const std::string& body);

}  // namespace refit
