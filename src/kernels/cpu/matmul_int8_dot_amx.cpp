// The AMX kernel of the integer-dot W8A8 matmul (definition in matmul_int8_dot.h), for
// batches of 16 activation rows or more (prefill).
//
// One tdpbssd multiplies a 16 x 32 tile of activation codes by a 32 x 16 tile of weight
// codes (signed x signed) into 16 x 16 exact int32 sums: the isum of one block for 256
// (row, column) pairs, 8192 products per instruction. Then, per activation row, the
// definition's float steps run across 16 output columns at once: float(isum) * (xd * dw)
// fused into the accumulator lane b % 16, and at the end the same lane tree. The integer
// sums are exact and the float steps are the definition's, so this kernel's bits are the
// definition's, and the VNNI decode kernel's: which kernel a batch size picks cannot change
// a row's result (batch invariance).
//
// The weight codes are tdpbssd's first operand as stored (row-major, 16 rows x 32 codes per
// block; MXFP4 nibbles are first decoded to 2v by a byte table); the activations, re-laid
// once per call, its second ("VNNI" layout: 4 consecutive codes of 16 rows per 64 bytes).
// Compiled for AMX only inside the pragma region; callers check amx_usable() first.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsics' self-initialised `__Y`
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/matmul_int8_dot.h"

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-int8,avx512f,avx512bw,avx512dq,avx512vl,f16c,fma")
#pragma GCC optimize("fp-contract=off", "no-tree-vectorize")
#include "kernels/cpu/avx512_lanes-inl.h"

namespace refit::cpu::int8dot {
namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace

int64_t amx_scratch_bytes(const Operands& op) {
  // The tile's weight codes as int8 rows [16][K] (MXFP4 decoded, or a partial tile padded),
  // accumulators [16 columns][16 lanes][16 rows] f32, two 16 x 16 int32 result tiles.
  return 16 * op.K + 16 * 16 * 16 * 4 + 2 * 16 * 16 * 4;
}

void weight_scales_f32(Weights kind, const uint8_t* scales, int64_t count, float* out) {
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 mask =
        count - i >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (count - i)) - 1);
    __m512 f;
    if (kind == Weights::q8_0) {
      f = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, scales + 2 * i));
    } else {
      f = avx512::E8m0TimesHalf(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask, scales + i)));
    }
    _mm512_mask_storeu_ps(out + i, mask, f);
  }
}

void prepare_amx_activations(const Operands& op, int64_t Mpad, int8_t* xv, float* xdt) {
  // xv: per 16-row group and block, 8 rows of (16 activation rows x 4 consecutive codes),
  // the layout tdpbssd reads its second operand in; xdt: the scales per group and block,
  // 16 rows each. Rows past M are zeros.
  for (int64_t g = 0; g < Mpad / 16; ++g)
    for (int64_t b = 0; b < op.S; ++b) {
      int8_t* dst = xv + (g * op.S + b) * 512;
      for (int64_t i = 0; i < 16; ++i) {
        const int64_t m = g * 16 + i;
        xdt[(g * op.S + b) * 16 + i] = m < op.M ? op.xd[m * op.ldxd + b] : 0.0f;
        for (int64_t k = 0; k < kBlock; ++k)
          dst[(k / 4) * 64 + i * 4 + k % 4] = m < op.M ? op.xq[m * op.ldxq + b * kBlock + k] : 0;
      }
    }
}

