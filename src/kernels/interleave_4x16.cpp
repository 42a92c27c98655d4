#include "kernels/interleave_4x16.h"

#include <cstring>

namespace refit {
namespace {

template <bool Forward>
void permute_rows(const uint8_t* in, uint8_t* out, int64_t rows, int64_t row_bytes) {
  const int64_t runs = row_bytes / kInterleaveRun;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = in + r * row_bytes;
    uint8_t* dst = out + r * row_bytes;
    for (int64_t run = 0; run < runs; ++run)
      for (int64_t i = 0; i < 16; ++i)     // block
        for (int64_t g = 0; g < 8; ++g) {  // group of 4 codes
          const int64_t plain = run * kInterleaveRun + 32 * i + 4 * g;
          const int64_t mixed = run * kInterleaveRun + 64 * g + 4 * i;
          std::memcpy(dst + (Forward ? mixed : plain), src + (Forward ? plain : mixed), 4);
        }
    std::memcpy(dst + runs * kInterleaveRun, src + runs * kInterleaveRun,
                static_cast<size_t>(row_bytes - runs * kInterleaveRun));
  }
}

}  // namespace

void interleave_4x16_rows(const uint8_t* in, uint8_t* out, int64_t rows, int64_t row_bytes) {
  permute_rows<true>(in, out, rows, row_bytes);
}

void deinterleave_4x16_rows(const uint8_t* in, uint8_t* out, int64_t rows, int64_t row_bytes) {
  permute_rows<false>(in, out, rows, row_bytes);
}

}  // namespace refit
