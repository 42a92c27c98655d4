// matmul with f16 / bf16 (or f32) weights and f32 activations, in Highway SIMD.
//
// out[m, n] = x[m, :] · w[n, :] (+ bias[n]), w row-major [N, K] as nn.Linear stores it.
//
// Every output element is a dot product computed the same way whatever M is: one vector
// accumulator per (m, n) pair running over k in steps of the vector width, then a
// horizontal sum, then the k tail in scalar fused multiply-adds, then the bias. The tile
// shapes below only choose which pairs share loads, never the order of an element's sum,
// so a row's result is bitwise the same alone (decode) or inside any batch (prefill).
// That is the batch invariance issue 8 asks for.
//
// Three paths, same arithmetic:
//  * decode (M <= kDecodeMaxRows): weights are converted to f32 in registers as they are
//    loaded; the weight matrix streams from memory once per call, so this path is bound
//    by memory bandwidth and never materialises an f32 copy.
//  * small batches (up to small_batch_max_rows(): 32 rows, bf16 64; serving's decode
//    batches): the same in-register conversion, each few weight rows kept in L1 while
//    every 4-row chunk of x passes by (SmallBatchImpl).
//  * prefill: a block of weight rows against every 4 rows of x, the sum over k in chunks
//    that keep the chunk of x in L1 (FourRowsBlock). f16 weights are widened in registers
//    as the tile loads them, 48 rows a block, where the CPU converts at the FMA rate (AMD
//    Zen 3 and later); elsewhere, and for bf16, each thread first converts a block of 16
//    rows to a thread-local f32 buffer (exact: every f16/bf16 value is an f32). Either way
//    the products and their order are the decode path's, so results match it bit for bit.
// Highway needs foreach_target.h right after HWY_TARGET_INCLUDE: not reordered.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/matmul_cpu.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format on

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/float_formats.h"

#ifndef REFIT_MATMUL_CPU_ONCE
#define REFIT_MATMUL_CPU_ONCE
namespace refit::cpu::matmul_detail {
enum class WeightType : int { f32 = 0, f16 = 1, bf16 = 2 };
constexpr int64_t kDecodeMaxRows = 4;
constexpr int64_t kBlockRows = 16;  // weight rows converted at once (prefill)
// Weight rows per prefill block when the tile reads 16-bit weights in place: each chunk of
// x, once in L1, serves 16 tiles instead of 5, and 48 rows (192 KiB at K 2048) still fit
// L2 beside x. The f16 model prefilled 5-10% faster than with 16 (pp64-pp512, Zen 3). A
// converted f32 block stays at kBlockRows: 48 rows of it would not fit L2 beside x.
constexpr int64_t kInPlaceBlockRows = 48;
// Row stride of the converted block: K rounded up to a cache line plus one more line, so
// that rows of a power-of-two K do not all fall into the same L1 sets.
inline int64_t block_stride(int64_t K) { return (K + 15) / 16 * 16 + 16; }
}  // namespace refit::cpu::matmul_detail
#endif

HWY_BEFORE_NAMESPACE();
namespace refit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using matmul_detail::WeightType;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Weight rows per register tile of 4 x rows: 4 x rows accumulators, `rows` weight vectors
// and one x vector must fit the register file, or the compiler re-reads the weights from
// L1 for every FMA and spills accumulators (loads, not FMAs, then bound the loop). x86
// below AVX-512 has 16 vector registers: 12 + 3 + 1. AVX-512 and others have 32.
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
constexpr int kTileWeightRows = 3;
constexpr int kShortRowTile = 4;  // weight rows of a one-row decode tile at short rows
#else
constexpr int kTileWeightRows = 4;
constexpr int kShortRowTile = 8;
#endif

// Weight element types as Highway sees them.
template <WeightType W>
struct WeightTraits;
template <>
struct WeightTraits<WeightType::f32> {
  using T = float;
  static float scalar(const T* p) { return *p; }
  static VF load(DF df, const T* p) { return hn::LoadU(df, p); }
};
template <>
struct WeightTraits<WeightType::f16> {
  using T = hwy::float16_t;
  static float scalar(const T* p) {
    uint16_t bits;
    std::memcpy(&bits, p, 2);
    return f16_to_f32(bits);
  }
  static VF load(DF df, const T* p) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, p));
  }
};
template <>
struct WeightTraits<WeightType::bf16> {
  using T = hwy::bfloat16_t;
  static float scalar(const T* p) {
    uint16_t bits;
    std::memcpy(&bits, p, 2);
    return bf16_to_f32(bits);
  }
  static VF load(DF df, const T* p) {
    const hn::Rebind<hwy::bfloat16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, p));
  }
};

