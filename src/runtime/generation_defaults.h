// The sampling defaults a model's generation_config.json recommends, applied to every field a
// request leaves unset, as vLLM applies them (`--generation-config auto`, its default since
// 0.8: ModelConfig.get_diff_sampling_param and the requests' to_sampling_params):
//
//   * the fields read are vLLM's: temperature, top_p, top_k, min_p, repetition_penalty and
//     max_new_tokens (the default max_tokens); nothing else (do_sample, max_length, num_beams)
//     changes sampling. vLLM ignores do_sample: a file with do_sample false and temperature 0.6
//     samples at 0.6 in vLLM, and so it does here (noted in `notes`).
//   * vLLM reads the file through transformers' GenerationConfig.to_diff_dict(), which drops a
//     value equal to transformers' own default (temperature 1.0, top_p 1.0, top_k 50,
//     repetition_penalty 1.0): so "top_k": 50 in a file does not apply (noted in `notes`).
//   * a field the request sets always wins, explicit 0 or 1.0 included.
//   * mode "vllm" (`--generation-config vllm`) ignores the file's sampling fields: engine
//     defaults. Its eos_token_id still stops generation, as in vLLM (stop ids are not sampling
//     defaults: runtime/stop_tokens.h).
//   * mode FOLDER reads FOLDER/generation_config.json instead of the model's; then, as vLLM's
//     override_max_tokens, its max_new_tokens also caps a request's own max_tokens.
//
// A malformed value (a string temperature, a negative top_p) fails the load with the file and
// the field named. vLLM would take it and fail every request that leaves the field unset; an
// engine that starts and then refuses each request is worse than one that refuses to start.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/sampler.h"

namespace refit {

// Which sampling fields a request set itself; the others take the model's defaults.
struct SamplingFieldsGiven {
  bool temperature = false, top_p = false, top_k = false, min_p = false, repetition_penalty = false;
};

struct GenerationDefaults {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;           // 0: off (a file's -1 or 0)
  std::optional<int64_t> max_tokens;  // max_new_tokens: for a request that gives none
  // FOLDER mode: max_new_tokens also bounds a request's own max_tokens (vLLM's
  // override_max_tokens).
  std::optional<int64_t> max_tokens_cap;
  std::string mode = "auto";       // "auto", "vllm" or the FOLDER given
  std::string source;              // the file the values come from; empty: none read
  std::vector<std::string> notes;  // fields of the file that do not apply, and why

  bool empty() const;  // no sampling field and no max_tokens: engine defaults everywhere
  // Sets every field of `sampling` that `given` says the request left unset and the file sets.
  void apply(SamplingParams& sampling, const SamplingFieldsGiven& given) const;
  // max_tokens for a request: its own (capped by max_tokens_cap), else max_tokens, else
  // `fallback` (the route's default).
  int64_t max_tokens_for(std::optional<int64_t> requested, int64_t fallback) const;
  // {"temperature": 0.6, ...} of the fields that apply; `refit inspect`, /v1/models.
  nlohmann::ordered_json fields_json() const;
  // One line: "temperature 0.6, top_p 0.9 (from /m/generation_config.json)" or "none (...)".
  std::string str() const;
};

// The defaults of `config` (a generation_config.json's object; null: none), read from
// `source` (its path, for errors) under `mode` ("auto", "vllm" or a folder). FormatError
// naming `source` and the field for a value of the wrong type or out of range.
GenerationDefaults read_generation_defaults(const nlohmann::json& config, const std::string& source,
                                            const std::string& mode);

}  // namespace refit
