// Causal grouped-query attention over a KV cache against the scalar reference.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "kernels/cpu/reference.h"
#include "kernels/ops.h"
#include "kernels_test_util.h"

namespace refit {
namespace {

using testing::bitwise_equal;
using testing::for_each_isa;
using testing::kNmseF32;
using testing::nmse;
using testing::random_tensor;

struct Case {
  int64_t T, start_pos, H, KVH, hd;
};

TEST(KernelsAttention, matches_reference_for_decode_prefill_and_gqa) {
  const Case cases[] = {
      {1, 0, 1, 1, 1},     {1, 0, 4, 4, 64},   {1, 37, 8, 2, 64},  {5, 0, 4, 1, 17},
      {17, 3, 6, 3, 33},   {3, 100, 2, 2, 128}, {33, 0, 8, 8, 16}, {1, 255, 32, 4, 64},
      {64, 64, 4, 2, 80},  {2, 5, 3, 1, 3}};
  for_each_isa([&] {
    uint32_t seed = 900;
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << "T=" << c.T << " start=" << c.start_pos << " H=" << c.H
                                        << " KVH=" << c.KVH << " hd=" << c.hd);
      const int64_t S = c.start_pos + c.T + 3;  // cache rows past the end must be ignored
      Tensor q = random_tensor({c.T, c.H, c.hd}, seed++, -2, 2);
      Tensor k = random_tensor({S, c.KVH, c.hd}, seed++, -2, 2);
      Tensor v = random_tensor({S, c.KVH, c.hd}, seed++);
      Tensor out = Tensor::empty({c.T, c.H, c.hd}, DType::f32), ref = out.clone();
      const float scale = 1.0f / std::sqrt(float(c.hd));
      ops::attention(q, k, v, c.start_pos, scale, out);
      cpu::reference::attention(q, k, v, c.start_pos, scale, ref);
      EXPECT_LT(nmse(out, ref), kNmseF32);
    }
  });
}

// The query heads of a GQA group are attended together (two or four at a time); each must
// come out bit for bit as that head alone against its kv head (one head, one kv head: the
// single-row path), in prefill and decode, under every ISA.
TEST(KernelsAttention, grouped_heads_equal_each_head_alone_bitwise) {
  for_each_isa([&] {
    for (const Case& c : {Case{6, 0, 8, 2, 64}, Case{1, 40, 8, 2, 24}, Case{5, 3, 4, 2, 17}, Case{3, 9, 8, 1, 80}}) {
      SCOPED_TRACE(::testing::Message() << "T=" << c.T << " start=" << c.start_pos << " H=" << c.H
                                        << " KVH=" << c.KVH << " hd=" << c.hd);
      const int64_t S = c.start_pos + c.T;
      Tensor q = random_tensor({c.T, c.H, c.hd}, 41, -2, 2);
      Tensor k = random_tensor({S, c.KVH, c.hd}, 42, -2, 2);
      Tensor v = random_tensor({S, c.KVH, c.hd}, 43);
      const float scale = 1.0f / std::sqrt(float(c.hd));
      Tensor out = Tensor::empty({c.T, c.H, c.hd}, DType::f32);
      ops::attention(q, k, v, c.start_pos, scale, out);
      for (int64_t h = 0; h < c.H; ++h) {
        const int64_t kvh = h / (c.H / c.KVH);
        Tensor q1 = q.narrow(1, h, 1).contiguous(), k1 = k.narrow(1, kvh, 1).contiguous();
        Tensor v1 = v.narrow(1, kvh, 1).contiguous(), alone = Tensor::empty({c.T, 1, c.hd}, DType::f32);
        ops::attention(q1, k1, v1, c.start_pos, scale, alone);
        EXPECT_TRUE(bitwise_equal(out.narrow(1, h, 1), alone)) << "head " << h;
      }
    }
  });
}

TEST(KernelsAttention, rows_beyond_the_causal_window_have_no_effect) {
  Tensor q = random_tensor({2, 2, 8}, 1), k = random_tensor({6, 1, 8}, 2), v = random_tensor({6, 1, 8}, 3);
  Tensor a = Tensor::empty({2, 2, 8}, DType::f32), b = a.clone();
  ops::attention(q, k, v, 1, 0.3f, a);
  // Token 1 (position 2) sees rows 0..2; rows 3..5 are garbage from its point of view.
  for (int64_t s = 3; s < 6; ++s)
    for (int64_t d = 0; d < 8; ++d) {
      k.set({s, 0, d}, 1e4);
      v.set({s, 0, d}, -1e4);
    }
  ops::attention(q, k, v, 1, 0.3f, b);
  EXPECT_EQ(nmse(b, a), 0.0);
}

TEST(KernelsAttention, large_scores_stay_finite) {
  Tensor q = random_tensor({1, 1, 16}, 1, 50, 60), k = random_tensor({4, 1, 16}, 2, 50, 60);
  Tensor v = random_tensor({4, 1, 16}, 3), out = Tensor::empty({1, 1, 16}, DType::f32);
  ops::attention(q, k, v, 3, 1.0f, out);
  for (float x : out.to_floats()) EXPECT_TRUE(std::isfinite(x));
}

TEST(KernelsAttention, refuses_bad_head_counts_and_cache_overflow) {
  Tensor q = random_tensor({2, 6, 8}, 1), k = random_tensor({4, 4, 8}, 2), v = k.clone();
  Tensor out = Tensor::empty({2, 6, 8}, DType::f32);
  EXPECT_THROW(ops::attention(q, k, v, 0, 1.0f, out), Error);  // 6 % 4 != 0
  Tensor k2 = random_tensor({4, 3, 8}, 2), v2 = k2.clone();
  EXPECT_THROW(ops::attention(q, k2, v2, 3, 1.0f, out), Error);  // 3 + 2 > 4 rows
  EXPECT_NO_THROW(ops::attention(q, k2, v2, 2, 1.0f, out));
  Tensor k3 = random_tensor({4, 3, 7}, 2), v3 = k3.clone();
  EXPECT_THROW(ops::attention(q, k3, v3, 0, 1.0f, out), Error);  // head_dim differs
}

}  // namespace
}  // namespace refit
