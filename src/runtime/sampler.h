// Token sampling. Greedy when temperature <= 0 (argmax; ties go to the lowest id, as
// llama2.c and llama.cpp do). Otherwise: repetition penalty -> temperature -> top-k ->
// top-p -> min-p -> draw. The random stream is a 64-bit Mersenne Twister turned into
// doubles by bit manipulation (not std::uniform_real_distribution, whose output varies
// between standard libraries), so the same seed gives the same text everywhere.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace refit {

struct SamplingParams {
  float temperature = 0.0f;
  int top_k = 0;          // 0: off
  float top_p = 1.0f;     // 1: off
  float min_p = 0.0f;     // 0: off
  float repetition_penalty = 1.0f;  // 1: off; >1 discourages tokens already seen
  int repeat_last_n = 64;           // how many previous tokens the penalty looks at
  uint64_t seed = 0;
  // Throws naming the field when a value is out of range.
  void validate() const;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // `history`: prompt and generated tokens so far (for the repetition penalty).
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace refit
