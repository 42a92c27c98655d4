// batched_forward over the paged cache: a sequence's logits are bitwise the same alone,
// inside batches of 1, 7 and 32 other sequences, with its prompt in one chunk or several,
// and equal to the single-sequence Model::forward on a contiguous cache.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "gtest_printers.h"
#include "kernels/ops.h"
#include "models/model.h"
#include "serve_test_model.h"

namespace refit {
namespace {

struct Seq {
  std::vector<int32_t> tokens;  // all tokens so far (prompt + fed)
  int64_t cached = 0;           // positions already in the cache
  std::vector<int32_t> table;
};

std::vector<int32_t> random_tokens(int64_t n, uint32_t seed, int64_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

std::vector<float> row(const Tensor& logits, int64_t r) {
  const int64_t V = logits.size(1);
  const float* p = logits.data<const float>() + r * V;
  return std::vector<float>(p, p + V);
}

class BatchedForwardTest : public ::testing::TestWithParam<std::tuple<Architecture, DType>> {};

TEST_P(BatchedForwardTest, logits_are_bitwise_independent_of_batch_and_chunking) {
  const auto [arch, dtype] = GetParam();
  const ModelConfig c = testing::serve_test_config(arch);
  auto model = testing::serve_test_model(c, dtype);
  PagedKvCache cache = make_paged_cache(*model, 512, 16);

  const std::vector<int32_t> prompt = random_tokens(37, 5, c.vocab_size);
  // Feeds `n` new tokens of each chosen sequence in one batch; returns the logits rows
  // (all rows for sequences flagged all) per sequence.
  auto step = [&](std::vector<Seq*> seqs, std::vector<int64_t> n, LogitsWanted wanted) {
    std::vector<BatchSequence> batch;
    for (size_t i = 0; i < seqs.size(); ++i) {
      Seq& s = *seqs[i];
      EXPECT_TRUE(cache.reserve(s.table, s.cached + n[i]));
      BatchSequence b;
      b.tokens = std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(s.cached),
                                                            static_cast<size_t>(n[i]));
      b.start_pos = s.cached;
      b.block_table = s.table;
      b.logits = i == 0 ? wanted : LogitsWanted::last;
      batch.push_back(b);
    }
    BatchForwardResult r = batched_forward(*model, batch, cache);
    for (size_t i = 0; i < seqs.size(); ++i) seqs[i]->cached += n[i];
    std::vector<std::vector<float>> rows;
    for (int64_t k = 0; k < r.n_rows[0]; ++k) rows.push_back(row(r.logits, r.first_row[0] + k));
    return rows;
  };
  auto release = [&](Seq& s) {
    cache.release(s.table);
    s.table.clear();
    s.cached = 0;
  };

  // Reference: the target alone, prompt in one chunk, every row.
  Seq alone{prompt, 0, {}};
  const auto expected = step({&alone}, {37}, LogitsWanted::all);
  ASSERT_EQ(expected.size(), 37u);
  release(alone);

  // The contiguous-cache single-sequence forward agrees bit for bit.
  {
    KvCache kv = model->make_cache(64);
    Tensor full = model->forward(prompt, 0, kv, /*all_logits=*/true);
    for (int64_t t = 0; t < 37; ++t)
      EXPECT_EQ(row(full, t), expected[static_cast<size_t>(t)]) << "row " << t;
  }

  for (int others : {1, 7, 32}) {
    SCOPED_TRACE("with " + std::to_string(others) + " other sequences");
    // Others: some mid-decode (their prompts already cached), some prefilling now.
    std::vector<Seq> other(static_cast<size_t>(others));
    std::vector<Seq*> warm;
    std::vector<int64_t> warm_n;
    for (int i = 0; i < others; ++i) {
      other[static_cast<size_t>(i)].tokens = random_tokens(3 + (i * 7) % 29, 100 + i, c.vocab_size);
      if (i % 2 == 0) {
        warm.push_back(&other[static_cast<size_t>(i)]);
        warm_n.push_back(static_cast<int64_t>(other[static_cast<size_t>(i)].tokens.size()) - 1);
      }
    }
    if (!warm.empty()) {
      // Prefill the warm ones in a batch of their own (with a dummy target slot).
      Seq dummy{random_tokens(4, 9, c.vocab_size), 0, {}};
      std::vector<Seq*> s{&dummy};
      std::vector<int64_t> n{4};
      s.insert(s.end(), warm.begin(), warm.end());
      n.insert(n.end(), warm_n.begin(), warm_n.end());
      step(s, n, LogitsWanted::last);
      release(dummy);
    }
    // One chunk: the target's whole prompt alongside every other sequence's next tokens.
    Seq target{prompt, 0, {}};
    std::vector<Seq*> s{&target};
    std::vector<int64_t> n{37};
    for (auto& o : other) {
      s.push_back(&o);
      n.push_back(static_cast<int64_t>(o.tokens.size()) - o.cached);
    }
    EXPECT_EQ(step(s, n, LogitsWanted::all), expected);
    release(target);
    for (auto& o : other) release(o);
  }

  // Chunked prefill: 10 + 1 + 16 + 10 tokens across four steps, each with other sequences.
  {
    Seq target{prompt, 0, {}};
    std::vector<std::vector<float>> got;
    int64_t seed = 500;
    for (int64_t chunk : {10L, 1L, 16L, 10L}) {
      Seq a{random_tokens(5, static_cast<uint32_t>(seed++), c.vocab_size), 0, {}};
      Seq b{random_tokens(1, static_cast<uint32_t>(seed++), c.vocab_size), 0, {}};
      auto rows = step({&target, &a, &b}, {chunk, 5, 1}, LogitsWanted::all);
      got.insert(got.end(), rows.begin(), rows.end());
      release(a);
      release(b);
    }
    EXPECT_EQ(got, expected);
    release(target);
  }
  EXPECT_EQ(cache.free_blocks(), 512);
}

INSTANTIATE_TEST_SUITE_P(Serve, BatchedForwardTest,
                         ::testing::Values(std::tuple{Architecture::llama, DType::f32},
                                           std::tuple{Architecture::llama, DType::bf16},
                                           std::tuple{Architecture::qwen2, DType::f32},
                                           std::tuple{Architecture::qwen3, DType::f16}));

// Element-wise kernels must give an element the same value wherever it sits in the flat
// array: the number of rows moves the row/vector boundary (ffn 172 = 10 * 16 + 12), and
// so do the pool's timing-dependent cuts. silu_mul once ran its tail through std::exp.
TEST(ServeBatchedForward, silu_mul_of_a_row_does_not_depend_on_the_rows_around_it) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-9.0f, 9.0f);
  for (int64_t F : {172L, 96L, 7L, 1000L}) {
    for (int64_t T : {1L, 3L, 7L, 12L, 33L}) {
      Tensor gate = Tensor::empty({T, F}, DType::f32), up = Tensor::empty({T, F}, DType::f32);
      for (int64_t i = 0; i < T * F; ++i) {
        gate.data<float>()[i] = dist(rng);
        up.data<float>()[i] = dist(rng);
      }
      Tensor all = Tensor::empty({T, F}, DType::f32);
      ops::silu_mul(gate, up, all);
      for (int64_t t = 0; t < T; ++t) {
        Tensor g1 = gate.narrow(0, t, 1).contiguous(), u1 = up.narrow(0, t, 1).contiguous();
        Tensor one = Tensor::empty({1, F}, DType::f32);
        ops::silu_mul(g1, u1, one);
        ASSERT_EQ(row(one, 0), row(all, t)) << "F " << F << " T " << T << " row " << t;
      }
    }
  }
}

