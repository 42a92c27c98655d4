// The AVX-512 BF16 kernel of the FP8 W8A8 matmul (see matmul_fp8_bf16dot.h).
//
// A 64-byte vector of e4m3 codes becomes two vectors of 32 bf16 values: vpermi2b looks up
// the low and the high byte of each code's bf16 bits in 128-entry tables (the index's bit 7,
// the sign, is ignored by the lookup and or-ed back into the high byte), and byte unpacks
// interleave them into words: the first vector holds codes 0-7, 16-23, 32-39, 48-55 of the
// 64, the second the others. The activations are stored once per call in that order, so
// each vdpbf16ps pairs every weight with its own activation.
//
// Compiled for AVX-512 BF16/VBMI only inside the pragma region: nothing here may call
// templates shared with code for other ISAs (no std::). Callers check usable() first.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsics' self-initialised `__Y`
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/matmul_fp8_bf16dot.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx512vbmi,fma")
#pragma GCC optimize("fp-contract=off", "no-tree-vectorize")
#include "kernels/cpu/avx512_lanes-inl.h"

namespace refit::cpu::fp8dot {

namespace {

struct Tables {
  __m512i lo_a, lo_b, hi_a, hi_b;
};

inline Tables LoadTables(const Operands& op) {
  return {_mm512_loadu_si512(op.bf16_low), _mm512_loadu_si512(op.bf16_low + 64),
          _mm512_loadu_si512(op.bf16_high), _mm512_loadu_si512(op.bf16_high + 64)};
}

// 64 codes to two bf16 vectors.
inline void Decode64(const Tables& t, __m512i c, __m512i& first, __m512i& second) {
  const __m512i lo = _mm512_permutex2var_epi8(t.lo_a, c, t.lo_b);
  __m512i hi = _mm512_permutex2var_epi8(t.hi_a, c, t.hi_b);
  hi = _mm512_ternarylogic_epi32(hi, c, _mm512_set1_epi8(static_cast<char>(0x80)),
                                 0xF8);  // hi | (c & 0x80)
  first = _mm512_unpacklo_epi8(lo, hi);
  second = _mm512_unpackhi_epi8(lo, hi);
}

// Codes k..k+63 of four rows (rows 4g..4g+3 of a 16-row tile stored shuffled: 32-byte
// pieces of [2][16 rows][16 bytes]) in row order, one vector per row: the four 64-byte
// loads hold 16 codes of each row (pieces k/32 and k/32 + 1, both halves), and a 4 x 4
// transpose of their 128-bit lanes puts each row's 64 codes side by side, the same vector
// a plain row's load gives (so the same bits follow). Past the last piece (K % 64 == 32)
// the codes read as 0, as the plain load's mask makes them.
inline void ShuffledCodes4(const uint8_t* tile, int64_t k, int64_t pieces, int g, __m512i c[4]) {
  const int64_t p0 = k / 32;
  const uint8_t* a = tile + p0 * 512 + 64 * g;
  const __m512i A = _mm512_loadu_si512(a), B = _mm512_loadu_si512(a + 256);
  const bool second = p0 + 1 < pieces;
  const __m512i C = second ? _mm512_loadu_si512(a + 512) : _mm512_setzero_si512();
  const __m512i D = second ? _mm512_loadu_si512(a + 768) : _mm512_setzero_si512();
  const __m512i t0 = _mm512_shuffle_i64x2(A, B, 0x44), t1 = _mm512_shuffle_i64x2(A, B, 0xEE);
  const __m512i t2 = _mm512_shuffle_i64x2(C, D, 0x44), t3 = _mm512_shuffle_i64x2(C, D, 0xEE);
  c[0] = _mm512_shuffle_i64x2(t0, t2, 0x88);
  c[1] = _mm512_shuffle_i64x2(t0, t2, 0xDD);
  c[2] = _mm512_shuffle_i64x2(t1, t3, 0x88);
  c[3] = _mm512_shuffle_i64x2(t1, t3, 0xDD);
}

// Activation rows [m0, m0 + MR) against weight rows [n0, n0 + NR). Shuffled: `codes` is
// the 16-row tile, rows r0 .. r0 + NR of it (multiples of 4).
template <int MR, int NR, bool Shuffled = false>
void Block(const Operands& op, const Tables& t, const uint8_t* codes, int64_t m0, int64_t n0,
           int64_t r0, const uint8_t* next, int64_t stride = 1) {
  static_assert(!Shuffled || NR % 4 == 0);
  const int64_t chunks = op.Kp / 64;
  const bool grouped = op.S > 1;
  const int64_t per_group = grouped ? op.group / 64 : chunks;
  __m512 total[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) total[i][j] = _mm512_setzero_ps();
  for (int64_t c0 = 0, g = 0; c0 < chunks; c0 += per_group, ++g) {
    __m512 acc[MR][NR];
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
    const int64_t c1 = c0 + per_group < chunks ? c0 + per_group : chunks;
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t k = c * 64, left = op.K - k;
      const __mmask64 mask = left >= 64 ? ~__mmask64{0} : (__mmask64{1} << left) - 1;
      if constexpr (Shuffled) {
        // Four rows at a time: their codes re-assembled, decoded and multiplied.
        __m512bh x0[MR], x1[MR];
        for (int i = 0; i < MR; ++i) {
          const uint16_t* x = op.xb + (m0 + i) * op.Kp + k;
          x0[i] = (__m512bh)_mm512_loadu_si512(x);
          x1[i] = (__m512bh)_mm512_loadu_si512(x + 32);
        }
        for (int q = 0; q < NR / 4; ++q) {
          const int group4 = static_cast<int>(r0 / 4) + q;
          // The next tile's lines at the same places (over all row groups: all of it).
          if (next)
            for (int64_t b = 0; b < 1024 && k / 32 * 512 + b < 16 * op.K; b += 256)
              _mm_prefetch(reinterpret_cast<const char*>(next + k / 32 * 512 + b + 64 * group4),
                           _MM_HINT_T1);
          __m512i cv[4];
          ShuffledCodes4(codes, k, op.K / 32, group4, cv);
          for (int jj = 0; jj < 4; ++jj) {
            __m512i w0, w1;
            Decode64(t, cv[jj], w0, w1);
            for (int i = 0; i < MR; ++i) {
              acc[i][4 * q + jj] = _mm512_dpbf16_ps(acc[i][4 * q + jj], (__m512bh)w0, x0[i]);
              acc[i][4 * q + jj] = _mm512_dpbf16_ps(acc[i][4 * q + jj], (__m512bh)w1, x1[i]);
            }
          }
        }
      } else {
        __m512i w[NR][2];
        for (int j = 0; j < NR; ++j) {
          const uint8_t* row = codes + (r0 + j * stride) * op.K;
          if (next)
            _mm_prefetch(reinterpret_cast<const char*>(next + (r0 + j * stride) * op.K + k),
                         _MM_HINT_T1);
          Decode64(t, _mm512_maskz_loadu_epi8(mask, row + k), w[j][0], w[j][1]);
        }
        for (int i = 0; i < MR; ++i) {
          const uint16_t* x = op.xb + (m0 + i) * op.Kp + k;
          const __m512bh x0 = (__m512bh)_mm512_loadu_si512(x);
          const __m512bh x1 = (__m512bh)_mm512_loadu_si512(x + 32);
          for (int j = 0; j < NR; ++j) {
            acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)w[j][0], x0);
            acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)w[j][1], x1);
          }
        }
      }
    }
    for (int j = 0; j < NR; ++j) {
      if (grouped) {
        const __m512 s = _mm512_set1_ps(op.w_scale[(n0 + j * stride) * op.S + g]);
        for (int i = 0; i < MR; ++i) total[i][j] = _mm512_fmadd_ps(acc[i][j], s, total[i][j]);
      } else {
        for (int i = 0; i < MR; ++i) total[i][j] = acc[i][j];
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      const int64_t m = m0 + i, n = n0 + j * stride;
      float v = avx512::LaneTreeSum(total[i][j]);
      if (!grouped) v = v * op.w_scale[n];
      v = v * op.xs[m];
      op.out[m * op.ldo + n] = op.bias ? v + op.bias[n] : v;
    }
}

}  // namespace

