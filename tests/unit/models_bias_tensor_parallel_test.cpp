// Llama's attention_bias and mlp_bias under tensor parallelism. q/k/v and gate/up biases
// are column-parallel (each rank its rows); o_proj's and down_proj's biases belong to
// row-parallel layers, whose partial outputs are all-reduced: the bias must be added once,
// after the reduction. Added per rank, a model at TP=2 would carry it twice (biases are
// drawn with std 0.3, far above the 1e-4 tolerance).
#include <gtest/gtest.h>

#include <cmath>

#include "formats_test_util.h"
#include "models/model_loader.h"
#include "refit_test_support.h"
#include "synthetic/synthetic_checkpoint.h"
#include "synthetic/synthetic_model.h"

namespace refit {
namespace {

using testing::TempDir;

ModelConfig biased_llama() {
  ModelConfig c = synthetic_preset(Architecture::llama, "tiny");
  c.dim = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16, c.ffn_dim = 96;
  c.vocab_size = 384;  // the synthetic vocabulary needs at least 354
  c.qkv_bias = c.o_bias = c.mlp_bias = true;
  return c;
}

std::vector<float> teacher_forced(const Model& model) {
  std::vector<int32_t> s;
  for (int32_t i = 0; i < 12; ++i) s.push_back((i * 37 + 5) % 290 + 4);
  KvCache cache = model.make_cache(static_cast<int64_t>(s.size()));
  return model.forward(s, 0, cache, /*all_logits=*/true).to_floats();
}

TEST(BiasTensorParallel, RowParallelBiasesAreAddedOnceAndTwoRanksMatchOne) {
  TempDir dir;
  SyntheticCheckpointOptions o;
  o.seed = 5;
  write_synthetic_hf(dir.file("m"), biased_llama(), o);
  auto one = load_model(dir.file("m"));
  ASSERT_TRUE(one->config().o_bias);
  ASSERT_TRUE(one->config().mlp_bias);
  // Every bias is a parameter loaded from the checkpoint.
  for (const char* name :
       {"model.layers.1.self_attn.o_proj.bias", "model.layers.1.mlp.down_proj.bias",
        "model.layers.1.mlp.gate_proj.bias", "model.layers.1.mlp.up_proj.bias"})
    EXPECT_NE(one->parameters().target(name).parameter, nullptr) << name;
  const std::vector<float> want = teacher_forced(*one);
  std::vector<std::vector<float>> got(2);
  testing::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    LoadOptions opts;
    opts.tensor_parallel.communicator = std::move(comm);
    got[static_cast<size_t>(rank)] = teacher_forced(*load_model(dir.file("m"), opts));
  });
  for (const auto& g : got) {
    ASSERT_EQ(g.size(), want.size());
    double m = 0;
    for (size_t i = 0; i < g.size(); ++i)
      m = std::max(m, std::fabs(static_cast<double>(g[i]) - want[i]));
    EXPECT_LT(m, 1e-4);
  }
  EXPECT_EQ(got[0], got[1]);
}

}  // namespace
}  // namespace refit
