// Synthetic weights: presets, determinism (a pure function of seed, name and index),
// independence of tensors and slices, distribution, and the dtype conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/float_formats.h"
#include "core/thread_pool.h"
#include "synthetic/synthetic_model.h"

namespace refit {
namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

const TensorSpec& spec_named(const std::vector<TensorSpec>& specs, const std::string& name) {
  for (const TensorSpec& s : specs)
    if (s.hf_name == name) return s;
  throw std::runtime_error("no tensor " + name);
}

TEST(SynthPreset, shapes_match_the_documented_real_models) {
  ModelConfig tiny = synthetic_preset(Architecture::llama, "tiny");
  EXPECT_EQ(tiny.dim, 288);
  EXPECT_EQ(tiny.n_layers, 6);
  EXPECT_EQ(tiny.n_heads, 6);
  EXPECT_EQ(tiny.n_kv_heads, 6);
  EXPECT_EQ(tiny.head_dim, 48);
  EXPECT_EQ(tiny.ffn_dim, 768);
  EXPECT_EQ(tiny.vocab_size, 32000);
  EXPECT_EQ(tiny.max_seq_len, 2048);
  EXPECT_TRUE(tiny.tied_embeddings);
  EXPECT_FALSE(tiny.qkv_bias);
  EXPECT_FALSE(tiny.qk_norm);

  ModelConfig small = synthetic_preset(Architecture::llama, "small");
  EXPECT_EQ(small.dim, 768);
  EXPECT_EQ(small.n_layers, 12);
  EXPECT_EQ(small.n_heads, 12);
  EXPECT_EQ(small.ffn_dim, 2048);
  EXPECT_TRUE(small.tied_embeddings);

  ModelConfig medium = synthetic_preset(Architecture::llama, "medium");
  EXPECT_EQ(medium.dim, 2048);
  EXPECT_EQ(medium.n_layers, 22);
  EXPECT_EQ(medium.n_heads, 32);
  EXPECT_EQ(medium.n_kv_heads, 4);
  EXPECT_EQ(medium.head_dim, 64);
  EXPECT_EQ(medium.ffn_dim, 5632);
  EXPECT_FALSE(medium.tied_embeddings);
  // TinyLlama-1.1B has 1,100,048,384 parameters.
  EXPECT_EQ(medium.n_params(), 1100048384);
}

TEST(SynthPreset, architecture_sets_bias_and_qk_norm_flags) {
  ModelConfig q2 = synthetic_preset(Architecture::qwen2, "tiny");
  EXPECT_TRUE(q2.qkv_bias);
  EXPECT_FALSE(q2.qk_norm);
  EXPECT_FLOAT_EQ(q2.rope_theta, 1e6f);
  ModelConfig q3 = synthetic_preset(Architecture::qwen3, "tiny");
  EXPECT_FALSE(q3.qkv_bias);
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_THROW(synthetic_preset(Architecture::llama, "huge"), Error);
}

TEST(SynthWeights, same_seed_gives_identical_bytes_and_another_seed_differs) {
  ModelConfig c = synthetic_preset(Architecture::qwen2, "tiny");
  auto specs = model_tensor_specs(c);
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    for (const char* name : {"model.embed_tokens.weight", "model.layers.3.self_attn.q_proj.bias",
                             "model.layers.5.mlp.down_proj.weight", "model.norm.weight"}) {
      const TensorSpec& s = spec_named(specs, name);
      Tensor a = synthetic_tensor(c, s, d, 7);
      Tensor b = synthetic_tensor(c, s, d, 7);
      Tensor other = synthetic_tensor(c, s, d, 8);
      EXPECT_TRUE(same_bytes(a, b)) << name;
      EXPECT_FALSE(same_bytes(a, other)) << name;
    }
  }
}

TEST(SynthWeights, tensors_with_the_same_shape_hold_different_values) {
  ModelConfig c = synthetic_preset(Architecture::llama, "tiny");
  auto specs = model_tensor_specs(c);
  Tensor q0 = synthetic_tensor(c, spec_named(specs, "model.layers.0.self_attn.q_proj.weight"),
                               DType::f32, 0);
  Tensor q1 = synthetic_tensor(c, spec_named(specs, "model.layers.1.self_attn.q_proj.weight"),
                               DType::f32, 0);
  Tensor k0 = synthetic_tensor(c, spec_named(specs, "model.layers.0.self_attn.k_proj.weight"),
                               DType::f32, 0);
  EXPECT_FALSE(same_bytes(q0, q1));
  EXPECT_FALSE(same_bytes(q0, k0));
}

TEST(SynthWeights, one_tensor_regenerates_alone_equal_to_the_whole_model) {
  ModelConfig c = synthetic_preset(Architecture::qwen3, "tiny");
  auto all = synthetic_weights(c, DType::bf16, 3);
  auto specs = model_tensor_specs(c);
  ASSERT_EQ(all.size(), specs.size());
  for (size_t i = 0; i < specs.size(); i += 7) {
    EXPECT_EQ(all[i].first, specs[i].hf_name);
    EXPECT_TRUE(same_bytes(all[i].second, synthetic_tensor(c, specs[i], DType::bf16, 3)))
        << specs[i].hf_name;
  }
}

