// Tensor views share storage and never copy; copies convert dtypes element by element.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "core/bulk_bytes.h"
#include "core/error.h"
#include "core/host_buffer_cache.h"
#include "core/tensor.h"

namespace refit {
namespace {

Tensor iota(Shape shape) {
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(i);
  return t;
}

TEST(Tensor, ViewsShareStorageAndAddressIsStable) {
  Tensor t = iota({4, 6});
  void* base = t.storage()->data();
  Tensor v = t.view({2, 12});
  Tensor s = t.slice(1, 1, 5, 2);
  Tensor n = t.narrow(0, 1, 2);
  Tensor tr = t.transpose(0, 1);
  Tensor p = t.view({2, 2, 6}).permute({2, 0, 1});
  for (const Tensor* x : {&v, &s, &n, &tr, &p}) EXPECT_EQ(x->storage()->data(), base);
  EXPECT_EQ(s.shape(), (Shape{4, 2}));
  EXPECT_EQ(s.get({2, 1}), 2 * 6 + 3);
  EXPECT_EQ(n.get({1, 5}), 2 * 6 + 5);
  EXPECT_EQ(tr.get({5, 3}), 3 * 6 + 5);
  EXPECT_EQ(p.shape(), (Shape{6, 2, 2}));
  EXPECT_EQ(p.get({4, 1, 0}), 12 + 4);
  EXPECT_FALSE(tr.is_contiguous());
  n.set({0, 0}, -1);
  EXPECT_EQ(t.get({1, 0}), -1);  // writes through a view reach the base
}

TEST(Tensor, ContiguousCopiesOnlyWhenNeeded) {
  Tensor t = iota({3, 5});
  EXPECT_EQ(t.contiguous().storage(), t.storage());
  Tensor tr = t.transpose(0, 1).contiguous();
  EXPECT_NE(tr.storage(), t.storage());
  EXPECT_TRUE(tr.is_contiguous());
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(tr.get({i, j}), t.get({j, i}));
  EXPECT_THROW(t.transpose(0, 1).view({15}), Error);
  EXPECT_EQ(t.transpose(0, 1).reshape({15}).get({1}), 5);
}

TEST(Tensor, ViewInfersOneDimension) {
  Tensor t = iota({2, 3, 4});
  EXPECT_EQ(t.view({-1, 4}).shape(), (Shape{6, 4}));
  EXPECT_THROW(t.view({-1, -1}), Error);
  EXPECT_THROW(t.view({5, 5}), Error);
}

TEST(Tensor, ToConvertsEveryDtypeAndBack) {
  Tensor t = Tensor::from_floats({2, 4}, std::vector<float>{0, 0.5f, 1, 1.5f, 2, 3, 4, 6});
  for (DType d : kAllDTypes) {
    if (d == DType::e8m0) continue;  // no zero or fractions below 1 in a pure scale
    Tensor c = t.to(d);
    EXPECT_EQ(c.dtype(), d);
    Tensor back = c.to(DType::f32);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 4; ++j) {
        double want = t.get({i, j});
        if (!dtype_is_floating(d)) want = d == DType::boolean ? (want != 0) : std::trunc(want);
        EXPECT_EQ(back.get({i, j}), want) << dtype_name(d) << " at " << i << "," << j;
      }
  }
}

TEST(Tensor, PackedFp4NeedsAnEvenLastDimension) {
  EXPECT_THROW(Tensor::empty({3, 3}, DType::f4_e2m1), Error);
  Tensor t = Tensor::empty({2, 4}, DType::f4_e2m1);
  EXPECT_EQ(t.nbytes(), 4u);
  t.set({1, 3}, -6.0);
  t.set({1, 2}, 0.5);
  EXPECT_EQ(t.data<uint8_t>()[3], 0xF1);  // low nibble first
}

TEST(Tensor, CopyFromWritesIntoTheSameStorage) {
  Tensor dst = Tensor::empty({3, 4}, DType::bf16);
  void* before = dst.storage()->data();
  Tensor src = iota({4, 3}).transpose(0, 1);  // non-contiguous source
  dst.copy_from(src);
  EXPECT_EQ(dst.storage()->data(), before);
  EXPECT_EQ(dst.get({2, 3}), 3 * 3 + 2);
  EXPECT_THROW(dst.copy_from(iota({4, 3})), Error);  // shape mismatch names both shapes
  dst.set_read_only(true);
  EXPECT_THROW(dst.copy_from(src), Error);
}

// Views whose rows are contiguous but not each other's neighbours (a column range of a
// wider tensor, in both directions, 3-d too) are copied row by row; every element must land
// where the element-by-element definition puts it, and nothing outside the view changes.
TEST(Tensor, CopyFromBetweenRowStridedViews) {
  Tensor wide = iota({2, 3, 10});
  Tensor src = wide.narrow(2, 4, 5);  // [2, 3, 5], rows 10 apart
  Tensor dst_wide = Tensor::empty({2, 3, 7}, DType::f32);
  Tensor dst = dst_wide.narrow(2, 1, 5);
  dst.copy_from(src);
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t c = 0; c < 7; ++c) {
        const double expected = c >= 1 && c < 6 ? wide.get({a, b, c - 1 + 4}) : 0.0;
        EXPECT_EQ(dst_wide.get({a, b, c}), expected) << a << "," << b << "," << c;
      }
  // A source whose rows are not contiguous (a transpose) still goes element by element.
  Tensor t = iota({5, 3}).transpose(0, 1);  // [3, 5], last stride 3
  Tensor into = Tensor::empty({3, 9}, DType::f32).narrow(1, 2, 5);
  into.copy_from(t);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(into.get({i, j}), t.get({i, j}));
}

