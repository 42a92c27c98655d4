// Highway SIMD kernels for matmul with quantized weights (FP8 e4m3fn, MXFP4, Q8_0; plain
// and shuffled_16x16 code layouts), f32 activations (or W8A8 e4m3 activations, decoded
// once per call). Registered above the scalar kernels of matmul_quantized_cpu.cpp, which
// stay as the fallback for shapes these do not take (see the constraints below).
//
// Decode (M <= kDecodeMaxRows; f4 kDecodeMaxRowsF4): every weight vector is decoded in
// registers straight from the code bytes (the codes stream from memory once per call, never
// as an f32 copy):
//   i8   sign-extend to i32, convert;
//   f8   sign-extend to i32, shift left by 20 and keep the sign and the 7 magnitude bits:
//        the f32 whose value is code * 2^-120 exactly (subnormal codes become denormal
//        floats, which assumes the FTZ/DAZ flags are off, as nothing in refit sets them;
//        the exhaustive-code test would catch it); NaN codes (0x7F, 0xFF) are blended in.
//        The 2^120 is folded into the scales (exact while scale * 2^120 stays finite; a
//        call with a larger scale takes the prefill path with unfolded scales);
//   f4   a 16-lane table lookup on AVX-512; on AVX2 the products themselves, looked up
//        by vpshufb in bf16 byte tables per scale exponent (F4Products32); elsewhere
//        rebuilt from the bits ((mag << 22) + (126 << 23), or mag * 0.5 for the two
//        subnormal codes);
// then multiplied by the group's scale: one rounding of the exact code * scale, which is
// the value the scalar dequantize gives (the AVX2 f4 tables hold exactly that product).
// Packed f4 bytes hold elements (2i, 2i+1) in their low and high nibbles; instead of
// interleaving decoded nibbles, the activations are permuted once per call into the order
// the decode leaves the values in (F4Source: on AVX2 its own order of each 32; elsewhere
// each chunk of L bytes reads x[2i] for its low nibbles, then x[2i+1] for its high ones).
// Scales are converted a tile at a time (e8m0 by bit operations); the AVX2 f4 decode reads
// the e8m0 bytes as they are, and plain f16 scales too (kF16InPlace).
// While a tile is multiplied, the next tile's codes and scales are prefetched (see
// PrefetchAhead): without it a 16-row tile's short row streams leave DRAM idle and decode
// ran at ~60% of the rate it reaches with it.
//
// Prefill (more rows): a tile of 16 weight rows is dequantized to f32 (f4 on AVX2: to bf16,
// which holds its products exactly) with the same decode (f4 in the same permuted order) and
// multiplied by the f16/bf16 kernels (cpu::matmul_hwy), so its products are the decode
// path's.
//
// Reduction order (batch invariance, issue 8): each output element out[m, n] is one
// vector accumulator running over k = 0, L, 2L, ... (f4: the permuted order) by fused
// multiply-adds, then a horizontal sum (SumOfLanes), then the k tail in scalar fused
// multiply-adds in order, then + bias. That is DotTile's order in matmul_cpu.cpp, with the
// same weight values, so the result of a row does not depend on M, on which other rows
// share its batch, or on the decode/prefill path: bitwise. Results differ across ISAs
// (L differs) and agree with dequantize-then-matmul to ~1e-6 relative.
// Highway needs foreach_target.h right after HWY_TARGET_INCLUDE: not reordered.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/matmul_quantized_hwy.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/float_formats.h"

#ifndef REFIT_MATMUL_QUANTIZED_HWY_ONCE
#define REFIT_MATMUL_QUANTIZED_HWY_ONCE
namespace refit::cpu::quant_hwy {
enum class Code : int { f8 = 0, f4 = 1, i8 = 2 };
enum class ScaleType : int { f32 = 0, f16 = 1, e8m0 = 2 };
constexpr int64_t kTileRows = 16;  // a work unit: the rows of one shuffled tile
// Up to this many rows of x take the decode kernels (four rows a pass; each pass decodes
// the tile again, from cache), more the prefill path. `quant_matmul_bench` (2 threads, Zen 2,
// GFLOP/s, prefill path -> decode kernels): Q8_0 at 5 rows 43 -> 86, 8 67 -> 99, 16 84 -> 103;
// MXFP4 (K 2880, N 5760; its prefill tiles bf16) at 5 rows 61 -> 63, 6 71 -> 85, 7 78-81 ->
// 86, 8 90 -> 84-89, 16 117 -> 86.
constexpr int64_t kDecodeMaxRows = 16;
constexpr int64_t kDecodeMaxRowsF4 = 7;
constexpr float kF8Fold = 0x1p120f;

// One call's operands, as the dispatched functions read them.
struct Args {
  Code code;
  bool shuffled;   // codes in 16-row x 32-byte tiles, each stored [2][16][16]
  const float* x;  // f32 [M, K] activations (f4: permuted, see PermuteF4Activations)
  int64_t ldx, M, K, N;
  const uint8_t* codes;  // [N, row_bytes]
  int64_t row_bytes;
  const void* scales;  // [N, S]; tiled (tile by tile) when tiled_scales
  ScaleType scale_type;
  bool tiled_scales;
  int64_t S, group, groups_per_tile;  // groups_per_tile: scale columns per 32-byte tile
  bool fold_f8;                       // f8 scales carry kF8Fold, codes decode to code / kF8Fold
  const float* bias;
  float* out;
  int64_t ldo;
};

inline float e8m0_value(uint8_t v) {
  static const auto table = [] {
    struct T {
      float v[256];
    } t;
    for (int i = 0; i < 256; ++i) t.v[i] = e8m0_to_f32(static_cast<uint8_t>(i));
    return t;
  }();
  return table.v[v];
}

// For every e8m0 exponent e, the 16 products fl(v * 2^(e - 127)) of the e2m1 values v, as
// bf16 split into a low-byte and a high-byte vpshufb table (the AVX2 f4 decode). bf16 holds
// each product exactly: v has at most two significant bits, the smallest product is the
// subnormal 2^-128, and inf and NaN keep their bits. Code 8 (-0) is +0, as a decode through
// integers gives: a zero product either way, and a sum that starts at +0 cannot become -0
// in round to nearest, so every sum keeps its bits.
struct F4ProductBytes {
  alignas(16) uint8_t lo[256][16];
  alignas(16) uint8_t hi[256][16];
};

inline const F4ProductBytes& f4_product_bytes() {
  static const F4ProductBytes tables = [] {
    F4ProductBytes t;
    for (int e = 0; e < 256; ++e)
      for (int n = 0; n < 16; ++n) {
        const float v = f4_e2m1_to_f32(static_cast<uint8_t>(n));
        const float w = (v == 0.0f ? 0.0f : v) * e8m0_to_f32(static_cast<uint8_t>(e));
        uint32_t bits;
        std::memcpy(&bits, &w, 4);
        if ((bits & 0xFFFFu) != 0) std::abort();  // not exact in bf16: cannot happen
        t.lo[e][n] = static_cast<uint8_t>(bits >> 16);
        t.hi[e][n] = static_cast<uint8_t>(bits >> 24);
      }
    return t;
  }();
  return tables;
}
}  // namespace refit::cpu::quant_hwy
#endif

