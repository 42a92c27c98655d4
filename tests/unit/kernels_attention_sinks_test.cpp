// Attention sinks (gpt-oss): a learned logit per head that joins the softmax's denominator
// and whose probability is dropped. Checked against Hugging Face's formulation written out
// here in double (the scores with the sink appended as one more column, the row max over
// both, softmax, the sink column dropped), with sinks far above the scores, far below and
// about their size, so that a kernel ignoring them fails; and the kernels' promises kept
// with sinks: batch invariance, paged == contiguous bit for bit, no sink == the sink-less op.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

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

// out[t, h] over cache rows lo..pos of kv head h / (H / KVH), as transformers'
// eager_attention_forward for gpt-oss computes it, in double.
Tensor hf_sink_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t start,
                         double scale, int64_t window, const std::vector<double>& sinks) {
  const int64_t T = q.size(0), H = q.size(1), hd = q.size(2), group = H / k.size(1);
  Tensor out = Tensor::empty(q.shape(), DType::f32);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t pos = start + t, lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
      std::vector<double> logits;  // the scores, then the sink column
      for (int64_t r = lo; r <= pos; ++r) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d) dot += q.get({t, h, d}) * k.get({r, h / group, d});
        logits.push_back(dot * scale);
      }
      logits.push_back(sinks[static_cast<size_t>(h)]);
      const double m = *std::max_element(logits.begin(), logits.end());
      double sum = 0;
      for (double& x : logits) sum += (x = std::exp(x - m));
      for (int64_t d = 0; d < hd; ++d) {
        double acc = 0;
        for (int64_t r = lo; r <= pos; ++r)
          acc += logits[static_cast<size_t>(r - lo)] / sum * v.get({r, h / group, d});
        out.set({t, h, d}, acc);
      }
    }
  return out;
}

// Sinks that matter: far above the scores (|score| <~ 4 here), far below, about their size.
std::vector<double> sink_values(int64_t H) {
  const double pattern[] = {8.0, -40.0, 1.0, 4.0, -2.0};
  std::vector<double> s;
  for (int64_t h = 0; h < H; ++h) s.push_back(pattern[h % 5]);
  return s;
}

Tensor f32_vector(const std::vector<double>& values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::f32);
  for (size_t i = 0; i < values.size(); ++i) t.data<float>()[i] = static_cast<float>(values[i]);
  return t;
}

Tensor i32_tensor(Shape shape, const std::vector<int32_t>& values) {
  Tensor t = Tensor::empty(std::move(shape), DType::i32);
  for (size_t i = 0; i < values.size(); ++i) t.data<int32_t>()[i] = values[i];
  return t;
}

struct Case {
  int64_t T, start, H, KVH, hd, window;
};
// GQA groups of 1, 2, 3, 4 and 8 (the kernels' one-, two- and four-head paths), decode and
// prefill, windows cutting and not.
const Case kCases[] = {{1, 0, 5, 5, 16, 0},  {4, 6, 8, 4, 32, 0},  {7, 2, 6, 2, 17, 3},
                       {3, 20, 8, 2, 64, 5}, {2, 11, 8, 1, 24, 0}, {5, 0, 10, 5, 8, 2}};

TEST(KernelsAttentionSinks, matches_hugging_face_formulation_and_matter) {
  for_each_isa([&] {
    uint32_t seed = 4100;
    for (const Case& c : kCases) {
      SCOPED_TRACE(::testing::Message()
                   << "T=" << c.T << " start=" << c.start << " H=" << c.H << " KVH=" << c.KVH
                   << " hd=" << c.hd << " window=" << c.window);
      const int64_t S = c.start + c.T + 2;
      const Tensor q = random_tensor({c.T, c.H, c.hd}, seed++, -2, 2);
      const Tensor k = random_tensor({S, c.KVH, c.hd}, seed++, -2, 2);
      const Tensor v = random_tensor({S, c.KVH, c.hd}, seed++);
      const std::vector<double> sv = sink_values(c.H);
      const Tensor sinks = f32_vector(sv);
      const float scale = 1.0f / std::sqrt(float(c.hd));
      const Tensor expected = hf_sink_attention(q, k, v, c.start, scale, c.window, sv);
      Tensor out = Tensor::empty(q.shape(), DType::f32), ref = out.clone(), plain = out.clone();
      ops::attention(q, k, v, c.start, scale, out, c.window, sinks);
      cpu::reference::attention(q, k, v, c.start, scale, ref, c.window, sinks);
      EXPECT_LT(nmse(out, expected), kNmseF32);
      EXPECT_LT(nmse(ref, expected), 1e-12);
      // Without the sinks the result is far off: the test sees whether they are applied.
      ops::attention(q, k, v, c.start, scale, plain, c.window);
      EXPECT_GT(nmse(plain, expected), 1e-2);
    }
  });
}

// A row's result does not depend on the other rows of the call: each token alone, given
// the same cache, gives the same bits.
TEST(KernelsAttentionSinks, each_row_is_independent_of_the_batch) {
  for_each_isa([&] {
    const int64_t T = 6, start = 3, H = 8, KVH = 2, hd = 24, S = start + T;
    const Tensor q = random_tensor({T, H, hd}, 41, -2, 2);
    const Tensor k = random_tensor({S, KVH, hd}, 42, -2, 2), v = random_tensor({S, KVH, hd}, 43);
    const Tensor sinks = f32_vector(sink_values(H));
    Tensor all = Tensor::empty(q.shape(), DType::f32);
    ops::attention(q, k, v, start, 0.3f, all, 4, sinks);
    for (int64_t t = 0; t < T; ++t) {
      Tensor alone = Tensor::empty({1, H, hd}, DType::f32);
      ops::attention(q.narrow(0, t, 1).contiguous(), k, v, start + t, 0.3f, alone, 4, sinks);
      EXPECT_TRUE(bitwise_equal(all.narrow(0, t, 1), alone)) << "token " << t;
    }
  });
}

