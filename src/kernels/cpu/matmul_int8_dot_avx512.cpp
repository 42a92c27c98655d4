// The AVX-512 VNNI kernel of the integer-dot W8A8 matmul (definition in matmul_int8_dot.h).
//
// vpdpbusd multiplies unsigned bytes by signed bytes, four per int32 lane. The activation
// codes are the signed side; the weights are made unsigned by an offset whose effect is
// taken back once per block from the activations' block sums (computed once per call):
//   Q8_0:  (w xor 0x80) = w + 128 in 0..255, so  sum (w + 128) x = isum + 128 * sum x;
//   MXFP4: a 16-entry byte table (vpshufb) maps each e2m1 nibble to 2v + 12 in 0..24, so
//          sum (2v + 12) x = isum + 12 * sum x.
// Packed MXFP4 bytes hold elements (2i, 2i + 1) of a block in their low and high nibbles;
// the activations are re-ordered once per call to match ([evens][odds] of 4 blocks).
//
// Four weight rows run together (one activation load for all, four independent chains;
// in L2, Q8_0 ran ~1.4x one row at a time). Per 16 blocks (512 values) of one weight row:
// vpdpbusd leaves int32 lanes of 4 products; a first round of pair sums (Q8_0) or a second
// vpdpbusd into the same lanes (MXFP4's high nibbles) makes 4 lanes per block, two more
// rounds of pair sums (two permutes and an add each) one lane per block, in block order;
// then the offset correction, one convert,
// the scale product and one fused multiply-add into the 16-lane accumulator, lane = block
// mod 16: exactly the definition's float steps. Remaining blocks (K / 32 not a multiple of
// 16) are summed in scalar code and enter the same accumulator under a mask.
//
// Shuffled weights (16-row tiles of [2][16 rows][16 bytes] pieces) are read in place by
// ShuffledTile, rows in the vector lanes instead of blocks (see there). Interleaved Q8_0
// weights (kernels/interleave_4x16.h) run the plain kernel with BlockSums16's Il path: the
// block sums come out of vpdpbusd already one per lane, and the pair sums are skipped.
//
// Compiled for AVX-512 VNNI only inside the pragma region below: nothing here may call
// templates shared with code for other ISAs (no std::), as their one compiled copy could
// then carry AVX-512 instructions. Callers check avx512_vnni_usable() first.
// GCC 12's AVX-512 intrinsics start from a self-initialised `__Y` ("undefined" register),
// which -Wuninitialized reports at every inlined use: a known false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/matmul_int8_dot.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx512vbmi,f16c,fma")
// The float steps are the definition's, one rounding each: no contraction of mul + add.
// No auto-vectorization either: GCC 12 vectorized the scalar tail sum of int8 x int8
// products into vpdpbusd (an unsigned x signed product) and the sums came out wrong (the
// kernel-vs-definition test caught it).
#pragma GCC optimize("fp-contract=off", "no-tree-vectorize")
#include "kernels/cpu/avx512_lanes-inl.h"

namespace refit::cpu::int8dot {
namespace {

// [a0 + a1, a2 + a3, ..., a14 + a15, b0 + b1, ..., b14 + b15]
inline __m512i PairSums(__m512i a, __m512i b) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  return _mm512_add_epi32(_mm512_permutex2var_epi32(a, even, b),
                          _mm512_permutex2var_epi32(a, odd, b));
}

// MXFP4 bytes to the unsigned dot-product operands of their low and high nibbles: 2v + 12
// for the 16 e2m1 codes (v: 0, .5, 1, 1.5, 2, 3, 4, 6, then negated).
template <bool Vbmi>
inline void F4Nibbles(__m512i bytes, __m512i& lo, __m512i& hi) {
  const __m512i table = _mm512_broadcast_i32x4(
      _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  if constexpr (Vbmi) {
    // vpermb reads only index bits 0-5 and the table repeats every 16 entries, so the bits
    // above each nibble need no masking: one shift and two lookups per 64 bytes.
    lo = _mm512_permutexvar_epi8(bytes, table);
    hi = _mm512_permutexvar_epi8(_mm512_srli_epi16(bytes, 4), table);
  } else {
    const __m512i low = _mm512_set1_epi8(0x0F);
    lo = _mm512_shuffle_epi8(table, _mm512_and_si512(bytes, low));
    hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low));
  }
}

