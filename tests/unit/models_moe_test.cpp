// Mixture of experts: Qwen3-MoE against llama.cpp (../shared/oracle/llamacpp, "MoE models" in
// its README), the Hugging Face form of the same weights, refit of experts (law L2), batch
// invariance, and the gpt-oss FFN variants (router bias, top-k then softmax, expert biases,
// clamped SwiGLU) at layer and op level against a straightforward reference.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/safetensors_writer.h"
#include "formats_test_util.h"
#include "kernels/ops.h"
#include "layers/moe_feed_forward.h"
#include "models/model_loader.h"
#include "models/quantize_model.h"
#include "oracle_runs.h"
#include "reference_files.h"
#include "refit_test_support.h"
#include "runtime/generator.h"
#include "weights/weight_update.h"

namespace refit {
namespace {

using testing::kPackPrompts;
using testing::pack_gguf;
using testing::pack_run;

using testing::read_floats;
using testing::RefRun;
using testing::teacher_forced;
using testing::TempDir;

const std::string kF32 = pack_gguf("qwen3moe-f32");
const std::string kQ8 = pack_gguf("qwen3moe-q8_0");

struct Diff {
  double max_abs = 0, mean_abs = 0;
};
Diff diff(const std::vector<float>& a, const std::vector<float>& b) {
  Diff d;
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double e = std::fabs(static_cast<double>(a[i]) - b[i]);
    d.max_abs = std::max(d.max_abs, e);
    d.mean_abs += e;
  }
  d.mean_abs /= static_cast<double>(std::max<size_t>(1, a.size()));
  return d;
}

// A model created for a checkpoint and quantized in its own scheme (Q8_0 GGUF) or `quant`.
std::unique_ptr<Model> load_as_engine(const std::string& path, const std::string& quant = "") {
  auto ck = Checkpoint::open(path);
  ModelConfig config = read_model_config(*ck);
  auto model = create_model(config, config.weight_dtype);
  quantize_for_checkpoint(*model, *ck, parse_quant_scheme(quant.empty() ? "none" : quant));
  load_weights(*model, *ck);
  return model;
}

TEST(Qwen3Moe, ConfigFromGgufMarksEveryLayerSparse) {
  auto model = load_model(kF32);
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.arch, Architecture::qwen3moe);
  EXPECT_EQ(c.n_experts, 8);
  EXPECT_EQ(c.n_experts_used, 2);
  EXPECT_EQ(c.expert_ffn_dim, 64);
  EXPECT_TRUE(c.router_renormalize);
  for (int64_t l = 0; l < c.n_layers; ++l) EXPECT_EQ(c.layer(l).ffn, FfnKind::moe) << l;
  // One stacked gate/up and one down parameter per layer, one sub-shard per expert tensor.
  const Parameter& gu = model->parameters().get("model.layers.1.mlp.experts.w13_weight");
  EXPECT_EQ(gu.local_shape(), (Shape{8 * 2 * 64, 128}));
  ASSERT_EQ(gu.sub_shards().size(), 16u);
  EXPECT_EQ(gu.sub_shards()[3].checkpoint_name, "model.layers.1.mlp.experts.1.up_proj.weight");
  EXPECT_EQ(gu.sub_shards()[3].local_row_offset, 3 * 64);
  const Parameter& down = model->parameters().get("model.layers.1.mlp.experts.w2_weight");
  EXPECT_EQ(down.local_shape(), (Shape{8 * 128, 64}));
  EXPECT_EQ(model->parameters().find("model.layers.1.mlp.gate_up_proj.weight"), nullptr);
}