HWY_BEFORE_NAMESPACE();
namespace refit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using quant_hwy::Args;
using quant_hwy::Code;
using quant_hwy::ScaleType;

using DF = hn::ScalableTag<float>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
using VF = hn::Vec<DF>;
using VU = hn::Vec<DU>;

HWY_INLINE int64_t LanesF() { return static_cast<int64_t>(hn::Lanes(DF())); }

// Byte b of row r of the tile starting at `tile` (= codes + first_row * row_bytes, also
// true of shuffled tiles: a tile holds 16 rows' bytes). A vector of L <= 16 bytes starting
// at a multiple of L never crosses a 16-byte piece of a shuffled tile.
template <bool Shuffled>
HWY_INLINE const uint8_t* CodeAt(const uint8_t* tile, int64_t row_bytes, int64_t r, int64_t b) {
  if constexpr (Shuffled)
    return tile + (b >> 5) * 512 + ((b >> 4) & 1) * 256 + r * 16 + (b & 15);
  else
    return tile + r * row_bytes + b;
}

// Decode reads a 16-row tile as NR-row streams of row_bytes each, too short for the
// hardware prefetcher to ramp up: each step of the k loop also requests a cache line
// of the next tile (the same fraction of it as of this one), so DRAM is kept busy. Into
// L2 (locality 2): a tile is up to ~90 KiB, more than L1 holds beside the current one.
HWY_INLINE void PrefetchAhead(const uint8_t* p) { __builtin_prefetch(p, 0, 2); }

// e4m3fn codes (sign-extended bytes) to f32 code * 2^-120, exact; with kNan, NaN for 0x7F
// and 0xFF (without, those two would read as +-480: callers scan a tile for them first).
template <bool kNan>
HWY_INLINE VF F8ToF32Folded(hn::Vec<DI> b) {
  const DF df;
  const DI di;
  const VF v = hn::BitCast(
      df, hn::And(hn::ShiftLeft<20>(b), hn::Set(di, static_cast<int32_t>(0x87F00000u))));
  if constexpr (!kNan) return v;
  const auto is_nan = hn::RebindMask(df, hn::Eq(hn::And(b, hn::Set(di, 0x7F)), hn::Set(di, 0x7F)));
  return hn::IfThenElse(is_nan, hn::Set(df, NAN), v);
}

// Whether any of `n` e4m3 code bytes is a NaN (0x7F or 0xFF): one pass over a tile, in
// full-width byte vectors, so that the decode loop need not test every code.
HWY_INLINE bool HasNanCodes(const uint8_t* p, int64_t n) {
  const hn::ScalableTag<uint8_t> d8;
  const int64_t L8 = static_cast<int64_t>(hn::Lanes(d8));
  auto top = hn::Zero(d8);
  const auto mask = hn::Set(d8, uint8_t{0x7F});
  int64_t i = 0;
  for (; i + L8 <= n; i += L8) top = hn::Max(top, hn::And(hn::LoadU(d8, p + i), mask));
  for (; i < n; ++i)
    if ((p[i] & 0x7F) == 0x7F) return true;
  return !hn::AllFalse(d8, hn::Eq(top, mask));
}

// e2m1 nibbles (0..15 per lane) to f32, exact.
HWY_INLINE VF F4ToF32(VU nib) {
  const DF df;
  const DU du;
  const DI di;
  if constexpr (hn::MaxLanes(DF()) == 16) {
    HWY_ALIGN static constexpr float kValues[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,
                                                    4.0f,  6.0f,  -0.0f, -0.5f, -1.0f, -1.5f,
                                                    -2.0f, -3.0f, -4.0f, -6.0f};
    return hn::TableLookupLanes(hn::Load(df, kValues),
                                hn::IndicesFromVec(df, hn::BitCast(di, nib)));
  } else {
    const VU mag = hn::And(nib, hn::Set(du, 7u));
    const VU sign = hn::ShiftLeft<28>(hn::And(nib, hn::Set(du, 8u)));
    const VF normal = hn::BitCast(df, hn::Add(hn::ShiftLeft<22>(mag), hn::Set(du, 126u << 23)));
    const auto magi = hn::BitCast(di, mag);
    const VF sub = hn::Mul(hn::ConvertTo(df, magi), hn::Set(df, 0.5f));
    const VF v = hn::IfThenElse(hn::RebindMask(df, hn::Lt(magi, hn::Set(di, 2))), sub, normal);
    return hn::Or(v, hn::BitCast(df, sign));
  }
}

