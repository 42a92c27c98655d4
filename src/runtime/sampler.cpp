#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace refit {

void SamplingParams::validate() const {
  if (!(temperature >= 0) || !std::isfinite(temperature)) fail("temperature must be >= 0, got {}", temperature);
  if (top_k < 0) fail("top_k must be >= 0, got {}", top_k);
  if (!(top_p > 0 && top_p <= 1)) fail("top_p must be in (0, 1], got {}", top_p);
  if (!(min_p >= 0 && min_p <= 1)) fail("min_p must be in [0, 1], got {}", min_p);
  if (!(repetition_penalty > 0)) fail("repetition_penalty must be > 0, got {}", repetition_penalty);
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  return best;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  params_.validate();
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  const float penalty = params_.repetition_penalty;
  std::span<const float> view = logits;
  if (penalty != 1.0f && !history.empty()) {
    scratch_.assign(logits.begin(), logits.end());
    size_t from = history.size() > static_cast<size_t>(std::max(params_.repeat_last_n, 0))
                      ? history.size() - params_.repeat_last_n
                      : 0;
    std::vector<int32_t> seen(history.begin() + from, history.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t id : seen) {
      if (id < 0 || static_cast<size_t>(id) >= scratch_.size()) continue;
      float& l = scratch_[id];
      l = l > 0 ? l / penalty : l * penalty;  // CTRL / HF / llama.cpp convention
    }
    view = scratch_;
  }
  if (params_.temperature <= 0.0f) return argmax(view);

  candidates_.resize(view.size());
  for (size_t i = 0; i < view.size(); ++i)
    candidates_[i] = {view[i] / params_.temperature, static_cast<int32_t>(i)};
  // Highest first; equal logits keep id order so results do not depend on sort internals.
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  size_t n = candidates_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + params_.top_k, candidates_.end(), by_logit);
    n = params_.top_k;
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  // Softmax over the survivors.
  const float max_logit = candidates_[0].first;
  double sum = 0;
  std::vector<double> probs(n);
  for (size_t i = 0; i < n; ++i) sum += probs[i] = std::exp(static_cast<double>(candidates_[i].first - max_logit));
  for (double& p : probs) p /= sum;
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
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += probs[i];
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * total;
  double cumulative = 0;
  for (size_t i = 0; i < n; ++i) {
    cumulative += probs[i];
    if (u < cumulative) return candidates_[i].second;
  }
  return candidates_[n - 1].second;
}

}  // namespace refit
