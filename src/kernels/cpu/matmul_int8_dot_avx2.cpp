// The AVX2 kernel of the integer-dot W8A8 matmul (definition in matmul_int8_dot.h), for
// x86 machines without AVX-512 VNNI, where the scalar definition was the only row (4 t/s
// decode on a 1.1 B model, a quarter of the f32-activation path).
//
// vpmaddubsw multiplies unsigned by signed bytes and adds neighbouring pairs into int16
// with saturation. llama.cpp's sign trick makes every product fit: |w| (as unsigned, 0..128)
// times x * sign(w) (-127..127) gives w * x, and a pair of them is at most 2 * 128 * 127 =
// 32512 < 2^15, so no pair saturates and the int16 sums are exact. That needs x != -128 (its
// negation wraps); the quantizer never writes -128 (|x| / d <= 127), and a call whose
// activation codes hold one runs the definition instead (see matmul_int8_dot.cpp).
// vpmaddwd by ones then gives 8 int32 partial sums of a block; eight blocks' partials are
// reduced to one int32 per block (lane i = block i) by three rounds of horizontal adds,
// so each block's isum is exact whatever the order. Then the definition's float steps:
// s = xd * dw (one rounding), acc[b % 16] = fma(float(isum), s, acc[b % 16]) with the 16
// lanes held as two 8-lane vectors (blocks 0-7 of each 16 in the first), the blocks left
// past a multiple of 8 in scalar code on the same lanes, and the definition's pairwise
// tree. So the output is the definition's bit for bit, for any M, layout or ISA.
//
// MXFP4 nibbles become 2 * e2m1 + 12 (0..24) through a vpshufb table; a block's 16 bytes
// give its even elements (low nibbles) in the low half of a 256-bit vector and its odd ones
// (high nibbles) in the high half, so the activations are re-ordered once per call to
// match: per block, the 16 even-indexed codes, then the 16 odd ones. Those offset weights
// are already unsigned, so vpmaddubsw takes them against x as they are (a pair is at most
// 2 * 24 * 128 = 6144: no saturation) and no sign instructions run; the offset's share,
// 12 * the block's sum of x codes, is computed once per call (offset_corrections, as for
// the VNNI kernel) and subtracted from each block's total, which leaves the exact w . x. Q8_0
// cannot do this here: 255 * 127 * 2 overflows int16.
//
// Compiled for AVX2 + FMA + F16C only inside the pragma region below: nothing here may
// call templates shared with code for other ISAs (no std::), as their one compiled copy
// could then carry these instructions. Callers check avx2_int8_usable() first.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/matmul_int8_dot.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
// The float steps are the definition's, one rounding each: no contraction of mul + add,
// and no auto-vectorization of the scalar tails (see matmul_int8_dot_avx512.cpp).
#pragma GCC optimize("fp-contract=off", "no-tree-vectorize")

namespace refit::cpu::int8dot {
namespace {

// Twice the e2m1 value of each nibble plus kF4WeightOffset (12), in both 128-bit halves for
// vpshufb.
inline __m256i F4Table() {
  static_assert(kF4WeightOffset == 12, "the table below holds 2 * e2m1 + 12");
  return _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0, 12, 13, 14, 15,
                          16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
}

// 8 int32 partial sums over one block of 32 codes: of w . x for Q8_0 (sign trick; x !=
// -128), of (w + kF4WeightOffset) . x for MXFP4 (the table's unsigned values as they are).
inline __m256i BlockPartials(Weights kind, __m256i w, __m256i x) {
  const __m256i prod16 = kind == Weights::q8_0
                             ? _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
                             : _mm256_maddubs_epi16(w, x);
  return _mm256_madd_epi16(prod16, _mm256_set1_epi16(1));
}

// v[i]: block i's 8 partial sums -> lane i: block i's total (exact int32).
inline __m256i BlockTotals8(const __m256i v[8]) {
  const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
  // Low half: blocks 0-3's sums of partials 0-3; high half: the same blocks' partials 4-7.
  const __m256i q0 = _mm256_hadd_epi32(h01, h23), q1 = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(q0, q1, 0x20),
                          _mm256_permute2x128_si256(q0, q1, 0x31));
}

// Block b of a weight row as 32 signed codes in the activations' order for that kind.
inline __m256i WeightBlock(Weights kind, const uint8_t* row, int64_t b, __m256i table) {
  if (kind == Weights::q8_0)
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * kBlock));
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * kBlock / 2));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes);
  return _mm256_shuffle_epi8(table, _mm256_and_si256(both, _mm256_set1_epi8(0x0F)));
}

// Weight scales of blocks [b, b + 8) of one row as the definition takes them.
inline __m256 WeightScales8(Weights kind, const uint8_t* scales, int64_t b,
                            const float* e8m0_half) {
  if (kind == Weights::q8_0)
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 2 * b)));
  int64_t e8;
  std::memcpy(&e8, scales + b, 8);
  const __m256i e = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(e8));
  // Exponent bytes 2-254 halve to the normal float 2^(e - 128), whose bits are (e - 1) << 23:
  // three integer operations instead of a gather, which AMD Zen runs as many micro-ops.
  // The rest (0 and 1: subnormal; 255: NaN) take the table.
  const __m256i normal = _mm256_and_si256(_mm256_cmpgt_epi32(e, _mm256_set1_epi32(1)),
                                          _mm256_cmpgt_epi32(_mm256_set1_epi32(255), e));
  if (_mm256_movemask_epi8(normal) == -1)
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23));
  return _mm256_i32gather_ps(e8m0_half, e, 4);
}

inline float WeightScale(Weights kind, const uint8_t* scales, int64_t b, const float* e8m0_half) {
  if (kind == Weights::q8_0) {
    uint16_t bits;
    std::memcpy(&bits, scales + 2 * b, 2);
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)));
  }
  return e8m0_half[scales[b]];
}