TEST(Qwen3Moe, HfSparseStepAndMlpOnlyLayers) {
  nlohmann::json j = {{"architectures", {"Qwen3MoeForCausalLM"}},
                      {"hidden_size", 64},
                      {"num_hidden_layers", 6},
                      {"num_attention_heads", 4},
                      {"num_key_value_heads", 2},
                      {"head_dim", 16},
                      {"intermediate_size", 96},
                      {"vocab_size", 100},
                      {"num_experts", 4},
                      {"num_experts_per_tok", 2},
                      {"moe_intermediate_size", 32},
                      {"norm_topk_prob", false},
                      {"decoder_sparse_step", 2},
                      {"mlp_only_layers", {3}},
                      {"output_router_logits", false},
                      {"router_aux_loss_coef", 0.001}};
  ModelConfig c = config_from_hf_json(j.dump(), "config.json");
  std::vector<bool> sparse;
  for (int64_t l = 0; l < 6; ++l) sparse.push_back(c.layer(l).ffn == FfnKind::moe);
  EXPECT_EQ(sparse, (std::vector<bool>{false, true, false, false, false, true}));
  EXPECT_FALSE(c.router_renormalize);
  auto model = create_model(c, DType::f32);
  EXPECT_NE(model->parameters().find("model.layers.0.mlp.gate_up_proj.weight"), nullptr);
  EXPECT_NE(model->parameters().find("model.layers.1.mlp.experts.w13_weight"), nullptr);
  EXPECT_NE(model->parameters().find("model.layers.1.mlp.gate.weight"), nullptr);
  EXPECT_EQ(model->parameters().find("model.layers.1.mlp.gate_up_proj.weight"), nullptr);
  // A field that changes the maths and is not honoured is refused by name.
  j["num_experts"] = 4;
  j["architectures"] = {"Qwen3ForCausalLM"};
  try {
    config_from_hf_json(j.dump(), "config.json");
    FAIL() << "num_experts on a dense architecture was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a mixture of experts"), std::string::npos) << e.what();
  }
}

TEST(Qwen3Moe, F32GreedyIdsAndLogitsMatchLlamaCpp) {
  auto model = load_model(kF32);
  for (const char* prompt : kPackPrompts) {
    SCOPED_TRACE(prompt);
    const RefRun r = pack_run("qwen3moe-f32", prompt);
    GenerateRequest req;
    req.prompt = r.prompt;
    req.max_tokens = static_cast<int64_t>(r.generated.size());
    EXPECT_EQ(generate(*model, req).tokens, r.generated);
    const Diff d =
        diff(teacher_forced(*model, r.sequence),
             read_floats(testing::kLlamaCppPack + "/qwen3moe-f32/" + prompt + ".logits.f32"));
    EXPECT_LT(d.max_abs, 1e-3);
    EXPECT_LT(d.mean_abs, 1e-4);
    RecordProperty(std::string(prompt) + "_max_abs", std::to_string(d.max_abs));
  }
}

// The Q8_0 file has no logits of its own. Against the F32 reference (which includes the
// weights' own quantization error) the README's Q8_0 mean bound of 0.8 holds over the three
// prompts together; single rows after a routing flip move by up to ~20, so the max only
// catches gross errors. And teacher-forced on llama.cpp's Q8_0 run, refit's greedy choice
// agrees with llama.cpp's at most of its 32 steps (ids may differ at small margins).
TEST(Qwen3Moe, Q8_0GgufIsWithinTheReadmeBoundsOfTheF32Reference) {
  auto model = load_as_engine(kQ8);
  EXPECT_TRUE(model->parameters().get("model.layers.0.mlp.experts.w13_weight").quantized());
  EXPECT_FALSE(model->parameters().get("model.layers.0.mlp.gate.weight").quantized());
  const size_t V = static_cast<size_t>(model->config().vocab_size);
  double mean_sum = 0;
  int agree = 0, steps = 0;
  for (const char* prompt : kPackPrompts) {
    SCOPED_TRACE(prompt);
    const RefRun r = pack_run("qwen3moe-f32", prompt);
    const Diff d =
        diff(teacher_forced(*model, r.sequence),
             read_floats(testing::kLlamaCppPack + "/qwen3moe-f32/" + prompt + ".logits.f32"));
    EXPECT_LT(d.max_abs, 30.0);
    mean_sum += d.mean_abs;
    const RefRun q = pack_run("qwen3moe-q8_0", prompt);
    const std::vector<float> logits = teacher_forced(*model, q.sequence);
    for (size_t i = 0; i < q.generated.size(); ++i) {
      const float* row = logits.data() + (q.prompt.size() - 1 + i) * V;
      agree += std::max_element(row, row + V) - row == q.generated[i];
      ++steps;
    }
    std::printf("qwen3moe-q8_0 %s vs F32 reference: max %.4g mean %.4g\n", prompt, d.max_abs,
                d.mean_abs);
  }
  std::printf("qwen3moe-q8_0: mean over prompts %.4g; greedy agrees with llama.cpp Q8_0 at %d/%d\n",
              mean_sum / 3, agree, steps);
  EXPECT_LT(mean_sum / 3, 0.8);
  EXPECT_GE(agree, steps * 3 / 4);
}

