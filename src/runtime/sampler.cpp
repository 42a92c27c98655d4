#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "core/error.h"

namespace refit {

void SamplingParams::validate() const {
  if (!(temperature >= 0) || !std::isfinite(temperature))
    fail("temperature must be >= 0, got {}", temperature);
  if (top_k < 0) fail("top_k must be >= 0, got {}", top_k);
  if (!(top_p > 0 && top_p <= 1)) fail("top_p must be in (0, 1], got {}", top_p);
  if (!(min_p >= 0 && min_p <= 1)) fail("min_p must be in [0, 1], got {}", min_p);
  if (!(repetition_penalty > 0) || !std::isfinite(repetition_penalty))
    fail("repetition_penalty must be > 0, got {}", repetition_penalty);
  if (!std::isfinite(frequency_penalty) || frequency_penalty < -2 || frequency_penalty > 2)
    fail("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  if (!std::isfinite(presence_penalty) || presence_penalty < -2 || presence_penalty > 2)
    fail("presence_penalty must be in [-2, 2], got {}", presence_penalty);
}

LogprobMode logprob_mode_from_name(const std::string& name) {
  if (name == "raw_logprobs") return LogprobMode::raw_logprobs;
  if (name == "processed_logprobs") return LogprobMode::processed_logprobs;
  if (name == "raw_logits") return LogprobMode::raw_logits;
  if (name == "processed_logits") return LogprobMode::processed_logits;
  if (name == "sglang") return LogprobMode::sglang;
  fail(
      "unknown logprobs mode '{}' (raw_logprobs, processed_logprobs, raw_logits, processed_logits, "
      "sglang)",
      name);
}

const char* logprob_mode_name(LogprobMode mode) {
  switch (mode) {
    case LogprobMode::raw_logprobs:
      return "raw_logprobs";
    case LogprobMode::processed_logprobs:
      return "processed_logprobs";
    case LogprobMode::raw_logits:
      return "raw_logits";
    case LogprobMode::processed_logits:
      return "processed_logits";
    case LogprobMode::sglang:
      return "sglang";
  }
  return "?";
}

// The first index of the largest logit, as `if (x[i] > x[best]) best = i` from best = 0 picks
// it (NaN never wins; a NaN at 0 is never beaten), in two passes: the largest value, in
// independent running maxima (SSE's maxps(v, m) is exactly `v > m ? v : m`), then the first
// index holding it. One loop-carried compare-and-branch per element, reloading x[best],
// took 2.5% of a greedy serving step.
int32_t argmax(std::span<const float> logits) {
  const float* x = logits.data();
  const size_t n = logits.size();
  if (n == 0 || std::isnan(x[0])) return 0;
  float best = x[0];
  size_t i = 0;
#if defined(__SSE2__)
  __m128 m[4];
  for (__m128& v : m) v = _mm_set1_ps(x[0]);
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 4; ++j) m[j] = _mm_max_ps(_mm_loadu_ps(x + i + 4 * j), m[j]);
  float lanes[16];
  for (int j = 0; j < 4; ++j) _mm_storeu_ps(lanes + 4 * j, m[j]);
  for (float v : lanes) best = v > best ? v : best;
#endif
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  // The maximum is exact, so the first element equal to it is the one the scalar loop kept
  // (-0 and +0 compare equal there as here).
  size_t k = 0;
  while (!(x[k] == best)) ++k;
  return static_cast<int32_t>(k);
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  params_.validate();
  // Below vLLM's sampling epsilon a draw is greedy: dividing by a temperature near the
  // smallest float turns logits into infinities whose softmax is NaN (it once picked the
  // least likely token every step).
  if (params_.temperature < kGreedyTemperature) params_.temperature = 0.0f;
}

std::span<const float> Sampler::process(std::span<const float> logits,
                                        std::span<const int32_t> history,
                                        std::span<const int32_t> output,
                                        std::span<const int32_t> banned) {
  const float penalty = params_.repetition_penalty;
  const bool repetition = penalty != 1.0f && !history.empty();
  const bool counted =
      (params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f) && !output.empty();
  const bool scale = params_.temperature > 0.0f && params_.temperature != 1.0f;
  if (!repetition && !counted && banned.empty() && !scale) return logits;
  scratch_.assign(logits.begin(), logits.end());
  const size_t V = scratch_.size();
  if (repetition) {
    const size_t window =
        params_.repeat_last_n < 0 ? history.size() : static_cast<size_t>(params_.repeat_last_n);
    const size_t from = history.size() > window ? history.size() - window : 0;
    std::vector<int32_t> seen(history.begin() + static_cast<std::ptrdiff_t>(from), history.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t id : seen) {
      if (id < 0 || static_cast<size_t>(id) >= V) continue;
      float& l = scratch_[static_cast<size_t>(id)];
      l = l > 0 ? l / penalty : l * penalty;  // CTRL / HF / llama.cpp convention
    }
  }
  if (counted) {
    std::vector<int32_t> ids(output.begin(), output.end());
    std::sort(ids.begin(), ids.end());
    for (size_t i = 0; i < ids.size();) {
      size_t j = i;
      while (j < ids.size() && ids[j] == ids[i]) ++j;
      if (ids[i] >= 0 && static_cast<size_t>(ids[i]) < V)
        scratch_[static_cast<size_t>(ids[i])] -=
            params_.frequency_penalty * static_cast<float>(j - i) + params_.presence_penalty;
      i = j;
    }
  }
  for (int32_t id : banned)
    if (id >= 0 && static_cast<size_t>(id) < V) scratch_[static_cast<size_t>(id)] = -INFINITY;
  if (scale)
    for (float& l : scratch_) l /= params_.temperature;
  return scratch_;
}

namespace {
float max_logit_of(std::span<const float> view) {
  float m = -INFINITY;
  for (float l : view) m = std::max(m, l);
  return m;
}
}  // namespace

// The uniform draw in [0, 1): 53 random bits, the same double on every platform.
double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

// No truncation (temperature sampling alone, what RL rollouts ask for): inverse-CDF over the
// softmax in id order. Every token keeps its probability and the draw needs no order by
// logit: sorting the whole vocabulary cost 2.9 ms a token at 32k ids and 21 ms at 201k
// (std::sort of (logit, id) pairs), most of a small model's decode step.
int32_t Sampler::draw_untruncated(std::span<const float> view) {
  const size_t V = view.size();
  const float max_logit = max_logit_of(view);
  weights_.resize(V);
  double sum = 0;
  for (size_t i = 0; i < V; ++i)
    sum += weights_[i] = std::exp(static_cast<double>(view[i] - max_logit));
  const double u = uniform() * sum;
  double cumulative = 0;
  size_t last = 0;
  for (size_t i = 0; i < V; ++i) {
    if (weights_[i] == 0) continue;
    cumulative += weights_[i];
    last = i;
    if (u < cumulative) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(last);  // u within rounding of the total
}

int32_t Sampler::draw(std::span<const float> view) {
  kept_all_ = true;
  kept_.clear();
  if (params_.temperature <= 0.0f) return argmax(view);
  const size_t V = view.size();
  const bool top_k = params_.top_k > 0 && static_cast<size_t>(params_.top_k) < V;
  if (!top_k && params_.top_p >= 1.0f && params_.min_p <= 0.0f) return draw_untruncated(view);

  // Truncation works in order of logit, highest first; equal logits keep id order so
  // results do not depend on sort internals.
  candidates_.resize(V);
  for (size_t i = 0; i < V; ++i) candidates_[i] = {view[i], static_cast<int32_t>(i)};
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  // Every probability is exp(l - max) / sum, the sum over the survivors of top-k (or over
  // all ids), each computed by the same expression wherever it is needed.
  const float max_logit = max_logit_of(view);
  auto weight_of = [&](float l) { return std::exp(static_cast<double>(l - max_logit)); };
  auto weight = [&](size_t i) { return weight_of(candidates_[i].first); };
  size_t n = V;
  double sum = 0;
  if (top_k) {
    n = static_cast<size_t>(params_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(n),
                      candidates_.end(), by_logit);
    for (size_t i = 0; i < n; ++i) sum += weight(i);
  } else {
    for (float l : view) sum += weight_of(l);
    // top-p and min-p keep a prefix of the order by logit, and sorting the whole vocabulary
    // took 2.9 ms at 32k ids: only the ids that can be kept are put in order. Both tests
    // below are monotone in the logit, so the ids passing one are the top of the full order.
    auto p_of = [&](float l) { return weight_of(l) / sum; };
    auto sort_front = [&](auto keep_id) {
      auto mid = std::partition(candidates_.begin(), candidates_.end(),
                                [&](const auto& c) { return keep_id(c.first); });
      std::sort(candidates_.begin(), mid, by_logit);
      return static_cast<size_t>(mid - candidates_.begin());
    };
    if (params_.min_p > 0.0f) {
      // The ids min-p keeps, by the very test the cut below makes (top-p, applied first,
      // can only keep fewer).
      const double threshold = p_of(max_logit) * params_.min_p;
      n = sort_front([&](float l) { return p_of(l) >= threshold; });
    } else {
      // top-p: the mass by logit distance from the maximum in quarter-logit bins finds a
      // distance within which the kept mass lies; the ids within it are sorted, and the
      // whole order is taken if rounding left the cut outside them after all.
      constexpr int kBins = 256;
      auto bin_of = [&](float l) {  // a banned id's -inf (and NaN) in the last bin
        const float d = (max_logit - l) * 4.0f;
        return d < kBins - 1 ? static_cast<int>(d) : kBins - 1;
      };
      double mass[kBins] = {};
      for (float l : view) mass[bin_of(l)] += p_of(l);
      int last = 0;
      for (double cumulative = 0; last < kBins - 1; ++last)
        if ((cumulative += mass[last]) >= params_.top_p * (1 + 1e-9)) break;
      n = sort_front([&](float l) { return bin_of(l) <= last; });
      double kept_mass = 0;
      for (size_t i = 0; i < n; ++i) kept_mass += weight(i) / sum;
      if (!(kept_mass >= params_.top_p)) {
        std::sort(candidates_.begin(), candidates_.end(), by_logit);
        n = V;
      }
    }
  }
  std::vector<double>& probs = weights_;
  probs.resize(n);
  for (size_t i = 0; i < n; ++i) probs[i] = weight(i) / sum;
  if (params_.top_p < 1.0f) {
    double cumulative = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cumulative += probs[i];
      if (cumulative >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }
  if (params_.min_p > 0.0f) {
    const double threshold = probs[0] * params_.min_p;
    size_t keep = 1;
    while (keep < n && probs[keep] >= threshold) ++keep;
    n = keep;
  }
  if (n < V) {
    kept_all_ = false;
    for (size_t i = 0; i < n; ++i) kept_.push_back(candidates_[i].second);
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += probs[i];
  const double u = uniform() * total;
  double cumulative = 0;
  for (size_t i = 0; i < n; ++i) {
    cumulative += probs[i];
    if (u < cumulative) return candidates_[i].second;
  }
  return candidates_[n - 1].second;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  return draw(process(logits, history));
}

}  // namespace refit
