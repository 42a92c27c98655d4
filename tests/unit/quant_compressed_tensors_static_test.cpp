// compressed-tensors FP8 with STATIC per-tensor activation scales (input_activations
// {strategy tensor, dynamic false}, `<layer>.input_scale` beside each weight: the format of
// many older RedHatAI / neuralmagic *-FP8 checkpoints), served as vLLM's Fp8LinearOp serves
// them: x_q = e4m3(x / s), out = (x_q · w_q^T) · s · w_scale, with s the max of a fused
// layer's shards' input scales.
//  * the logits equal a reference forward pass written here (dequantized weights, f32
//    arithmetic, activations rounded through e4m3 with the static scale), and not the
//    dynamic per-token logits (catches a scale that is ignored) nor the reference that uses
//    q's scale for the fused q/k/v (catches a fused layer not taking the max);
//  * the input scales are parameters named as in the checkpoint, one per tensor, and refit
//    like weights: from disk bitwise a fresh load, by update, and kept by a weights-only
//    update;
//  * an input_scale that is negative, NaN, zero or misshapen is refused by name, in a
//    checkpoint or in an update, and the engine keeps its old weights.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "compressed_tensors_test_util.h"
#include "core/dlpack.h"
#include "core/float_formats.h"
#include "kernels/matmul_quantized.h"
#include "layers/linear.h"
#include "models/compressed_tensors.h"
#include "models/quantize_model.h"
#include "refit_test_support.h"
#include "runtime/engine.h"

namespace refit {
namespace {

using namespace refit::ct_test;
using refit::testing::addresses;
using refit::testing::expect_same_bytes;

const std::vector<int32_t> kTokens = {1, 17, 200, 45, 3, 99, 128, 7};

std::unique_ptr<Engine> engine_on(const std::string& path) {
  EngineOptions options;
  options.model_path = path;
  return std::make_unique<Engine>(options);
}

// ---- the reference forward pass (independent of refit's layers and kernels) ----

using Vec = std::vector<float>;

// Weights by name, f32 (FP8 ones decoded: code * weight_scale), and the input scales.
struct RefModel {
  std::map<std::string, Vec> w;
  std::map<std::string, float> input_scale;  // by layer ("model.layers.0.self_attn.q_proj")
};

RefModel ref_model(const std::string& dir) {
  RefModel m;
  auto ck = Checkpoint::open(dir);
  const HfFolder& hf = *ck->hf();
  for (const std::string& name : hf.tensor_names()) {
    const Tensor t = hf.tensor(name);
    if (name.ends_with(".input_scale")) {
      m.input_scale[name.substr(0, name.size() - 12)] = t.to_floats()[0];
      continue;
    }
    if (name.ends_with("_scale")) continue;
    if (t.dtype() != DType::f8_e4m3fn) {
      m.w[name] = t.to_floats();
      continue;
    }
    const Vec s = hf.tensor(name + "_scale").to_floats();
    const auto* c = static_cast<const uint8_t*>(t.raw_data());
    Vec d(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < d.size(); ++i)
      d[i] = f8_e4m3fn_to_f32(c[i]) * s[s.size() == 1 ? 0 : i / static_cast<size_t>(t.size(1))];
    m.w[name] = d;
  }
  return m;
}

// How the reference treats the activations of a fused layer.
enum class Acts { f32, static_max, static_first_shard };

// y[t, n] = sum_k a(x[t, k]) * W[n, k], with a() the e4m3 round trip x -> e4m3(x / s) * s
// under static scales; `amax` (when given) records max |x| of each layer's input.
struct Ref {
  const ModelConfig c;
  const RefModel& m;
  Acts acts;
  std::map<std::string, float>* amax = nullptr;