TEST(Tensor, FromStorageRejectsViewsOutsideTheStorage) {
  auto storage = Storage::allocate(16);
  EXPECT_NO_THROW(Tensor::from_storage(storage, DType::f32, {4}));
  EXPECT_THROW(Tensor::from_storage(storage, DType::f32, {5}), Error);
  EXPECT_THROW(Tensor::from_storage(storage, DType::f32, {2}, {1}, 3), Error);
}

TEST(Storage, WrappedMemoryIsReleasedExactlyOnce) {
  int releases = 0;
  std::vector<float> memory(8, 1.0f);
  {
    auto s = Storage::wrap(memory.data(), 32, Device::cpu(), [&] { ++releases; });
    Tensor a = Tensor::from_storage(s, DType::f32, {8});
    Tensor b = a.slice(0, 2, 6);
    EXPECT_EQ(b.get({0}), 1.0);
  }
  EXPECT_EQ(releases, 1);
}

TEST(Storage, AllocationIsAligned) {
  for (size_t n : {1, 3, 64, 1000}) {
    auto s = Storage::allocate(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s->data()) % Storage::kAlignment, 0u);
  }
}

// Overwritten storage skips the zero fill; under the poison setting it starts as NaN, so a
// producer that leaves an element unwritten shows.
TEST(Storage, OverwrittenStorageIsPoisonedWhenAsked) {
  const bool before = set_poison_overwritten(true);
  Tensor t = Tensor::empty({3, 5}, DType::f32, Device::cpu(), StorageUse::overwritten);
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_TRUE(std::isnan(t.data<float>()[i])) << i;
  Tensor big = Tensor::empty({1 << 20, 3}, DType::bf16, Device::cpu(), StorageUse::overwritten);
  EXPECT_TRUE(std::isnan(big.get({(1 << 20) - 1, 2})));
  Tensor zeros = Tensor::empty({3, 5}, DType::f32);
  for (int64_t i = 0; i < zeros.numel(); ++i) EXPECT_EQ(zeros.data<float>()[i], 0.0f);
  Tensor half = Tensor::from_floats({4}, std::vector<float>{1, 2, 3, 4}).to(DType::f16);
  EXPECT_EQ(half.get({3}), 4.0);
  set_poison_overwritten(before);
}

// A large buffer is filled on the pool's threads: every byte, to the last, of a kept buffer
// handed out again (host_buffer_cache: its old contents are still there) is zeroed, or set to
// the poison when that is asked for. Sizes: chunks of the fill and a ragged tail.
TEST(Storage, LargeReusedBuffersAreFilledToTheLastByte) {
  for (size_t n : {size_t{40} << 20, (size_t{50} << 20) + 2 * 1048576 - 64}) {
    for (const bool poison : {false, true}) {
      SCOPED_TRACE(std::to_string(n) + (poison ? " poisoned" : " zeroed"));
      const void* first = nullptr;
      {
        auto dirty = Storage::allocate(n, Device::cpu());
        std::memset(dirty->data(), 0xAB, n);
        first = dirty->data();
      }
      const bool before = set_poison_overwritten(poison);
      auto again = Storage::allocate(n, Device::cpu(),
                                     poison ? StorageUse::overwritten : StorageUse::general);
      set_poison_overwritten(before);
      // The kept buffer came back (else the test would prove nothing about the fill).
      EXPECT_EQ(again->data(), first);
      const auto* p = static_cast<const uint8_t*>(again->data());
      const uint8_t want = poison ? 0xFF : 0x00;
      size_t wrong = 0;
      for (size_t i = 0; i < n; ++i) wrong += p[i] != want;
      EXPECT_EQ(wrong, 0u);
    }
  }
}

