// Post-load layout transforms. Each rewrites a parameter's storage in place (the address
// never changes) and is recorded on the parameter, so every later load re-applies it to
// the incoming tensor (law L2). A transform is a pure function of one sub-shard's rows,
// so a partial reload transforms exactly the rows it replaces.
#pragma once

#include <string>

#include "core/tensor.h"

namespace refit {

enum class LayoutTransform : uint8_t {
  transpose,        // [N, K] stored as [K, N]; the parameter's row (sharding) dim becomes dim 1
  shuffle_16x16,    // AITER shuffle_weight(w, (16, 16)); same shape and dtype, tiles reordered
  interleave_4x16,  // Q8_0 codes for the integer-dot W8A8 kernel (kernels/interleave_4x16.h)
};
const char* layout_transform_name(LayoutTransform t);

// AITER's shuffle_weight(w, layout=(16, 16)) on a row-major [N, K] matrix: view it as
// [N/16, 16, K/BK, BK/KP, KP] with BK = 32 elements and KP = 16 bytes / element size,
// permute to (0, 2, 3, 1, 4). Requires N % 16 == 0, K % 32 == 0 and a strided
// (unshuffled) input: the output is tagged Layout::shuffled_16x16, so shuffling twice is
// refused rather than silently scrambling the weight.
Tensor shuffle_16x16(const Tensor& w);
// The inverse (for tests and for exporting the logical weight).
Tensor unshuffle_16x16(const Tensor& w);
// "" when `rows` x `cols` of `dtype` can be shuffled, else the reason.
std::string shuffle_16x16_unsupported_reason(int64_t rows, int64_t cols, DType dtype);

// Layout::interleaved_4x16 for a row-major [N, K] tensor of 1-byte elements (Q8_0 codes),
// and the inverse. The input must be plain (strided): interleaving twice is refused.
Tensor interleave_4x16(const Tensor& w);
Tensor deinterleave_4x16(const Tensor& w);

}  // namespace refit
