// Small AVX-512 pieces the hand-written kernels share (matmul_int8_dot_avx512.cpp,
// matmul_int8_dot_amx.cpp, matmul_fp8_bf16dot_avx512.cpp). Include it only inside a
// `#pragma GCC target("avx512f,avx512bw,avx512dq,...")` region, after <immintrin.h>:
// the functions are static so that each file's copy carries its own region's target.
#pragma once

namespace refit::cpu::avx512 {

// The fixed tree over 16 lanes: i + 8, then + 4, + 2, + 1 (lane i always the left operand).
static inline float LaneTreeSum(__m512 acc) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  const __m128 d = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(d, _mm_shuffle_ps(d, d, 1)));
}

// MXFP4 block scales (e8m0 bytes, zero-extended to 32 bits) times 0.5, as the integer-dot
// definition takes them: 2^(e - 128), with e = 0 giving 2^-128 and e = 255 NaN. Exact.
static inline __m512 E8m0TimesHalf(__m512i e) {
  __m512 f = _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));  // 2^(e - 127) for e in 1..254
  f = _mm512_mask_mov_ps(f, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()),
                         _mm512_set1_ps(0x1p-127f));
  f = _mm512_mask_mov_ps(f, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(255)),
                         _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
  return _mm512_mul_ps(f, _mm512_set1_ps(0.5f));
}

// xd * E8m0TimesHalf(e), the same bits, two instructions fewer: the scale is a power of two,
// 2^(e - 128), so the product is vscalefps(xd, e - 128), rounded once as the product is
// (subnormal results included); e = 255 (a NaN scale) still takes the product, so which
// NaN comes out follows the multiplication's operand order.
static inline __m512 TimesE8m0Half(__m512 xd, __m512i e) {
  const __m512 s =
      _mm512_scalef_ps(xd, _mm512_cvtepi32_ps(_mm512_sub_epi32(e, _mm512_set1_epi32(128))));
  const __mmask16 nan = _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(255));
  return _mm512_mask_mul_ps(s, nan, xd, _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
}

}  // namespace refit::cpu::avx512
