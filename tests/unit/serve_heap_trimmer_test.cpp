// The heap trimmer runs malloc_trim once after a burst of large request bodies, never for
// small ones, and gives back the large buffers kept for reuse; the soak (bench/soak.mjs)
// shows the RSS it keeps flat.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "core/host_buffer_cache.h"
#include "core/storage.h"
#include "server/heap_trimmer.h"

namespace refit {
namespace {

// Waits (generously: this is not a timing test) until `trims` reaches `want`.
bool trims_reach(const HeapTrimmer& t, size_t want) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (t.trims() < want && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return t.trims() >= want;
}

TEST(ServeHeapTrimmer, small_bodies_never_trim_and_a_burst_of_large_ones_trims_once) {
  HeapTrimmer trimmer;
  for (int i = 0; i < 100; ++i) trimmer.note_request(HeapTrimmer::kLargeBody - 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_EQ(trimmer.trims(), 0u);
  for (int i = 0; i < 5; ++i) trimmer.note_request(HeapTrimmer::kLargeBody);
  ASSERT_TRUE(trims_reach(trimmer, 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_EQ(trimmer.trims(), 1u) << "one burst, one trim";
  trimmer.note_request(size_t{1} << 30);
  EXPECT_TRUE(trims_reach(trimmer, 2));
}

// Large buffers kept for reuse after a request freed them (a decoded weight update's
// tensors) are given back with the trim, as the request's other memory is.
TEST(ServeHeapTrimmer, a_trim_gives_back_the_large_buffers_kept_for_reuse) {
  if (std::getenv("REFIT_BUFFER_CACHE_MIB")) GTEST_SKIP() << "REFIT_BUFFER_CACHE_MIB is set";
  host_buffer_cache::release_all();
  Storage::allocate(HeapTrimmer::kLargeBody * 2).reset();  // a decoded tensor, freed
  ASSERT_GT(host_buffer_cache::kept_bytes(), 0u);
  HeapTrimmer trimmer;
  trimmer.note_request(HeapTrimmer::kLargeBody);
  ASSERT_TRUE(trims_reach(trimmer, 1));
  EXPECT_EQ(host_buffer_cache::kept_bytes(), 0u);
}

TEST(ServeHeapTrimmer, stops_at_once_with_a_trim_pending) {
  const auto t0 = std::chrono::steady_clock::now();
  {
    HeapTrimmer trimmer;
    trimmer.note_request(HeapTrimmer::kLargeBody);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

}  // namespace
}  // namespace refit
