#include "core/float_convert.h"

#include <bit>
#include <cstring>

#include "core/cpu_features.h"
#include "core/float_formats.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace refit {
namespace {

#if defined(__x86_64__)
const bool kHaveF16c = cpu_has_avx_f16c();

// Blocks of 8; a block with a NaN lane is converted by the scalar function, so NaN payloads
// and quiet bits come out exactly as f32_to_f16 makes them (F16C's NaN rules differ).
__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* in, uint16_t* out,
                                                         int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(in + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
      for (int j = 0; j < 8; ++j) out[i + j] = f32_to_f16(in[i + j]);
      continue;
    }
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = f32_to_f16(in[i]);
}

__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const uint16_t* in, float* out,
                                                         int64_t n) {
  int64_t i = 0;
  const __m128i exp_mask = _mm_set1_epi16(0x7C00);
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    // Exponent all ones (inf or NaN): let the scalar function decide the bits.
    if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, exp_mask), exp_mask)) != 0) {
      for (int j = 0; j < 8; ++j) out[i + j] = f16_to_f32(in[i + j]);
      continue;
    }
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = f16_to_f32(in[i]);
}
#else
const bool kHaveF16c = false;
#endif

}  // namespace

bool float_convert_uses_f16c() { return kHaveF16c; }

void convert_f32_to_f16(const float* in, uint16_t* out, int64_t n) {
#if defined(__x86_64__)
  if (kHaveF16c) return f32_to_f16_f16c(in, out, n);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(in[i]);
}

void convert_f16_to_f32(const uint16_t* in, float* out, int64_t n) {
#if defined(__x86_64__)
  if (kHaveF16c) return f16_to_f32_f16c(in, out, n);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(in[i]);
}

// The scalar f32_to_bf16 written without branches (a select per lane), so it vectorises.
void convert_f32_to_bf16(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, in + i, sizeof u);
    const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
    const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet = (u >> 16) | 0x0040u;
    out[i] = static_cast<uint16_t>(nan ? quiet : rounded);
  }
}

void convert_bf16_to_f32(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(in[i]) << 16;
    std::memcpy(out + i, &u, sizeof u);
  }
}

}  // namespace refit