  Vec linear(const Vec& x, int64_t T, int64_t K, const std::vector<std::string>& layers) const {
    float s = 0.0f;
    for (const std::string& l : layers) {
      if (amax) {
        float& a = (*amax)[l];
        for (float v : x) a = std::max(a, std::fabs(v));
      }
      if (acts == Acts::f32) continue;
      const float ls = m.input_scale.at(l);
      s = acts == Acts::static_first_shard && &l != &layers[0] ? s : std::max(s, ls);
    }
    Vec xa = x;
    if (acts != Acts::f32)
      for (float& v : xa) v = f8_e4m3fn_to_f32(f32_to_f8_e4m3fn(v / s)) * s;
    Vec out;
    for (const std::string& l : layers) {
      const Vec& w = m.w.at(l + ".weight");
      const int64_t N = static_cast<int64_t>(w.size()) / K;
      Vec y(static_cast<size_t>(T * N));
      for (int64_t t = 0; t < T; ++t)
        for (int64_t n = 0; n < N; ++n) {
          double acc = 0;
          for (int64_t k = 0; k < K; ++k) acc += double(xa[t * K + k]) * w[n * K + k];
          y[t * N + n] = static_cast<float>(acc);
        }
      out.insert(out.end(), y.begin(), y.end());  // [T, N] per layer, concatenated by layer
    }
    return out;
  }

  Vec rms(const Vec& x, int64_t T, const std::string& weight) const {
    const Vec& g = m.w.at(weight);
    const int64_t D = static_cast<int64_t>(g.size());
    Vec y(x.size());
    for (int64_t t = 0; t < T; ++t) {
      double ss = 0;
      for (int64_t i = 0; i < D; ++i) ss += double(x[t * D + i]) * x[t * D + i];
      const double r = 1.0 / std::sqrt(ss / D + c.rms_eps);
      for (int64_t i = 0; i < D; ++i) y[t * D + i] = static_cast<float>(x[t * D + i] * r * g[i]);
    }
    return y;
  }

  // rotate_half rope of head vectors [T, heads, hd] at positions 0..T-1.
  void rope(Vec& x, int64_t T, int64_t heads) const {
    const int64_t hd = c.head_dim, half = hd / 2;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const double f = std::pow(double(c.rope_theta), -2.0 * i / hd), a = t * f;
          float* v = &x[(t * heads + h) * hd];
          const double x0 = v[i], x1 = v[i + half];
          v[i] = static_cast<float>(x0 * std::cos(a) - x1 * std::sin(a));
          v[i + half] = static_cast<float>(x1 * std::cos(a) + x0 * std::sin(a));
        }
  }

  // [T, N] rows of layer j of a concatenated linear output (N rows per layer).
  static Vec part(const Vec& y, int64_t T, int64_t N, int64_t offset_layers) {
    return Vec(y.begin() + offset_layers * T * N, y.begin() + (offset_layers + 1) * T * N);
  }

