// SelfAttention with learned sinks: the parameter is split by query heads like q_proj
// (each rank holds its heads' sinks), tensor parallelism 2 gives tensor parallelism 1's
// output, the sinks change the result, and reloading the sinks alone keeps their storage
// and equals a fresh load bit for bit (law L2).
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <vector>

#include "kernels_test_util.h"
#include "layers/kv_cache.h"
#include "layers/rotary.h"
#include "layers/self_attention.h"
#include "refit_test_support.h"
#include "weights/parameter_set.h"

namespace refit {
namespace {

using testing::bitwise_equal;
using testing::nmse;
using testing::random_tensor;

constexpr int64_t kDim = 32, kHeads = 4, kKvHeads = 2, kHeadDim = 8, kTokens = 5;
const std::string kSinks = "model.layers.0.self_attn.sinks";

AttentionSpec spec(bool sinks) {
  AttentionSpec s;
  s.qkv_name = "model.layers.0.self_attn.qkv_proj";
  s.qkv = {{"model.layers.0.self_attn.q_proj", kHeads * kHeadDim, kHeadDim},
           {"model.layers.0.self_attn.k_proj", kKvHeads * kHeadDim, kHeadDim},
           {"model.layers.0.self_attn.v_proj", kKvHeads * kHeadDim, kHeadDim}};
  s.o_proj = "model.layers.0.self_attn.o_proj";
  s.dim = kDim;
  s.n_heads = kHeads;
  s.n_kv_heads = kKvHeads;
  s.head_dim = kHeadDim;
  s.scale = 0.35f;
  if (sinks) s.sinks = kSinks;
  return s;
}

std::map<std::string, Tensor> checkpoint(float sink_shift) {
  std::map<std::string, Tensor> t;
  t["model.layers.0.self_attn.q_proj.weight"] = random_tensor({kHeads * kHeadDim, kDim}, 1);
  t["model.layers.0.self_attn.k_proj.weight"] = random_tensor({kKvHeads * kHeadDim, kDim}, 2);
  t["model.layers.0.self_attn.v_proj.weight"] = random_tensor({kKvHeads * kHeadDim, kDim}, 3);
  t["model.layers.0.self_attn.o_proj.weight"] = random_tensor({kDim, kHeads * kHeadDim}, 4);
  Tensor sinks = Tensor::empty({kHeads}, DType::f32);
  const float values[] = {5.0f, -30.0f, 1.0f, 2.5f};
  for (int64_t h = 0; h < kHeads; ++h) sinks.data<float>()[h] = values[h] + sink_shift;
  t[kSinks] = sinks;
  return t;
}

void load(ParameterSet& params, const std::map<std::string, Tensor>& ckpt) {
  for (const auto& p : params.all())
    for (const SubShard& s : p->sub_shards()) p->load(s, ckpt.at(s.checkpoint_name));
}

Tensor run(const SelfAttention& attention, const Tensor& x) {
  KvCache cache(1, kTokens, attention.local_kv_heads(), kHeadDim);
  ContiguousKvStore kv(cache);
  const std::vector<int32_t> tokens(kTokens, 0);
  BatchSequence seq;
  seq.tokens = tokens;
  kv.begin(std::span<const BatchSequence>(&seq, 1));
  Tensor positions = Tensor::empty({kTokens}, DType::i32);
  for (int64_t t = 0; t < kTokens; ++t) positions.data<int32_t>()[t] = static_cast<int32_t>(t);
  RopeConfig rope;
  rope.dim = kHeadDim;
  return attention.forward(x, positions, rope_cos_sin_table(rope, kTokens), 0, kv);
}

TEST(LayersAttentionSinks, split_by_query_heads_and_tp2_equals_tp1) {
  const auto ckpt = checkpoint(0.0f);
  const Tensor x = random_tensor({kTokens, kDim}, 9);
  std::map<int, Tensor> out;
  std::mutex mu;
  for (int world : {1, 2}) {
    testing::run_ranks(world, [&](int rank, std::shared_ptr<Communicator> comm) {
      ParameterSet params;
      TensorParallel tp{comm};
      SelfAttention attention(params, spec(true), DType::f32, tp);
      load(params, ckpt);
      const Tensor local = attention.sinks();
      ASSERT_EQ(local.shape(), (Shape{kHeads / world}));
      for (int64_t h = 0; h < kHeads / world; ++h)
        EXPECT_EQ(local.get({h}), ckpt.at(kSinks).get({rank * (kHeads / world) + h}));
      Tensor y = run(attention, x);
      if (rank == 0) {
        std::lock_guard<std::mutex> lock(mu);
        out[world] = y.clone();
      }
    });
  }
  EXPECT_LT(nmse(out[2], out[1]), 1e-10);
  // Without sinks the layer computes something else: the sinks are applied.
  ParameterSet plain_params;
  SelfAttention plain(plain_params, spec(false), DType::f32, TensorParallel{});
  load(plain_params, ckpt);
  EXPECT_GT(nmse(run(plain, x), out[1]), 1e-3);
}

TEST(LayersAttentionSinks, reloading_sinks_alone_equals_a_fresh_load_in_place) {
  const Tensor x = random_tensor({kTokens, kDim}, 10);
  ParameterSet params;
  SelfAttention attention(params, spec(true), DType::f32, TensorParallel{});
  load(params, checkpoint(0.0f));
  Parameter& sinks = params.get(kSinks);
  const void* address = sinks.data().raw_data();
  const Tensor before = run(attention, x);
  const auto updated = checkpoint(-1.5f);
  sinks.load(sinks.sub_shards()[0], updated.at(kSinks));
  EXPECT_EQ(sinks.data().raw_data(), address);
  const Tensor after = run(attention, x);
  ParameterSet fresh_params;
  SelfAttention fresh(fresh_params, spec(true), DType::f32, TensorParallel{});
  load(fresh_params, updated);
  EXPECT_TRUE(bitwise_equal(after, run(fresh, x)));
  EXPECT_FALSE(bitwise_equal(after, before));
}

}  // namespace
}  // namespace refit