// The definition's s = xd * dw for 16 (or, masked, fewer) blocks: dw the f16 scale (Q8_0),
// or the e8m0 scale times 0.5 (MXFP4), multiplied in one vscalefps (TimesE8m0Half; ABBA
// pairs on `medium`, AMD Zen 5: mxfp4-w8a8 decode +1 to +16%, 6 of 6 faster, mean +6%).
template <Weights W>
inline __m512 ScaleProducts(__m512 xd, const void* p, __mmask16 mask) {
  if constexpr (W == Weights::q8_0) {
    return _mm512_mul_ps(xd, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p)));
  } else {
    return avx512::TimesE8m0Half(xd, _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask, p)));
  }
}

// Raw (offset) sums of 16 consecutive blocks starting at value k0, one lane per block.
// Interleaved Q8_0 (Il; x then holds the activation codes in the same order): 64-byte
// load g holds codes 4g..4g+3 of each of the 16 blocks, so vpdpbusd adds them into block
// i's lane i and eight loads leave the 16 sums in order, with no pair sums.
template <Weights W, bool Vbmi, bool Il>
inline __m512i BlockSums16(const uint8_t* w, const int8_t* x, const int8_t* xperm, int64_t k0,
                           const uint8_t* ahead) {
  if constexpr (Il) {
    static_assert(W == Weights::q8_0, "only Q8_0 codes are interleaved");
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    // Two chains of four: vpdpbusd's latency is not waited on back to back.
    __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
    for (int64_t k = k0; k < k0 + 512; k += 128) {
      if (ahead) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + k), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(ahead + k + 64), _MM_HINT_T1);
      }
      a = _mm512_dpbusd_epi32(a, _mm512_xor_si512(_mm512_loadu_si512(w + k), flip),
                              _mm512_loadu_si512(x + k));
      b = _mm512_dpbusd_epi32(b, _mm512_xor_si512(_mm512_loadu_si512(w + k + 64), flip),
                              _mm512_loadu_si512(x + k + 64));
    }
    return _mm512_add_epi32(a, b);
  }
  __m512i t[4];
  if constexpr (W == Weights::q8_0) {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int p = 0; p < 4; ++p) {
      const int64_t k = k0 + 128 * p;
      if (ahead) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + k), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(ahead + k + 64), _MM_HINT_T1);
      }
      const __m512i w0 = _mm512_xor_si512(_mm512_loadu_si512(w + k), flip);
      const __m512i w1 = _mm512_xor_si512(_mm512_loadu_si512(w + k + 64), flip);
      const __m512i v0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w0, _mm512_loadu_si512(x + k));
      const __m512i v1 =
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), w1, _mm512_loadu_si512(x + k + 64));
      t[p] = PairSums(v0, v1);  // 4 blocks x 4 lanes
    }
  } else {
    for (int p = 0; p < 4; ++p) {
      const int64_t b = k0 / 2 + 64 * p;  // packed byte offset: 4 blocks of 16 bytes
      if (ahead) _mm_prefetch(reinterpret_cast<const char*>(ahead + b), _MM_HINT_T1);
      __m512i lo, hi;
      F4Nibbles<Vbmi>(_mm512_loadu_si512(w + b), lo, hi);
      const int8_t* xp = xperm + k0 + 128 * p;
      __m512i v = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xp));
      t[p] = _mm512_dpbusd_epi32(v, hi, _mm512_loadu_si512(xp + 64));  // 4 blocks x 4 lanes
    }
  }
  return PairSums(PairSums(t[0], t[1]), PairSums(t[2], t[3]));
}