  Vec logits(const std::vector<int32_t>& tokens) const {
    const int64_t T = static_cast<int64_t>(tokens.size()), D = c.dim, hd = c.head_dim;
    const int64_t H = c.n_heads, KV = c.n_kv_heads, F = c.ffn_dim;
    const Vec& emb = m.w.at("model.embed_tokens.weight");
    Vec x(static_cast<size_t>(T * D));
    for (int64_t t = 0; t < T; ++t) std::copy_n(emb.begin() + tokens[t] * D, D, x.begin() + t * D);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const std::string p = fmt::format("model.layers.{}.", l);
      Vec h = rms(x, T, p + "input_layernorm.weight");
      const std::string a = p + "self_attn.";
      // q, k, v through one fused matmul (one scale), as refit and vLLM run them.
      const Vec qkv = linear(h, T, D, {a + "q_proj", a + "k_proj", a + "v_proj"});
      Vec q(qkv.begin(), qkv.begin() + T * H * hd);
      Vec k(qkv.begin() + T * H * hd, qkv.begin() + T * (H + KV) * hd);
      Vec v(qkv.begin() + T * (H + KV) * hd, qkv.end());
      rope(q, T, H);
      rope(k, T, KV);
      Vec att(static_cast<size_t>(T * H * hd), 0.0f);
      const double scale = 1.0 / std::sqrt(double(hd));
      for (int64_t t = 0; t < T; ++t)
        for (int64_t hh = 0; hh < H; ++hh) {
          const int64_t kh = hh / (H / KV);
          std::vector<double> sc(static_cast<size_t>(t + 1));
          double mx = -1e300, sum = 0;
          for (int64_t u = 0; u <= t; ++u) {
            double d = 0;
            for (int64_t i = 0; i < hd; ++i)
              d += double(q[(t * H + hh) * hd + i]) * k[(u * KV + kh) * hd + i];
            sc[u] = d * scale;
            mx = std::max(mx, sc[u]);
          }
          for (double& e : sc) sum += (e = std::exp(e - mx));
          for (int64_t i = 0; i < hd; ++i) {
            double o = 0;
            for (int64_t u = 0; u <= t; ++u) o += sc[u] / sum * v[(u * KV + kh) * hd + i];
            att[(t * H + hh) * hd + i] = static_cast<float>(o);
          }
        }
      const Vec o = linear(att, T, H * hd, {a + "o_proj"});
      for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
      h = rms(x, T, p + "post_attention_layernorm.weight");
      const std::string mlp = p + "mlp.";
      const Vec gu = linear(h, T, D, {mlp + "gate_proj", mlp + "up_proj"});
      const Vec g = part(gu, T, F, 0), u = part(gu, T, F, 1);
      Vec act(g.size());
      for (size_t i = 0; i < g.size(); ++i) act[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
      const Vec down = linear(act, T, F, {mlp + "down_proj"});
      for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
    }
    const Vec n = rms(x, T, "model.norm.weight");
    const Vec& lm = m.w.at("lm_head.weight");
    const int64_t V = static_cast<int64_t>(lm.size()) / D;
    Vec out(static_cast<size_t>(T * V));
    for (int64_t t = 0; t < T; ++t)  // lm_head is ignored: float, f32 activations
      for (int64_t vv = 0; vv < V; ++vv) {
        double acc = 0;
        for (int64_t i = 0; i < D; ++i) acc += double(n[t * D + i]) * lm[vv * D + i];
        out[t * V + vv] = static_cast<float>(acc);
      }
    return out;
  }
};

float max_abs_diff(const Vec& a, const Vec& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

// Calibrated scales: max |x| of each layer's input over kTokens / 448 (what llm-compressor's
// minmax observer computes), times a factor per projection so that q, k and v (and gate
// and up) differ: k's is the largest, so the fused max is not q's.
std::map<std::string, float> calibrated_scales(const std::string& decoded_dir) {
  std::map<std::string, float> amax;
  const RefModel m = ref_model(decoded_dir);
  Ref r{tiny_config(), m, Acts::f32, &amax};
  r.logits(kTokens);
  std::map<std::string, float> s;
  for (const auto& [layer, a] : amax) {
    const float f = layer.ends_with("k_proj")    ? 2.5f
                    : layer.ends_with("v_proj")  ? 1.25f
                    : layer.ends_with("up_proj") ? 1.75f
                                                 : 1.0f;
    s[layer] = a / 448.0f * f;
  }
  return s;
}

CtOptions static_options(const std::string& strategy, const std::map<std::string, float>& scales) {
  CtOptions o;
  o.strategy = strategy;
  o.input_scale = [scales](const std::string& layer) { return scales.at(layer); };
  return o;
}

class CtStatic : public ::testing::TestWithParam<std::string> {};

TEST_P(CtStatic, logits_equal_the_reference_and_not_dynamic_per_token_ones) {
  const std::string strategy = GetParam();
  Dir plain, ct, dynamic;
  CtOptions o;
  o.strategy = strategy;
  write_ct_checkpoint(dynamic.str(), source_weights(), o, plain.str());  // W8A16 + decoded
  const std::map<std::string, float> scales = calibrated_scales(plain.str());
  write_ct_checkpoint(ct.str(), source_weights(), static_options(strategy, scales));
  auto engine = engine_on(ct.str());
  const std::string scheme = fmt::format("fp8-{}-w8a8-static", strategy);
  EXPECT_NE(engine->description().find(scheme), std::string::npos) << engine->description();
  // One f32 [1] parameter per checkpoint tensor, named as the checkpoint names it.
  const Parameter& k_scale =
      engine->model().parameters().get("model.layers.0.self_attn.k_proj.input_scale");
  EXPECT_EQ(k_scale.data().shape(), Shape{1});
  EXPECT_EQ(k_scale.data().dtype(), DType::f32);
  EXPECT_EQ(k_scale.data().to_floats()[0], scales.at("model.layers.0.self_attn.k_proj"));
  const Parameter& qkv =
      engine->model().parameters().get("model.layers.0.self_attn.qkv_proj.weight");
  ASSERT_EQ(qkv.input_scales().size(), 3u);
  EXPECT_EQ(qkv.static_input_scale(), scales.at("model.layers.0.self_attn.k_proj"));

  const Vec got = engine->logits(kTokens).to_floats();
  const RefModel m = ref_model(ct.str());
  const Vec want = Ref{tiny_config(), m, Acts::static_max}.logits(kTokens);
  const Vec first_shard = Ref{tiny_config(), m, Acts::static_first_shard}.logits(kTokens);
  const Vec dyn = engine_on(dynamic.str())->logits(kTokens).to_floats();  // W8A16
  CtOptions d = o;
  d.dynamic = true;
  Dir per_token;
  write_ct_checkpoint(per_token.str(), source_weights(), d);
  const Vec tok = engine_on(per_token.str())->logits(kTokens).to_floats();
  float largest = 0;
  for (float v : want) largest = std::max(largest, std::fabs(v));
  const float err = max_abs_diff(got, want);
  // Tolerance: f32 accumulation order, and the rare activation whose x / s lies within an
  // ulp of a rounding boundary between two e4m3 codes (one code step, 1/16 relative, on one
  // element) -> 2e-3 of the largest logit; the differences the test must catch are larger.
  EXPECT_LE(err, 2e-3f * largest) << "largest logit " << largest;
  EXPECT_GT(max_abs_diff(got, tok), 5 * err) << "static scales served as dynamic per-token";
  EXPECT_GT(max_abs_diff(got, dyn), 5 * err) << "static scales ignored (W8A16)";
  EXPECT_GT(max_abs_diff(got, first_shard), 5 * err) << "fused q/k/v not at the max scale";
}

INSTANTIATE_TEST_SUITE_P(Strategies, CtStatic, ::testing::Values("tensor", "channel"));

// One matmul, the fused q/k/v of layer 0: matmul_weight's output against the formula with
// the max of the three input scales, written out (within f32 summation order).
TEST(CtStaticMatmul, fused_qkv_uses_the_max_input_scale) {
  Dir plain, ct;
  write_ct_checkpoint(plain.str(), source_weights(), CtOptions{});
  std::map<std::string, float> scales;
  for (const auto& [name, t] : source_weights())
    if (is_linear(name)) scales[name.substr(0, name.size() - 7)] = 0.004f;
  const std::string a = "model.layers.0.self_attn.";
  scales[a + "q_proj"] = 0.002f, scales[a + "k_proj"] = 0.009f, scales[a + "v_proj"] = 0.005f;
  write_ct_checkpoint(ct.str(), source_weights(), static_options("channel", scales));
  auto engine = engine_on(ct.str());
  const Parameter& qkv = engine->model().parameters().get(a + "qkv_proj.weight");
  const int64_t T = 3, K = qkv.local_shape()[1], N = qkv.local_shape()[0];
  Vec xv(static_cast<size_t>(T * K));
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.37f * static_cast<float>(i)) * 1.5f;
  const Tensor x = Tensor::from_floats({T, K}, xv);
  Tensor out = Tensor::empty({T, N}, DType::f32);
  matmul_weight(x, qkv, Tensor(), out);
  const RefModel m = ref_model(ct.str());
  const Ref r{tiny_config(), m, Acts::static_max};
  const Vec want = r.linear(xv, T, K, {a + "q_proj", a + "k_proj", a + "v_proj"});
  // The reference is [T, N] per layer; refit's output is [T, N_q + N_k + N_v].
  Vec got_by_layer;
  const Vec got = out.to_floats();
  int64_t col = 0;
  for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
    const int64_t n = static_cast<int64_t>(m.w.at(a + proj + ".weight").size()) / K;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < n; ++j) got_by_layer.push_back(got[t * N + col + j]);
    col += n;
  }
  EXPECT_LE(max_abs_diff(got_by_layer, want), 1e-4f);
  const Vec q_scale = Ref{tiny_config(), m, Acts::static_first_shard}.linear(
      xv, T, K, {a + "q_proj", a + "k_proj", a + "v_proj"});
  EXPECT_GT(max_abs_diff(got_by_layer, q_scale), 1e-2f) << "q's scale used, not the max";
  // The helper itself: x_scale is s, codes e4m3(x / s).
  Tensor xq = Tensor::empty({T, K}, DType::f8_e4m3fn), xs = Tensor::empty({T}, DType::f32);
  ops::quantize_fp8_with_scale(x, 0.009f, xq, xs);
  EXPECT_EQ(xs.to_floats(), Vec(T, 0.009f));
  const auto* c = static_cast<const uint8_t*>(xq.raw_data());
  for (int64_t i = 0; i < T * K; ++i) ASSERT_EQ(c[i], f32_to_f8_e4m3fn(xv[i] / 0.009f)) << i;
  EXPECT_THROW(ops::quantize_fp8_with_scale(x, -1.0f, xq, xs), Error);
}

