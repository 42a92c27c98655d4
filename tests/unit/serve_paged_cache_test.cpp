// Paged KV cache (block pool, block tables, reference counts) and the paged_attention op:
// bitwise equal to contiguous-cache attention, independent of the batch and of chunking.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "core/dlpack.h"
#include "core/error.h"
#include "kernels/cpu/serve_kernels.h"
#include "kernels/ops.h"
#include "kernels/paged_attention.h"
#include "kernels_test_util.h"
#include "layers/paged_kv_cache.h"

namespace refit {
namespace {

using testing::bitwise_equal;
using testing::random_tensor;

PagedKvCacheOptions small_options(int64_t n_blocks = 8, int64_t block_size = 4) {
  PagedKvCacheOptions o;
  o.n_layers = 2;
  o.n_kv_heads = 2;
  o.head_dim = 8;
  o.block_size = block_size;
  o.n_blocks = n_blocks;
  return o;
}

Tensor i32_tensor(Shape shape, const std::vector<int32_t>& values) {
  Tensor t = Tensor::empty(std::move(shape), DType::i32);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

TEST(ServePagedCache, allocate_release_and_reference_counts) {
  PagedKvCache cache(small_options(8));
  EXPECT_EQ(cache.free_blocks(), 8);
  auto a = cache.allocate(3);
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(cache.stats().used_blocks, 3);
  EXPECT_DOUBLE_EQ(cache.stats().usage(), 3.0 / 8.0);
  // Too many: nothing is taken.
  EXPECT_FALSE(cache.allocate(6));
  EXPECT_EQ(cache.free_blocks(), 5);
  cache.retain((*a)[1]);
  EXPECT_EQ(cache.ref_count((*a)[1]), 2);
  cache.release(*a);
  EXPECT_EQ(cache.free_blocks(), 7);  // block 1 still shared
  EXPECT_EQ(cache.ref_count((*a)[1]), 1);
  const int32_t shared = (*a)[1];
  cache.release(std::span<const int32_t>(&shared, 1));
  EXPECT_EQ(cache.free_blocks(), 8);
  // Double free and out-of-range ids are refused, not corrupting the free list.
  EXPECT_THROW(cache.release(std::span<const int32_t>(&shared, 1)), Error);
  const int32_t bad = 99;
  EXPECT_THROW(cache.release(std::span<const int32_t>(&bad, 1)), Error);
  EXPECT_EQ(cache.free_blocks(), 8);
}

TEST(ServePagedCache, reserve_grows_the_table_by_whole_blocks_or_not_at_all) {
  PagedKvCache cache(small_options(4, 4));
  std::vector<int32_t> table;
  EXPECT_TRUE(cache.reserve(table, 1));
  EXPECT_EQ(table.size(), 1u);
  EXPECT_TRUE(cache.reserve(table, 4));
  EXPECT_EQ(table.size(), 1u);
  EXPECT_TRUE(cache.reserve(table, 5));
  EXPECT_EQ(table.size(), 2u);
  EXPECT_FALSE(cache.reserve(table, 17));  // needs 5 blocks, pool has 4
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(cache.free_blocks(), 2);
}

TEST(ServePagedCache, write_places_rows_by_block_table) {
  PagedKvCache cache(small_options(8, 4));
  std::vector<int32_t> table{5, 2, 7};
  Tensor k = random_tensor({6, 2, 8}, 1), v = random_tensor({6, 2, 8}, 2);
  cache.write(1, table, 3, k, v);  // positions 3..8: block 5 row 3, block 2 rows 0-3, block 7 row 0
  auto row = [&](const Tensor& pool, int64_t block, int64_t r) {
    return pool.select(0, block).select(0, r).contiguous();
  };
  EXPECT_TRUE(bitwise_equal(row(cache.keys(1), 5, 3), k.select(0, 0)));
  EXPECT_TRUE(bitwise_equal(row(cache.keys(1), 2, 0), k.select(0, 1)));
  EXPECT_TRUE(bitwise_equal(row(cache.values(1), 2, 3), v.select(0, 4)));
  EXPECT_TRUE(bitwise_equal(row(cache.values(1), 7, 0), v.select(0, 5)));
  // Positions past the table are refused.
  EXPECT_THROW(cache.write(0, table, 8, k, v), Error);
}

// The pool is stored head-major (one kv head's rows of a block in one run, what attention
// reads in order) and shown as [n_blocks, block_size, n_kv_heads, head_dim] through strides:
// a write lands where that layout says, and the view exports as it is (law L1).
TEST(ServePagedCache, pool_is_head_major_storage_behind_the_row_major_view) {
  PagedKvCache cache(small_options(8, 4));  // 4 rows a block, 2 kv heads of 8
  const Tensor& pool = cache.keys(0);
  EXPECT_EQ(pool.shape(), (Shape{8, 4, 2, 8}));
  EXPECT_EQ(pool.strides(), (Shape{64, 8, 32, 1}));
  std::vector<int32_t> table{3};
  Tensor k = random_tensor({2, 2, 8}, 3), v = random_tensor({2, 2, 8}, 4);
  cache.write(0, table, 1, k, v);  // positions 1, 2: block 3, rows 1 and 2
  const float* base = pool.data<const float>();
  for (int64_t t = 0; t < 2; ++t)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t d = 0; d < 8; ++d)
        ASSERT_EQ(base[3 * 64 + h * 32 + (1 + t) * 8 + d], k.get({t, h, d})) << t << " " << h;
  DLManagedTensorVersioned* dl = to_dlpack_versioned(pool);
  ASSERT_NE(dl, nullptr);
  EXPECT_EQ(dl->dl_tensor.strides[1], 8);
  EXPECT_EQ(dl->dl_tensor.strides[2], 32);
  dl->deleter(dl);
}

// One sequence's keys/values in a contiguous cache, and the same rows in a shuffled
// paged pool. Attention over both must agree bit for bit.
struct Sequence {
  int64_t length;
  Tensor k, v, q;  // [length, KVH, hd], [length, H, hd]
  std::vector<int32_t> table;
};

TEST(ServePagedAttention, equals_contiguous_attention_bitwise_in_any_batch_and_chunking) {
  // Query heads per kv head 2, 4 and 1: the kernels attend two or four heads of a group
  // together, or one at a time. Blocks of 4 rows (a power of two: the kernel shifts) and
  // of 3 (it divides).
  for (const int64_t bs : {4, 3})
    for (const auto& [H, KVH] : {std::pair<int64_t, int64_t>{4, 2}, {8, 2}, {3, 3}})
      testing::for_each_isa([bs, H = H, KVH = KVH] {
        SCOPED_TRACE(::testing::Message() << "H=" << H << " KVH=" << KVH << " block size " << bs);
        const int64_t hd = 24;  // not a multiple of lanes: scalar tails
        PagedKvCacheOptions o;
        o.n_layers = 1;
        o.n_kv_heads = KVH;
        o.head_dim = hd;
        o.block_size = bs;
        o.n_blocks = 64;
        PagedKvCache cache(o);
        // Give sequences scattered blocks: allocate all, shuffle, hand out.
        std::vector<int32_t> all = *cache.allocate(64);
        std::shuffle(all.begin(), all.end(), std::mt19937(7));
        std::vector<Sequence> seqs;
        size_t next = 0;
        for (int64_t len : {1L, 5L, 13L, 32L, 7L}) {
          Sequence s;
          s.length = len;
          s.k = random_tensor({len, KVH, hd}, 100 + static_cast<uint32_t>(len));
          s.v = random_tensor({len, KVH, hd}, 200 + static_cast<uint32_t>(len));
          s.q = random_tensor({len, H, hd}, 300 + static_cast<uint32_t>(len));
          for (int64_t b = 0; b < cache.blocks_for(len); ++b) s.table.push_back(all[next++]);
          cache.write(0, s.table, 0, s.k, s.v);
          seqs.push_back(std::move(s));
        }
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        // Reference: contiguous attention of each whole sequence.
        std::vector<Tensor> expected;
        for (const Sequence& s : seqs) {
          Tensor out = Tensor::empty({s.length, H, hd}, DType::f32);
          ops::attention(s.q, s.k, s.v, 0, scale, out);
          expected.push_back(out);
        }
        // Runs a batch: for each chosen sequence, its tokens [from, to).
        struct Part {
          size_t seq;
          int64_t from, to;
        };
        auto run = [&](const std::vector<Part>& parts) {
          int64_t N = 0, max_blocks = 1;
          for (const Part& p : parts) {
            N += p.to - p.from;
            max_blocks =
                std::max<int64_t>(max_blocks, static_cast<int64_t>(seqs[p.seq].table.size()));
          }
          const int64_t B = static_cast<int64_t>(parts.size());
          Tensor q = Tensor::empty({N, H, hd}, DType::f32);
          std::vector<int32_t> tables(static_cast<size_t>(B * max_blocks), -1), starts{0},
              positions;
          int64_t row = 0;
          for (int64_t b = 0; b < B; ++b) {
            const Part& p = parts[static_cast<size_t>(b)];
            const Sequence& s = seqs[p.seq];
            q.narrow(0, row, p.to - p.from).copy_from(s.q.narrow(0, p.from, p.to - p.from));
            std::copy(s.table.begin(), s.table.end(), tables.begin() + b * max_blocks);
            row += p.to - p.from;
            starts.push_back(static_cast<int32_t>(row));
            positions.push_back(static_cast<int32_t>(p.from));
          }
          Tensor out = Tensor::empty({N, H, hd}, DType::f32);
          ops::paged_attention(q, cache.keys(0), cache.values(0),
                               i32_tensor({B, max_blocks}, tables), i32_tensor({B + 1}, starts),
                               i32_tensor({B}, positions), scale, out);
          // Compare each part against the reference rows.
          row = 0;
          for (const Part& p : parts) {
            const int64_t n = p.to - p.from;
            EXPECT_TRUE(bitwise_equal(out.narrow(0, row, n), expected[p.seq].narrow(0, p.from, n)))
                << "sequence " << p.seq << " tokens " << p.from << ".." << p.to << " in a batch of "
                << parts.size();
            row += n;
          }
        };
        // Alone, whole.
        for (size_t i = 0; i < seqs.size(); ++i) run({{i, 0, seqs[i].length}});
        // All together, whole.
        run({{0, 0, 1}, {1, 0, 5}, {2, 0, 13}, {3, 0, 32}, {4, 0, 7}});
        // Chunked prefill of sequence 3 mixed with decode-like single tokens of others.
        run({{3, 0, 10}, {2, 12, 13}});
        run({{1, 4, 5}, {3, 10, 11}, {4, 3, 7}});
        run({{3, 11, 32}, {0, 0, 1}});
        // An empty part (a sequence with no new tokens this step) is allowed.
        run({{2, 13, 13}, {1, 2, 5}});
      });
}

TEST(ServePagedAttention, refuses_block_ids_outside_the_pool_and_short_tables) {
  PagedKvCache cache(small_options(4, 4));
  Tensor q = random_tensor({3, 2, 8}, 1), out = Tensor::empty({3, 2, 8}, DType::f32);
  auto call = [&](std::vector<int32_t> table, int32_t start) {
    ops::paged_attention(q, cache.keys(0), cache.values(0),
                         i32_tensor({1, static_cast<int64_t>(table.size())}, table),
                         i32_tensor({2}, {0, 3}), i32_tensor({1}, {start}), 0.5f, out);
  };
  EXPECT_NO_THROW(call({0, 1}, 2));
  try {
    call({0, 9}, 2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the pool"), std::string::npos) << e.what();
  }
  EXPECT_THROW(call({0}, 2), Error);  // positions 2..4 need 2 blocks
  EXPECT_THROW(call({0, 1}, -1), Error);
}

TEST(ServeBatchInvariance, f32_matmul_dispatch_is_batch_invariant_by_default) {
  if (!batch_invariant_f32_matmul()) GTEST_SKIP() << "REFIT_BATCH_INVARIANT=0 in the environment";
  Tensor x = random_tensor({2, 8}, 1), w = random_tensor({4, 8}, 2),
         out = Tensor::empty({2, 4}, DType::f32);
  Tensor none;
  std::array<const Tensor*, 4> args{&x, &w, &none, &out};
  EXPECT_EQ(KernelRegistry::global().select("matmul", args).name, "matmul.cpu.f32_invariant");
  // Every row of a 41-row product equals the same row computed alone or in a smaller batch.
  const int64_t M = 41, K = 300, N = 70;
  Tensor xb = random_tensor({M, K}, 3), wb = random_tensor({N, K}, 4), bias = random_tensor({N}, 5);
  Tensor full = Tensor::empty({M, N}, DType::f32);
  ops::matmul(xb, wb, bias, full);
  for (int64_t m : {0L, 7L, 40L})
    for (int64_t rows : {1L, 3L, 8L}) {
      if (m + rows > M) continue;
      Tensor part = Tensor::empty({rows, N}, DType::f32);
      ops::matmul(xb.narrow(0, m, rows).contiguous(), wb, bias, part);
      EXPECT_TRUE(bitwise_equal(part, full.narrow(0, m, rows))) << "rows " << m << "+" << rows;
    }
}

}  // namespace
}  // namespace refit