// The GGUF's weights written as a Hugging Face folder: per-expert names, HF row order.
std::string write_hf_folder(const TempDir& dir) {
  auto model = load_model(kF32);
  const ModelConfig& c = model->config();
  const testing::TensorMap weights = testing::base_weights(kF32, *model);
  std::vector<std::pair<std::string, Tensor>> tensors(weights.begin(), weights.end());
  write_safetensors(dir.file("model.safetensors"), tensors);
  nlohmann::json j = {{"architectures", {"Qwen3MoeForCausalLM"}},
                      {"model_type", "qwen3_moe"},
                      {"hidden_size", c.dim},
                      {"num_hidden_layers", c.n_layers},
                      {"num_attention_heads", c.n_heads},
                      {"num_key_value_heads", c.n_kv_heads},
                      {"head_dim", c.head_dim},
                      {"intermediate_size", c.ffn_dim},
                      {"vocab_size", c.vocab_size},
                      {"max_position_embeddings", c.max_seq_len},
                      {"rms_norm_eps", c.rms_eps},
                      {"rope_theta", c.rope_theta},
                      {"tie_word_embeddings", false},
                      {"num_experts", c.n_experts},
                      {"num_experts_per_tok", c.n_experts_used},
                      {"moe_intermediate_size", c.expert_ffn_dim},
                      {"norm_topk_prob", true},
                      {"decoder_sparse_step", 1},
                      {"mlp_only_layers", nlohmann::json::array()},
                      {"torch_dtype", "float32"}};
  std::ofstream(dir.file("config.json")) << j.dump(2);
  return dir.path.string();
}

TEST(Qwen3Moe, HuggingFaceFolderMatchesTheGguf) {
  TempDir dir;
  const std::string hf = write_hf_folder(dir);
  auto gguf = load_model(kF32);
  auto folder = load_model(hf);
  const RefRun r = pack_run("qwen3moe-f32", "hello_world_123");
  EXPECT_EQ(teacher_forced(*folder, r.sequence), teacher_forced(*gguf, r.sequence));
}

// Law L2 on experts: one expert, a subset, all; f32 and Q8_0 (--quant and the Q8_0 GGUF's
// own scheme); bitwise a fresh load, storage addresses unchanged.
struct RefitCase {
  const char* name;
  std::string path_kind;  // "hf" or "q8_gguf"
  std::string quant;
};

std::vector<std::string> expert_names(int64_t layer, std::vector<int64_t> experts,
                                      std::vector<const char*> projections) {
  std::vector<std::string> out;
  for (int64_t e : experts)
    for (const char* p : projections)
      out.push_back(fmt::format("model.layers.{}.mlp.experts.{}.{}.weight", layer, e, p));
  return out;
}

// A model quantized as load_as_engine quantizes it, loaded from `weights` (what a fresh
// engine given those values computes with).
std::unique_ptr<Model> fresh_engine(const std::string& path, const std::string& quant,
                                    const testing::TensorMap& weights) {
  auto ck = Checkpoint::open(path);
  ModelConfig config = read_model_config(*ck);
  auto model = create_model(config, config.weight_dtype);
  quantize_for_checkpoint(*model, *ck, parse_quant_scheme(quant.empty() ? "none" : quant));
  for (const std::string& name : model->parameters().checkpoint_names()) {
    CheckpointTarget t = model->parameters().target(name);
    t.parameter->load(*t.sub_shard, weights.at(name));
  }
  return model;
}

