// The byte order of Layout::interleaved_4x16, the kernel layout of Q8_0 codes for the
// integer-dot W8A8 kernel (kernels/cpu/matmul_int8_dot.h). A row of 1-byte codes is cut
// into runs of 16 blocks of 32 bytes (512 bytes); within a run, byte j of group g of block
// i (code 32 i + 4 g + j) is stored at 64 g + 4 i + j. One 64-byte load then holds the same
// 4 codes of 16 blocks, so vpdpbusd leaves block i's partial sum in int32 lane i and eight
// loads add up to the 16 blocks' sums with no lane shuffles (the plain order needs 14
// cross-lane permutes per 16 blocks to gather them). Bytes after the last whole run (rows
// whose block count is not a multiple of 16) stay in place. A permutation within each
// row, so rows, sub-shards and their scales are where the plain layout has them.
#pragma once

#include <cstdint>

namespace refit {

constexpr int64_t kInterleaveRun = 512;  // bytes of one run of 16 blocks

// `rows` rows of `row_bytes` from plain `in` to interleaved `out`, and back (in != out).
void interleave_4x16_rows(const uint8_t* in, uint8_t* out, int64_t rows, int64_t row_bytes);
void deinterleave_4x16_rows(const uint8_t* in, uint8_t* out, int64_t rows, int64_t row_bytes);

}  // namespace refit