// The exact sum of one block in scalar code (tail blocks).
template <Weights W>
inline int32_t BlockSum(const uint8_t* w, const int8_t* x, int64_t block) {
  int32_t s = 0;
  if constexpr (W == Weights::q8_0) {
    for (int64_t k = block * kBlock; k < (block + 1) * kBlock; ++k)
      s += static_cast<int8_t>(w[k]) * x[k];
  } else {
    static constexpr int8_t kTwice[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    for (int64_t i = 0; i < kBlock / 2; ++i) {
      const uint8_t byte = w[block * kBlock / 2 + i];
      s += kTwice[byte & 15] * x[block * kBlock + 2 * i] +
           kTwice[byte >> 4] * x[block * kBlock + 2 * i + 1];
    }
  }
  return s;
}

// NR weight rows, `stride` rows apart (rows of row_bytes), against activation row m: NR
// independent streams and dependency chains in flight, one activation load shared by all.
template <Weights W, bool Vbmi, bool Il, int NR>
void RowsDot(const Operands& op, const Prepared& p, int64_t m, const uint8_t* w, int64_t row_bytes,
             int64_t stride, const uint8_t* scales, const uint8_t* ahead, float* result) {
  const int8_t* x = op.xq + m * op.ldxq;
  // Whole runs of 16 blocks read the interleaved codes; the tail blocks are plain in both.
  const int8_t* xrun = Il ? p.xil + m * op.K : x;
  const int8_t* xperm = p.xperm ? p.xperm + m * op.K : nullptr;
  const float* xd = op.xd + m * op.ldxd;
  const int32_t* corr = p.xcorr + m * p.S16;
  const int64_t esize = W == Weights::q8_0 ? 2 : 1, scale_row = op.S * esize * stride;
  row_bytes *= stride;
  // The row loops below are unrolled on purpose: GCC 12 left them rolled (the inlined
  // block sums are long), so acc[j] lived on the stack, one load and one store per 16
  // blocks and row. Unrolled, the accumulators stay in registers (in-process A/B on
  // `medium`, tg: mxfp4-w8a8 median +2 to +7%, q8_0-w8a8 +1 to +4%, four runs each).
  __m512 acc[NR];
  for (int j = 0; j < NR; ++j) acc[j] = _mm512_setzero_ps();
  const int64_t full = op.S / kLanes * kLanes;
  for (int64_t b = 0; b < full; b += kLanes) {
    const __m512i c = _mm512_loadu_si512(corr + b);
    const __m512 d = _mm512_loadu_ps(xd + b);
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const __m512i raw = BlockSums16<W, Vbmi, Il>(w + j * row_bytes, xrun, xperm, b * kBlock,
                                                   ahead ? ahead + j * row_bytes : nullptr);
      const __m512 s = ScaleProducts<W>(d, scales + j * scale_row + b * esize, 0xFFFF);
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(raw, c)), s, acc[j]);
    }
  }
  if (full < op.S) {
    const int64_t rem = op.S - full;
    const __mmask16 mask = static_cast<__mmask16>((1u << rem) - 1);
    const __m512 d = _mm512_maskz_loadu_ps(mask, xd + full);
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      alignas(64) int32_t sums[kLanes] = {};
      for (int64_t i = 0; i < rem; ++i) sums[i] = BlockSum<W>(w + j * row_bytes, x, full + i);
      const __m512 s = ScaleProducts<W>(d, scales + j * scale_row + full * esize, mask);
      acc[j] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums)), s, acc[j], mask);
    }
  }
  for (int j = 0; j < NR; ++j) result[j] = avx512::LaneTreeSum(acc[j]);
}

