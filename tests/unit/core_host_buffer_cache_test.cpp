// Large host buffers freed by storages are handed out again for the same size, zeroed as
// every new storage is, within the cache's bounds, and given back on request.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/fresh_pages.h"
#include "core/host_buffer_cache.h"
#include "core/storage.h"

namespace refit {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

bool all_zero(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i)
    if (b[i] != 0) return false;
  return true;
}

// The tests assume the default bounds.
#define SKIP_IF_CACHE_CONFIGURED() \
  if (std::getenv("REFIT_BUFFER_CACHE_MIB")) GTEST_SKIP() << "REFIT_BUFFER_CACHE_MIB is set"

TEST(HostBufferCache, a_freed_large_buffer_serves_the_next_storage_of_its_size_zeroed) {
  SKIP_IF_CACHE_CONFIGURED();
  host_buffer_cache::release_all();
  auto first = Storage::allocate(6 * kMiB);
  void* address = first->data();
  std::vector<uint8_t> junk(6 * kMiB, 0xAB);
  std::memcpy(address, junk.data(), junk.size());
  first.reset();
  EXPECT_EQ(host_buffer_cache::kept_bytes(), 6 * kMiB);

  auto other_size = Storage::allocate(8 * kMiB);
  EXPECT_NE(other_size->data(), address);
  EXPECT_EQ(host_buffer_cache::kept_bytes(), 6 * kMiB) << "an 8 MiB storage took the 6 MiB one";

  auto again = Storage::allocate(6 * kMiB - 100);  // rounds up to the same 6 MiB
  EXPECT_EQ(again->data(), address);
  EXPECT_EQ(again->nbytes(), 6 * kMiB - 100);
  EXPECT_TRUE(all_zero(again->data(), 6 * kMiB)) << "a reused buffer kept its old bytes";
  EXPECT_EQ(host_buffer_cache::kept_bytes(), 0u);
  host_buffer_cache::release_all();
}

TEST(HostBufferCache, small_and_oversized_buffers_are_freed_not_kept_and_only_backed_pages_count) {
  SKIP_IF_CACHE_CONFIGURED();
  host_buffer_cache::release_all();
  Storage::allocate(1 * kMiB).reset();
  EXPECT_EQ(host_buffer_cache::kept_bytes(), 0u);
  Storage::allocate(host_buffer_cache::kMaxEach + 2 * kMiB).reset();
  EXPECT_EQ(host_buffer_cache::kept_bytes(), 0u);
  Storage::allocate(host_buffer_cache::kMaxEach).reset();
  EXPECT_EQ(host_buffer_cache::kept_bytes(), host_buffer_cache::kMaxEach);
  // Never written, so never memory: releasing it gives nothing back.
  EXPECT_EQ(host_buffer_cache::release_all(), 0u);
  EXPECT_EQ(host_buffer_cache::kept_bytes(), 0u);
  {
    auto used = Storage::allocate(host_buffer_cache::kMaxEach);
    std::memset(used->data(), 1, 3 * kMiB);  // three of its MiB backed (and at most 4: huge pages)
  }
  const size_t given_back = host_buffer_cache::release_all();
  EXPECT_GE(given_back, 3 * kMiB);
  EXPECT_LE(given_back, 4 * kMiB);
  EXPECT_EQ(host_buffer_cache::kept_bytes(), 0u);
}

TEST(HostBufferCache, keeps_at_most_its_total_giving_back_the_least_recently_kept_first) {
  SKIP_IF_CACHE_CONFIGURED();
  host_buffer_cache::release_all();
  // Untouched allocations: address space only.
  const size_t big = host_buffer_cache::kMaxEach, half = big / 2;
  static_assert(2 * host_buffer_cache::kMaxEach == host_buffer_cache::kMaxTotal);
  void* oldest = fresh_pages::map(big);
  void* newer = fresh_pages::map(big);
  void* newest = fresh_pages::map(half);
  ASSERT_TRUE(oldest && newer && newest);
  ASSERT_TRUE(host_buffer_cache::keep(oldest, big));
  ASSERT_TRUE(host_buffer_cache::keep(newer, big));
  EXPECT_EQ(host_buffer_cache::kept_bytes(), host_buffer_cache::kMaxTotal);
  ASSERT_TRUE(host_buffer_cache::keep(newest, half));  // over the total: `oldest` is freed
  EXPECT_EQ(host_buffer_cache::kept_bytes(), big + half);
  EXPECT_EQ(host_buffer_cache::take(big), newer);
  EXPECT_EQ(host_buffer_cache::take(big), nullptr);
  EXPECT_EQ(host_buffer_cache::take(half), newest);
  EXPECT_EQ(host_buffer_cache::kept_bytes(), 0u);
  fresh_pages::unmap(newer, big);
  fresh_pages::unmap(newest, half);
}

// Storages freed and allocated on several threads at once, as HTTP threads and the
// scheduler do: every one comes back zeroed and the cache stays within its total.
TEST(HostBufferCache, threads_allocating_and_freeing_at_once_each_get_zeroed_buffers) {
  SKIP_IF_CACHE_CONFIGURED();
  host_buffer_cache::release_all();
  std::vector<std::thread> threads;
  std::vector<int> dirty(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &dirty] {
      for (int i = 0; i < 24; ++i) {
        const size_t bytes = (4 + 2 * static_cast<size_t>((t + i) % 3)) * kMiB;
        auto s = Storage::allocate(bytes);
        if (!all_zero(s->data(), bytes)) ++dirty[static_cast<size_t>(t)];
        std::memset(s->data(), 0x5A, bytes);
      }
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(dirty[static_cast<size_t>(t)], 0) << "thread " << t;
  EXPECT_LE(host_buffer_cache::kept_bytes(), host_buffer_cache::kMaxTotal);
  EXPECT_GT(host_buffer_cache::kept_bytes(), 0u);
  host_buffer_cache::release_all();
}

// REFIT_BUFFER_CACHE_MIB is read once per process, so it is checked through the CLI: 0
// (keep nothing) runs, a value that is not a size fails naming it.
TEST(HostBufferCache, its_setting_is_honoured_or_refused_by_a_new_process) {
  auto run = [](const std::string& value) {
    const std::string cmd =
        "REFIT_BUFFER_CACHE_MIB=" + value + " " + REFIT_BINARY + " generate -n 2 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    std::string out;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    return std::pair<int, std::string>{::pclose(p), out};
  };
  const auto [ok, ok_text] = run("0");
  EXPECT_EQ(ok, 0) << ok_text;
  const auto [bad, bad_text] = run("lots");
  EXPECT_NE(bad, 0);
  EXPECT_NE(bad_text.find("REFIT_BUFFER_CACHE_MIB='lots' is not a size in MiB"), std::string::npos)
      << bad_text;
}

}  // namespace
}  // namespace refit
