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

// n values (a multiple of 32) -> n / 32 MXFP4 blocks as ggml's quantize_row_mxfp4_ref (what
// llama-quantize MXFP4_MOE writes): e = floor(log2 max|x|) - 2 + 127, each value the nearest
// of the 16 e2m1 codes times 2^(e - 127), ties to the lower code.
void quantize_row_mxfp4(const float* x, BlockMxfp4* y, int64_t n);

// One ggml MXFP4 block in transformers' layout (gpt-oss `_blocks` / `_scales`): 16 bytes with
// element 2i in byte i's low nibble and 2i + 1 in its high one (ggml: element j low, j + 16
// high), and the same e8m0 scale.
void mxfp4_block_to_hf(const BlockMxfp4& block, uint8_t codes[16], uint8_t* scale);

}  // namespace refit