// The f4 kernels read activations permuted once per call, in chunks of F4Chunk() values:
// position j of a chunk reads x[chunk + F4Source(j)], the element whose weight the decode
// below puts in that lane.
#if HWY_TARGET == HWY_AVX2
// AVX2: a group's 32 codes (16 packed bytes) as f32 products fl(v * s), straight from the
// bf16 byte tables of the group's scale exponent (f4_product_bytes): the bytes broadcast
// to both 128-bit lanes, shifted right by 0 in the low lane and 4 in the high one, give the
// 32 nibbles as indices; vpshufb looks up each product's two bytes, and interleaving them
// and placing the words in the top half of each lane gives the exact f32s. Per 32 values
// 10 single-uop integer instructions and no multiply: the decode through integers (vpshufb
// to 2v, sign-extend, convert, times s / 2) took 20; `quant_matmul_bench` (K 2880, N 720,
// in cache, one Zen 2 core) read 3.8 GB/s with it, 7.1 with this.
// Lane l of v[q] holds element 16 (q / 2) + 4 (l % 4) + 2 (q % 2) + l / 4 of the group.
HWY_INLINE int64_t F4Chunk() { return 32; }
HWY_INLINE int64_t F4Source(int64_t j) {
  const int64_t q = j / 8, l = j % 8;
  return 16 * (q >> 1) + 4 * (l & 3) + 2 * (q & 1) + (l >> 2);
}

// The group's 32 products as bf16 words: w[0] holds the low nibbles of bytes 0-7 (lane 0)
// and their high nibbles (lane 1), w[1] the same of bytes 8-15.
HWY_INLINE void F4ProductWords(const quant_hwy::F4ProductBytes& t, const uint8_t* p, uint32_t e,
                               __m256i w[2]) {
  const __m256i b =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i idx = _mm256_and_si256(
      _mm256_srlv_epi32(b, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0F));
  const __m256i lo = _mm256_shuffle_epi8(
      _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t.lo[e]))), idx);
  const __m256i hi = _mm256_shuffle_epi8(
      _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t.hi[e]))), idx);
  w[0] = _mm256_unpacklo_epi8(lo, hi);
  w[1] = _mm256_unpackhi_epi8(lo, hi);
}

HWY_INLINE void F4Products32(const quant_hwy::F4ProductBytes& t, const uint8_t* p, uint32_t e,
                             VF v[4]) {
  __m256i w[2];
  F4ProductWords(t, p, e, w);
  const __m256i w0 = w[0], w1 = w[1];
  const __m256i top = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  v[0] = VF{_mm256_castsi256_ps(_mm256_slli_epi32(w0, 16))};
  v[1] = VF{_mm256_castsi256_ps(_mm256_and_si256(w0, top))};
  v[2] = VF{_mm256_castsi256_ps(_mm256_slli_epi32(w1, 16))};
  v[3] = VF{_mm256_castsi256_ps(_mm256_and_si256(w1, top))};
}

#else
// Elsewhere each chunk of L bytes: x[2i] for its low nibbles, then x[2i + 1] for its high ones.
HWY_INLINE int64_t F4Chunk() { return 2 * LanesF(); }
HWY_INLINE int64_t F4Source(int64_t j) {
  const int64_t L = LanesF();
  return j < L ? 2 * j : 2 * (j - L) + 1;
}
#endif

// table[bytes & 15] per lane, for 16-lane vectors. AVX-512's vpermps reads only the low
// four bits of each index, so there the mask is one instruction saved per 32 weights.
HWY_INLINE VF LookupLowNibble(VF table, VU bytes) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  return VF{_mm512_permutexvar_ps(bytes.raw, table.raw)};
#else
  return hn::TableLookupLanes(
      table, hn::IndicesFromVec(DF(), hn::BitCast(DI(), hn::And(bytes, hn::Set(DU(), 15u)))));
#endif
}

// L codes of an 8-bit scheme at p, unscaled (f8: code * 2^-120, for folded scales).
template <Code C, bool kNan = true>
HWY_INLINE VF Decode8(const uint8_t* p) {
  const DF df;
  const hn::Rebind<int8_t, DF> d8;
  const auto b = hn::PromoteTo(DI(), hn::LoadU(d8, reinterpret_cast<const int8_t*>(p)));
  if constexpr (C == Code::i8)
    return hn::ConvertTo(df, b);
  else
    return F8ToF32Folded<kNan>(b);
}

// One code, matching the scales of `a` (f8: divided by the fold when the scales carry it;
// exact, as code * 2^-120 is never below the smallest denormal).
template <Code C>
HWY_INLINE float DecodeScalar8(const Args& a, uint8_t c) {
  if constexpr (C == Code::i8)
    return static_cast<float>(static_cast<int8_t>(c));
  else
    return a.fold_f8 ? f8_e4m3fn_to_f32(c) * (1.0f / quant_hwy::kF8Fold) : f8_e4m3fn_to_f32(c);
}

// A tile's scale columns put in plain order, plain[r * S + c], from the tiled layout
// [S / g, 16, g] (g scale columns per 32-byte tile): runs of g, no division per element.
template <typename T>
HWY_INLINE void UntileScales(const T* HWY_RESTRICT tiled, int64_t rows, int64_t S, int64_t g,
                             T* HWY_RESTRICT plain) {
  for (int64_t cb = 0; cb < S / g; ++cb)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < g; ++j)
        plain[r * S + cb * g + j] = tiled[(cb * quant_hwy::kTileRows + r) * g + j];
}

// The e8m0 scale bytes of tile rows [0, rows) in plain order, as stored (no conversion):
// in place for plain scales, else untiled into buf (rows * S bytes).
HWY_INLINE const uint8_t* TileE8m0(const Args& a, int64_t n0, int64_t rows, uint8_t* buf) {
  const auto* e8 = static_cast<const uint8_t*>(a.scales) + n0 * a.S;
  if (!a.tiled_scales) return e8;
  UntileScales(e8, rows, a.S, a.groups_per_tile, buf);
  return buf;
}