template <Weights W, bool Vbmi, bool Il>
void TileImpl(const Operands& op, const Prepared& p, const Tile& t) {
  const int64_t esize = W == Weights::q8_0 ? 2 : 1;
  const auto* scales = static_cast<const uint8_t*>(t.scales);
  // The next tile's scales (one contiguous run right after these, 2 KiB for Q8_0 at
  // K = 2048) are requested now, as its codes are below; the quantized matmul with f32
  // activations (matmul_quantized_hwy.cpp) does the same. Interleaved A/B on `medium`
  // (tg64, AMD Zen 5): q8_0-w8a8 +4% on average (7 of 9 pairs faster), mxfp4-w8a8 within
  // noise.
  if (t.next)
    for (int64_t b = 0; b < t.rows * op.S * esize; b += 64)
      _mm_prefetch(reinterpret_cast<const char*>(scales + t.rows * op.S * esize + b), _MM_HINT_T1);
  // Rows shorter than a 4 KiB page share pages (2 Q8_0 or 4 MXFP4 rows of K = 2048). The
  // L2 streamer follows one ascending stream per page, so four rows side by side from one
  // page are four streams it cannot all follow. Each pass therefore takes four rows from
  // four different pages (stride = rows per page), and the next pass the rows right after
  // them: every page is read front to back as one stream.
  // Interleaved A/B on `medium` (tg64): q8_0-w8a8 +3%, mxfp4-w8a8 +5% (five pairs each),
  // fp8-channel-w8a8 +8% (four pairs, its kernel does the same).
  const int64_t per_page = t.row_bytes < 4096 && 4096 % t.row_bytes == 0 ? 4096 / t.row_bytes : 1;
  const int64_t stride = per_page <= 4 && t.rows % (4 * per_page) == 0 ? per_page : 1;
  // Two rows per page (Q8_0 at K = 2048): a whole tile is eight pages, read eight rows at
  // a time (one per page), which streamed ~4% faster than four (A/B on `medium`, 4 pairs).
  if (stride == 2 && t.rows == 16) {
    for (int64_t phase = 0; phase < 2; ++phase) {
      const uint8_t* ahead = t.next ? t.next + phase * t.row_bytes : nullptr;
      for (int64_t m = 0; m < op.M; ++m) {
        float v[8];
        RowsDot<W, Vbmi, Il, 8>(op, p, m, t.codes + phase * t.row_bytes, t.row_bytes, 2,
                                scales + phase * op.S * esize, m == 0 ? ahead : nullptr, v);
        for (int j = 0; j < 8; ++j) {
          const int64_t n = t.n0 + phase + 2 * j;
          op.out[m * op.ldo + n] = op.bias ? v[j] + op.bias[n] : v[j];
        }
      }
    }
    return;
  }
  for (int64_t g = 0; g < t.rows; g += 4 * stride)
    for (int64_t phase = 0; phase < stride; ++phase)
      for (int64_t r = g + phase, end = g + 4 * stride < t.rows ? g + 4 * stride : t.rows;
           r < end;) {
        const int nr = stride > 1 || t.rows - r >= 4 ? 4 : 1;
        // The next tile's rows are requested while these stream (first activation row only).
        const uint8_t* ahead = t.next ? t.next + r * t.row_bytes : nullptr;
        for (int64_t m = 0; m < op.M; ++m) {
          float v[4];
          const uint8_t* w = t.codes + r * t.row_bytes;
          const uint8_t* sc = scales + r * op.S * esize;
          const uint8_t* a = m == 0 ? ahead : nullptr;
          if (nr == 4)
            RowsDot<W, Vbmi, Il, 4>(op, p, m, w, t.row_bytes, stride, sc, a, v);
          else
            RowsDot<W, Vbmi, Il, 1>(op, p, m, w, t.row_bytes, stride, sc, a, v);
          for (int j = 0; j < nr; ++j) {
            const int64_t n = t.n0 + r + j * stride;
            op.out[m * op.ldo + n] = op.bias ? v[j] + op.bias[n] : v[j];
          }
        }
        r += stride > 1 ? 4 * stride : nr;
      }
}