TEST(SynthWeights, any_slice_equals_the_same_elements_of_the_whole_tensor) {
  const uint64_t key = synthetic_tensor_key(5, "model.layers.2.mlp.up_proj.weight");
  SyntheticInit init{0.0f, 0.08f};
  const int64_t n = 300000;  // several parallel chunks
  std::vector<float> whole(n);
  synthetic_fill(key, init, 0, n, DType::f32, whole.data());
  for (int64_t begin : {int64_t{0}, int64_t{1}, int64_t{65535}, int64_t{123457}}) {
    const int64_t count = 70001;
    std::vector<float> part(count);
    synthetic_fill(key, init, begin, count, DType::f32, part.data());
    EXPECT_EQ(std::memcmp(part.data(), whole.data() + begin, count * sizeof(float)), 0) << begin;
    EXPECT_EQ(synthetic_value(key, begin + 17, init), whole[begin + 17]);
  }
}

TEST(SynthWeights, bytes_do_not_depend_on_the_thread_count) {
  ModelConfig c = synthetic_preset(Architecture::llama, "tiny");
  const auto specs = model_tensor_specs(c);
  const TensorSpec& s = spec_named(specs, "model.embed_tokens.weight");
  const int saved = num_threads();
  set_num_threads(1);
  Tensor one = synthetic_tensor(c, s, DType::f16, 11);
  set_num_threads(3);
  Tensor three = synthetic_tensor(c, s, DType::f16, 11);
  set_num_threads(saved);
  EXPECT_TRUE(same_bytes(one, three));
}

TEST(SynthWeights, values_follow_the_requested_mean_and_std) {
  ModelConfig c = synthetic_preset(Architecture::qwen2, "small");
  auto specs = model_tensor_specs(c);
  struct Want {
    const char* name;
    double mean, std;
  };
  const double r = std::sqrt(128.0 / 768.0);
  for (Want w : {Want{"model.embed_tokens.weight", 0.0, 0.18 * r},
                 Want{"model.layers.0.self_attn.o_proj.weight", 0.0, 0.20 * r},
                 Want{"model.layers.0.mlp.down_proj.weight", 0.0, 0.15 * r},
                 Want{"model.layers.0.self_attn.q_proj.bias", 0.0, 0.30},
                 Want{"model.layers.0.input_layernorm.weight", 1.0, 0.2},
                 Want{"model.norm.weight", 4.0, 0.8}}) {
    const TensorSpec& s = spec_named(specs, w.name);
    std::vector<float> v = synthetic_tensor(c, s, DType::f32, 1).to_floats();
    double sum = 0, sq = 0;
    for (float x : v) sum += x;
    const double mean = sum / v.size();
    for (float x : v) sq += (x - mean) * (x - mean);
    const double std = std::sqrt(sq / v.size());
    // Small tensors (768 values) get loose bounds; big ones tight.
    const double tol = v.size() > 100000 ? 0.01 : 0.1;
    EXPECT_NEAR(mean, w.mean, 4 * w.std / std::sqrt(double(v.size())) + 1e-6) << w.name;
    EXPECT_NEAR(std / w.std, 1.0, tol) << w.name;
    for (float x : v)
      ASSERT_LE(std::abs(x - w.mean), 3.47 * w.std) << w.name;  // Irwin-Hall(4) bound
  }
}

TEST(SynthWeights, narrow_dtypes_are_the_rounded_f32_values) {
  ModelConfig c = synthetic_preset(Architecture::llama, "tiny");
  const auto specs = model_tensor_specs(c);
  const TensorSpec& s = spec_named(specs, "model.layers.1.mlp.gate_proj.weight");
  Tensor f = synthetic_tensor(c, s, DType::f32, 2);
  Tensor h = synthetic_tensor(c, s, DType::f16, 2);
  Tensor b = synthetic_tensor(c, s, DType::bf16, 2);
  ASSERT_EQ(h.dtype(), DType::f16);
  ASSERT_EQ(b.dtype(), DType::bf16);
  const float* fv = f.data<float>();
  for (int64_t i = 0; i < f.numel(); ++i) {
    ASSERT_EQ(h.data<uint16_t>()[i], f32_to_f16(fv[i])) << i;
    ASSERT_EQ(b.data<uint16_t>()[i], f32_to_bf16(fv[i])) << i;
  }
  // Norms and biases stay f32 whatever the weight dtype.
  const TensorSpec& norm = spec_named(specs, "model.layers.1.input_layernorm.weight");
  EXPECT_EQ(synthetic_tensor(c, norm, DType::bf16, 2).dtype(), DType::f32);
}

TEST(SynthWeights, fast_f16_conversion_matches_the_reference_bit_for_bit) {
  std::vector<float> in;
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f,
                            -1.0f,
                            65504.0f,
                            65519.99f,
                            65520.0f,
                            1e6f,
                            -1e6f,
                            6.1035156e-05f,
                            5.9604645e-08f,
                            2.9802322e-08f,
                            2.98023259e-08f,
                            1e-10f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            0.33333334f,
                            1.0009766f};
  in.assign(std::begin(specials), std::end(specials));
  // Every f16 value and the midpoints and near-midpoints between neighbours (ties to even).
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    float a = f16_to_f32(static_cast<uint16_t>(h)), b = f16_to_f32(static_cast<uint16_t>(h + 1));
    float mid = a + (b - a) / 2;
    for (float x : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      in.push_back(x);
      in.push_back(-x);
    }
  }
  std::vector<uint16_t> out(in.size());
  synthetic_f32_to_f16(in.data(), out.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i)
    ASSERT_EQ(out[i], f32_to_f16(in[i])) << "value " << in[i] << " (#" << i << ")";
}

TEST(SynthWeights, unsupported_dtype_is_refused) {
  std::vector<uint8_t> buf(16);
  EXPECT_THROW(synthetic_fill(1, {0, 1}, 0, 16, DType::i8, buf.data()), Error);
}

}  // namespace
}  // namespace refit