// The scales of tile rows [0, rows) as f32 in plain order, sc[r * S + c].
void TileScales(const Args& a, int64_t n0, int64_t rows, float* HWY_RESTRICT sc,
                float* HWY_RESTRICT tmp) {
  const DF df;
  const int64_t L = LanesF(), count = rows * a.S;
  // Plain or tiled, the tile's scales are one contiguous run starting at n0 * S.
  float* dst = a.tiled_scales ? tmp : sc;
  switch (a.scale_type) {
    case ScaleType::f32:
      std::memcpy(dst, static_cast<const float*>(a.scales) + n0 * a.S, count * sizeof(float));
      break;
    case ScaleType::f16: {
      const hn::Rebind<hwy::float16_t, DF> dh;
      const auto* src = static_cast<const hwy::float16_t*>(a.scales) + n0 * a.S;
      int64_t i = 0;
      for (; i + L <= count; i += L)
        hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, src + i)), df, dst + i);
      for (; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, src + i, 2);
        dst[i] = f16_to_f32(bits);
      }
      break;
    }
    case ScaleType::e8m0: {  // 2^(v - 127) is the f32 with exponent field v, for v in 1..254
      const DU du;
      const hn::Rebind<uint8_t, DF> d8;
      const auto* src = static_cast<const uint8_t*>(a.scales) + n0 * a.S;
      int64_t i = 0;
      for (; i + L <= count; i += L) {
        const VU v = hn::PromoteTo(du, hn::LoadU(d8, src + i));
        VF f = hn::BitCast(df, hn::ShiftLeft<23>(v));
        f = hn::IfThenElse(hn::RebindMask(df, hn::Eq(v, hn::Zero(du))), hn::Set(df, 0x1p-127f), f);
        f = hn::IfThenElse(hn::RebindMask(df, hn::Eq(v, hn::Set(du, 255u))), hn::Set(df, NAN), f);
        hn::StoreU(f, df, dst + i);
      }
      for (; i < count; ++i) dst[i] = quant_hwy::e8m0_value(src[i]);
      break;
    }
  }
  if (a.fold_f8)
    for (int64_t i = 0; i < count; ++i) dst[i] *= quant_hwy::kF8Fold;
  if (a.tiled_scales) UntileScales(tmp, rows, a.S, a.groups_per_tile, sc);
}

// A tile's scales as the dot kernels read them: f32 in plain order, f[r * S + c]; for f4
// on AVX2 instead the raw e8m0 bytes in plain order, e8m0[r * S + c]; for plain f16 scales
// on AVX2 the stored halves in place, f16[r * S + c], converted as each group starts
// (kF16InPlace).
struct TileScaleRef {
  const float* HWY_RESTRICT f = nullptr;
  const uint8_t* HWY_RESTRICT e8m0 = nullptr;
  const uint16_t* HWY_RESTRICT f16 = nullptr;
};

// Whether the decode kernels read plain f16 scales where they are stored. Converting a
// tile's scales to f32 first (TileScales) took 1000-1200 cycles a 16-row tile on Zen 3
// (rdtsc around the call, weights from DRAM, the scales requested a tile ahead), ~10% of a
// Q8_0 decode at K 2048: a loop of loads and stores with no multiply to overlap. Read as
// each group starts (one vcvtph2ps per row and group) they overlap the multiply: +5-8% in
// an in-process A/B of the two, same bits. AVX-512 keeps the pass until measured there: with
// 16 lanes a group is two steps, so the per-group conversion weighs twice as much.
constexpr bool kF16InPlace = HWY_TARGET == HWY_AVX2;

// Scale i of a tile (i = r * S + c), as a float.
HWY_INLINE float ScaleAt(TileScaleRef sc, int64_t i) {
#if HWY_TARGET == HWY_AVX2
  if (sc.f16) return _cvtsh_ss(sc.f16[i]);
#endif
  return sc.f[i];
}

