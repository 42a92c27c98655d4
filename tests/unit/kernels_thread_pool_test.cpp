// The one thread pool: every index exactly once, grain respected, a thread index never in
// two calls at once, a slow thread's share taken over by the others, nested calls inline,
// exceptions reach the caller, concurrent callers are serialised safely.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

namespace refit {
namespace {

TEST(KernelsThreadPool, covers_every_index_exactly_once_with_chunks_at_least_grain) {
  const int saved = num_threads();
  for (int threads : {1, 2, 3, 5}) {
    set_num_threads(threads);
    EXPECT_EQ(num_threads(), threads);
    for (int64_t n : {1L, 2L, 7L, 64L, 1001L})
      for (int64_t grain : {1L, 3L, 100L}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::vector<std::atomic<int>> busy(static_cast<size_t>(threads));
        parallel_for(
            n,
            [&](int64_t b, int64_t e, int idx) {
              EXPECT_LT(b, e);
              ASSERT_GE(idx, 0);
              ASSERT_LT(idx, threads);
              // Per-thread scratch indexed by idx is safe only if one call per index runs at a
              // time.
              EXPECT_EQ(busy[static_cast<size_t>(idx)].fetch_add(1), 0)
                  << "index " << idx << " in two calls at once";
              if (n >= grain) {
                EXPECT_GE(e - b, grain);
              }
              for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
              std::this_thread::yield();  // widen the window in which an overlap would show
              busy[static_cast<size_t>(idx)].fetch_sub(1);
            },
            grain);
        for (auto& h : hits) EXPECT_EQ(h.load(), 1);
      }
  }
  set_num_threads(saved);
}

// A thread that stalls (descheduled on a shared machine) must not make the others wait for
// its whole share: they take the rest of it over.
TEST(KernelsThreadPool, a_stalled_thread_share_is_taken_over_by_the_others) {
  const int saved = num_threads();
  set_num_threads(2);
  std::vector<std::atomic<int>> by(2);
  std::atomic<bool> stalled{false};
  parallel_for(64, [&](int64_t b, int64_t e, int idx) {
    // 1 ms per index, so the worker is surely running before the caller is through its share;
    // the worker's first call stalls for 300 ms more.
    if (idx == 1 && !stalled.exchange(true))
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::this_thread::sleep_for(std::chrono::milliseconds(e - b));
    by[static_cast<size_t>(idx)] += static_cast<int>(e - b);
  });
  EXPECT_EQ(by[0].load() + by[1].load(), 64);
  // The worker's first claim is a quarter of its half (8 indices); the caller does all the
  // rest while it sleeps. Without stealing the split would be 32 / 32.
  EXPECT_GE(by[0].load(), 56) << "caller " << by[0].load() << ", stalled worker " << by[1].load();
  set_num_threads(saved);
}

TEST(KernelsThreadPool, nested_calls_run_inline_without_deadlock) {
  const int saved = num_threads();
  set_num_threads(3);
  std::atomic<int64_t> total{0};
  parallel_for(6, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i)
      parallel_for(10, [&](int64_t b2, int64_t e2, int idx) {
        EXPECT_EQ(idx, 0);
        EXPECT_EQ(e2 - b2, 10);  // one inline chunk
        total += e2 - b2;
      });
  });
  EXPECT_EQ(total.load(), 60);
  set_num_threads(saved);
}

TEST(KernelsThreadPool, an_exception_in_a_chunk_reaches_the_caller_and_pool_survives) {
  const int saved = num_threads();
  set_num_threads(2);
  EXPECT_THROW(parallel_for(100,
                            [](int64_t b, int64_t, int) {
                              if (b > 0) throw std::runtime_error("chunk failed");
                            }),
               std::runtime_error);
  std::atomic<int64_t> sum{0};
  parallel_for(100, [&](int64_t b, int64_t e, int) { sum += e - b; });
  EXPECT_EQ(sum.load(), 100);
  set_num_threads(saved);
}

TEST(KernelsThreadPool, concurrent_callers_each_get_their_whole_range) {
  const int saved = num_threads();
  set_num_threads(2);
  std::atomic<int64_t> a{0}, b{0};
  std::thread t1([&] {
    for (int r = 0; r < 200; ++r) parallel_for(50, [&](int64_t s, int64_t e, int) { a += e - s; });
  });
  std::thread t2([&] {
    for (int r = 0; r < 200; ++r) parallel_for(70, [&](int64_t s, int64_t e, int) { b += e - s; });
  });
  t1.join();
  t2.join();
  EXPECT_EQ(a.load(), 200 * 50);
  EXPECT_EQ(b.load(), 200 * 70);
  set_num_threads(saved);
}

TEST(KernelsThreadPool, refuses_zero_threads_and_more_than_it_has_shares_for) {
  const int saved = num_threads();
  EXPECT_THROW(set_num_threads(0), Error);
  EXPECT_THROW(set_num_threads(1025), Error);
  EXPECT_EQ(num_threads(), saved);  // refused before anything changed
  std::atomic<int64_t> sum{0};
  parallel_for(100, [&](int64_t b, int64_t e, int) { sum += e - b; });
  EXPECT_EQ(sum.load(), 100);
}

}  // namespace
}  // namespace refit
