// Scalar load/store of one element of any dtype, through double. Slow and exact: used
// by element access, dtype conversion fallbacks and test references, never in kernels.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace refit {

// `base` is the storage's first byte; `element` the absolute element index from it.
double load_element(const void* base, DType dtype, int64_t element);
void store_element(void* base, DType dtype, int64_t element, double value);

}  // namespace refit
