// The heap trimmer runs malloc_trim once after a burst of large request bodies, never for
// small ones; the soak (bench/soak.mjs) shows the RSS it keeps flat.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

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
