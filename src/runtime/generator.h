// Single-sequence generation: the prompt in one forward pass (prefill), then one token
// per step (decode) with the KV cache. Stops at max_tokens, at a stop token, or when a
// callback asks. Optionally records the logits of every position.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "models/model.h"
#include "runtime/sampler.h"

namespace refit {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 128;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one of these
  bool record_logits = false;        // rows for every fed position, prompt and generated
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (a stop token included when hit)
  std::string finish_reason;    // "length", "stop", "callback"
  std::vector<float> logits;    // [n_positions][vocab] when record_logits
  int64_t n_positions = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  uint64_t weight_version = 0;  // the weights every token was computed with (Engine sets it)
};

// Called after each generated token; return false to stop.
using TokenCallback = std::function<bool(int32_t token)>;

GenerateResult generate(const Model& model, const GenerateRequest& request,
                        const TokenCallback& on_token = {});

}  // namespace refit
