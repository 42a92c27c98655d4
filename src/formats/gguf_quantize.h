// f32 -> ggml block quantization for writing GGUF files, byte for byte as ggml's reference
// quantizers (quantize_row_q8_0_ref, which llama-quantize and gguf-py both reproduce), so a
// file refit writes equals the one llama.cpp's tools would make from the same values.
#pragma once

#include <cstdint>

#include "formats/gguf_types.h"

namespace refit {

// n values (a multiple of 32) -> n / 32 Q8_0 blocks: d = max|x| / 127 stored as f16,
// q = round-half-away(x / d).
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);

}  // namespace refit