void shuffled_tile_avx512(const Operands& op, const uint8_t* tile, int64_t n0,
                          const uint8_t* next) {
  const Tables t = LoadTables(op);
  // One scale per row: all 16 rows in one pass over the tile (16 accumulators). Grouped
  // scales keep a second set of accumulators, so there four rows per pass.
  for (int64_t m = 0; m < op.M; ++m) {
    if (op.S == 1) {
      Block<1, 16, true>(op, t, tile, m, n0, 0, m == 0 ? next : nullptr);
    } else {
      for (int64_t g = 0; g < 4; ++g)
        Block<1, 4, true>(op, t, tile, m, n0 + 4 * g, 4 * g, m == 0 ? next : nullptr);
    }
  }
}

void rows_avx512(const Operands& op, const uint8_t* codes, int64_t n0, int64_t rows,
                 const uint8_t* next) {
  const Tables t = LoadTables(op);
  int64_t r = 0;
  // Decode: four weight rows at a time. More activation rows: 4 x 2 blocks, so that each
  // decoded weight vector serves four rows of x. Grouped scales keep a second set of
  // accumulators, so they stay at one activation row.
  if (op.M == 1 || op.S > 1) {
    // Rows shorter than a 4 KiB page: four rows from four pages per pass, then the rows
    // after them, so each page streams front to back (see matmul_int8_dot_avx512.cpp).
    const int64_t per_page = op.K < 4096 && 4096 % op.K == 0 ? 4096 / op.K : 1;
    if (per_page > 1 && per_page <= 4 && rows % (4 * per_page) == 0) {
      for (int64_t g = 0; g < rows; g += 4 * per_page)
        for (int64_t phase = 0; phase < per_page; ++phase)
          for (int64_t m = 0; m < op.M; ++m)
            Block<1, 4>(op, t, codes, m, n0 + g + phase, g + phase, m == 0 ? next : nullptr,
                        per_page);
      return;
    }
    for (; r + 4 <= rows; r += 4)
      for (int64_t m = 0; m < op.M; ++m)
        Block<1, 4>(op, t, codes, m, n0 + r, r, m == 0 ? next : nullptr);
    for (; r < rows; ++r)
      for (int64_t m = 0; m < op.M; ++m)
        Block<1, 1>(op, t, codes, m, n0 + r, r, m == 0 ? next : nullptr);
    return;
  }
  for (; r + 2 <= rows; r += 2) {
    int64_t m = 0;
    for (; m + 4 <= op.M; m += 4) Block<4, 2>(op, t, codes, m, n0 + r, r, m == 0 ? next : nullptr);
    for (; m < op.M; ++m) Block<1, 2>(op, t, codes, m, n0 + r, r, m == 0 ? next : nullptr);
  }
  for (; r < rows; ++r)
    for (int64_t m = 0; m < op.M; ++m)
      Block<1, 1>(op, t, codes, m, n0 + r, r, m == 0 ? next : nullptr);
}

}  // namespace refit::cpu::fp8dot

#pragma GCC pop_options
