// Causal grouped-query attention over a KV cache, contiguous and paged, with and without a
// sliding window, against the scalar reference.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "kernels/cpu/reference.h"
#include "kernels/ops.h"
#include "kernels/paged_attention.h"
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
  const Case cases[] = {{1, 0, 1, 1, 1},   {1, 0, 4, 4, 64},    {1, 37, 8, 2, 64},
                        {5, 0, 4, 1, 17},  {17, 3, 6, 3, 33},   {3, 100, 2, 2, 128},
                        {33, 0, 8, 8, 16}, {1, 255, 32, 4, 64}, {64, 64, 4, 2, 80},
                        {2, 5, 3, 1, 3}};
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
    for (const Case& c : {Case{6, 0, 8, 2, 64}, Case{1, 40, 8, 2, 24}, Case{5, 3, 4, 2, 17},
                          Case{3, 9, 8, 1, 80}}) {
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
        Tensor v1 = v.narrow(1, kvh, 1).contiguous(),
               alone = Tensor::empty({c.T, 1, c.hd}, DType::f32);
        ops::attention(q1, k1, v1, c.start_pos, scale, alone);
        EXPECT_TRUE(bitwise_equal(out.narrow(1, h, 1), alone)) << "head " << h;
      }
    }
  });
}

// A prefill's rows equal each token alone (decode) bit for bit: one head per kv head takes
// two consecutive tokens per item (the second sees one row more), groups take their heads
// together; odd token counts leave a single last token; sinks join every row's softmax.
TEST(KernelsAttention, prefill_rows_equal_each_token_alone_bitwise) {
  for_each_isa([&] {
    for (const Case& c : {Case{7, 0, 3, 3, 64}, Case{8, 5, 2, 2, 24}, Case{9, 11, 2, 2, 17},
                          Case{6, 2, 8, 2, 64}, Case{33, 0, 1, 1, 8}}) {
      for (const bool with_sinks : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "T=" << c.T << " start=" << c.start_pos << " H=" << c.H << " KVH=" << c.KVH
                     << " hd=" << c.hd << " sinks=" << with_sinks);
        const int64_t S = c.start_pos + c.T;
        Tensor q = random_tensor({c.T, c.H, c.hd}, 51, -2, 2);
        Tensor k = random_tensor({S, c.KVH, c.hd}, 52, -2, 2);
        Tensor v = random_tensor({S, c.KVH, c.hd}, 53);
        Tensor sinks = with_sinks ? random_tensor({c.H}, 54, -1, 1) : Tensor();
        const float scale = 1.0f / std::sqrt(float(c.hd));
        Tensor all = Tensor::empty({c.T, c.H, c.hd}, DType::f32);
        ops::attention(q, k, v, c.start_pos, scale, all, 0, sinks);
        for (int64_t t = 0; t < c.T; ++t) {
          Tensor alone = Tensor::empty({1, c.H, c.hd}, DType::f32);
          ops::attention(q.narrow(0, t, 1).contiguous(), k, v, c.start_pos + t, scale, alone, 0,
                         sinks);
          EXPECT_TRUE(bitwise_equal(all.narrow(0, t, 1), alone)) << "token " << t;
        }
      }
    }
  });
}