// One activation row against a 16-row tile stored shuffled (16 x 32-byte pieces, each
// [2][16 rows][16 bytes]; scales [pieces][16 rows][blocks per piece]), read in place.
// A 64-byte load holds 16 bytes of four rows, so one vpdpbusd pair against the block's
// activations broadcast to the four 128-bit lanes leaves four partial sums per row; two
// rounds of pair sums turn four such vectors into one block's sums for the 16 rows, in row
// order (3 pair sums per block and tile, where the plain kernel needs 7 per 16 blocks and
// row). The float steps are the definition's with rows in the lanes: accumulator l holds
// lane l (blocks l, l + 16, ...) of every row, and the lane tree sum of the definition is
// the same additions done across the 16 accumulators.
template <Weights W, bool Vbmi>
void ShuffledTile(const Operands& op, const Prepared& p, int64_t m, const uint8_t* codes,
                  const uint8_t* scales, const uint8_t* prefetch_end, float* result) {
  const int8_t* x = op.xq + m * op.ldxq;
  const int8_t* xperm = p.xperm ? p.xperm + m * op.K : nullptr;
  const float* xd = op.xd + m * op.ldxd;
  const int32_t* corr = p.xcorr + m * p.S16;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  // Lane l of every row takes blocks l, l + 16, l + 32, ... in that order, and the lanes
  // are independent until the final sum, so the lanes run one after the other: each pass
  // then visits blocks 16 apart, which lie in different 4 KiB pages of the tile (4 for
  // K = 2048), read side by side as separate ascending streams that the L2 streamer
  // follows; block by block, a tile was one stream (MXFP4 shuffled read ~25% slower than
  // plain). The next tile's bytes at the same places are requested as these stream.
  __m512 acc[kLanes];
  const int64_t tile_bytes = op.S * 16 * (W == Weights::q8_0 ? kBlock : kBlock / 2);
  const uint8_t* next =
      prefetch_end && codes + 2 * tile_bytes <= prefetch_end ? codes + tile_bytes : nullptr;
  for (int l = 0; l < kLanes; ++l) {
    __m512 a = _mm512_setzero_ps();
    for (int64_t b = l; b < op.S; b += kLanes) {
      // Block b's bytes of rows 4i..4i+3 sit at half + 64 i.
      const int64_t offset = W == Weights::q8_0 ? b * 512 : (b / 2) * 512 + (b % 2) * 256;
      const uint8_t* half = codes + offset;
      if (next)
        for (int c = 0; c < (W == Weights::q8_0 ? 512 : 256); c += 64)
          _mm_prefetch(reinterpret_cast<const char*>(next + offset + c), _MM_HINT_T1);
      __m512i v[4];
      if constexpr (W == Weights::q8_0) {
        const __m512i x0 = _mm512_broadcast_i32x4(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + b * kBlock)));
        const __m512i x1 = _mm512_broadcast_i32x4(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + b * kBlock + 16)));
        for (int i = 0; i < 4; ++i) {
          const __m512i w0 = _mm512_xor_si512(_mm512_loadu_si512(half + 64 * i), flip);
          const __m512i w1 = _mm512_xor_si512(_mm512_loadu_si512(half + 256 + 64 * i), flip);
          v[i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w0, x0), w1, x1);
        }
      } else {
        // Evens and odds of block b: from the re-ordered activations (see Prepared), which
        // hold whole groups of 4 blocks; the last S % 4 blocks are split here.
        alignas(16) int8_t split[32];
        const int8_t* even = xperm + (b / 4) * 128 + (b % 4) * 16;
        const int8_t* odd = even + 64;
        if (b >= op.S / 4 * 4) {
          for (int k = 0; k < 16; ++k)
            split[k] = x[b * kBlock + 2 * k], split[16 + k] = x[b * kBlock + 2 * k + 1];
          even = split, odd = split + 16;
        }
        const __m512i xe =
            _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(even)));
        const __m512i xo =
            _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(odd)));
        for (int i = 0; i < 4; ++i) {
          __m512i lo, hi;
          F4Nibbles<Vbmi>(_mm512_loadu_si512(half + 64 * i), lo, hi);
          v[i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xe), hi, xo);
        }
      }
      const __m512i raw =
          PairSums(PairSums(v[0], v[1]), PairSums(v[2], v[3]));  // block b, rows 0..15
      __m512 s;
      if constexpr (W == Weights::q8_0) {
        s = _mm512_mul_ps(
            _mm512_set1_ps(xd[b]),
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + b * 32))));
      } else {
        const __m512i pair = _mm512_cvtepu16_epi32(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + (b / 2) * 32)));
        s = avx512::TimesE8m0Half(
            _mm512_set1_ps(xd[b]),
            b % 2 ? _mm512_srli_epi32(pair, 8) : _mm512_and_si512(pair, _mm512_set1_epi32(0xFF)));
      }
      a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(raw, _mm512_set1_epi32(corr[b]))), s,
                          a);
    }
    acc[l] = a;
  }
  for (int h = kLanes / 2; h >= 1; h /= 2)
    for (int l = 0; l < h; ++l) acc[l] = _mm512_add_ps(acc[l], acc[l + h]);
  _mm512_storeu_ps(result, acc[0]);
}

}  // namespace

