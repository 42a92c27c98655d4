// gpt-oss's YaRN as each format defines it: Hugging Face's _compute_yarn_parameters with
// truncate false (the correction range not rounded), and llama.cpp's ggml rope (rounded:
// floor / ceil), with the attention factor 0.1 ln(factor) + 1 on cos and sin in both; and
// llama.cpp's sliding-window layer pattern for gpt-oss (even layers slide).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "formats_test_util.h"
#include "layers/rotary.h"
#include "models/gguf_rope_config.h"
#include "models/hf_layer_windows.h"
#include "models/hf_rope_config.h"

namespace refit {
namespace {

// transformers' _compute_yarn_parameters, written out: inv_freq per pair i of `dim`.
std::vector<double> hf_yarn_inv_freq(double base, int64_t dim, double factor, double beta_fast,
                                     double beta_slow, double original, bool truncate) {
  auto corr = [&](double rotations) {
    return dim * std::log(original / (rotations * 2 * M_PI)) / (2 * std::log(base));
  };
  double low = corr(beta_fast), high = corr(beta_slow);
  if (truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;
  std::vector<double> out;
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double pos_freq = std::pow(base, double(2 * i) / double(dim));
    const double extrapolation = 1.0 / pos_freq, interpolation = 1.0 / (factor * pos_freq);
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_factor = 1 - ramp;
    out.push_back(interpolation * (1 - extrapolation_factor) +
                  extrapolation * extrapolation_factor);
  }
  return out;
}

ModelConfig gpt_oss_like() {
  ModelConfig c;
  c.head_dim = 64;
  c.n_heads = 4;
  c.dim = 256;
  c.max_seq_len = 131072;
  c.rope_theta = 150000.0f;  // config_from_hf reads rope_theta beside read_hf_rope
  return c;
}

nlohmann::json gpt_oss_rope(const nlohmann::json& truncate) {
  nlohmann::json j = {{"rope_theta", 150000.0},
                      {"max_position_embeddings", 131072},
                      {"rope_scaling",
                       {{"rope_type", "yarn"},
                        {"factor", 32.0},
                        {"beta_fast", 32.0},
                        {"beta_slow", 1.0},
                        {"original_max_position_embeddings", 4096}}}};
  if (!truncate.is_null()) j["rope_scaling"]["truncate"] = truncate;
  return j;
}

void expect_frequencies(const ModelConfig& c, const std::vector<double>& expected) {
  const std::vector<double> got = rope_frequencies(c.layer(0).rope, c.max_seq_len);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], expected[i], 1e-12 * std::abs(expected[i])) << "pair " << i;
}

TEST(ModelsYarnRope, hugging_face_truncate_false_keeps_the_correction_range_unrounded) {
  ModelConfig c = gpt_oss_like();
  read_hf_rope(gpt_oss_rope(false), c, "config.json", false);
  ASSERT_EQ(c.rope_scaling.kind, RopeScalingKind::yarn);
  EXPECT_FALSE(c.rope_scaling.truncate);
  EXPECT_NEAR(c.rope_scaling.attention_factor, 0.1 * std::log(32.0) + 1, 1e-6);
  const auto exact = hf_yarn_inv_freq(150000, 64, 32, 32, 1, 4096, false);
  expect_frequencies(c, exact);
  // The rounded range gives other frequencies: the test tells the two apart.
  const auto rounded = hf_yarn_inv_freq(150000, 64, 32, 32, 1, 4096, true);
  double most = 0;
  for (size_t i = 0; i < exact.size(); ++i)
    most = std::max(most, std::abs(exact[i] - rounded[i]) / exact[i]);
  EXPECT_GT(most, 1e-2);
}

TEST(ModelsYarnRope, hugging_face_truncate_true_or_absent_rounds_the_range) {
  const auto rounded = hf_yarn_inv_freq(150000, 64, 32, 32, 1, 4096, true);
  for (const nlohmann::json& truncate : {nlohmann::json(true), nlohmann::json()}) {
    ModelConfig c = gpt_oss_like();
    read_hf_rope(gpt_oss_rope(truncate), c, "config.json", false);
    EXPECT_TRUE(c.rope_scaling.truncate);
    expect_frequencies(c, rounded);
  }
}

// The oracle's gpt-oss-yarn GGUF: llama.cpp's keys give its rounded range [8, 18] and
// mscale 1 + 0.1 ln 32 on cos and sin.
TEST(ModelsYarnRope, gguf_yarn_keys_give_llamacpp_semantics) {
  auto g = GgufFile::open(testing::kOracle +
                          "/llamacpp/gpt-oss-yarn-f32/micro-gpt-oss-yarn-f32-s1.gguf");
  const GgufMetadata& m = g->metadata();
  ModelConfig c = gpt_oss_like();
  c.head_dim = m.require_u32("gpt-oss.attention.key_length");
  c.rope_theta = m.get_f32("gpt-oss.rope.freq_base").value_or(0.0f);
  c.max_seq_len = m.get_u32("gpt-oss.context_length").value_or(0);
  read_gguf_rope_scaling(m, "gpt-oss", c);
  const RopeScaling& s = c.rope_scaling;
  ASSERT_EQ(s.kind, RopeScalingKind::yarn);
  EXPECT_EQ(s.factor, 32.0f);
  EXPECT_EQ(s.original_max_position, 4096);
  EXPECT_EQ(s.beta_fast, 32.0f);
  EXPECT_EQ(s.beta_slow, 1.0f);
  EXPECT_TRUE(s.truncate);
  EXPECT_NEAR(s.attention_factor, 1.3465736, 1e-6);
  expect_frequencies(c, hf_yarn_inv_freq(c.rope_theta, c.head_dim, 32, 32, 1, 4096, true));
  // The table's rows are cos and sin times the attention factor (ggml's mscale).
  const Tensor table = rope_cos_sin_table(c.layer(0).rope, 8);
  const auto freqs = rope_frequencies(c.layer(0).rope, 8);
  const int64_t half = c.head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float angle = 5.0f * static_cast<float>(freqs[i]);
    EXPECT_FLOAT_EQ(table.get({5, i}), std::cos(angle) * s.attention_factor);
    EXPECT_FLOAT_EQ(table.get({5, half + i}), std::sin(angle) * s.attention_factor);
  }
}

TEST(ModelsYarnRope, llamacpp_gpt_oss_pattern_slides_on_even_layers) {
  EXPECT_EQ(llamacpp_swa_pattern_layers(4, 2), (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(llamacpp_swa_pattern_layers(3, 0), (std::vector<bool>{true, true, true}));
  EXPECT_EQ(llamacpp_swa_pattern_layers(6, 3),
            (std::vector<bool>{true, true, false, true, true, false}));
  ModelConfig c = gpt_oss_like();
  c.n_layers = 4;
  set_sliding_layers(c, 128, llamacpp_swa_pattern_layers(4, 2));
  ASSERT_EQ(c.layers.size(), 4u);
  EXPECT_EQ(c.layers[0].window, 128);
  EXPECT_EQ(c.layers[1].window, 0);
  EXPECT_EQ(c.layers[2].window, 128);
  EXPECT_EQ(c.layers[3].window, 0);
  // HF's gpt-oss config lists the same layers in layer_types.
  const nlohmann::json j = {
      {"layer_types",
       {"sliding_attention", "full_attention", "sliding_attention", "full_attention"}}};
  EXPECT_EQ(hf_sliding_layer_types(j, 4, "config.json"), llamacpp_swa_pattern_layers(4, 2));
}

}  // namespace
}  // namespace refit
