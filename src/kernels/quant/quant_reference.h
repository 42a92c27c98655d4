// The scalar quantizers, one value at a time: the specification the fast path
// (kernels/quant/quantize.h) must reproduce byte for byte. They are kept in the library, not
// only in the tests, so that the definition of every code and scale lives next to the
// code that is measured against it (tests/unit/quant_fast_paths_test.cpp).
#pragma once

#include <cstdint>

#include "kernels/quant/quant_scheme.h"

namespace refit {

// The f32 scale of an fp8 group (amax / 448, mapping amax onto e4m3's largest finite
// value); 1 for all-zero groups and groups so small (or large) the scale is 0 or not
// finite: their codes are the same either way. Shared by both paths so they cannot drift.
float fp8_group_scale(float amax);

// Quantizes rows f32 [n, k] (contiguous) into codes (plain layout, packed for f4) and
// scales [n, S], exactly as quantize_rows does, but slowly and on the calling thread.
void quantize_rows_reference(const QuantScheme& scheme, const float* rows, int64_t n, int64_t k,
                             void* codes, void* scales);

}  // namespace refit