// The definition's steps on 16 values at a time: the largest |x| bit pattern of the block,
// d = amax / 127 and its reciprocal in scalar code, then x * inv + 1.5 * 2^23 - 1.5 * 2^23
// (one rounding each, no contraction: see the pragma above), exact in int32 and in int8.
void quantize_row_avx512(const float* row, int64_t S, int8_t* q, float* d) {
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512 round = _mm512_set1_ps(12582912.0f);
  for (int64_t b = 0; b < S; ++b) {
    const __m512 lo = _mm512_loadu_ps(row + b * kBlock),
                 hi = _mm512_loadu_ps(row + b * kBlock + 16);
    const __m512i bits = _mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(lo), magnitude),
                                          _mm512_and_si512(_mm512_castps_si512(hi), magnitude));
    const uint32_t top = static_cast<uint32_t>(_mm512_reduce_max_epu32(bits));
    int8_t* out = q + b * kBlock;
    if (top >= 0x7F800000u) {  // inf or NaN
      d[b] = __builtin_nanf("");
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_setzero_si256());
      continue;
    }
    float amax;
    __builtin_memcpy(&amax, &top, 4);
    const float scale = amax / 127.0f, inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    d[b] = scale;
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m512 rl = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(lo, vinv), round), round);
    const __m512 rh = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(hi, vinv), round), round);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(rl)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16),
                     _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(rh)));
  }
}

void shuffled_tile_avx512(const Operands& op, const Prepared& p, const uint8_t* codes,
                          const void* scales, int64_t n0, const uint8_t* prefetch_end) {
  const auto* sc = static_cast<const uint8_t*>(scales);
  for (int64_t m = 0; m < op.M; ++m) {
    alignas(64) float v[kTileRows];
    const uint8_t* ahead = m == 0 ? prefetch_end : nullptr;
    if (op.kind == Weights::q8_0)
      ShuffledTile<Weights::q8_0, false>(op, p, m, codes, sc, ahead, v);
    else if (vbmi_in_use())
      ShuffledTile<Weights::mxfp4, true>(op, p, m, codes, sc, ahead, v);
    else
      ShuffledTile<Weights::mxfp4, false>(op, p, m, codes, sc, ahead, v);
    for (int64_t r = 0; r < kTileRows; ++r)
      op.out[m * op.ldo + n0 + r] = op.bias ? v[r] + op.bias[n0 + r] : v[r];
  }
}

void tile_avx512(const Operands& op, const Prepared& p, const Tile& tile) {
  if (op.kind == Weights::q8_0 && op.interleaved)
    TileImpl<Weights::q8_0, false, true>(op, p, tile);
  else if (op.kind == Weights::q8_0)
    TileImpl<Weights::q8_0, false, false>(op, p, tile);
  else if (vbmi_in_use())
    TileImpl<Weights::mxfp4, true, false>(op, p, tile);
  else
    TileImpl<Weights::mxfp4, false, false>(op, p, tile);
}

}  // namespace refit::cpu::int8dot

#pragma GCC pop_options
