// Rotary position embeddings: how one layer rotates its queries and keys, and the
// [max_pos, rot_dim] table (cos of every frequency, then sin) the rope kernel reads, so
// scaling schemes only change the table. Layers with different settings (Gemma 3's local
// and global layers) each point at the table of their own settings.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace refit {

enum class RopeScalingKind : uint8_t {
  none,
  linear,    // positions divided by `factor` (HF rope_type "linear")
  llama3,    // Llama 3.1's frequency-dependent slow-down (HF rope_type "llama3")
  longrope,  // Phi-3's per-frequency factors and attention factor (HF rope_type "longrope")
  yarn,      // YaRN: interpolate low frequencies by `factor`, keep high ones, ramp between
  dynamic,   // dynamic NTK: the base raised for original_max_position * factor positions
};

struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::none;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;   // llama3
  float high_freq_factor = 4.0f;  // llama3
  int64_t original_max_position = 8192;
  // longrope: frequency i is divided by short_factors[i] when the context the table
  // covers is within original_max_position, else by long_factors[i]; cos and sin are
  // multiplied by attention_factor. Like llama.cpp (transformers switches per sequence
  // length), the choice is made once for the served context, so a cached key never
  // changes meaning.
  std::vector<float> short_factors, long_factors;
  float attention_factor = 1.0f;  // longrope and yarn: multiplies cos and sin
  // yarn: the correction range from original_max_position (rotations beta_fast..beta_slow),
  // rounded outwards unless !truncate.
  float beta_fast = 32.0f, beta_slow = 1.0f;
  bool truncate = true;
  // dynamic: transformers recomputes the base from each sequence's length beyond
  // original_max_position; refit, as vLLM, fixes it once for original_max_position * factor
  // (the served context): base * (factor^2 - factor + 1)^(dim / (dim - 2)).
  bool operator==(const RopeScaling&) const = default;
};

struct RopeConfig {
  ops::RopeStyle style = ops::RopeStyle::neox;
  float theta = 10000.0f;
  int64_t dim = 0;  // rotated dims per head
  RopeScaling scaling;
  std::vector<float> freq_factors;  // GGUF rope_freqs.weight: divides each frequency
  bool operator==(const RopeConfig&) const = default;
};

// Frequencies theta^(-2i/dim), with the scaling (for a context of `context` positions)
// and the GGUF freq factors applied.
std::vector<double> rope_frequencies(const RopeConfig& rope, int64_t context);
Tensor rope_cos_sin_table(const RopeConfig& rope, int64_t max_positions);

}  // namespace refit