std::map<std::string, float> fixed_scales(float base) {
  std::map<std::string, float> s;
  int i = 0;
  for (const auto& [name, t] : source_weights())
    if (is_linear(name) && name != "lm_head.weight")  // lm_head is ignored: no scale
      s[name.substr(0, name.size() - 7)] = base * (1.0f + 0.125f * (i++ % 5));
  return s;
}

// Refit from disk: a checkpoint with other input scales (stored as scalars, in bf16) is
// bitwise a fresh load of it, at the same addresses; an update carrying one input_scale
// changes it and equals a fresh load of the checkpoint holding it; a weights-only bf16
// update keeps the input scales.
TEST(CtStaticRefit, input_scales_refit_like_weights) {
  Dir first, second, third;
  const Weights w = source_weights();
  const auto s1 = fixed_scales(0.004f), s2 = fixed_scales(0.007f);
  write_ct_checkpoint(first.str(), w, static_options("tensor", s1));
  CtOptions o2 = static_options("tensor", s2);
  o2.scalar_input_scale = true;
  o2.input_scale_dtype = DType::bf16;
  write_ct_checkpoint(second.str(), w, o2);
  auto engine = engine_on(first.str());
  const auto before = addresses(engine->model());
  const Vec logits1 = engine->logits(kTokens).to_floats();
  engine->update_weights_from_disk(second.str());
  auto fresh2 = engine_on(second.str());
  expect_same_bytes(engine->model(), fresh2->model(), "refit from disk with other input scales");
  EXPECT_EQ(engine->logits(kTokens).to_floats(), fresh2->logits(kTokens).to_floats());
  EXPECT_NE(engine->logits(kTokens).to_floats(), logits1);
  // Back to the first, only the input scales.
  std::vector<std::string> names;
  for (const auto& [layer, s] : s1) names.push_back(layer + ".input_scale");
  engine->update_weights_from_disk(first.str(), names);
  auto fresh1 = engine_on(first.str());
  expect_same_bytes(engine->model(), fresh1->model(), "input scales reloaded from disk");
  EXPECT_EQ(engine->logits(kTokens).to_floats(), logits1);
  // An update carrying one input_scale.
  const std::string k = "model.layers.1.self_attn.k_proj";
  auto s3 = s1;
  s3[k] = 0.03f;
  write_ct_checkpoint(third.str(), w, static_options("tensor", s3));
  engine->update_weights_from_tensors(
      {{k + ".input_scale", Tensor::from_floats({1}, std::vector<float>{0.03f})}});
  auto fresh3 = engine_on(third.str());
  expect_same_bytes(engine->model(), fresh3->model(), "an update carrying an input_scale");
  EXPECT_EQ(engine->logits(kTokens).to_floats(), fresh3->logits(kTokens).to_floats());
  EXPECT_EQ(engine->model().parameters().get(k + ".input_scale").data().to_floats()[0], 0.03f);
  // The trainer's bf16 weights only: re-quantized, the input scales kept.
  const Weights next = as_bf16(perturbed(w, 5));
  engine->update_weights_from_tensors(
      std::vector<std::pair<std::string, Tensor>>(next.begin(), next.end()));
  for (const auto& [layer, s] : s3)
    EXPECT_EQ(engine->model().parameters().get(layer + ".input_scale").data().to_floats()[0], s)
        << layer;
  EXPECT_NE(engine->logits(kTokens).to_floats(), fresh3->logits(kTokens).to_floats());
  EXPECT_EQ(addresses(engine->model()), before);
}