// An MR x NR block of outputs. x rows at x + i*ldx, weight rows at w + j*ldw; writes
// out[i*ldo + j]. The per-element order is fixed (see the file comment).
// kAhead (decode): each k step also requests the next NR rows' bytes at the same fraction
// of their span (rows ldw apart taken as one run, as a dense weight stores them). Rows of a
// small model (K 768: 1.5 KiB of f16) are too short for the hardware prefetcher to ramp up
// on NR streams at once: the 110M model decoded 16% faster with it (Zen 2). A prefetch
// changes no result.
template <WeightType W, int MR, int NR, bool kAhead = false>
HWY_INLINE void DotTile(const float* HWY_RESTRICT x, int64_t ldx,
                        const typename WeightTraits<W>::T* HWY_RESTRICT w, int64_t ldw, int64_t K,
                        const float* bias, float* HWY_RESTRICT out, int64_t ldo) {
  using Tr = WeightTraits<W>;
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  VF acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = hn::Zero(df);
  int64_t k = 0;
  for (; k + L <= K; k += L) {
    if constexpr (kAhead) {
      const auto* next = reinterpret_cast<const uint8_t*>(w + NR * ldw + k * NR);
      for (int64_t b = 0; b < L * NR * static_cast<int64_t>(sizeof(*w)); b += 64)
        __builtin_prefetch(next + b, 0, 2);
    }
    if constexpr (MR == 1) {
      // Each weight vector goes straight into its FMA: with all NR loaded first, 8 rows
      // need 8 + 8 + 1 registers and the compiler keeps an accumulator in memory.
      const VF xv = hn::LoadU(df, x + k);
      for (int j = 0; j < NR; ++j)
        acc[0][j] = hn::MulAdd(xv, Tr::load(df, w + j * ldw + k), acc[0][j]);
    } else {
      VF wv[NR];
      for (int j = 0; j < NR; ++j) wv[j] = Tr::load(df, w + j * ldw + k);
      for (int i = 0; i < MR; ++i) {
        const VF xv = hn::LoadU(df, x + i * ldx + k);
        for (int j = 0; j < NR; ++j) acc[i][j] = hn::MulAdd(xv, wv[j], acc[i][j]);
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      float s = hn::GetLane(hn::SumOfLanes(df, acc[i][j]));
      for (int64_t kk = k; kk < K; ++kk)
        s = std::fma(x[i * ldx + kk], Tr::scalar(w + j * ldw + kk), s);
      out[i * ldo + j] = bias ? s + bias[j] : s;
    }
}

// All MR rows of x against weight rows [n0, n1): NR-wide tiles, then single rows.
template <WeightType W, int MR, int NR, bool kAhead = false>
HWY_INLINE void RowBlock(const float* x, int64_t ldx, const typename WeightTraits<W>::T* w,
                         int64_t ldw, int64_t n0, int64_t n1, int64_t K, const float* bias,
                         float* out, int64_t ldo) {
  int64_t n = n0;
  for (; n + NR <= n1; n += NR)
    DotTile<W, MR, NR, kAhead>(x, ldx, w + n * ldw, ldw, K, bias ? bias + n : nullptr, out + n,
                               ldo);
  for (; n < n1; ++n)
    DotTile<W, MR, 1>(x, ldx, w + n * ldw, ldw, K, bias ? bias + n : nullptr, out + n, ldo);
}

// The last `rows` (0-3) rows of x, at x, against weight rows [n0, n1) in NR-wide tiles.
template <WeightType W, int NR>
HWY_INLINE void TailRows(int64_t rows, const float* x, int64_t ldx,
                         const typename WeightTraits<W>::T* w, int64_t ldw, int64_t n0, int64_t n1,
                         int64_t K, const float* bias, float* out, int64_t ldo) {
  switch (rows) {
    case 3:
      RowBlock<W, 3, NR>(x, ldx, w, ldw, n0, n1, K, bias, out, ldo);
      break;
    case 2:
      RowBlock<W, 2, NR>(x, ldx, w, ldw, n0, n1, K, bias, out, ldo);
      break;
    case 1:
      RowBlock<W, 1, NR>(x, ldx, w, ldw, n0, n1, K, bias, out, ldo);
      break;
    default:
      break;
  }
}

// Small batches (serving 5-32 sequences): weights converted in registers as in decode, but
// each group of NR weight rows stays in L1 while every 4-row chunk of x passes by, so the
// weights stream from memory once and no f32 block is written and read back (the prefill
// path's conversion cost about as much as the multiply at these M). Tiles of 4 x 3 on x86
// below AVX-512 (16 registers), 4 x 4 elsewhere; DotTile's order, so the same bits.
template <WeightType W>
void SmallBatchImpl(const float* x, int64_t ldx, int64_t M, const void* w_raw, int64_t ldw,
                    int64_t n0, int64_t n1, int64_t K, const float* bias, float* out, int64_t ldo) {
  constexpr int NR = kTileWeightRows;
  const auto* w = static_cast<const typename WeightTraits<W>::T*>(w_raw);
  for (int64_t n = n0; n < n1; n += NR) {
    const int64_t rows = std::min<int64_t>(NR, n1 - n);
    // The first chunk of x also requests the next NR rows (as decode does for short rows),
    // so that they arrive from memory while the other chunks reuse this group from L1.
    RowBlock<W, 4, NR, true>(x, ldx, w, ldw, n, n + rows, K, bias, out, ldo);
    int64_t m = 4;
    for (; m + 4 <= M; m += 4)
      RowBlock<W, 4, NR>(x + m * ldx, ldx, w, ldw, n, n + rows, K, bias, out + m * ldo, ldo);
    TailRows<W, NR>(M - m, x + m * ldx, ldx, w, ldw, n, n + rows, K, bias, out + m * ldo, ldo);
  }
}

// Rows [0, M) of x against weight rows [n0, n1), converting weights in registers; more
// than kDecodeMaxRows rows go to SmallBatchImpl.
template <WeightType W>
void DecodeImpl(const float* x, int64_t ldx, int64_t M, const void* w_raw, int64_t ldw, int64_t n0,
                int64_t n1, int64_t K, const float* bias, float* out, int64_t ldo) {
  if (M > matmul_detail::kDecodeMaxRows)
    return SmallBatchImpl<W>(x, ldx, M, w_raw, ldw, n0, n1, K, bias, out, ldo);
  static_assert(matmul_detail::kDecodeMaxRows == 4, "M is 1-4 below");
  const auto* w = static_cast<const typename WeightTraits<W>::T*>(w_raw);
  // One or two rows request the next weight rows ahead only when rows are short: rows of
  // 4 KiB and more (K 2048 f16) already read at the weights-read rate, and alternating runs
  // with the requests on looked slower there (Zen 2, noisy; 2 rows -3-5% on Zen 3). Three
  // and four rows, which spend longer on each row, gained from it at every K (Zen 3, weights
  // from DRAM: +10-15% at K 2048).
  const bool short_rows = K * static_cast<int64_t>(sizeof(typename WeightTraits<W>::T)) <= 2048;
  if (M == 1) {
    // One row: 8 independent accumulators hide the FMA latency. Short rows from DRAM
    // stream faster as fewer rows at a time on AVX2 machines (Zen 3, weights from DRAM:
    // 4 rows instead of 8 read K 768 +24%, K 1024 +18%, the 110M model decoded +15%;
    // from L2 it costs 12-28%, but decode streams a model far larger than the caches).
    // AVX-512 machines keep 8 (not measured there).
    if (short_rows)
      RowBlock<W, 1, kShortRowTile, true>(x, ldx, w, ldw, n0, n1, K, bias, out, ldo);
    else
      RowBlock<W, 1, 8>(x, ldx, w, ldw, n0, n1, K, bias, out, ldo);
  } else if (M == 2) {
    if (short_rows)
      RowBlock<W, 2, 4, true>(x, ldx, w, ldw, n0, n1, K, bias, out, ldo);
    else
      RowBlock<W, 2, 4>(x, ldx, w, ldw, n0, n1, K, bias, out, ldo);
  } else if (M == 3) {
    // 3-4 rows take the register tile's width: 4 x 4 accumulators plus 4 weight vectors
    // would not fit 16 registers (x86 below AVX-512), and a spilled accumulator is stored
    // and reloaded on its chain every k step.
    RowBlock<W, 3, kTileWeightRows, true>(x, ldx, w, ldw, n0, n1, K, bias, out, ldo);
  } else {
    RowBlock<W, 4, kTileWeightRows, true>(x, ldx, w, ldw, n0, n1, K, bias, out, ldo);
  }
}

// Converts weight rows [n, n + rows) to f32 into buf (rows x K, row stride K).
template <WeightType W>
HWY_INLINE void ConvertRows(const typename WeightTraits<W>::T* w, int64_t ldw, int64_t rows,
                            int64_t K, float* HWY_RESTRICT buf, int64_t ldb) {
  using Tr = WeightTraits<W>;
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = 0; r < rows; ++r) {
    const auto* src = w + r * ldw;
    float* dst = buf + r * ldb;
    int64_t k = 0;
    for (; k + L <= K; k += L) hn::StoreU(Tr::load(df, src + k), df, dst + k);
    for (; k < K; ++k) dst[k] = Tr::scalar(src + k);
  }
}

// Four rows of x against `rows` (<= kInPlaceBlockRows) weight rows, the sum over k split
// into chunks so that the chunk of x (4 rows) stays in L1 while every tile of weight rows
// passes by (16 rows of f32, also in L1; 48 rows of f16, from L2): the accumulators are
// parked in `park` between chunks. Each (m, n) accumulator still sees k = 0, L, 2L, ...
// in order, so the result is bit-identical to DotTile's.
template <WeightType W, int NR>
HWY_INLINE void ChunkTile(const float* HWY_RESTRICT x, int64_t ldx,
                          const typename WeightTraits<W>::T* HWY_RESTRICT w, int64_t ldw,
                          int64_t k0, int64_t k1, float* HWY_RESTRICT park, int64_t park_row) {
  using Tr = WeightTraits<W>;
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  VF acc[4][NR];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = hn::Load(df, park + (i * park_row + j) * L);
  for (int64_t k = k0; k < k1; k += L) {
    VF wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = Tr::load(df, w + j * ldw + k);
    for (int i = 0; i < 4; ++i) {
      const VF xv = hn::LoadU(df, x + i * ldx + k);
      for (int j = 0; j < NR; ++j) acc[i][j] = hn::MulAdd(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < NR; ++j) hn::Store(acc[i][j], df, park + (i * park_row + j) * L);
}

template <WeightType W>
void FourRowsBlock(const float* HWY_RESTRICT x, int64_t ldx,
                   const typename WeightTraits<W>::T* HWY_RESTRICT w, int64_t ldw, int64_t rows,
                   int64_t K, const float* bias, float* out, int64_t ldo) {
  using Tr = WeightTraits<W>;
  // Floats of k per pass: 512 keeps the 4 rows of x (8 KiB) in L1 while the weight rows
  // stream past from L1 or L2, and gives each tile 64 steps between parking its
  // accumulators. Against 256 (in-process A/B, Zen 3, 2 threads): f32 weights +9% at K
  // 2048 and M 512, +8% at M 64, unchanged at K 5632; bf16 (through its converted f32
  // block) and Q8_0 prefill unchanged; f16 read in place ~3% faster.
  constexpr int64_t kChunk = 512;
  constexpr int kTileRows = kTileWeightRows;
  constexpr int64_t kParkRow = matmul_detail::kInPlaceBlockRows;
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  HWY_ALIGN float park[4 * kParkRow * (HWY_MAX_BYTES / sizeof(float))];
  for (int64_t v = 0; v < 4 * kParkRow; ++v) hn::Store(hn::Zero(df), df, park + v * L);
  const int64_t kv = K / L * L;  // the vector part of k; the rest is the scalar tail
  for (int64_t k0 = 0; k0 < kv; k0 += kChunk) {
    const int64_t k1 = std::min(kv, k0 + kChunk);
    int64_t j = 0;
    for (; j + kTileRows <= rows; j += kTileRows)
      ChunkTile<W, kTileRows>(x, ldx, w + j * ldw, ldw, k0, k1, park + j * L, kParkRow);
    for (; j < rows; ++j) ChunkTile<W, 1>(x, ldx, w + j * ldw, ldw, k0, k1, park + j * L, kParkRow);
  }
  for (int i = 0; i < 4; ++i)
    for (int64_t j = 0; j < rows; ++j) {
      float s = hn::GetLane(hn::SumOfLanes(df, hn::Load(df, park + (i * kParkRow + j) * L)));
      for (int64_t kk = kv; kk < K; ++kk)
        s = std::fma(x[i * ldx + kk], Tr::scalar(w + j * ldw + kk), s);
      out[i * ldo + j] = bias ? s + bias[j] : s;
    }
}

// Rows [0, M) of x against `rows` (<= kInPlaceBlockRows) weight rows at w.
template <WeightType W>
HWY_INLINE void RowsAgainstBlock(const float* x, int64_t ldx, int64_t M,
                                 const typename WeightTraits<W>::T* w, int64_t ldw, int64_t rows,
                                 int64_t K, const float* bias, float* out, int64_t ldo) {
  int64_t m = 0;
  for (; m + 4 <= M; m += 4)
    FourRowsBlock<W>(x + m * ldx, ldx, w, ldw, rows, K, bias, out + m * ldo, ldo);
  for (; m < M; ++m)
    RowBlock<W, 1, 8>(x + m * ldx, ldx, w, ldw, 0, rows, K, bias, out + m * ldo, ldo);
}

// Rows [0, M) of x against weight rows [n0, n1), a block of weight rows at a time.
// widen_in_registers: the tile reads the f16/bf16 weights as they are, kInPlaceBlockRows at
// a time (the f16 model prefilled 12-15% faster that way on Zen 3, where vcvtph2ps runs
// beside the FMAs); otherwise each block of kBlockRows is converted to f32 in buf
// (kBlockRows * block_stride(K) floats, private to the calling thread) first, one
// conversion per 64 rows of x instead of one per 4.
template <WeightType W>
void PrefillImpl(const float* x, int64_t ldx, int64_t M, const void* w_raw, int64_t ldw, int64_t n0,
                 int64_t n1, int64_t K, const float* bias, float* out, int64_t ldo,
                 bool widen_in_registers, float* buf) {
  const auto* w = static_cast<const typename WeightTraits<W>::T*>(w_raw);
  // Rows of x in blocks that stay in L2 while every weight block passes by; otherwise
  // all of x would stream from L3 for each block of 16 weight rows. Weights are then
  // converted once per x block, which costs little next to the multiply.
  constexpr int64_t kRowsOfX = 64;
  const int64_t block_rows = W != WeightType::f32 && widen_in_registers
                                 ? matmul_detail::kInPlaceBlockRows
                                 : matmul_detail::kBlockRows;
  for (int64_t mb = 0; mb < M; mb += kRowsOfX) {
    const int64_t rows_of_x = std::min(M, mb + kRowsOfX) - mb;
    for (int64_t nb = n0; nb < n1; nb += block_rows) {
      const int64_t rows = std::min<int64_t>(block_rows, n1 - nb);
      const float* b = bias ? bias + nb : nullptr;
      const float* xb = x + mb * ldx;
      float* ob = out + mb * ldo + nb;
      if (W == WeightType::f32 || widen_in_registers) {
        RowsAgainstBlock<W>(xb, ldx, rows_of_x, w + nb * ldw, ldw, rows, K, b, ob, ldo);
      } else {
        const int64_t ldf = matmul_detail::block_stride(K);
        ConvertRows<W>(w + nb * ldw, ldw, rows, K, buf, ldf);
        RowsAgainstBlock<WeightType::f32>(xb, ldx, rows_of_x, buf, ldf, rows, K, b, ob, ldo);
      }
    }
  }
}

// Decode against a weight stored [K, N] (the [N, K] view w has stride(0) == 1), columns
// [c0, c1), in DotTile's steps: column n's lane l accumulates x[k] * w[n, k] for k = l,
// l + L, ... in order, by the same fused multiply-add, the L lanes are summed by SumOfLanes,
// the k tail in scalar fused multiply-adds, then the bias; so the plain layout's bits.
// Here the lanes of one column sit in L accumulators over columns (acc[m][l][block]),
// updated row by row of the storage, which streams each row's slice of columns instead of
// reading one element per row and column; the accumulators (M x L x blocks vectors) stay
// in L1. At the end each column's L lane values are gathered into one vector.
template <WeightType W>
void TransposedDecodeImpl(const float* x, int64_t ldx, int64_t M, const void* w_raw, int64_t ldk,
                          int64_t c0, int64_t c1, int64_t K, const float* bias, float* out,
                          int64_t ldo, float* acc) {
  using Tr = WeightTraits<W>;
  const auto* w = static_cast<const typename Tr::T*>(w_raw);
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df)), K_main = K / L * L;
  const int64_t blocks = (c1 - c0) / L;  // whole vectors of columns; the rest below
  for (int64_t i = 0; i < M * L * blocks * L; i += L) hn::StoreU(hn::Zero(df), df, acc + i);
  for (int64_t k = 0; k < K_main; ++k) {
    const typename Tr::T* row = w + k * ldk + c0;
    // Rows further on are requested while this one is used.
    if (k + 8 < K_main)
      for (int64_t b = 0; b < blocks * L * static_cast<int64_t>(sizeof(typename Tr::T)); b += 64)
        __builtin_prefetch(reinterpret_cast<const uint8_t*>(w + (k + 8) * ldk + c0) + b, 0, 3);
    const int64_t l = k % L;
    for (int64_t b = 0; b < blocks; ++b) {
      const VF wv = Tr::load(df, row + b * L);
      for (int64_t m = 0; m < M; ++m) {
        float* a = acc + ((m * L + l) * blocks + b) * L;
        hn::StoreU(hn::MulAdd(hn::Set(df, x[m * ldx + k]), wv, hn::LoadU(df, a)), df, a);
      }
    }
  }
  HWY_ALIGN float lanes[hn::MaxLanes(df)];
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = c0; n < c1; ++n) {
      const int64_t j = n - c0;
      if (j < blocks * L) {
        for (int64_t l = 0; l < L; ++l) lanes[l] = acc[((m * L + l) * blocks + j / L) * L + j % L];
      } else {  // a column past the last whole vector: its lanes one at a time
        // With MulAdd on one-lane vectors: fused or not exactly as the target's vector
        // MulAdd is (SSE4 has no FMA), which std::fma would not match.
        const hn::CappedTag<float, 1> d1;
        for (int64_t l = 0; l < L; ++l) {
          auto s1 = hn::Zero(d1);
          for (int64_t k = l; k < K_main; k += L)
            s1 = hn::MulAdd(hn::Set(d1, x[m * ldx + k]), hn::Set(d1, Tr::scalar(w + k * ldk + n)),
                            s1);
          lanes[l] = hn::GetLane(s1);
        }
      }
      float s = hn::GetLane(hn::SumOfLanes(df, hn::Load(df, lanes)));
      for (int64_t k = K_main; k < K; ++k)
        s = std::fma(x[m * ldx + k], Tr::scalar(w + k * ldk + n), s);
      out[m * ldo + n] = bias ? s + bias[n] : s;
    }
}

