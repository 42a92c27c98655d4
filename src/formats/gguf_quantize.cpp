#include "formats/gguf_quantize.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <cmath>

#include "core/error.h"
#include "core/float_formats.h"

namespace refit {

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  if (n % kQK8_0 != 0) fail("Q8_0 quantization: {} values are not whole blocks of {}", n, kQK8_0);
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float* v = x + b * kQK8_0;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    // ggml multiplies by the reciprocal (not divides) and rounds half away from zero.
    for (int j = 0; j < kQK8_0; ++j) y[b].qs[j] = static_cast<int8_t>(std::roundf(v[j] * id));
  }
}

namespace {

// 2^(e - 128): ggml's GGML_E8M0_TO_FP32_HALF, the scale of the doubled kMxfp4Values.
float e8m0_half(uint8_t e) { return std::ldexp(1.0f, static_cast<int>(e) - 128); }

// ggml's best_index_mxfp4: the first of the 16 codes nearest x (ties to the lower index).
uint8_t nearest_mxfp4(float x, float d) {
  uint8_t best = 0;
  float best_err = std::fabs(kMxfp4Values[0] * d - x);
  for (uint8_t i = 1; i < 16; ++i) {
    const float err = std::fabs(kMxfp4Values[i] * d - x);
    if (err < best_err) best = i, best_err = err;
  }
  return best;
}

}  // namespace

void quantize_row_mxfp4(const float* x, BlockMxfp4* y, int64_t n) {
  if (n % kQK_MXFP4 != 0)
    fail("MXFP4 quantization: {} values are not whole blocks of {}", n, kQK_MXFP4);
  for (int64_t b = 0; b < n / kQK_MXFP4; ++b) {
    const float* v = x + b * kQK_MXFP4;
    float amax = 0.0f;
    for (int j = 0; j < kQK_MXFP4; ++j) amax = std::max(amax, std::fabs(v[j]));
    // As ggml writes it: floor(log2 amax) - 2 + 127 cast to u8 (amax > 0), else 0.
    const uint8_t e =
        amax > 0.0f ? static_cast<uint8_t>(std::floor(std::log2(amax)) - 2 + 127) : uint8_t{0};
    const float d = e8m0_half(e);
    y[b].e = e;
    for (int j = 0; j < kQK_MXFP4 / 2; ++j)
      y[b].qs[j] = static_cast<uint8_t>(nearest_mxfp4(v[j], d) |
                                        (nearest_mxfp4(v[kQK_MXFP4 / 2 + j], d) << 4));
  }
}

void mxfp4_block_to_hf(const BlockMxfp4& block, uint8_t codes[16], uint8_t* scale) {
  // Values 0-15 are ggml's low nibbles, 16-31 its high ones: transformers' byte i holds
  // values 2i and 2i + 1, so bytes 0-7 pair low nibbles and bytes 8-15 high ones.
  const uint8_t* q = block.qs;
#if defined(__SSE2__)
  // The same in one vector (a model load converts gigabytes of blocks): even and odd bytes
  // apart, then each pair's nibbles joined.
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  const __m128i low_byte = _mm_set1_epi16(0x00FF), zero = _mm_setzero_si128();
  const __m128i even = _mm_packus_epi16(_mm_and_si128(v, low_byte), zero);  // q[0], q[2], ...
  const __m128i odd = _mm_packus_epi16(_mm_srli_epi16(v, 8), zero);         // q[1], q[3], ...
  const __m128i nib = _mm_set1_epi8(0x0F), high = _mm_set1_epi8(static_cast<char>(0xF0));
  const __m128i lows =
      _mm_or_si128(_mm_and_si128(even, nib), _mm_and_si128(_mm_slli_epi16(odd, 4), high));
  const __m128i highs =
      _mm_or_si128(_mm_and_si128(_mm_srli_epi16(even, 4), nib), _mm_and_si128(odd, high));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(codes), _mm_unpacklo_epi64(lows, highs));
#else
  for (int i = 0; i < kQK_MXFP4 / 4; ++i) {
    codes[i] = static_cast<uint8_t>((q[2 * i] & 0x0F) | (q[2 * i + 1] << 4));
    codes[i + kQK_MXFP4 / 4] = static_cast<uint8_t>((q[2 * i] >> 4) | (q[2 * i + 1] & 0xF0));
  }
#endif
  *scale = block.e;
}

}  // namespace refit