struct BadScale {
  std::string what;
  std::function<Tensor(Tensor)> make;
  std::string expected;
};
void PrintTo(const BadScale& b, std::ostream* os) { *os << b.what; }

std::vector<BadScale> bad_scales() {
  const auto value = [](float v) {
    return [v](Tensor) { return Tensor::from_floats({1}, std::vector<float>{v}); };
  };
  return {
      {"negative", value(-0.01f), "must be finite and positive"},
      {"zero", value(0.0f), "must be finite and positive"},
      {"NaN", value(std::numeric_limits<float>::quiet_NaN()), "must be finite and positive"},
      {"infinite", value(std::numeric_limits<float>::infinity()), "must be finite and positive"},
      {"shape [2]",
       [](Tensor) {
         return Tensor::from_floats({2}, std::vector<float>{0.01f, 0.01f});
       },
       "expected shape [1] or a scalar []"},
  };
}

class CtStaticBad : public ::testing::TestWithParam<BadScale> {};

TEST_P(CtStaticBad, is_refused_by_name_in_a_checkpoint_and_in_an_update) {
  const BadScale b = GetParam();
  const std::string v = "model.layers.1.self_attn.v_proj";
  Dir good, bad;
  const auto scales = fixed_scales(0.004f);
  write_ct_checkpoint(good.str(), source_weights(), static_options("channel", scales));
  CtOptions o = static_options("channel", scales);
  o.edit_input_scale = [&](const std::string& layer, Tensor t) {
    return layer == v ? b.make(t) : t;
  };
  write_ct_checkpoint(bad.str(), source_weights(), o);
  const auto refused = [&](const std::function<void()>& f) {
    try {
      f();
      ADD_FAILURE() << b.what << " accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(v + ".input_scale"), std::string::npos) << m;
      EXPECT_NE(m.find(b.expected), std::string::npos) << m;
    }
  };
  refused([&] { engine_on(bad.str()); });
  auto engine = engine_on(good.str());
  auto fresh = engine_on(good.str());
  const uint64_t version = engine->weight_version();
  refused([&] { engine->update_weights_from_disk(bad.str()); });
  refused([&] { engine->update_weights_from_tensors({{v + ".input_scale", b.make(Tensor())}}); });
  // Also alongside a good weight: nothing of the transaction is written.
  const Weights next = as_bf16(perturbed(source_weights(), 9));
  refused([&] {
    engine->update_weights_from_tensors(
        {{v + ".weight", next.at(v + ".weight")}, {v + ".input_scale", b.make(Tensor())}});
  });
  EXPECT_EQ(engine->weight_version(), version);
  expect_same_bytes(engine->model(), fresh->model(), "after refused updates");
}