void MatmulTransposedDecode(int weight_type, const float* x, int64_t ldx, int64_t M, const void* w,
                            int64_t ldk, int64_t c0, int64_t c1, int64_t K, const float* bias,
                            float* out, int64_t ldo, float* acc) {
  switch (static_cast<WeightType>(weight_type)) {
    case WeightType::f32:
      return TransposedDecodeImpl<WeightType::f32>(x, ldx, M, w, ldk, c0, c1, K, bias, out, ldo,
                                                   acc);
    case WeightType::f16:
      return TransposedDecodeImpl<WeightType::f16>(x, ldx, M, w, ldk, c0, c1, K, bias, out, ldo,
                                                   acc);
    case WeightType::bf16:
      return TransposedDecodeImpl<WeightType::bf16>(x, ldx, M, w, ldk, c0, c1, K, bias, out, ldo,
                                                    acc);
  }
}

size_t VectorLanes() { return hn::Lanes(DF()); }

// Decode against 16-row tiles stored shuffled_16x16 (tile (n/16, k/32) holds its 16 x 32
// elements as [pieces][16 rows][16 bytes], tiles of a row group one after the other),
// read in place on 512-bit x86 targets: the 64-byte loads of four pieces hold 16 bytes of
// four rows each, and a 4 x 4 transpose of their 128-bit blocks gives each row's next 64
// bytes in order, so every output takes DotTile's steps (one accumulator, k in steps of
// the vector width, SumOfLanes, bias) and the plain layout's bits. Elsewhere this returns
// false and the caller un-shuffles a tile at a time.
#if HWY_TARGET <= HWY_AVX3 && HWY_ARCH_X86
// Row r of the result: block r of each of the four loads, in load order. (The FP8 W8A8
// kernel does the same for e4m3 codes in ShuffledCodes4; the two files are compiled for
// different targets and share no code.)
HWY_INLINE void TransposeBlocks4(const uint8_t* p, int64_t piece_stride, __m512i r[4]) {
  const __m512i a = _mm512_loadu_si512(p), b = _mm512_loadu_si512(p + piece_stride);
  const __m512i c = _mm512_loadu_si512(p + 2 * piece_stride),
                d = _mm512_loadu_si512(p + 3 * piece_stride);
  const __m512i t0 = _mm512_shuffle_i64x2(a, b, 0x44), t1 = _mm512_shuffle_i64x2(a, b, 0xEE);
  const __m512i t2 = _mm512_shuffle_i64x2(c, d, 0x44), t3 = _mm512_shuffle_i64x2(c, d, 0xEE);
  r[0] = _mm512_shuffle_i64x2(t0, t2, 0x88);
  r[1] = _mm512_shuffle_i64x2(t0, t2, 0xDD);
  r[2] = _mm512_shuffle_i64x2(t1, t3, 0x88);
  r[3] = _mm512_shuffle_i64x2(t1, t3, 0xDD);
}