// stories260K's shape: ffn 172 (not a multiple of the vector width), head_dim 8, GQA 2.
// The prompt in one chunk and the prompt fed one token at a time give the same logits.
TEST(ServeBatchedForward, odd_shapes_give_the_same_logits_in_one_chunk_and_token_by_token) {
  ModelConfig c = testing::serve_test_config();
  c.dim = 64;
  c.n_layers = 3;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.head_dim = 8;
  c.ffn_dim = 172;
  c.vocab_size = 512;
  auto model = testing::serve_test_model(c, DType::f32, 3);
  const std::vector<int32_t> prompt = random_tokens(29, 11, c.vocab_size);
  const int64_t n = static_cast<int64_t>(prompt.size());
  auto run = [&](std::vector<int64_t> chunks) {
    PagedKvCache cache = make_paged_cache(*model, 8, 16);
    std::vector<int32_t> table;
    EXPECT_TRUE(cache.reserve(table, n));
    std::vector<std::vector<float>> rows;
    int64_t pos = 0;
    for (int64_t k : chunks) {
      BatchSequence b{std::span<const int32_t>(prompt).subspan(static_cast<size_t>(pos),
                                                               static_cast<size_t>(k)),
                      pos,
                      table,
                      LogitsWanted::all,
                      {}};
      BatchForwardResult r = batched_forward(*model, std::span<const BatchSequence>(&b, 1), cache);
      for (int64_t j = 0; j < k; ++j) rows.push_back(row(r.logits, j));
      pos += k;
    }
    return rows;
  };
  const auto expected = run({n});
  std::vector<int64_t> decode{7};
  decode.resize(static_cast<size_t>(n - 6), 1);
  const auto got = run(decode);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t t = 0; t < got.size(); ++t) EXPECT_EQ(got[t], expected[t]) << "position " << t;
  const auto chunked = run({12, 5, 1, 11});
  for (size_t t = 0; t < chunked.size(); ++t)
    EXPECT_EQ(chunked[t], expected[t]) << "position " << t;
}

TEST(ServeBatchedForward, refuses_a_block_table_that_does_not_cover_the_tokens) {
  const ModelConfig c = testing::serve_test_config();
  auto model = testing::serve_test_model(c, DType::f32);
  PagedKvCache cache = make_paged_cache(*model, 8, 16);
  std::vector<int32_t> tokens(20, 3), table{0};
  BatchSequence b{tokens, 0, table, LogitsWanted::last, {}};
  EXPECT_THROW(batched_forward(*model, std::span<const BatchSequence>(&b, 1), cache), Error);
}

}  // namespace
}  // namespace refit
