#include "layers/rotary.h"

#include <algorithm>
#include <cmath>

namespace refit {

namespace {

// transformers' _compute_yarn_parameters (>= 4.56, as vLLM and llama.cpp): frequency i
// blends its interpolated (f / factor) and original values by a linear ramp over the
// dims whose wavelengths fall between beta_fast and beta_slow rotations of the original
// context.
double yarn_frequency(const RopeConfig& c, int64_t i, double f) {
  const RopeScaling& s = c.scaling;
  const double dim = static_cast<double>(c.dim);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(static_cast<double>(s.original_max_position) / (rotations * 2 * M_PI)) /
           (2 * std::log(static_cast<double>(c.theta)));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;
  const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
  const double extrapolation = 1 - ramp;
  return f / s.factor * (1 - extrapolation) + f * extrapolation;
}

}  // namespace

std::vector<double> rope_frequencies(const RopeConfig& c, int64_t context) {
  const int64_t rot = c.dim;
  const RopeScaling& s = c.scaling;
  const std::vector<float>& longrope =
      context > s.original_max_position ? s.long_factors : s.short_factors;
  std::vector<double> freqs(rot / 2);
  double base = static_cast<double>(c.theta);
  if (s.kind == RopeScalingKind::dynamic) {
    // transformers' _compute_dynamic_ntk_parameters at seq_len = original * factor (vLLM).
    const double factor = s.factor;
    const double seq_len = static_cast<double>(s.original_max_position) * factor;
    const double d = static_cast<double>(rot);
    base *= std::pow(factor * seq_len / static_cast<double>(s.original_max_position) - (factor - 1),
                     d / (d - 2));
  }
  for (int64_t i = 0; i < rot / 2; ++i) {
    double f = std::pow(base, -2.0 * i / rot);
    if (s.kind == RopeScalingKind::llama3) {
      // Hugging Face's _compute_llama3_parameters: long wavelengths are slowed by
      // `factor`, short ones kept, the band between interpolated smoothly.
      const double old_len = static_cast<double>(s.original_max_position);
      const double low_wavelen = old_len / s.low_freq_factor;
      const double high_wavelen = old_len / s.high_freq_factor;
      const double wavelen = 2 * M_PI / f;
      if (wavelen > low_wavelen) {
        f /= s.factor;
      } else if (wavelen >= high_wavelen) {
        double smooth =
            (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    } else if (s.kind == RopeScalingKind::linear) {
      f /= s.factor;
    } else if (s.kind == RopeScalingKind::yarn) {
      f = yarn_frequency(c, i, f);
    } else if (s.kind == RopeScalingKind::longrope) {
      f /= longrope[static_cast<size_t>(i)];
    }
    if (!c.freq_factors.empty()) f /= c.freq_factors[i];
    freqs[i] = f;
  }
  return freqs;
}

Tensor rope_cos_sin_table(const RopeConfig& c, int64_t max_positions) {
  const int64_t rot = c.dim, half = rot / 2;
  std::vector<double> freqs = rope_frequencies(c, max_positions);
  const bool scaled =
      c.scaling.kind == RopeScalingKind::longrope || c.scaling.kind == RopeScalingKind::yarn;
  const float mscale = scaled ? c.scaling.attention_factor : 1.0f;
  Tensor table = Tensor::empty({max_positions, rot}, DType::f32);
  float* t = table.data<float>();
  for (int64_t p = 0; p < max_positions; ++p)
    for (int64_t i = 0; i < half; ++i) {
      // f32 angle as llama2.c and ggml compute it, so long positions round alike.
      const float angle = static_cast<float>(p) * static_cast<float>(freqs[i]);
      t[p * rot + i] = std::cos(angle) * mscale;
      t[p * rot + half + i] = std::sin(angle) * mscale;
    }
  return table;
}

}  // namespace refit