// acc + the float steps of blocks [b, b + 8) of one row: lane i takes block b + i.
// `ahead`, when set, is the matching row of the next tile: its bytes at the same offsets
// are requested now, a few cache lines per group, so DRAM stays busy while this row is
// summed (a 16-row tile's rows are too short for the hardware prefetcher to ramp up).
inline __m256 Group8(Weights kind, const int8_t* x, const float* xd, const int32_t* xcorr,
                     const uint8_t* w, const uint8_t* scales, int64_t b, const float* e8m0_half,
                     __m256i table, const uint8_t* ahead, __m256 acc) {
  if (ahead) {
    const int64_t bytes = kind == Weights::q8_0 ? 8 * kBlock : 4 * kBlock;
    const int64_t at = kind == Weights::q8_0 ? b * kBlock : b * kBlock / 2;
    for (int64_t c = 0; c < bytes; c += 64)
      _mm_prefetch(reinterpret_cast<const char*>(ahead + at + c), _MM_HINT_T1);
  }
  __m256i partial[8];
  for (int i = 0; i < 8; ++i)
    partial[i] =
        BlockPartials(kind, WeightBlock(kind, w, b + i, table),
                      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + (b + i) * kBlock)));
  __m256i isum = BlockTotals8(partial);
  if (kind == Weights::mxfp4)
    isum = _mm256_sub_epi32(isum, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xcorr + b)));
  const __m256 s =
      _mm256_mul_ps(_mm256_loadu_ps(xd + b), WeightScales8(kind, scales, b, e8m0_half));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), s, acc);
}

// One output: activation row x (codes in the kind's order, scales xd; MXFP4: its offset
// corrections xcorr) against one weight row.
float RowDot(Weights kind, const int8_t* x, const float* xd, const int32_t* xcorr, const uint8_t* w,
             const uint8_t* scales, int64_t S, const float* e8m0_half, const uint8_t* ahead) {
  const __m256i table = F4Table();
  // The definition's 16 lanes: blocks 0-7 of every 16 in acc0, blocks 8-15 in acc1.
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 16 <= S; b += 16) {
    acc0 = Group8(kind, x, xd, xcorr, w, scales, b, e8m0_half, table, ahead, acc0);
    acc1 = Group8(kind, x, xd, xcorr, w, scales, b + 8, e8m0_half, table, ahead, acc1);
  }
  if (b + 8 <= S) {
    acc0 = Group8(kind, x, xd, xcorr, w, scales, b, e8m0_half, table, ahead, acc0);
    b += 8;
  }
  alignas(32) float lanes[kLanes];
  _mm256_store_ps(lanes, acc0);
  _mm256_store_ps(lanes + 8, acc1);
  for (; b < S; ++b) {  // the blocks past the last group of 8, one at a time
    const __m256i p =
        BlockPartials(kind, WeightBlock(kind, w, b, table),
                      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + b * kBlock)));
    const __m128i p4 = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    const __m128i p2 = _mm_add_epi32(p4, _mm_unpackhi_epi64(p4, p4));
    const int32_t isum = _mm_cvtsi128_si32(_mm_add_epi32(p2, _mm_shuffle_epi32(p2, 1))) -
                         (kind == Weights::mxfp4 ? xcorr[b] : 0);
    const float s = xd[b] * WeightScale(kind, scales, b, e8m0_half);
    float& lane = lanes[b % kLanes];
    lane = _mm_cvtss_f32(
        _mm_fmadd_ss(_mm_set_ss(static_cast<float>(isum)), _mm_set_ss(s), _mm_set_ss(lane)));
  }
  for (int64_t h = kLanes / 2; h >= 1; h /= 2)
    for (int64_t i = 0; i < h; ++i) lanes[i] = lanes[i] + lanes[i + h];
  return lanes[0];
}

}  // namespace

void prepare_activations_avx2(const Operands& op, int8_t* xperm) {
  for (int64_t m = 0; m < op.M; ++m) {
    const int8_t* x = op.xq + m * op.ldxq;
    int8_t* dst = xperm + m * op.K;
    for (int64_t b = 0; b < op.S; ++b)
      for (int64_t k = 0; k < kBlock / 2; ++k) {
        dst[b * kBlock + k] = x[b * kBlock + 2 * k];
        dst[b * kBlock + kBlock / 2 + k] = x[b * kBlock + 2 * k + 1];
      }
  }
}

void tile_avx2(const Operands& op, const int8_t* xperm, const int32_t* xcorr,
               const float* e8m0_half, const Tile& tile) {
  const auto* scales = static_cast<const uint8_t*>(tile.scales);
  const int64_t scale_row = op.S * (op.kind == Weights::q8_0 ? 2 : 1);
  for (int64_t r = 0; r < tile.rows; ++r) {
    const uint8_t* w = tile.codes + r * tile.row_bytes;
    const uint8_t* ahead = tile.next ? tile.next + r * tile.row_bytes : nullptr;
    for (int64_t m = 0; m < op.M; ++m) {
      const bool f4 = op.kind == Weights::mxfp4;
      const int8_t* x = f4 ? xperm + m * op.K : op.xq + m * op.ldxq;
      const int32_t* corr = f4 ? xcorr + m * corrections_stride(op.S) : nullptr;
      const float v = RowDot(op.kind, x, op.xd + m * op.ldxd, corr, w, scales + r * scale_row, op.S,
                             e8m0_half, m == 0 ? ahead : nullptr);
      op.out[m * op.ldo + tile.n0 + r] = op.bias ? v + op.bias[tile.n0 + r] : v;
    }
  }
}

}  // namespace refit::cpu::int8dot

#pragma GCC pop_options
