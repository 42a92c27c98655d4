// Mixture of experts under tensor parallelism (ranks as threads over a local communicator):
// experts split along their width (gate/up rows and down columns in blocks of 32, the ranks'
// shares uneven where the blocks do not divide, the down bias added once) or by expert
// (--ep: whole experts per rank, uneven too). Every rank's logits equal TP 1's within 1e-4
// and each other's exactly; a refit of experts (per-expert names, and gpt-oss's stacked form,
// of which a rank takes only its slices or its experts' parts) is bitwise a fresh sharded
// load at the same addresses.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "formats_test_util.h"
#include "models/model_loader.h"
#include "oracle_runs.h"
#include "refit_test_support.h"
#include "synthetic/synthetic_checkpoint.h"
#include "synthetic/synthetic_model.h"
#include "weights/weight_update.h"

namespace refit {
namespace {

using testing::pack_gguf;

using testing::TempDir;

// A gpt-oss whose 6 heads split over 3 ranks: experts 288 wide (9 blocks of 32), 8 experts
// (3 + 3 + 2 under --ep), as an HF folder (stacked experts), written once per test run.
const std::string& synthetic_gpt_oss() {
  static testing::TempDir dir;
  static const std::string path = [] {
    ModelConfig c = synthetic_preset(Architecture::gpt_oss, "tiny", 2);
    c.vocab_size = 3072;
    SyntheticCheckpointOptions o;
    o.seed = 3;
    write_synthetic_hf(dir.file("gpt-oss"), c, o);
    return dir.file("gpt-oss");
  }();
  return path;
}

std::string model_path(const std::string& name) {
  return name == "synthetic-gpt-oss" ? synthetic_gpt_oss() : pack_gguf(name);
}

std::vector<float> teacher_forced(const Model& model) {
  std::vector<int32_t> s;
  for (int32_t i = 0; i < 14; ++i) s.push_back((i * 37 + 5) % 2900 + 4);
  KvCache cache = model.make_cache(static_cast<int64_t>(s.size()));
  return model.forward(s, 0, cache, /*all_logits=*/true).to_floats();
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

struct ParallelCase {
  const char* folder;
  int world;
  bool expert_parallel;
};

class MoeParallel : public ::testing::TestWithParam<ParallelCase> {};

TEST_P(MoeParallel, RanksMatchOneRankAndEachOther) {
  const ParallelCase p = GetParam();
  const std::string path = model_path(p.folder);
  const std::vector<float> want = teacher_forced(*load_model(path));
  std::vector<std::vector<float>> got(static_cast<size_t>(p.world));
  testing::run_ranks(p.world, [&](int rank, std::shared_ptr<Communicator> comm) {
    LoadOptions opts;
    opts.tensor_parallel.communicator = std::move(comm);
    opts.tensor_parallel.expert_parallel = p.expert_parallel;
    got[static_cast<size_t>(rank)] = teacher_forced(*load_model(path, opts));
  });
  for (const auto& g : got) EXPECT_LT(max_diff(g, want), 1e-4);
  for (const auto& g : got) EXPECT_EQ(g, got[0]);
}

INSTANTIATE_TEST_SUITE_P(
    Oracle, MoeParallel,
    ::testing::Values(ParallelCase{"qwen3moe-f32", 2, false},       // I 64: two blocks of 32
                      ParallelCase{"gpt-oss-f32", 2, false},        // I 96: blocks 2 + 1, biases
                      ParallelCase{"synthetic-gpt-oss", 3, false},  // I 288: 3 blocks each
                      ParallelCase{"qwen3moe-f32", 2, true},        // experts 4 + 4
                      ParallelCase{"synthetic-gpt-oss", 3, true}),  // experts 3 + 3 + 2
    [](const auto& info) {
      std::string n = fmt::format("{}_tp{}{}", info.param.folder, info.param.world,
                                  info.param.expert_parallel ? "_ep" : "");
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

// transformers' gate_up_proj [E, dim, 2I] of layer l: gate rows at the even columns.
Tensor stacked_gate_up(const testing::TensorMap& w, const ModelConfig& c, int64_t l) {
  const int64_t E = c.n_experts, I = c.expert_ffn_dim, D = c.dim;
  Tensor out = Tensor::zeros({E, D, 2 * I}, DType::f32);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t parity = 0; parity < 2; ++parity) {
      const Tensor part = w.at(fmt::format("model.layers.{}.mlp.experts.{}.{}.weight", l, e,
                                           parity == 0 ? "gate_proj" : "up_proj"))
                              .contiguous();
      for (int64_t i = 0; i < I; ++i)
        for (int64_t k = 0; k < D; ++k)
          out.data<float>()[(e * D + k) * 2 * I + 2 * i + parity] =
              part.data<const float>()[i * D + k];
    }
  return out;
}

// Law L2 under sharding: each rank stages the whole update (every rank is sent the same
// tensors) and writes only what it holds.
TEST(MoeParallelRefit, ExpertUpdatesOnEveryRankAreBitwiseAFreshShardedLoad) {
  const std::string path = synthetic_gpt_oss();
  auto one = load_model(path);
  const testing::TensorMap base = testing::base_weights(path, *one);
  const testing::TensorMap changed = testing::perturbed(base, 7, DType::f32);
  std::vector<std::string> names;
  for (int64_t e : {0, 3, 7})
    for (const char* p : {"gate_proj", "up_proj", "down_proj"})
      for (const char* kind : {"weight", "bias"})
        names.push_back(fmt::format("model.layers.1.mlp.experts.{}.{}.{}", e, p, kind));
  testing::TensorMap after = base;
  for (const std::string& n : names) after[n] = changed.at(n);
  for (int64_t e = 0; e < one->config().n_experts; ++e)
    for (const char* p : {"gate_proj", "up_proj"}) {
      const std::string n = fmt::format("model.layers.0.mlp.experts.{}.{}.weight", e, p);
      after[n] = changed.at(n);
    }
  for (bool ep : {false, true}) {
    SCOPED_TRACE(ep ? "--ep" : "split along I");
    testing::run_ranks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
      TensorParallel tp;
      tp.communicator = comm;
      tp.expert_parallel = ep;
      LoadOptions opts;
      opts.tensor_parallel = tp;
      auto model = load_model(path, opts);
      const auto before = testing::addresses(*model);
      WeightUpdate update(model->parameters(), {});
      for (const std::string& n : names) update.update(n, changed.at(n));
      // Layer 0 in gpt-oss's stacked form: each rank takes its experts' (or slices') parts.
      const Tensor stacked = stacked_gate_up(changed, model->config(), 0);
      update.update("model.layers.0.mlp.experts.gate_up_proj", stacked);
      update.apply();
      auto fresh = create_model(model->config(), DType::f32, tp);
      for (const std::string& n : fresh->parameters().checkpoint_names()) {
        CheckpointTarget t = fresh->parameters().target(n);
        t.parameter->load(*t.sub_shard, after.at(n));
      }
      testing::expect_same_bytes(*model, *fresh, fmt::format("rank {}", rank));
      EXPECT_EQ(testing::addresses(*model), before);
    });
  }
}

}  // namespace
}  // namespace refit