template <WeightType W>
void ShuffledDecodeImpl(const float* x, int64_t ldx, int64_t M, const uint8_t* tiles, int64_t t0,
                        int64_t t1, int64_t n_tiles, int64_t K, const float* bias, float* out,
                        int64_t ldo) {
  using T = typename WeightTraits<W>::T;
  const DF df;
  constexpr int64_t kElemBytes = sizeof(T);
  constexpr int64_t kChunk = 512 * kElemBytes;  // one (16 rows x 32 elements) piece group
  const int64_t tile_bytes = 16 * K * kElemBytes;
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* tile = tiles + t * tile_bytes;
    const uint8_t* next = t + 1 < n_tiles ? tile + tile_bytes : nullptr;
    for (int64_t m = 0; m < M; ++m) {
      const float* xr = x + m * ldx;
      VF acc[16];
      for (int j = 0; j < 16; ++j) acc[j] = hn::Zero(df);
      for (int64_t c = 0; c < K / 32; ++c) {
        const uint8_t* chunk = tile + c * kChunk;
        // The next tile is requested while this one streams (first activation row only).
        if (m == 0 && next)
          for (int64_t b = 0; b < kChunk; b += 64)
            _mm_prefetch(reinterpret_cast<const char*>(next + c * kChunk + b), _MM_HINT_T1);
        const VF x0 = hn::LoadU(df, xr + 32 * c), x1 = hn::LoadU(df, xr + 32 * c + 16);
        for (int g = 0; g < 4; ++g) {
          if constexpr (W == WeightType::f32) {
            // Eight pieces of 4 floats: elements 0-15 of each row, then 16-31.
            __m512i lo[4], hi[4];
            TransposeBlocks4(chunk + 64 * g, 256, lo);
            TransposeBlocks4(chunk + 1024 + 64 * g, 256, hi);
            for (int j = 0; j < 4; ++j) {
              acc[4 * g + j] = hn::MulAdd(x0, VF{_mm512_castsi512_ps(lo[j])}, acc[4 * g + j]);
              acc[4 * g + j] = hn::MulAdd(x1, VF{_mm512_castsi512_ps(hi[j])}, acc[4 * g + j]);
            }
          } else {
            // Four pieces of 8 halves: each row's 32 elements in one vector.
            const hn::Repartition<T, DF> dh2;
            const hn::Half<decltype(dh2)> dh;
            __m512i rows[4];
            TransposeBlocks4(chunk + 64 * g, 256, rows);
            for (int j = 0; j < 4; ++j) {
              const auto w = hn::BitCast(dh2, hn::Vec512<uint16_t>{rows[j]});
              acc[4 * g + j] =
                  hn::MulAdd(x0, hn::PromoteTo(df, hn::LowerHalf(dh, w)), acc[4 * g + j]);
              acc[4 * g + j] =
                  hn::MulAdd(x1, hn::PromoteTo(df, hn::UpperHalf(dh, w)), acc[4 * g + j]);
            }
          }
        }
      }
      for (int j = 0; j < 16; ++j) {
        const int64_t n = t * 16 + j;
        const float v = hn::GetLane(hn::SumOfLanes(df, acc[j]));
        out[m * ldo + n] = bias ? v + bias[n] : v;
      }
    }
  }
}
#endif

