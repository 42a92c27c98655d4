// Highway needs foreach_target.h right after HWY_TARGET_INCLUDE: not reordered.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/stream_read.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format on

#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace refit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The lanes summed in unsigned scalar code: SumOfLanes on u64 lanes lowers to the
// intrinsic _mm512_reduce_add_epi64, whose header adds as signed long long, an overflow
// UBSan stops on (the sum of raw bytes wraps by design).
template <class D, class V>
uint64_t SumLanesWrapping(D d, V v) {
  HWY_ALIGN uint64_t lanes[hn::MaxLanes(d)];
  hn::Store(v, d, lanes);
  uint64_t sum = 0;
  for (size_t i = 0; i < hn::Lanes(d); ++i) sum += lanes[i];
  return sum;
}

uint64_t ReadSweep(const uint8_t* p, size_t n) {
  const hn::ScalableTag<uint64_t> d;
  const size_t L = hn::Lanes(d), step = 4 * L * sizeof(uint64_t);
  // Four accumulators: the adds never wait on each other, only on memory.
  auto a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + step <= n; i += step) {
    const auto* q = reinterpret_cast<const uint64_t*>(p + i);
    a0 = hn::Add(a0, hn::LoadU(d, q));
    a1 = hn::Add(a1, hn::LoadU(d, q + L));
    a2 = hn::Add(a2, hn::LoadU(d, q + 2 * L));
    a3 = hn::Add(a3, hn::LoadU(d, q + 3 * L));
  }
  uint64_t sum = SumLanesWrapping(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)));
  for (; i < n; ++i) sum += p[i];
  return sum;
}

// The range as kStreams equal parts read side by side, one vector from each per step: the
// pattern of a matmul walking many weight rows at once. On the 2-vCPU Sapphire Rapids VM
// this read ~5-15% faster than one stream (more misses in flight per core).
uint64_t ReadSweepStreams(const uint8_t* p, size_t n) {
  constexpr size_t kStreams = 16;
  const hn::ScalableTag<uint64_t> d;
  const size_t L = hn::Lanes(d), vbytes = L * sizeof(uint64_t);
  const size_t part = n / kStreams / vbytes * vbytes;
  auto a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < part; i += vbytes) {
    for (size_t s = 0; s < kStreams; s += 4) {
      a0 = hn::Add(a0, hn::LoadU(d, reinterpret_cast<const uint64_t*>(p + (s + 0) * part + i)));
      a1 = hn::Add(a1, hn::LoadU(d, reinterpret_cast<const uint64_t*>(p + (s + 1) * part + i)));
      a2 = hn::Add(a2, hn::LoadU(d, reinterpret_cast<const uint64_t*>(p + (s + 2) * part + i)));
      a3 = hn::Add(a3, hn::LoadU(d, reinterpret_cast<const uint64_t*>(p + (s + 3) * part + i)));
    }
  }
  uint64_t sum = SumLanesWrapping(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)));
  for (size_t i = kStreams * part; i < n; ++i) sum += p[i];
  return sum;
}

}  // namespace refit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/stream_read.h"

namespace refit::cpu {
HWY_EXPORT(ReadSweep);
HWY_EXPORT(ReadSweepStreams);

uint64_t read_sweep(const void* p, size_t n) {
  init_cpu_isa();
  return HWY_DYNAMIC_DISPATCH(ReadSweep)(static_cast<const uint8_t*>(p), n);
}

uint64_t read_sweep_streams(const void* p, size_t n) {
  init_cpu_isa();
  return HWY_DYNAMIC_DISPATCH(ReadSweepStreams)(static_cast<const uint8_t*>(p), n);
}

}  // namespace refit::cpu
#endif  // HWY_ONCE