INSTANTIATE_TEST_SUITE_P(Values, CtStaticBad, ::testing::ValuesIn(bad_scales()),
                         [](const ::testing::TestParamInfo<BadScale>& i) {
                           std::string n = i.param.what;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// `refit inspect`'s config section says what is served; block weights with static scales
// are refused (vLLM refuses them too), as are static scales per channel.
TEST(CtStaticConfig, inspect_line_and_refusals) {
  QuantScheme s;
  s.method = QuantMethod::fp8_tensor;
  s.w8a8 = s.static_activations = true;
  EXPECT_EQ(describe_quant_scheme(s),
            "quantization: fp8-tensor weights, W8A8, static per-tensor activation scales "
            "(input_scale; max over fused layers)");
  s.static_activations = false;
  EXPECT_EQ(describe_quant_scheme(s),
            "quantization: fp8-tensor weights, W8A8, dynamic per-token activation scales");
  CtOptions o = static_options("channel", {});
  nlohmann::json qc = ct_quantization_config(o);
  EXPECT_EQ(parse_compressed_tensors(qc, "config.json").scheme.name(), "fp8-channel-w8a8-static");
  nlohmann::json block = qc;
  block["config_groups"]["group_0"]["weights"]["strategy"] = "block";
  block["config_groups"]["group_0"]["weights"]["block_structure"] = {128, 128};
  EXPECT_THROW(
      {
        try {
          parse_compressed_tensors(block, "config.json");
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("static activation scales with block weights"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  nlohmann::json channel = qc;
  channel["config_groups"]["group_0"]["input_activations"]["strategy"] = "channel";
  EXPECT_THROW(parse_compressed_tensors(channel, "config.json"), Error);
}

// L1: the input scales are tensors the engine owns, so each exports zero-copy through
// DLPack (both structs) like every other parameter.
TEST(CtStaticExport, input_scales_export_zero_copy_through_dlpack) {
  Dir plain, ct, dynamic;
  CtOptions o;
  o.strategy = "channel";
  write_ct_checkpoint(dynamic.str(), source_weights(), o, plain.str());
  write_ct_checkpoint(ct.str(), source_weights(),
                      static_options("channel", calibrated_scales(plain.str())));
  auto engine = engine_on(ct.str());
  int scales = 0;
  for (const ParameterInfo& p : engine->named_parameters()) {
    if (!p.name.ends_with(".input_scale")) continue;
    SCOPED_TRACE(p.name);
    DLManagedTensorVersioned* v = to_dlpack_versioned(p.tensor);
    EXPECT_EQ(v->dl_tensor.data, p.tensor.raw_data());
    EXPECT_EQ(v->dl_tensor.ndim, 1);
    EXPECT_EQ(v->dl_tensor.shape[0], 1);
    Tensor back = from_dlpack(v);
    EXPECT_EQ(back.raw_data(), p.tensor.raw_data());
    DLManagedTensor* legacy = to_dlpack_legacy(p.tensor);
    EXPECT_EQ(legacy->dl_tensor.data, p.tensor.raw_data());
    legacy->deleter(legacy);
    ++scales;
  }
  EXPECT_EQ(scales, 7 * engine->config().n_layers);  // q, k, v, o, gate, up, down
}

}  // namespace
}  // namespace refit
