// A GGUF tensor stored in Q8_0 or MXFP4 read as block codes (weights/block_codes.h), in the
// row order the parameter takes: llama.cpp's converter permutes q/k rows for its rope, and
// undo_gguf_change's permutation is applied to the rows here instead of to decoded values.
#pragma once

#include <cstdint>
#include <string>

#include "formats/gguf.h"
#include "weights/block_codes.h"

namespace refit {

// Tensor `name` of `g` (expert `expert` of a stacked [E, rows, K] tensor when >= 0), its rows
// in Hugging Face order for `rope_permute_heads` > 0. Empty for any type but Q8_0 and MXFP4,
// and for a shape that is not a [rows, K] matrix (or a stack of them) of whole blocks.
// The file must outlive the result's use.
BlockCodes gguf_block_codes(const GgufFile& g, const std::string& name, int64_t expert = -1,
                            int64_t rope_permute_heads = 0);

}  // namespace refit
