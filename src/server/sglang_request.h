// SGLang's /generate request (sglang python/sglang/srt/managers/io_struct.py
// GenerateReqInput and sampling/sampling_params.py), parsed and validated into the
// requests the scheduler runs: single or batched prompts, per-prompt sampling and logprob
// fields, n > 1 expanded as SGLang expands it ([p0, p1, p0, p1]; a string rid becomes
// rid_0, rid_1, ...; sample j draws with sampling_seed + j). Unknown fields are ignored
// (server/request_fields.h); malformed known ones throw HttpError 400 naming the field;
// fields refit knows but cannot honour (constrained decoding, images, LoRA, per-id
// logprobs) are refused by name.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/generation_defaults.h"
#include "runtime/scheduler.h"
#include "server/choice_stream.h"
#include "server/prompt_limits.h"
#include "tokenizer/tokenizer.h"

namespace refit {

struct SglangItem {
  std::string rid;
  RequestSpec spec;
  std::vector<std::string> stop;  // stop strings (the text is cut before them unless no_stop_trim)
  ChoiceOptions choice;
  bool return_logprob = false;
  int64_t logprob_start = -1;  // -1: no input logprobs
  int top_logprobs = 0;
  // return_routed_experts: meta_info.routed_experts (base64 int32), rows from this position.
  int64_t routed_experts_start = 0;
};

struct SglangGenerateRequest {
  std::vector<SglangItem> items;  // in SGLang's order
  bool single = true;             // answer one object, not a list
  bool stream = false;
  bool text_in_logprobs = false;  // return_text_in_logprobs
};

// What the parse needs to know about the served model.
struct SglangLimits {
  const Tokenizer* tokenizer = nullptr;  // null: input_ids only
  std::string model;                     // for messages
  int64_t context = 0;
  PromptLimits prompt;  // refuses a prompt that cannot fit before it is tokenized
  int64_t vocab = 0;
  std::vector<int32_t> eos_ids;  // the model's stop ids (Engine::stop_ids), unless ignore_eos
  const GenerationDefaults* defaults = nullptr;  // generation_config.json's; null: none
  int max_logprobs = 20;
  LogprobMode logprob_mode = LogprobMode::sglang;
  int64_t routing_width = 0;  // mixture of experts: moe layers x k (0: dense, no routing)
};

SglangGenerateRequest parse_sglang_generate(const nlohmann::json& body, const SglangLimits& limits);

}  // namespace refit