bool MatmulShuffledDecode(int weight_type, const float* x, int64_t ldx, int64_t M,
                          const void* tiles, int64_t t0, int64_t t1, int64_t n_tiles, int64_t K,
                          const float* bias, float* out, int64_t ldo) {
#if HWY_TARGET <= HWY_AVX3 && HWY_ARCH_X86
  const auto* p = static_cast<const uint8_t*>(tiles);
  switch (static_cast<WeightType>(weight_type)) {
    case WeightType::f32:
      ShuffledDecodeImpl<WeightType::f32>(x, ldx, M, p, t0, t1, n_tiles, K, bias, out, ldo);
      break;
    case WeightType::f16:
      ShuffledDecodeImpl<WeightType::f16>(x, ldx, M, p, t0, t1, n_tiles, K, bias, out, ldo);
      break;
    case WeightType::bf16:
      ShuffledDecodeImpl<WeightType::bf16>(x, ldx, M, p, t0, t1, n_tiles, K, bias, out, ldo);
      break;
  }
  return true;
#else
  (void)weight_type, (void)x, (void)ldx, (void)M, (void)tiles, (void)t0, (void)t1, (void)n_tiles,
      (void)K, (void)bias;
  (void)out, (void)ldo;
  return false;
#endif
}

bool ShuffledDecodeInPlace() { return HWY_TARGET <= HWY_AVX3 && HWY_ARCH_X86; }

