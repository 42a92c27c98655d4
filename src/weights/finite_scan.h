// The finiteness check of a weight update: finds the first NaN or infinity in a tensor by
// its bits (an all-ones exponent field), with no float conversion, so the scan runs at
// memory bandwidth; large tensors are split over the thread pool. One read pass over the
// bytes an update sends (bench/RESULTS.md, "finiteness check").
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor.h"
#include "weights/shard.h"

namespace refit {

struct NonFinite {
  Shape index;   // of the first non-finite element (row-major order), in the tensor scanned
  double value;  // NaN, +inf or -inf
};

// The first non-finite element of `t` (any strides, on the cpu), or nullopt. Integer
// dtypes, f4_e2m1 (no NaN or infinity) and empty tensors are always finite.
std::optional<NonFinite> find_non_finite(const Tensor& t);

// Throws Error naming `sub.checkpoint_name`, the first non-finite element of the rows this
// rank takes from `full` (its index in `full`) and its value. Scans those rows only.
void require_finite(const SubShard& sub, const Tensor& full);

}  // namespace refit