TEST(KernelsAttention, rows_beyond_the_causal_window_have_no_effect) {
  Tensor q = random_tensor({2, 2, 8}, 1), k = random_tensor({6, 1, 8}, 2),
         v = random_tensor({6, 1, 8}, 3);
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

TEST(KernelsAttention, sliding_window_matches_reference) {
  struct WindowCase {
    Case c;
    int64_t window;
  };
  const WindowCase cases[] = {
      {{1, 0, 1, 1, 8}, 1},       {{1, 37, 8, 2, 64}, 1}, {{1, 37, 8, 2, 64}, 16},
      {{6, 3, 4, 1, 17}, 2},      {{17, 3, 6, 3, 33}, 5}, {{3, 100, 2, 2, 128}, 100},
      {{3, 100, 2, 2, 128}, 101}, {{33, 0, 8, 8, 16}, 7}, {{64, 64, 4, 2, 80}, 64}};
  for_each_isa([&] {
    uint32_t seed = 1900;
    for (const WindowCase& wc : cases) {
      const Case& c = wc.c;
      SCOPED_TRACE(::testing::Message()
                   << "T=" << c.T << " start=" << c.start_pos << " H=" << c.H << " KVH=" << c.KVH
                   << " hd=" << c.hd << " window=" << wc.window);
      const int64_t S = c.start_pos + c.T + 2;
      Tensor q = random_tensor({c.T, c.H, c.hd}, seed++, -2, 2);
      Tensor k = random_tensor({S, c.KVH, c.hd}, seed++, -2, 2);
      Tensor v = random_tensor({S, c.KVH, c.hd}, seed++);
      Tensor out = Tensor::empty({c.T, c.H, c.hd}, DType::f32), ref = out.clone(),
             full = out.clone();
      const float scale = 1.0f / std::sqrt(float(c.hd));
      ops::attention(q, k, v, c.start_pos, scale, out, wc.window);
      cpu::reference::attention(q, k, v, c.start_pos, scale, ref, wc.window);
      EXPECT_LT(nmse(out, ref), kNmseF32);
      ops::attention(q, k, v, c.start_pos, scale, full);
      if (wc.window < c.start_pos + c.T) {
        EXPECT_GT(nmse(out, full), 1e-8) << "the window must cut something";
      }
    }
  });
}

// The rule (llama.cpp's is_masked_swa, LLAMA_SWA_TYPE_STANDARD: masked when p - k >= window):
// window 1 sees only its own row, so the output is that row's value exactly; rows before
// the window have no effect; window 0 and any window covering every row give the bits of
// unlimited attention.
TEST(KernelsAttention, sliding_window_sees_exactly_the_last_window_positions) {
  Tensor q = random_tensor({4, 2, 8}, 1), k = random_tensor({9, 1, 8}, 2),
         v = random_tensor({9, 1, 8}, 3);
  Tensor one = Tensor::empty({4, 2, 8}, DType::f32);
  ops::attention(q, k, v, 5, 0.3f, one, 1);
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t d = 0; d < 8; ++d) EXPECT_EQ(one.get({t, h, d}), v.get({5 + t, 0, d}));
  Tensor a = Tensor::empty({4, 2, 8}, DType::f32), b = a.clone();
  ops::attention(q, k, v, 5, 0.3f, a, 3);
  // Token 0 (position 5) sees 3..5, token 3 (position 8) sees 6..8: rows 0..2 never count.
  for (int64_t s = 0; s < 3; ++s)
    for (int64_t d = 0; d < 8; ++d) {
      k.set({s, 0, d}, 1e4);
      v.set({s, 0, d}, -1e4);
    }
  ops::attention(q, k, v, 5, 0.3f, b, 3);
  EXPECT_TRUE(bitwise_equal(a, b));
  Tensor unlimited = a.clone(), zero = a.clone(), covering = a.clone();
  ops::attention(q, k, v, 5, 0.3f, unlimited);
  ops::attention(q, k, v, 5, 0.3f, zero, 0);
  ops::attention(q, k, v, 5, 0.3f, covering, 9);
  EXPECT_TRUE(bitwise_equal(unlimited, zero));
  EXPECT_TRUE(bitwise_equal(unlimited, covering));
  EXPECT_THROW(ops::attention(q, k, v, 5, 0.3f, a, -1), Error);
}

Tensor i32_tensor(Shape shape, const std::vector<int32_t>& values) {
  Tensor t = Tensor::empty(std::move(shape), DType::i32);
  for (size_t i = 0; i < values.size(); ++i) t.data<int32_t>()[i] = values[i];
  return t;
}

// Paged attention with a window: the reference's rule, and bit for bit ops::attention over
// a contiguous cache with the same rows and window (the batch invariance the server keeps).
// Blocks wholly before the window may be absent from the table (-1).
TEST(KernelsAttention, paged_sliding_window_matches_reference_and_contiguous_bitwise) {
  const int64_t bs = 4, KVH = 2, H = 4, hd = 24, n_blocks = 12;
  Tensor k_pool = random_tensor({n_blocks, bs, KVH, hd}, 5, -2, 2),
         v_pool = random_tensor({n_blocks, bs, KVH, hd}, 6);
  // Sequence 0: 3 new tokens at 9..11 in blocks 7, 2, 5; sequence 1: 1 token at 13 in 0, 11, 3, 9.
  for (int64_t window : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{6}, int64_t{40}}) {
    SCOPED_TRACE(::testing::Message() << "window=" << window);
    const int32_t gone =
        window == 3 ? -1 : 0;  // with window 3 no token reads block 0 of either table
    Tensor tables =
        i32_tensor({2, 4}, {gone == -1 ? -1 : 7, 2, 5, -1, gone == -1 ? -1 : 0, 11, 3, 9});
    Tensor starts = i32_tensor({3}, {0, 3, 4}), positions = i32_tensor({2}, {9, 13});
    Tensor q = random_tensor({4, H, hd}, 7, -2, 2), out = Tensor::empty({4, H, hd}, DType::f32),
           ref = out.clone();
    const float scale = 0.2f;
    ops::paged_attention(q, k_pool, v_pool, tables, starts, positions, scale, out, window);
    cpu::reference::paged_attention(q, k_pool, v_pool, tables, starts, positions, scale, ref,
                                    window);
    EXPECT_LT(nmse(out, ref), kNmseF32);
    // Sequence 1 as a contiguous cache of its 14 positions.
    const int32_t blocks1[] = {0, 11, 3, 9};
    Tensor kc = Tensor::empty({16, KVH, hd}, DType::f32), vc = kc.clone();
    for (int64_t r = 0; r < 16; ++r)
      for (int64_t h = 0; h < KVH; ++h)
        for (int64_t d = 0; d < hd; ++d) {
          kc.set({r, h, d}, k_pool.get({blocks1[r / bs], r % bs, h, d}));
          vc.set({r, h, d}, v_pool.get({blocks1[r / bs], r % bs, h, d}));
        }
    Tensor contiguous = Tensor::empty({1, H, hd}, DType::f32);
    ops::attention(q.narrow(0, 3, 1).contiguous(), kc, vc, 13, scale, contiguous, window);
    EXPECT_TRUE(bitwise_equal(out.narrow(0, 3, 1), contiguous));
  }
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