// The pool's fill and copy cover every byte: whole chunks, a ragged tail, and a size under
// the chunked path's threshold.
TEST(BulkBytes, FillAndCopyReachTheLastByte) {
  for (size_t n : {size_t{40} << 20, (size_t{50} << 20) + 2 * 1048576 - 61, size_t{3} << 20}) {
    SCOPED_TRACE(n);
    std::vector<uint8_t> src(n), dst(n, 0xAB);
    for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 131 + i / 4099);
    bulk_copy(dst.data(), src.data(), n);
    EXPECT_TRUE(dst == src);
    bulk_fill(dst.data(), 0x5C, n);
    EXPECT_EQ(std::count(dst.begin(), dst.end(), uint8_t{0x5C}), static_cast<std::ptrdiff_t>(n));
  }
}

// A large copy between views of one storage that overlap shifts the bytes as memmove does
// (the pool's chunked copy would read bytes it had already overwritten); disjoint large
// copies take the chunked copy and give the same bytes.
TEST(Tensor, LargeCopiesBetweenOverlappingViewsAreMemmoves) {
  const int64_t n = (int64_t{20} << 20) + 5;
  auto pattern = [](int64_t i) { return static_cast<uint8_t>(i * 37 + i / 1021); };
  for (const int shift : {1, -1}) {
    SCOPED_TRACE(shift);
    Tensor t = Tensor::empty({n}, DType::u8);
    auto* p = t.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) p[i] = pattern(i);
    // shift 1: [1, n) <- [0, n - 1); shift -1: [0, n - 1) <- [1, n).
    Tensor dst = t.narrow(0, shift > 0 ? 1 : 0, n - 1);
    dst.copy_from(t.narrow(0, shift > 0 ? 0 : 1, n - 1));
    int64_t wrong = 0;
    for (int64_t i = 0; i < n - 1; ++i)
      wrong += dst.data<uint8_t>()[i] != pattern(i + (shift > 0 ? 0 : 1));
    EXPECT_EQ(wrong, 0);
  }
  Tensor a = Tensor::empty({n}, DType::u8);
  for (int64_t i = 0; i < n; ++i) a.data<uint8_t>()[i] = pattern(i);
  Tensor b = a.clone();
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(n)), 0);
}

// Weights of 1 MiB and up start on a 2 MiB boundary (the pages they are advised onto), zeroed
// like any storage; a 1.5 MiB weight of a small model would otherwise sit on 4 KiB pages.
TEST(Storage, WeightsFromOneMebibyteStartOnHugePageBoundaries) {
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  for (size_t n : {size_t{1} << 20, size_t{3} << 19, (size_t{3} << 20) + 5}) {
    auto s = Storage::allocate(n, Device::cpu(), StorageUse::weights);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s->data()) % kHugePage, 0u) << n;
    EXPECT_EQ(s->nbytes(), n);
    const auto* p = static_cast<const uint8_t*>(s->data());
    EXPECT_EQ(p[0], 0);
    EXPECT_EQ(p[n - 1], 0);
  }
  Tensor w = Tensor::empty({768, 768}, DType::f16, Device::cpu(), StorageUse::weights);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.raw_data()) % kHugePage, 0u);
}

// A large zeroed storage comes from the kernel's zero pages and is left untouched: no page
// of it is backed by memory until written (a weight allocated at its checkpoint dtype and
// then replaced by quantized codes never costs memory), and it still reads as zeros. Giving
// it back counts only the pages that were backed.
TEST(Storage, LargeFreshStorageTakesNoMemoryUntilWritten) {
  const size_t n = host_buffer_cache::kMaxEach + (size_t{6} << 20);  // never a kept buffer
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto resident_pages = [&](const void* p, size_t bytes) {
    std::vector<unsigned char> in((bytes + page - 1) / page);
    EXPECT_EQ(mincore(const_cast<void*>(p), bytes, in.data()), 0);
    size_t count = 0;
    for (unsigned char c : in) count += c & 1;
    return count;
  };
  for (StorageUse use : {StorageUse::general, StorageUse::weights}) {
    auto s = Storage::allocate(n, Device::cpu(), use);
    EXPECT_EQ(resident_pages(s->data(), n), 0u);
    auto* p = static_cast<uint8_t*>(s->data());
    p[n / 2] = 7;  // one page backed now (a huge page where granted), the rest still not
    const size_t backed = resident_pages(s->data(), n) * page;
    EXPECT_GE(backed, page);
    EXPECT_LE(backed, size_t{2} << 20);
    EXPECT_EQ(s->discard_contents(), backed);
    EXPECT_EQ(resident_pages(s->data(), n), 0u);
    p[1] = 3;
    size_t nonzero = 0;
    for (size_t i = 0; i < n; ++i) nonzero += p[i] != 0;
    EXPECT_EQ(nonzero, 1u);
  }
}

}  // namespace
}  // namespace refit
