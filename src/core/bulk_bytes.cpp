#include "core/bulk_bytes.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/thread_pool.h"

namespace refit {
namespace {

constexpr size_t kChunk = size_t{8} << 20;  // whole 2 MiB pages per task

// fn(begin, end) over [0, n) in kChunk pieces on the pool.
template <class Fn>
void in_chunks(size_t n, Fn fn) {
  parallel_for(static_cast<int64_t>((n + kChunk - 1) / kChunk), [&](int64_t c0, int64_t c1, int) {
    fn(static_cast<size_t>(c0) * kChunk, std::min(n, static_cast<size_t>(c1) * kChunk));
  });
}

}  // namespace

void bulk_fill(void* p, int value, size_t n) {
  if (n < 2 * kChunk) {
    std::memset(p, value, n);
    return;
  }
  auto* bytes = static_cast<uint8_t*>(p);
  in_chunks(n, [&](size_t begin, size_t end) { std::memset(bytes + begin, value, end - begin); });
}

void bulk_copy(void* dst, const void* src, size_t n) {
  if (n < 2 * kChunk) {
    std::memcpy(dst, src, n);
    return;
  }
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  in_chunks(n, [&](size_t begin, size_t end) { std::memcpy(d + begin, s + begin, end - begin); });
}

}  // namespace refit