// No sink (undefined) and a sink of -inf both give the sink-less op's bits: exp(-inf) adds 0.
TEST(KernelsAttentionSinks, minus_infinity_sinks_are_no_sinks_bit_for_bit) {
  const int64_t T = 3, H = 4, KVH = 2, hd = 20, S = 8;
  const Tensor q = random_tensor({T, H, hd}, 51, -2, 2);
  const Tensor k = random_tensor({S, KVH, hd}, 52, -2, 2), v = random_tensor({S, KVH, hd}, 53);
  const Tensor none = f32_vector(std::vector<double>(H, -std::numeric_limits<double>::infinity()));
  Tensor a = Tensor::empty(q.shape(), DType::f32), b = a.clone();
  ops::attention(q, k, v, 4, 0.3f, a, 0);
  ops::attention(q, k, v, 4, 0.3f, b, 0, none);
  EXPECT_TRUE(bitwise_equal(a, b));
}

// Paged attention with sinks: the reference, and bit for bit ops::attention over a
// contiguous cache holding the same rows, for every token of two sequences.
TEST(KernelsAttentionSinks, paged_equals_contiguous_bitwise) {
  for_each_isa([&] {
    const int64_t bs = 4, KVH = 2, H = 8, hd = 24, n_blocks = 12;
    const Tensor k_pool = random_tensor({n_blocks, bs, KVH, hd}, 61, -2, 2),
                 v_pool = random_tensor({n_blocks, bs, KVH, hd}, 62);
    const Tensor sinks = f32_vector(sink_values(H));
    // Sequence 0: tokens at 9..11 in blocks 7, 2, 5; sequence 1: one token at 13 in 0, 11, 3, 9.
    const std::vector<std::vector<int32_t>> blocks = {{7, 2, 5, -1}, {0, 11, 3, 9}};
    const Tensor tables = i32_tensor({2, 4}, {7, 2, 5, -1, 0, 11, 3, 9});
    const Tensor starts = i32_tensor({3}, {0, 3, 4}), positions = i32_tensor({2}, {9, 13});
    const Tensor q = random_tensor({4, H, hd}, 63, -2, 2);
    for (int64_t window : {int64_t{0}, int64_t{3}}) {
      SCOPED_TRACE(::testing::Message() << "window=" << window);
      Tensor out = Tensor::empty({4, H, hd}, DType::f32), ref = out.clone();
      ops::paged_attention(q, k_pool, v_pool, tables, starts, positions, 0.2f, out, window, sinks);
      cpu::reference::paged_attention(q, k_pool, v_pool, tables, starts, positions, 0.2f, ref,
                                      window, sinks);
      EXPECT_LT(nmse(out, ref), kNmseF32);
      const int64_t first_token[] = {0, 3}, n_tokens[] = {3, 1}, first_pos[] = {9, 13};
      for (int b = 0; b < 2; ++b) {
        const int64_t rows = first_pos[b] + n_tokens[b];
        Tensor kc = Tensor::empty({rows, KVH, hd}, DType::f32), vc = kc.clone();
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t h = 0; h < KVH; ++h)
            for (int64_t d = 0; d < hd; ++d) {
              const int64_t blk = blocks[static_cast<size_t>(b)][static_cast<size_t>(r / bs)];
              kc.set({r, h, d}, k_pool.get({blk, r % bs, h, d}));
              vc.set({r, h, d}, v_pool.get({blk, r % bs, h, d}));
            }
        Tensor contiguous = Tensor::empty({n_tokens[b], H, hd}, DType::f32);
        ops::attention(q.narrow(0, first_token[b], n_tokens[b]).contiguous(), kc, vc, first_pos[b],
                       0.2f, contiguous, window, sinks);
        EXPECT_TRUE(bitwise_equal(out.narrow(0, first_token[b], n_tokens[b]), contiguous))
            << "sequence " << b;
      }
    }
  });
}

TEST(KernelsAttentionSinks, bad_sinks_are_refused_by_name) {
  const Tensor q = random_tensor({2, 4, 8}, 71), k = random_tensor({4, 2, 8}, 72), v = k.clone();
  Tensor out = Tensor::empty(q.shape(), DType::f32);
  const auto message = [&](const Tensor& sinks) {
    try {
      ops::attention(q, k, v, 1, 0.5f, out, 0, sinks);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(random_tensor({3}, 73)).find("sinks"), std::string::npos);  // 3 != 4 heads
  EXPECT_NE(message(Tensor::empty({4}, DType::f16)).find("sinks"), std::string::npos);
  // Every other element of an [8] tensor: the kernel reads sinks contiguously.
  EXPECT_NE(message(random_tensor({4, 2}, 74).select(1, 0)).find("sinks"), std::string::npos);
  const Tensor tables = i32_tensor({1, 2}, {0, 1}), starts = i32_tensor({2}, {0, 2}),
               positions = i32_tensor({1}, {1});
  const Tensor pool = random_tensor({2, 2, 2, 8}, 75);
  EXPECT_THROW(ops::paged_attention(q, pool, pool, tables, starts, positions, 0.5f, out, 0,
                                    random_tensor({5}, 76)),
               Error);
}

}  // namespace
}  // namespace refit
