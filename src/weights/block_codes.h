// A weight a checkpoint stores in a block scheme (GGUF Q8_0 or MXFP4 tensors, gpt-oss's MXFP4
// `_blocks` / `_scales`), read as codes and scales without decoding them.
//
// A parameter quantized in the same scheme stores these bytes as they are
// (Parameter::load_block_codes). Decoding them to f32 and quantizing back gives the same
// values (quantize_model.cpp says why), but costs a pass of each, plus a 4-byte-per-value
// temporary for every tensor: loading an 8-layer gpt-oss-20b GGUF took 40 s that way here, and
// a refit from disk paid the same. Both a fresh load and a refit from disk take this path, so
// they write the same bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/tensor.h"
#include "kernels/quant/quant_scheme.h"
#include "weights/checkpoint_alias.h"

namespace refit {

struct BlockCodes {
  QuantMethod method = QuantMethod::none;  // q8_0 or mxfp4; none: not readable as codes
  Shape shape;                             // the values' [rows, K]
  // Writes row `row`'s blocks [g0, g0 + groups) of 32 values: their codes packed as the
  // scheme stores them (Q8_0: 32 i8 a block; MXFP4: 16 bytes, value 2i in byte i's low
  // nibble) to `codes` (unless null: only the scales wanted), and their scales (Q8_0: f16;
  // MXFP4: e8m0) to `scales`. Reads the source in place; safe to call from several threads.
  std::function<void(int64_t row, int64_t g0, int64_t groups, uint8_t* codes, uint8_t* scales)>
      read;
  explicit operator bool() const { return method != QuantMethod::none; }
};

// "" when every scale of `codes` is finite (the codes themselves always are), else which
// block's is not and what it is: an e8m0 0xFF (NaN), an f16 inf or NaN. Reads every row's
// scales.
std::string block_codes_non_finite(const BlockCodes& codes);

// One part of gpt-oss's stacked MXFP4 blocks [E, rows, K/32, 16] and scales [E, rows, K/32]
// (u8, as check_alias_tensor accepts them) as codes; the tensors must outlive the result's
// use. Empty for a part that is transposed (its blocks would not be rows of the weight).
BlockCodes mxfp4_part_codes(const AliasPart& part, const Tensor& blocks, const Tensor& scales);

}  // namespace refit