void tile_amx(const Operands& op, const int8_t* xv, const float* xdt, int64_t Mpad, const Tile& t,
              const float* dw_plain, void* scratch) {
  auto* wrows = static_cast<int8_t*>(scratch);               // [16][K]
  auto* acc = reinterpret_cast<float*>(wrows + 16 * op.K);   // [16 n][16 lanes][16 m]
  auto* c = reinterpret_cast<int32_t*>(acc + 16 * 16 * 16);  // [2][16 n][16 m]
  // The weight operand: Q8_0 codes straight from the tile (rows t.row_bytes apart) unless
  // the tile is partial; MXFP4 nibbles to 2v by a byte table, 128 codes per step.
  const int8_t* w = reinterpret_cast<const int8_t*>(t.codes);
  int64_t ldw = t.row_bytes;
  if (op.kind == Weights::mxfp4 || t.rows < 16) {
    for (int64_t n = 0; n < 16; ++n) {
      int8_t* dst = wrows + n * op.K;
      const uint8_t* row = t.codes + n * t.row_bytes;
      if (n >= t.rows || op.kind == Weights::q8_0) {  // zeros past the last row, else a copy
        for (int64_t k = 0; k < op.K; k += 64) {
          const __mmask64 mask = op.K - k >= 64 ? ~__mmask64{0} : (__mmask64{1} << (op.K - k)) - 1;
          _mm512_mask_storeu_epi8(
              dst + k, mask,
              n >= t.rows ? _mm512_setzero_si512() : _mm512_maskz_loadu_epi8(mask, row + k));
        }
        continue;
      }
      const __m128i table = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
      for (int64_t b = 0; b < op.K / 2; b += 16) {  // 16 packed bytes -> 32 codes in order
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b));
        const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(bytes, _mm_set1_epi8(0x0F)));
        const __m128i hi =
            _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0F)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * b), _mm_unpacklo_epi8(lo, hi));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * b + 16), _mm_unpackhi_epi8(lo, hi));
      }
    }
    w = wrows;
    ldw = op.K;
  }
  // Two blocks per step in separate tiles (C 0/3, A 1/4, B 2/5), so that one block's
  // products are under way while the other's float steps run.
  TileConfig cfg;
  for (int p = 0; p < 2; ++p) {
    cfg.colsb[3 * p] = 64, cfg.rows[3 * p] = 16;  // C: 16 weight rows x 16 activation rows, int32
    cfg.colsb[3 * p + 1] = 32, cfg.rows[3 * p + 1] = 16;  // A: 16 weight rows x 32 codes
    cfg.colsb[3 * p + 2] = 64, cfg.rows[3 * p + 2] = 8;   // B: 8 x (16 activation rows x 4 codes)
  }
  _tile_loadconfig(&cfg);
  auto float_steps = [&](int64_t g, int64_t b, const int32_t* cb) {
    const __m512 xd = _mm512_loadu_ps(xdt + (g * op.S + b) * 16);
    const int64_t lane = b % kLanes;
    for (int64_t n = 0; n < t.rows; ++n) {
      const __m512 s = _mm512_mul_ps(xd, _mm512_set1_ps(dw_plain[n * op.S + b]));
      float* a = acc + (n * 16 + lane) * 16;
      _mm512_storeu_ps(a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(cb + n * 16)), s,
                                          _mm512_loadu_ps(a)));
    }
  };
  for (int64_t g = 0; g < Mpad / 16; ++g) {
    for (int64_t i = 0; i < 16 * 16 * 16; i += 16) _mm512_storeu_ps(acc + i, _mm512_setzero_ps());
    int64_t b = 0;
    for (; b + 2 <= op.S; b += 2) {
      _tile_zero(0);
      _tile_zero(3);
      _tile_loadd(1, w + b * kBlock, ldw);
      _tile_loadd(2, xv + (g * op.S + b) * 512, 64);
      _tile_loadd(4, w + (b + 1) * kBlock, ldw);
      _tile_loadd(5, xv + (g * op.S + b + 1) * 512, 64);
      _tile_dpbssd(0, 1, 2);
      _tile_dpbssd(3, 4, 5);
      _tile_stored(0, c, 64);
      _tile_stored(3, c + 256, 64);
      float_steps(g, b, c);
      float_steps(g, b + 1, c + 256);
    }
    if (b < op.S) {
      _tile_zero(0);
      _tile_loadd(1, w + b * kBlock, ldw);
      _tile_loadd(2, xv + (g * op.S + b) * 512, 64);
      _tile_dpbssd(0, 1, 2);
      _tile_stored(0, c, 64);
      float_steps(g, b, c);
    }
    // The definition's lane tree, 16 activation rows at a time, then bias.
    for (int64_t n = 0; n < t.rows; ++n) {
      float* a = acc + n * 16 * 16;
      for (int64_t h = kLanes / 2; h >= 1; h /= 2)
        for (int64_t l = 0; l < h; ++l)
          _mm512_storeu_ps(a + l * 16, _mm512_add_ps(_mm512_loadu_ps(a + l * 16),
                                                     _mm512_loadu_ps(a + (l + h) * 16)));
      const float bias = op.bias ? op.bias[t.n0 + n] : 0.0f;
      for (int64_t i = 0; i < 16 && g * 16 + i < op.M; ++i)
        op.out[(g * 16 + i) * op.ldo + t.n0 + n] = op.bias ? a[i] + bias : a[i];
    }
  }
  _tile_release();
}

}  // namespace refit::cpu::int8dot

#pragma GCC pop_options