// Rows [0, MR) of x against tile rows [r0, r0 + NR), 8-bit codes. `group` is a multiple
// of 16 (so of L) or covers K: a vector never spans two scales.
template <Code C, bool Shuffled, int MR, int NR, bool kNan>
HWY_INLINE void DotTile8(const Args& a, const float* HWY_RESTRICT x, const uint8_t* tile,
                         const uint8_t* ahead, int64_t r0, TileScaleRef sc, const float* bias,
                         float* HWY_RESTRICT out) {
  const DF df;
  const int64_t L = LanesF(), K = a.K, kv = K / L * L, S = a.S;
  VF acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = hn::Zero(df);
  for (int64_t g = 0, k0 = 0; k0 < kv; ++g, k0 += a.group) {
    const int64_t k1 = std::min(kv, k0 + a.group);
    VF sv[NR];
    for (int j = 0; j < NR; ++j) sv[j] = hn::Set(df, ScaleAt(sc, (r0 + j) * S + g));
    for (int64_t k = k0; k < k1; k += L) {
      PrefetchAhead(ahead + r0 * a.row_bytes + k * NR);
      VF wv[NR];
      for (int j = 0; j < NR; ++j)
        wv[j] = hn::Mul(Decode8<C, kNan>(CodeAt<Shuffled>(tile, a.row_bytes, r0 + j, k)), sv[j]);
      for (int i = 0; i < MR; ++i) {
        const VF xv = hn::LoadU(df, x + i * a.ldx + k);
        for (int j = 0; j < NR; ++j) acc[i][j] = hn::MulAdd(xv, wv[j], acc[i][j]);
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      float s = hn::GetLane(hn::SumOfLanes(df, acc[i][j]));
      for (int64_t k = kv; k < K; ++k) {
        const float w = DecodeScalar8<C>(a, *CodeAt<Shuffled>(tile, a.row_bytes, r0 + j, k)) *
                        ScaleAt(sc, (r0 + j) * S + k / a.group);
        s = std::fma(x[i * a.ldx + k], w, s);
      }
      out[i * a.ldo + j] = bias ? s + bias[j] : s;
    }
}

// The same for packed f4 codes: group 32 (16 bytes), K % 32 == 0, x permuted, e8m0 scales
// (the only scales the f4 rows take).
template <bool Shuffled, int MR, int NR>
HWY_INLINE void DotTile4(const Args& a, const float* HWY_RESTRICT x, const uint8_t* tile,
                         const uint8_t* ahead, int64_t r0, TileScaleRef sc, const float* bias,
                         float* HWY_RESTRICT out) {
  const DF df;
  const DU du;
  const hn::Rebind<uint8_t, DF> d8;
  const int64_t L = LanesF(), S = a.S;
  VF acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = hn::Zero(df);
#if HWY_TARGET == HWY_AVX2
  // Fetched once: its first-use guard inside the loop kept the accumulators in memory.
  const quant_hwy::F4ProductBytes& products = quant_hwy::f4_product_bytes();
#endif
  for (int64_t g = 0; g < S; ++g) {
#if HWY_TARGET == HWY_AVX2
    // The whole group at once, row by row (its four weight vectors, then every x row's four
    // products into its one accumulator, in F4Products32's order).
    {
      const int64_t b = g * 16;
      PrefetchAhead(ahead + r0 * a.row_bytes + b * NR);
      PrefetchAhead(ahead + r0 * a.row_bytes + (b + 8) * NR);
      for (int j = 0; j < NR; ++j) {
        VF w[4];
        F4Products32(products, CodeAt<Shuffled>(tile, a.row_bytes, r0 + j, b),
                     sc.e8m0[(r0 + j) * S + g], w);
        for (int i = 0; i < MR; ++i)
          for (int q = 0; q < 4; ++q)
            acc[i][j] = hn::MulAdd(hn::LoadU(df, x + i * a.ldx + 2 * b + q * L), w[q], acc[i][j]);
      }
      continue;
    }
#endif
    // AVX-512: the 16 e2m1 values times the scale, fl(v * s) each, the very products a
    // multiply after the lookup would give. Elsewhere the scale itself.
    VF sv[NR];
    for (int j = 0; j < NR; ++j) {
      sv[j] = hn::Set(df, sc.f[(r0 + j) * S + g]);
      if constexpr (hn::MaxLanes(DF()) == 16) sv[j] = hn::Mul(F4ToF32(hn::Iota(du, 0)), sv[j]);
    }
    for (int64_t b = g * 16; b < g * 16 + 16; b += L) {
      PrefetchAhead(ahead + r0 * a.row_bytes + b * NR);
      VF lo[NR], hi[NR];
      for (int j = 0; j < NR; ++j) {
        const VU bytes =
            hn::PromoteTo(du, hn::LoadU(d8, CodeAt<Shuffled>(tile, a.row_bytes, r0 + j, b)));
        if constexpr (hn::MaxLanes(DF()) == 16) {
          // sv holds the group's 16 values already scaled: the lookup is code * scale.
          lo[j] = LookupLowNibble(sv[j], bytes);
          hi[j] = hn::TableLookupLanes(
              sv[j], hn::IndicesFromVec(df, hn::BitCast(DI(), hn::ShiftRight<4>(bytes))));
        } else {
          lo[j] = hn::Mul(F4ToF32(hn::And(bytes, hn::Set(du, 15u))), sv[j]);
          hi[j] = hn::Mul(F4ToF32(hn::ShiftRight<4>(bytes)), sv[j]);
        }
      }
      for (int i = 0; i < MR; ++i) {
        const VF xl = hn::LoadU(df, x + i * a.ldx + 2 * b);
        const VF xh = hn::LoadU(df, x + i * a.ldx + 2 * b + L);
        for (int j = 0; j < NR; ++j) {
          acc[i][j] = hn::MulAdd(xl, lo[j], acc[i][j]);
          acc[i][j] = hn::MulAdd(xh, hi[j], acc[i][j]);
        }
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      const float s = hn::GetLane(hn::SumOfLanes(df, acc[i][j]));
      out[i * a.ldo + j] = bias ? s + bias[j] : s;
    }
}

template <Code C, bool Shuffled, int MR, int NR, bool kNan>
HWY_INLINE void DotTile(const Args& a, const float* x, const uint8_t* tile, const uint8_t* ahead,
                        int64_t r0, TileScaleRef sc, const float* bias, float* out) {
  if constexpr (C == Code::f4)
    DotTile4<Shuffled, MR, NR>(a, x, tile, ahead, r0, sc, bias, out);
  else
    DotTile8<C, Shuffled, MR, NR, kNan>(a, x, tile, ahead, r0, sc, bias, out);
}

// Rows [0, MR) of x against tile rows [0, rows): NR-row groups, then single rows.
template <Code C, bool Shuffled, int MR, int NR, bool kNan>
HWY_INLINE void TileRowsImpl(const Args& a, const float* x, const uint8_t* tile,
                             const uint8_t* ahead, int64_t rows, TileScaleRef sc, const float* bias,
                             float* out) {
  int64_t r = 0;
  for (; r + NR <= rows; r += NR)
    DotTile<C, Shuffled, MR, NR, kNan>(a, x, tile, ahead, r, sc, bias ? bias + r : nullptr,
                                       out + r);
  for (; r < rows; ++r)
    DotTile<C, Shuffled, MR, 1, kNan>(a, x, tile, ahead, r, sc, bias ? bias + r : nullptr, out + r);
}

// f8 tiles without NaN codes (all of them, in practice) skip the per-code NaN test; the
// values, and so the results, are the same either way.
template <Code C, bool Shuffled, int MR, int NR>
HWY_INLINE void TileRows(const Args& a, const float* x, const uint8_t* tile, const uint8_t* ahead,
                         int64_t rows, TileScaleRef sc, const float* bias, float* out) {
  if (C == Code::f8 && !HasNanCodes(tile, rows * a.row_bytes))
    TileRowsImpl<C, Shuffled, MR, NR, false>(a, x, tile, ahead, rows, sc, bias, out);
  else
    TileRowsImpl<C, Shuffled, MR, NR, true>(a, x, tile, ahead, rows, sc, bias, out);
}

template <Code C, bool Shuffled>
void DecodeTiles(const Args& a, int64_t t0, int64_t t1, float* scratch) {
  float* sc = scratch;
  float* tmp = scratch + quant_hwy::kTileRows * a.S;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n0 = t * quant_hwy::kTileRows, rows = std::min(quant_hwy::kTileRows, a.N - n0);
    // The next tile's scales (one contiguous run, a few KiB) are requested now, so that
    // converting them does not wait on DRAM.
    if (n0 + 2 * quant_hwy::kTileRows <= a.N) {
      const int64_t esize = a.scale_type == ScaleType::f32   ? 4
                            : a.scale_type == ScaleType::f16 ? 2
                                                             : 1;
      const auto* next =
          static_cast<const uint8_t*>(a.scales) + (n0 + quant_hwy::kTileRows) * a.S * esize;
      for (int64_t b = 0; b < quant_hwy::kTileRows * a.S * esize; b += 64) PrefetchAhead(next + b);
    }
    TileScaleRef scales{sc};
    if (C == Code::f4 && HWY_TARGET == HWY_AVX2) {
      // The AVX2 f4 decode indexes its product tables by the raw e8m0 bytes: no conversion.
      scales.e8m0 = TileE8m0(a, n0, rows, reinterpret_cast<uint8_t*>(tmp));
    } else if (C != Code::f4 && kF16InPlace && a.scale_type == ScaleType::f16 && !a.tiled_scales &&
               !a.fold_f8) {
      scales.f16 = static_cast<const uint16_t*>(a.scales) + n0 * a.S;
    } else {
      TileScales(a, n0, rows, sc, tmp);
    }
    const uint8_t* tile = a.codes + n0 * a.row_bytes;
    // The next tile's bytes are fetched while this one is multiplied (the last tile
    // re-fetches itself, which costs nothing).
    const uint8_t* ahead =
        n0 + 2 * quant_hwy::kTileRows <= a.N ? tile + quant_hwy::kTileRows * a.row_bytes : tile;
    const float* bias = a.bias ? a.bias + n0 : nullptr;
    // Weight decode is shared by the MR rows of x; fewer rows, more weight rows at once.
    // More than four rows of x go four at a time, each pass decoding the tile again from
    // cache.
    for (int64_t m0 = 0; m0 < a.M; m0 += 4) {
      const float* x = a.x + m0 * a.ldx;
      float* out = a.out + m0 * a.ldo + n0;
      switch (std::min<int64_t>(4, a.M - m0)) {
        case 1:
          TileRows<C, Shuffled, 1, 4>(a, x, tile, ahead, rows, scales, bias, out);
          break;
        case 2:
          TileRows<C, Shuffled, 2, 4>(a, x, tile, ahead, rows, scales, bias, out);
          break;
        case 3:
          TileRows<C, Shuffled, 3, 2>(a, x, tile, ahead, rows, scales, bias, out);
          break;
        default:
          TileRows<C, Shuffled, 4, 2>(a, x, tile, ahead, rows, scales, bias, out);
          break;
      }
    }
  }
}

// Whether f4 tiles are dequantized to bf16 (F4TileIsBf16) rather than f32: on AVX2, where
// the bf16 small-batch kernel runs ~1.5x the f32 one (`matmul_bench`, K 2880 x N 5760, 16
// rows: bf16 148 GFLOP/s, f32 97). Every f4 product fl(v * s) is exact in bf16 (see
// f4_product_bytes), and the float kernels widen bf16 exactly and sum in the f32 kernel's
// order: the same bits either way.
HWY_INLINE bool F4TileIsBf16() { return HWY_TARGET == HWY_AVX2; }

#if HWY_TARGET == HWY_AVX2
// The group's 32 products stored as bf16 in F4Products32's order (its v[0..3] one after
// another): per 128-bit lane the even words, then the odd ones, then the two lanes' halves
// interleaved by vpermq.
HWY_INLINE void StoreF4ProductsBf16(const quant_hwy::F4ProductBytes& t, const uint8_t* p,
                                    uint32_t e, uint16_t* dst) {
  __m256i w[2];
  F4ProductWords(t, p, e, w);
  const __m256i evens_odds = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                              0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  for (int h = 0; h < 2; ++h) {
    const __m256i sorted = _mm256_shuffle_epi8(w[h], evens_odds);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16 * h),
                        _mm256_permute4x64_epi64(sorted, 0xD8));
  }
}

// v[0..3] (f32 values exact in bf16) stored as 32 bf16, in the same order.
HWY_INLINE void StoreBf16x32(const VF v[4], uint16_t* dst) {
  for (int q = 0; q < 4; q += 2) {
    const __m256i a = _mm256_srli_epi32(_mm256_castps_si256(v[q].raw), 16),
                  b = _mm256_srli_epi32(_mm256_castps_si256(v[q + 1].raw), 16);
    // packus interleaves the 128-bit lanes (a0-3 b0-3 | a4-7 b4-7); vpermq puts a before b.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 8 * q), packed);
  }
}
#endif

// Tile t's rows dequantized, buf [rows, ldb]: f32, or bf16 for f4 where F4TileIsBf16; f4 in
// the permuted order. Groups that do not fit the decode kernels (`fast` false) take a scale
// per element.
template <Code C, bool Shuffled>
void DequantizeTileImpl(const Args& a, bool fast, int64_t t, void* out_buf, int64_t ldb,
                        float* scratch) {
  float* buf = static_cast<float*>(out_buf);
  const DF df;
  const DU du;
  const hn::Rebind<uint8_t, DF> d8;
  const int64_t L = LanesF(), K = a.K, kv = K / L * L, S = a.S, group = a.group;
  const int64_t n0 = t * quant_hwy::kTileRows, rows = std::min(quant_hwy::kTileRows, a.N - n0);
  float* sc = scratch;
  TileScales(a, n0, rows, sc, scratch + quant_hwy::kTileRows * S);
  const uint8_t* tile = a.codes + n0 * a.row_bytes;
#if HWY_TARGET == HWY_AVX2
  // f4: the decode kernel's products (F4Products32) by the raw exponents (the second half of
  // scratch is free once TileScales returns).
  const quant_hwy::F4ProductBytes* products =
      C == Code::f4 ? &quant_hwy::f4_product_bytes() : nullptr;
  const uint8_t* e8 =
      C == Code::f4
          ? TileE8m0(a, n0, rows, reinterpret_cast<uint8_t*>(scratch + quant_hwy::kTileRows * S))
          : nullptr;
#endif
  for (int64_t r = 0; r < rows; ++r) {
    float* dst = buf + r * ldb;
    const float* rs = sc + r * S;
    if constexpr (C == Code::f4) {
#if HWY_TARGET == HWY_AVX2
      // Groups of 32 as the decode kernel has them; other groups take the values (exponent
      // 127: scale 1) times each element's scale.
      uint16_t* dst16 = static_cast<uint16_t*>(out_buf) + r * ldb;
      for (int64_t b = 0; b < a.row_bytes; b += 16) {
        if (fast) {
          StoreF4ProductsBf16(*products, CodeAt<Shuffled>(tile, a.row_bytes, r, b),
                              e8[r * S + b / 16], dst16 + 2 * b);
          continue;
        }
        VF v[4];
        F4Products32(*products, CodeAt<Shuffled>(tile, a.row_bytes, r, b), 127, v);
        HWY_ALIGN float e[32];
        for (int q = 0; q < 4; ++q) hn::Store(v[q], df, e + q * L);
        for (int64_t j = 0; j < 32; ++j) e[j] *= rs[(2 * b + F4Source(j)) / group];
        for (int q = 0; q < 4; ++q) v[q] = hn::Load(df, e + q * L);
        StoreBf16x32(v, dst16 + 2 * b);
      }
      (void)dst;
      continue;
#endif
      for (int64_t b = 0; b < a.row_bytes; b += L) {
        const VU bytes =
            hn::PromoteTo(du, hn::LoadU(d8, CodeAt<Shuffled>(tile, a.row_bytes, r, b)));
        const VF lo = F4ToF32(hn::And(bytes, hn::Set(du, 15u))),
                 hi = F4ToF32(hn::ShiftRight<4>(bytes));
        if (fast) {
          const VF s = hn::Set(df, rs[b / 16]);
          hn::StoreU(hn::Mul(lo, s), df, dst + 2 * b);
          hn::StoreU(hn::Mul(hi, s), df, dst + 2 * b + L);
        } else {
          hn::StoreU(lo, df, dst + 2 * b);
          hn::StoreU(hi, df, dst + 2 * b + L);
          for (int64_t j = 0; j < 2 * L; ++j) dst[2 * b + j] *= rs[(2 * b + F4Source(j)) / group];
        }
      }
    } else if (fast) {
      // A vector never straddles two groups here (group % 16 == 0, or one group a row), so
      // the scale changes only at group boundaries: found by comparison, not by a division
      // per vector (a 64-bit idiv per 8 codes made this 14% of a Q8_0 prefill on Zen 2).
      VF s = hn::Zero(df);
      for (int64_t k = 0, next = 0, g = 0; k < kv; k += L) {
        if (k >= next) {
          g = k / group;
          next = (g + 1) * group;
          s = hn::Set(df, rs[g]);
        }
        hn::StoreU(hn::Mul(Decode8<C>(CodeAt<Shuffled>(tile, a.row_bytes, r, k)), s), df, dst + k);
      }
      for (int64_t k = kv; k < K; ++k)
        dst[k] = DecodeScalar8<C>(a, *CodeAt<Shuffled>(tile, a.row_bytes, r, k)) * rs[k / group];
    } else {
      for (int64_t k = 0; k < K; ++k)
        dst[k] = DecodeScalar8<C>(a, *CodeAt<Shuffled>(tile, a.row_bytes, r, k)) * rs[k / group];
    }
  }
}

// Exported entry points; `lanes` is checked so that the activation permutation and the
// kernels agree on L even if the ISA cap changed in between (it must not, but cheaply).
int64_t QuantLanes() { return LanesF(); }

void QuantDecodeTiles(const Args& a, int64_t lanes, int64_t t0, int64_t t1, float* scratch) {
  HWY_ASSERT(lanes == LanesF());
  switch (a.code) {
    case Code::f8:
      return a.shuffled ? DecodeTiles<Code::f8, true>(a, t0, t1, scratch)
                        : DecodeTiles<Code::f8, false>(a, t0, t1, scratch);
    case Code::f4:
      return a.shuffled ? DecodeTiles<Code::f4, true>(a, t0, t1, scratch)
                        : DecodeTiles<Code::f4, false>(a, t0, t1, scratch);
    case Code::i8:
      return a.shuffled ? DecodeTiles<Code::i8, true>(a, t0, t1, scratch)
                        : DecodeTiles<Code::i8, false>(a, t0, t1, scratch);
  }
}

bool QuantF4TileIsBf16() { return F4TileIsBf16(); }

void QuantDequantizeTile(const Args& a, bool fast, int64_t lanes, int64_t t, void* buf, int64_t ldb,
                         float* scratch) {
  HWY_ASSERT(lanes == LanesF());
  switch (a.code) {
    case Code::f8:
      return a.shuffled ? DequantizeTileImpl<Code::f8, true>(a, fast, t, buf, ldb, scratch)
                        : DequantizeTileImpl<Code::f8, false>(a, fast, t, buf, ldb, scratch);
    case Code::f4:
      return a.shuffled ? DequantizeTileImpl<Code::f4, true>(a, fast, t, buf, ldb, scratch)
                        : DequantizeTileImpl<Code::f4, false>(a, fast, t, buf, ldb, scratch);
    case Code::i8:
      return a.shuffled ? DequantizeTileImpl<Code::i8, true>(a, fast, t, buf, ldb, scratch)
                        : DequantizeTileImpl<Code::i8, false>(a, fast, t, buf, ldb, scratch);
  }
}

// xp[m, c + j] = x[m, c + F4Source(j)] for each chunk c of F4Chunk() values: the order the
// f4 kernels read packed nibbles in. K % F4Chunk() == 0 (K % 32 == 0 on every target).
void PermuteF4Activations(const float* x, int64_t ldx, int64_t M, int64_t K, float* xp,
                          int64_t lanes) {
  HWY_ASSERT(lanes == LanesF());
  const int64_t chunk = F4Chunk();
  HWY_ASSERT(K % chunk == 0);
  int64_t source[64];
  for (int64_t j = 0; j < chunk; ++j) source[j] = F4Source(j);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < K; c += chunk)
      for (int64_t j = 0; j < chunk; ++j) xp[m * K + c + j] = x[m * ldx + c + source[j]];
}

}  // namespace refit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <fmt/format.h>