void MatmulDecode(int weight_type, const float* x, int64_t ldx, int64_t M, const void* w,
                  int64_t ldw, int64_t n0, int64_t n1, int64_t K, const float* bias, float* out,
                  int64_t ldo) {
  switch (static_cast<WeightType>(weight_type)) {
    case WeightType::f32:
      return DecodeImpl<WeightType::f32>(x, ldx, M, w, ldw, n0, n1, K, bias, out, ldo);
    case WeightType::f16:
      return DecodeImpl<WeightType::f16>(x, ldx, M, w, ldw, n0, n1, K, bias, out, ldo);
    case WeightType::bf16:
      return DecodeImpl<WeightType::bf16>(x, ldx, M, w, ldw, n0, n1, K, bias, out, ldo);
  }
}

void MatmulPrefill(int weight_type, const float* x, int64_t ldx, int64_t M, const void* w,
                   int64_t ldw, int64_t n0, int64_t n1, int64_t K, const float* bias, float* out,
                   int64_t ldo, bool widen_in_registers, float* buf) {
  switch (static_cast<WeightType>(weight_type)) {
    case WeightType::f32:
      return PrefillImpl<WeightType::f32>(x, ldx, M, w, ldw, n0, n1, K, bias, out, ldo,
                                          widen_in_registers, buf);
    case WeightType::f16:
      return PrefillImpl<WeightType::f16>(x, ldx, M, w, ldw, n0, n1, K, bias, out, ldo,
                                          widen_in_registers, buf);
    case WeightType::bf16:
      return PrefillImpl<WeightType::bf16>(x, ldx, M, w, ldw, n0, n1, K, bias, out, ldo,
                                           widen_in_registers, buf);
  }
}

}  // namespace refit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <hwy/aligned_allocator.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_kernels.h"