void refit_matrix(const std::string& path, const std::string& quant) {
  auto model = load_as_engine(path, quant);
  const ModelConfig& config = model->config();
  const auto before = testing::addresses(*model);
  testing::TensorMap current = testing::base_weights(path, *model);
  const testing::TensorMap changed = testing::perturbed(current, 11, DType::f32);
  const std::vector<std::vector<std::string>> updates = {
      expert_names(2, {5}, {"gate_proj"}),                          // one tensor of one expert
      expert_names(1, {3}, {"gate_proj", "up_proj", "down_proj"}),  // one expert
      [] {                                                          // a subset across layers
        auto a = expert_names(0, {0, 7}, {"up_proj", "down_proj"});
        auto b = expert_names(3, {2, 4, 6}, {"gate_proj"});
        a.insert(a.end(), b.begin(), b.end());
        return a;
      }(),
      [&] {  // every expert of every layer
        std::vector<std::string> all;
        for (int64_t l = 0; l < config.n_layers; ++l) {
          auto x = expert_names(l, {0, 1, 2, 3, 4, 5, 6, 7}, {"gate_proj", "up_proj", "down_proj"});
          all.insert(all.end(), x.begin(), x.end());
        }
        return all;
      }(),
  };
  for (const auto& names : updates) {
    SCOPED_TRACE(fmt::format("{} tensors from {}", names.size(), names.front()));
    WeightUpdate update(model->parameters(), {});
    for (const std::string& n : names) {
      update.update(n, changed.at(n));
      current[n] = changed.at(n);
    }
    update.apply();
    auto fresh = fresh_engine(path, quant, current);
    testing::expect_same_bytes(*model, *fresh, "refit vs fresh");
    EXPECT_EQ(testing::addresses(*model), before);
  }
  // A wrong shape (an expert's [in, out], transposed) is refused naming the tensor, and
  // changes nothing.
  const std::string name = "model.layers.2.mlp.experts.4.down_proj.weight";
  const Tensor& good = current.at(name);
  const Tensor wrong = Tensor::zeros({good.size(1), good.size(0)}, DType::f32);
  auto snapshot = fresh_engine(path, quant, current);
  WeightUpdate bad(model->parameters(), {});
  try {
    bad.update(name, wrong);
    FAIL() << "a transposed expert tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
  EXPECT_THROW(bad.apply(), Error);
  testing::expect_same_bytes(*model, *snapshot, "after a refused update");
}

TEST(Qwen3Moe, RefitExpertsIsBitwiseAFreshLoadF32) {
  TempDir dir;
  refit_matrix(write_hf_folder(dir), "");
}

TEST(Qwen3Moe, RefitExpertsIsBitwiseAFreshLoadQuantQ8_0) {
  TempDir dir;
  refit_matrix(write_hf_folder(dir), "q8_0");
}

TEST(Qwen3Moe, RefitExpertsIsBitwiseAFreshLoadFromQ8_0Gguf) { refit_matrix(kQ8, ""); }

// A token's logits do not depend on what else is in the batch: the prompt in one forward,
// in chunks through the paged cache, and beside other sequences, bitwise.
TEST(Qwen3Moe, BatchInvariantWithExperts) {
  for (const std::string& quant : {std::string(""), std::string("q8_0")}) {
    SCOPED_TRACE(quant.empty() ? "f32" : quant);
    TempDir dir;
    auto model = load_as_engine(write_hf_folder(dir), quant);
    std::vector<int32_t> a, b;
    for (int32_t i = 0; i < 23; ++i) a.push_back((i * 41 + 7) % 3000 + 4);
    for (int32_t i = 0; i < 17; ++i) b.push_back((i * 13 + 5) % 3000 + 9);
    const std::vector<float> want = teacher_forced(*model, a);
    PagedKvCache cache = make_paged_cache(*model, 32, 4);
    std::vector<int32_t> ta, tb;
    ASSERT_TRUE(cache.reserve(ta, static_cast<int64_t>(a.size())));
    ASSERT_TRUE(cache.reserve(tb, static_cast<int64_t>(b.size())));
    std::vector<float> got;
    for (int64_t start = 0; start < static_cast<int64_t>(a.size()); start += 5) {
      BatchSequence sa, sb;
      sa.tokens = std::span<const int32_t>(a).subspan(static_cast<size_t>(start),
                                                      std::min<size_t>(5, a.size() - start));
      sa.start_pos = start;
      sa.block_table = ta;
      sa.logits = LogitsWanted::all;
      const int64_t nb = std::min<int64_t>(3, static_cast<int64_t>(b.size()) - start);
      std::vector<BatchSequence> batch{sa};
      if (nb > 0) {  // another sequence's tokens share every expert's matmul
        sb.tokens = std::span<const int32_t>(b).subspan(static_cast<size_t>(start),
                                                        static_cast<size_t>(nb));
        sb.start_pos = start;
        sb.block_table = tb;
        sb.logits = LogitsWanted::last;
        batch.push_back(sb);
      }
      BatchForwardResult res = batched_forward(*model, batch, cache);
      const std::vector<float> rows = res.logits.to_floats();
      const size_t V = static_cast<size_t>(model->config().vocab_size);
      got.insert(got.end(), rows.begin(), rows.begin() + static_cast<long>(sa.tokens.size() * V));
    }
    EXPECT_EQ(got, want);
  }
}

// ---- op and layer level ----

TEST(MoeRoute, TiesGoToTheLowestExpertIndex) {
  Tensor logits = Tensor::from_floats({2, 6}, std::vector<float>{1, 3, 3, 0, 3, 2,  //
                                                                 5, 5, 5, 5, 5, 5});
  for (auto scoring : {ops::RouterScoring::softmax_topk, ops::RouterScoring::topk_softmax}) {
    Tensor ids = Tensor::empty({2, 3}, DType::i32), w = Tensor::empty({2, 3}, DType::f32);
    ops::moe_route(logits, 3, scoring, true, ids, w);
    const int32_t* id = ids.data<const int32_t>();
    EXPECT_EQ(std::vector<int32_t>(id, id + 6), (std::vector<int32_t>{1, 2, 4, 0, 1, 2}));
    for (int j = 0; j < 6; ++j) EXPECT_NEAR(w.data<float>()[j], 1.0 / 3, 1e-6);
  }
  // Not renormalised: the softmax over all six experts at the chosen ones.
  Tensor ids = Tensor::empty({2, 3}, DType::i32), w = Tensor::empty({2, 3}, DType::f32);
  ops::moe_route(logits, 3, ops::RouterScoring::softmax_topk, false, ids, w);
  EXPECT_NEAR(w.data<float>()[3], 1.0 / 6, 1e-6);
  EXPECT_THROW(ops::moe_route(logits, 7, ops::RouterScoring::softmax_topk, true, ids, w), Error);
}

TEST(SwigluOai, ClampsGateAboveAndUpBothWays) {
  Tensor g = Tensor::from_floats({1, 4}, std::vector<float>{9, -9, 2, 7}),
         u = Tensor::from_floats({1, 4}, std::vector<float>{-9, 9, 8, 0});
  Tensor out = Tensor::empty({1, 4}, DType::f32);
  ops::swiglu_oai_mul(g, u, 1.702f, 7.0f, out);
  auto f = [](double g, double u) {
    g = std::min(g, 7.0);
    u = std::clamp(u, -7.0, 7.0);
    return (u + 1) * g / (1 + std::exp(-1.702 * g));
  };
  EXPECT_NEAR(out.data<float>()[0], f(9, -9), 1e-5);  // g -> 7, u -> -7
  EXPECT_NEAR(out.data<float>()[1], f(-9, 9), 1e-5);  // g kept (no lower clamp), u -> 7
  EXPECT_NEAR(out.data<float>()[2], f(2, 8), 1e-5);
  EXPECT_NEAR(out.data<float>()[0], -6 * 7 / (1 + std::exp(-1.702 * 7)), 1e-4);
}

// gpt-oss's FFN as data: router bias, top-k then softmax, per-expert biases, swiglu_oai,
// against a plain double loop over every token and its chosen experts.
TEST(MoeFeedForward, GptOssVariantMatchesAStraightforwardReference) {
  const int64_t D = 24, I = 40, E = 6, k = 3, T = 9;  // I != D: orientation mistakes show
  MoeSpec s;
  s.router = "r.weight";
  s.router_bias = "r.bias";
  s.gate_up_name = "experts.w13_weight";
  s.down_name = "experts.w2_weight";
  s.gate_up_bias_name = "experts.w13_bias";
  s.down_bias_name = "experts.w2_bias";
  for (int64_t e = 0; e < E; ++e) {
    s.gate.push_back(fmt::format("e{}.gate.weight", e));
    s.up.push_back(fmt::format("e{}.up.weight", e));
    s.down.push_back(fmt::format("e{}.down.weight", e));
    s.gate_bias.push_back(fmt::format("e{}.gate.bias", e));
    s.up_bias.push_back(fmt::format("e{}.up.bias", e));
    s.down_bias.push_back(fmt::format("e{}.down.bias", e));
  }
  s.dim = D, s.hidden = I, s.n_experts = E, s.n_used = k;
  s.scoring = ops::RouterScoring::topk_softmax;
  s.activation = ExpertActivation::swiglu_oai;
  ParameterSet params;
  MoeFeedForward moe(params, s, DType::f32, {});
  uint32_t seed = 1;
  auto rnd = [&](Shape shape, float scale) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) {
      seed = seed * 1664525u + 1013904223u;
      x = scale * (static_cast<float>(seed >> 8) * 0x1.0p-24f - 0.5f) * 2;
    }
    return Tensor::from_floats(shape, v);
  };
  std::map<std::string, Tensor> w;
  w["r.weight"] = rnd({E, D}, 1.0f);
  w["r.bias"] = rnd({E}, 1.0f);
  for (int64_t e = 0; e < E; ++e) {
    w[s.gate[e]] = rnd({I, D}, 0.9f), w[s.up[e]] = rnd({I, D}, 0.9f);
    w[s.down[e]] = rnd({D, I}, 0.2f);
    w[s.gate_bias[e]] = rnd({I}, 1.0f), w[s.up_bias[e]] = rnd({I}, 1.0f);
    w[s.down_bias[e]] = rnd({D}, 0.5f);
  }
  for (const std::string& n : params.checkpoint_names()) {
    CheckpointTarget t = params.target(n);
    t.parameter->load(*t.sub_shard, w.at(n));
  }
  const Tensor x = rnd({T, D}, 2.0f);
  const std::vector<float> got = moe.forward(x).to_floats();

  auto at = [](const Tensor& t, int64_t i) { return double(t.data<const float>()[i]); };
  int clamped_gate = 0, clamped_up = 0;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> logit(E);
    for (int64_t e = 0; e < E; ++e) {
      logit[e] = at(w["r.bias"], e);
      for (int64_t d = 0; d < D; ++d) logit[e] += at(w["r.weight"], e * D + d) * at(x, t * D + d);
    }
    std::vector<int64_t> order(E);
    for (int64_t e = 0; e < E; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return logit[a] > logit[b]; });
    double z = 0;
    for (int64_t j = 0; j < k; ++j) z += std::exp(logit[order[j]] - logit[order[0]]);
    std::vector<double> y(D, 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = order[j];
      const double weight = std::exp(logit[e] - logit[order[0]]) / z;
      std::vector<double> a(I);
      for (int64_t i = 0; i < I; ++i) {
        double g = at(w[s.gate_bias[e]], i), u = at(w[s.up_bias[e]], i);
        for (int64_t d = 0; d < D; ++d) {
          g += at(w[s.gate[e]], i * D + d) * at(x, t * D + d);
          u += at(w[s.up[e]], i * D + d) * at(x, t * D + d);
        }
        clamped_gate += g > 7;
        clamped_up += std::fabs(u) > 7;
        g = std::min(g, 7.0);
        u = std::clamp(u, -7.0, 7.0);
        a[i] = (u + 1) * g / (1 + std::exp(-1.702 * g));
      }
      for (int64_t d = 0; d < D; ++d) {
        double o = at(w[s.down_bias[e]], d);
        for (int64_t i = 0; i < I; ++i) o += at(w[s.down[e]], d * I + i) * a[i];
        y[d] += weight * o;
      }
    }
    for (int64_t d = 0; d < D; ++d)
      EXPECT_NEAR(got[static_cast<size_t>(t * D + d)], y[d], 1e-4 * (1 + std::fabs(y[d])))
          << "token " << t << " dim " << d;
  }
  EXPECT_GT(clamped_gate, 0) << "the gate clamp is not exercised";
  EXPECT_GT(clamped_up, 0) << "the up clamp is not exercised";
}

}  // namespace
}  // namespace refit