#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matmul_quantized_hwy.h"
#include "kernels/cpu/matmul_quantized_rows.h"
#include "kernels/matmul_quantized.h"

namespace refit::cpu {
HWY_EXPORT(QuantLanes);
HWY_EXPORT(QuantDecodeTiles);
HWY_EXPORT(QuantDequantizeTile);
HWY_EXPORT(QuantF4TileIsBf16);
HWY_EXPORT(PermuteF4Activations);

namespace {
using quant_hwy::Code;
using quant_hwy::kTileRows;
using quant_hwy::ScaleType;

template <Code C, bool Shuffled>
void matmul_quantized_hwy(const Tensor& x, const Tensor& x_scale, const Tensor& w,
                          const Tensor& w_scale, int64_t group, const Tensor& bias, Tensor& out) {
  init_cpu_isa();
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  if (M == 0 || N == 0) return;
  const int64_t lanes = HWY_DYNAMIC_DISPATCH(QuantLanes)();
  // Activations as f32 rows: W8A8 codes decoded with their per-token scale (as the
  // reference does), f4 permuted to the kernels' nibble order.
  Tensor xf = x;
  if (x.dtype() == DType::f8_e4m3fn) {
    xf = Tensor::empty({M, K}, DType::f32);
    const uint8_t* xq = static_cast<const uint8_t*>(x.raw_data());
    const float* xs = x_scale.data<const float>();
    float* dst = xf.data<float>();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k)
        dst[m * K + k] = f8_e4m3fn_to_f32(xq[m * x.stride(0) + k]) * xs[m];
  }
  if constexpr (C == Code::f4) {
    Tensor xp = Tensor::empty({M, K}, DType::f32);
    HWY_DYNAMIC_DISPATCH(PermuteF4Activations)
    (xf.data<const float>(), xf.stride(0), M, K, xp.data<float>(), lanes);
    xf = xp;
  }
  quant_hwy::Args a{};
  a.code = C;
  a.shuffled = Shuffled;
  a.x = xf.data<const float>();
  a.ldx = xf.stride(0);
  a.M = M, a.K = K, a.N = N;
  a.codes = static_cast<const uint8_t*>(w.raw_data());
  a.row_bytes = C == Code::f4 ? K / 2 : K;
  a.scales = w_scale.raw_data();
  a.scale_type = w_scale.dtype() == DType::f32   ? ScaleType::f32
                 : w_scale.dtype() == DType::f16 ? ScaleType::f16
                                                 : ScaleType::e8m0;
  a.tiled_scales = w_scale.layout() == Layout::shuffled_16x16;
  a.S = w_scale.size(1);
  a.group = group;
  a.groups_per_tile = a.tiled_scales ? 32 * (C == Code::f4 ? 2 : 1) / group : 1;
  a.bias = bias.defined() ? bias.data<const float>() : nullptr;
  a.out = out.data<float>();
  a.ldo = out.stride(0);
  const int64_t tiles = (N + kTileRows - 1) / kTileRows;
  const size_t scratch_floats = static_cast<size_t>(2 * kTileRows * a.S);
  // f8 codes decode to code * 2^-120 for scales that carry 2^120; checked per call, as
  // it needs every scale * 2^120 finite (it is for any scale below 2^8).
  if constexpr (C == Code::f8) {
    a.fold_f8 = true;
    const float* sp = w_scale.data<const float>();
    for (int64_t i = 0, count = N * a.S; i < count && a.fold_f8; ++i)
      a.fold_f8 = !(std::isfinite(sp[i]) && !std::isfinite(sp[i] * quant_hwy::kF8Fold));
  }
  // The decode kernels need one scale per vector of up to 16 codes (MXFP4: exactly 32),
  // and f8 scales that fold.
  const bool fast =
      C == Code::f4 ? group == 32 : (a.S == 1 || group % 16 == 0) && (C != Code::f8 || a.fold_f8);
  if (M <= (C == Code::f4 ? quant_hwy::kDecodeMaxRowsF4 : quant_hwy::kDecodeMaxRows) && fast) {
    parallel_for(tiles, [&](int64_t t0, int64_t t1, int) {
      std::vector<float> scratch(scratch_floats);
      HWY_DYNAMIC_DISPATCH(QuantDecodeTiles)(a, lanes, t0, t1, scratch.data());
    });
    return;
  }
  // Prefill (and other groups): f32 (f4 on AVX2: bf16) tiles through the float kernel
  // (nested parallel_for runs inline). Same products, same order as the decode kernels.
  const DType tile_type =
      C == Code::f4 && HWY_DYNAMIC_DISPATCH(QuantF4TileIsBf16)() ? DType::bf16 : DType::f32;
  parallel_for(tiles, [&](int64_t t0, int64_t t1, int) {
    std::vector<float> scratch(scratch_floats);
    Tensor wt = Tensor::empty({kTileRows, K}, tile_type);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n0 = t * kTileRows, rows = std::min(kTileRows, N - n0);
      HWY_DYNAMIC_DISPATCH(QuantDequantizeTile)
      (a, fast, lanes, t, wt.raw_data(), K, scratch.data());
      Tensor out_cols = out.narrow(1, n0, rows);
      matmul_hwy(xf, rows == kTileRows ? wt : wt.narrow(0, 0, rows),
                 bias.defined() ? bias.narrow(0, n0, rows) : Tensor(), out_cols);
    }
  });
}

}  // namespace

