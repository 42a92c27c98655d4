#include "weights/finite_scan.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/thread_pool.h"

namespace refit {
namespace {

// A value is NaN or infinite exactly when its exponent field is all ones (f8_e4m3fn has
// no infinities and one NaN per sign, S.1111.111; e8m0's NaN is 0xFF): (bits & mask) == mask.
struct ExponentMask {
  int bytes = 0;
  uint64_t mask = 0;
};

ExponentMask exponent_mask(DType t) {
  switch (t) {
    case DType::f32:
      return {4, 0x7F800000u};
    case DType::f64:
      return {8, 0x7FF0000000000000ull};
    case DType::f16:
      return {2, 0x7C00u};
    case DType::bf16:
      return {2, 0x7F80u};
    case DType::f8_e5m2:
      return {1, 0x7Cu};
    case DType::f8_e4m3fn:
      return {1, 0x7Fu};
    case DType::e8m0:
      return {1, 0xFFu};
    default:
      return {};  // integers, booleans and f4_e2m1 hold no NaN or infinity
  }
}

// Index of the first element of p[0, n) whose exponent is all ones, or -1. Blocks of 512
// are counted with branch-free compares (the compiler vectorises the loop); only a block
// with a hit is searched element by element.
template <typename U>
int64_t first_in_run(const U* p, int64_t n, U mask) {
  constexpr int64_t kBlock = 512;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    U hits = 0;
    for (int64_t i = b; i < e; ++i) hits |= static_cast<U>((p[i] & mask) == mask);
    if (hits)
      for (int64_t i = b; i < e; ++i)
        if ((p[i] & mask) == mask) return i;
  }
  return -1;
}

int64_t first_in_run(const void* p, int64_t n, const ExponentMask& m) {
  switch (m.bytes) {
    case 1:
      return first_in_run(static_cast<const uint8_t*>(p), n, static_cast<uint8_t>(m.mask));
    case 2:
      return first_in_run(static_cast<const uint16_t*>(p), n, static_cast<uint16_t>(m.mask));
    case 4:
      return first_in_run(static_cast<const uint32_t*>(p), n, static_cast<uint32_t>(m.mask));
    default:
      return first_in_run(static_cast<const uint64_t*>(p), n, m.mask);
  }
}

// NaN when any fraction bit is set (always for f8_e4m3fn and e8m0), else +-inf by the sign.
double value_of(const uint8_t* element, const ExponentMask& m, DType t) {
  if (t == DType::f8_e4m3fn || t == DType::e8m0) return std::numeric_limits<double>::quiet_NaN();
  uint64_t bits = 0;
  std::memcpy(&bits, element, static_cast<size_t>(m.bytes));  // little-endian
  const uint64_t sign = uint64_t{1} << (8 * m.bytes - 1);
  if (bits & ~(m.mask | sign)) return std::numeric_limits<double>::quiet_NaN();
  return bits & sign ? -std::numeric_limits<double>::infinity()
                     : std::numeric_limits<double>::infinity();
}

Shape unflatten(int64_t flat, const Shape& shape) {
  Shape index(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

// Work items of about this many bytes go to one thread; smaller tensors scan inline.
constexpr int64_t kGrainBytes = int64_t{1} << 20;

}  // namespace

std::optional<NonFinite> find_non_finite(const Tensor& given) {
  const ExponentMask m = exponent_mask(given.dtype());
  if (m.bytes == 0 || given.numel() == 0) return std::nullopt;
  if (given.device().type != DeviceType::cpu)
    fail("finiteness check: the tensor is on {}; only cpu tensors can be scanned",
         given.device().str());
  // Rows along the last dim must be contiguous; any other view (a transpose) is scanned
  // as a contiguous copy.
  const Tensor t = given.dim() == 0 || given.stride(-1) == 1 ? given : given.contiguous();
  const Shape& shape = t.shape();
  const int64_t row = t.dim() == 0 ? 1 : shape.back();
  const int64_t rows = t.numel() / row;
  const auto* base = static_cast<const uint8_t*>(t.raw_data());
  std::atomic<int64_t> first{std::numeric_limits<int64_t>::max()};  // flat row-major index
  auto note = [&](int64_t flat) {
    int64_t seen = first.load();
    while (flat < seen && !first.compare_exchange_weak(seen, flat)) {
    }
  };
  if (t.is_contiguous()) {
    const int64_t n = t.numel();
    parallel_for(
        n,
        [&](int64_t begin, int64_t end, int) {
          if (begin >= first.load()) return;
          const int64_t at = first_in_run(base + begin * m.bytes, end - begin, m);
          if (at >= 0) note(begin + at);
        },
        std::max<int64_t>(1, kGrainBytes / m.bytes));
  } else {
    const Shape& strides = t.strides();
    parallel_for(
        rows,
        [&](int64_t begin, int64_t end, int) {
          for (int64_t r = begin; r < end && r * row < first.load(); ++r) {
            int64_t offset = 0, rest = r;
            for (int64_t d = t.dim() - 2; d >= 0; --d) {
              offset += (rest % shape[d]) * strides[d];
              rest /= shape[d];
            }
            const int64_t at = first_in_run(base + offset * m.bytes, row, m);
            if (at >= 0) note(r * row + at);
          }
        },
        std::max<int64_t>(1, kGrainBytes / std::max<int64_t>(1, row * m.bytes)));
  }
  const int64_t flat = first.load();
  if (flat == std::numeric_limits<int64_t>::max()) return std::nullopt;
  NonFinite out;
  out.index = unflatten(flat, shape);
  int64_t offset = 0;
  for (int64_t d = 0; d < t.dim(); ++d) offset += out.index[d] * t.strides()[d];
  out.value = value_of(base + offset * m.bytes, m, t.dtype());
  return out;
}

void require_finite(const SubShard& sub, const Tensor& full) {
  std::vector<SliceRange> ranges = sub.slices();
  if (ranges.empty()) ranges.push_back({0, full.dim() == 0 ? 1 : full.size(0)});
  const int64_t dim = sub.split_dim < 0 ? -1 : sub.split_dim;
  for (const SliceRange& r : ranges) {
    const Tensor part = dim < 0 ? full : full.narrow(dim, r.start, r.length);
    const std::optional<NonFinite> bad = find_non_finite(part);
    if (!bad) continue;
    Shape index = bad->index;
    if (dim >= 0) index[static_cast<size_t>(dim)] += r.start;
    std::string at;
    for (int64_t i : index) at += fmt::format("{}{}", at.empty() ? "" : ", ", i);
    fail(
        "'{}': element [{}] is {}; a weight update must hold finite values (the finiteness "
        "check is on by default: check_finite false skips it)",
        sub.checkpoint_name, at, bad->value);
  }
}

}  // namespace refit
