// Token sampling. Greedy when temperature < 1e-5 (argmax; ties go to the lowest id, as
// llama2.c and llama.cpp do). Otherwise: penalties -> temperature -> top-k -> top-p ->
// min-p -> draw. The draw inverts the cumulative distribution of the kept ids: in id
// order when nothing is cut (no order by logit is needed then: sorting a 201k vocabulary
// took 21 ms a token), else in order of logit. The random stream is a 64-bit
// Mersenne Twister turned into doubles by bit manipulation (not std::uniform_real_distribution,
// whose output varies between standard libraries), so the same seed gives the same text everywhere;
// each request owns its sampler, so its draws do not depend on what else is in the batch.
//
// The two halves are separate so a server can report log-probabilities of either the
// raw logits or the processed ones (vLLM's logprobs modes, SGLang's temperature-scaled
// logprobs): process() gives the logits the draw uses, draw() picks from them and
// remembers which ids survived truncation.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace refit {

struct SamplingParams {
  float temperature = 0.0f;
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // 1: off; >1 discourages tokens already seen
  int repeat_last_n = 64;           // how many previous tokens the penalty looks at; < 0: all
  // OpenAI's penalties over the generated tokens: logit -= frequency * count + presence * (count >
  // 0).
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  uint64_t seed = 0;
  // Throws naming the field when a value is out of range.
  void validate() const;
};

// What a reported log-probability is computed from (vLLM's --logprobs-mode values, plus
// SGLang's own): raw = the model's logits; processed = after penalties, banned ids and
// temperature, truncated ids at -inf; sglang = log_softmax of the penalised,
// temperature-scaled logits before truncation (SGLang's sampler; greedy: unscaled).
enum class LogprobMode : uint8_t {
  raw_logprobs,
  processed_logprobs,
  raw_logits,
  processed_logits,
  sglang
};
LogprobMode logprob_mode_from_name(const std::string& name);  // throws naming the value
const char* logprob_mode_name(LogprobMode mode);

class Sampler {
 public:
  // Temperatures below this are greedy (vLLM's _SAMPLING_EPS).
  static constexpr float kGreedyTemperature = 1e-5f;
  explicit Sampler(const SamplingParams& params);
  const SamplingParams& params() const { return params_; }

  // The logits the draw uses: the repetition penalty over the last repeat_last_n of
  // `history`, the frequency and presence penalties over `output`, `banned` ids at -inf
  // (a stop token before min_tokens), then the temperature when it is > 0. A view of
  // `logits` itself when none applies; valid until the next call.
  std::span<const float> process(std::span<const float> logits, std::span<const int32_t> history,
                                 std::span<const int32_t> output = {},
                                 std::span<const int32_t> banned = {});
  // Picks a token from process()'s result: the argmax when greedy, else a draw after
  // top-k, top-p and min-p. kept() lists the ids that survived truncation (all when
  // nothing truncated: kept_all() is true then).
  int32_t draw(std::span<const float> processed);
  bool kept_all() const { return kept_all_; }
  std::span<const int32_t> kept() const { return kept_; }

  // process() then draw(), with `history` for the repetition penalty only.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);

 private:
  double uniform();
  int32_t draw_untruncated(std::span<const float> processed);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;
  std::vector<double> weights_;  // exp(l - max) (no truncation) or probabilities in order
  std::vector<std::pair<float, int32_t>> candidates_;
  std::vector<int32_t> kept_;
  bool kept_all_ = true;
};

int32_t argmax(std::span<const float> logits);

}  // namespace refit