void register_quantized_matmul_hwy_kernels(KernelRegistry& registry) {
  QuantizedKernelFamily simd;
  simd.name_prefix = "matmul_quantized.cpu.hwy_";
  simd.priority = 20;  // above the scalar kernels (10), which take what these refuse
  simd.f4_needs_k_multiple_of_32 = true;
  simd.constraint_suffix = "; SIMD, batch-invariant";
  simd.f8_plain = kernel_fn<kernels::MatmulQuantizedFn>(&matmul_quantized_hwy<Code::f8, false>);
  simd.f8_shuffled = kernel_fn<kernels::MatmulQuantizedFn>(&matmul_quantized_hwy<Code::f8, true>);
  simd.f4_plain = kernel_fn<kernels::MatmulQuantizedFn>(&matmul_quantized_hwy<Code::f4, false>);
  simd.f4_shuffled = kernel_fn<kernels::MatmulQuantizedFn>(&matmul_quantized_hwy<Code::f4, true>);
  simd.i8_plain = kernel_fn<kernels::MatmulQuantizedFn>(&matmul_quantized_hwy<Code::i8, false>);
  simd.i8_shuffled = kernel_fn<kernels::MatmulQuantizedFn>(&matmul_quantized_hwy<Code::i8, true>);
  register_quantized_family(registry, simd);
}

}  // namespace refit::cpu
#endif  // HWY_ONCE