namespace refit::cpu {
HWY_EXPORT(MatmulDecode);
HWY_EXPORT(MatmulPrefill);
HWY_EXPORT(MatmulShuffledDecode);
HWY_EXPORT(ShuffledDecodeInPlace);
HWY_EXPORT(MatmulTransposedDecode);
HWY_EXPORT(VectorLanes);

using matmul_detail::WeightType;

namespace {

WeightType weight_type_of(const Tensor& w) {
  switch (w.dtype()) {
    case DType::f32:
      return WeightType::f32;
    case DType::f16:
      return WeightType::f16;
    case DType::bf16:
      return WeightType::bf16;
    default:
      fail("matmul.cpu.hwy: weight dtype {} not supported", dtype_name(w.dtype()));
  }
}

// Up to how many rows of x the small-batch path runs (REFIT_SMALL_BATCH_ROWS overrides it
// for every type, for measuring; 0 turns it off). Every path gives the same bits. bf16
// widens to f32 with a shift, so converting in registers for every 4-row chunk of x still
// beats the prefill path's converted block at 40-64 rows (+7-16%, K 768-5632, Zen 2);
// f16's vcvtph2ps costs as much as a quarter of the FMA rate there, and past 32 rows
// the converted block wins.
int64_t small_batch_max_rows(WeightType wt) {
  static const int64_t forced = [] {
    const char* v = std::getenv("REFIT_SMALL_BATCH_ROWS");
    return v && *v ? std::atoll(v) : int64_t{-1};
  }();
  if (forced >= 0) return forced;
  return wt == WeightType::bf16 ? 64 : 32;
}

// set_f16_prefill_in_registers's setting: -1 none (REFIT_F16_PREFILL, else the CPU's own).
std::atomic<int> forced_f16_prefill{-1};

// The prefill path's per-thread f32 weight block; grows, never shrinks.
float* thread_block_buffer(int64_t floats) {
  thread_local hwy::AlignedFreeUniquePtr<float[]> buf;
  thread_local int64_t capacity = 0;
  if (capacity < floats) {
    buf = hwy::AllocateAligned<float>(static_cast<size_t>(floats));
    if (!buf) fail("matmul: cannot allocate a {}-float weight block", floats);
    capacity = floats;
  }
  return buf.get();
}

}  // namespace

bool f16_prefill_in_registers() {
  const int forced = forced_f16_prefill.load(std::memory_order_relaxed);
  if (forced >= 0) return forced == 1;
  static const bool chosen = [] {
    const char* v = std::getenv("REFIT_F16_PREFILL");
    const std::string mode = v ? v : "";
    if (mode == "registers") return true;
    if (mode == "block") return false;
    if (!mode.empty())
      fail("REFIT_F16_PREFILL='{}': expected 'registers' or 'block' (unset: the CPU's choice)",
           mode);
    return cpu_converts_f16_at_fma_rate();
  }();
  return chosen;
}

void set_f16_prefill_in_registers(std::optional<bool> in_registers) {
  forced_f16_prefill.store(in_registers ? int{*in_registers} : -1, std::memory_order_relaxed);
}

void matmul_hwy(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  init_cpu_isa();
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const WeightType type = weight_type_of(w);
  const int wt = static_cast<int>(type);
  const float* xp = x.data<const float>();
  const void* wp = w.raw_data();
  const float* bp = bias.defined() ? bias.data<const float>() : nullptr;
  float* op = out.data<float>();
  const int64_t ldx = x.stride(0), ldw = w.stride(0), ldo = out.stride(0);
  if (M == 0 || N == 0) return;
  // Split N in whole blocks so tiles stay full; each thread streams its own rows of w.
  const int64_t blocks = (N + matmul_detail::kBlockRows - 1) / matmul_detail::kBlockRows;
  // Decode and small batches convert the weights in registers (DecodeImpl picks which).
  const bool in_registers =
      M <= std::max(matmul_detail::kDecodeMaxRows, small_batch_max_rows(type));
  const bool widen = type == WeightType::f16 && f16_prefill_in_registers();
  parallel_for(blocks, [&](int64_t b0, int64_t b1, int) {
    const int64_t n0 = b0 * matmul_detail::kBlockRows;
    const int64_t n1 = std::min(N, b1 * matmul_detail::kBlockRows);
    if (in_registers) {
      HWY_DYNAMIC_DISPATCH(MatmulDecode)(wt, xp, ldx, M, wp, ldw, n0, n1, K, bp, op, ldo);
    } else {
      float* buf =
          widen ? nullptr
                : thread_block_buffer(matmul_detail::kBlockRows * matmul_detail::block_stride(K));
      HWY_DYNAMIC_DISPATCH(MatmulPrefill)
      (wt, xp, ldx, M, wp, ldw, n0, n1, K, bp, op, ldo, widen, buf);
    }
  });
}

bool matmul_shuffled_decode_hwy(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  init_cpu_isa();
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  if (M > matmul_detail::kDecodeMaxRows || N % 16 != 0 || K % 32 != 0 ||
      !HWY_DYNAMIC_DISPATCH(ShuffledDecodeInPlace)())
    return false;
  if (M == 0 || N == 0) return true;
  const int wt = static_cast<int>(weight_type_of(w));
  const float* xp = x.data<const float>();
  const float* bp = bias.defined() ? bias.data<const float>() : nullptr;
  float* op = out.data<float>();
  const int64_t ldx = x.stride(0), ldo = out.stride(0), n_tiles = N / 16;
  const void* tiles = w.raw_data();
  parallel_for(n_tiles, [&](int64_t t0, int64_t t1, int) {
    HWY_DYNAMIC_DISPATCH(MatmulShuffledDecode)
    (wt, xp, ldx, M, tiles, t0, t1, n_tiles, K, bp, op, ldo);
  });
  return true;
}

bool matmul_transposed_decode_hwy(const Tensor& x, const Tensor& w, const Tensor& bias,
                                  Tensor& out) {
  init_cpu_isa();
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  if (M > matmul_detail::kDecodeMaxRows || w.stride(0) != 1) return false;
  if (M == 0 || N == 0) return true;
  const int wt = static_cast<int>(weight_type_of(w));
  const int64_t L = static_cast<int64_t>(HWY_DYNAMIC_DISPATCH(VectorLanes)());
  // Column slices of `width` columns per unit of work: long enough that each storage row
  // is read in runs of several cache lines, short enough that both threads get several
  // and that the accumulators (M x L x width floats) stay within 32 KiB of L1.
  const int64_t most = std::max<int64_t>(L, 32 * 1024 / 4 / (M * L) / L * L);
  const int64_t width =
      std::clamp<int64_t>(N / (4 * num_threads()) / L * L, std::min<int64_t>(4 * L, most), most);
  const float* xp = x.data<const float>();
  const float* bp = bias.defined() ? bias.data<const float>() : nullptr;
  float* op = out.data<float>();
  const void* wp = w.raw_data();
  const int64_t ldx = x.stride(0), ldk = w.stride(1), ldo = out.stride(0);
  parallel_for((N + width - 1) / width, [&](int64_t s0, int64_t s1, int) {
    thread_local std::vector<float> acc;
    if (acc.size() < static_cast<size_t>(M * L * width))
      acc.resize(static_cast<size_t>(M * L * width));
    for (int64_t s = s0; s < s1; ++s) HWY_DYNAMIC_DISPATCH(MatmulTransposedDecode)
    (wt, xp, ldx, M, wp, ldk, s * width, std::min(N, (s + 1) * width), K, bp, op, ldo, acc.data());
  });
  return true;
}

}  // namespace refit::cpu
#endif  // HWY_ONCE
