// Integer-dot W8A8 for Q8_0 and MXFP4 weights ("q8_0-w8a8", "mxfp4-w8a8"): the activations
// are quantized like llama.cpp's Q8_0 (int8 codes, one f32 scale per block of 32 values),
// so each block's dot product is an exact integer sum, which x86 computes 64 products per
// instruction (AVX-512 VNNI vpdpbusd). With f32 activations the same weights cost 4-5
// vector instructions per 16 weights and decode was instruction-bound on these cores; this
// is the lever llama.cpp uses for its Q8_0 and MXFP4 decode.
//
// The result is specified exactly, independent of ISA, batch size and layout:
//   isum[b]  = sum over the block's 32 k of xq[m, k] * wi[n, k]   (exact, int32)
//              wi: the Q8_0 code; for MXFP4 twice the e2m1 value (-12..12, an integer)
//   s[b]     = xd[m, b] * dw[n, b]   (f32; dw: the f16 scale, or e8m0 scale * 0.5 for MXFP4)
//   acc[16]  = 0; for b in order: acc[b % 16] = fma(float(isum[b]), s[b], acc[b % 16])
//   out      = pairwise tree over the 16 lanes (i + 8, then + 4, + 2, + 1), then + bias
// float(isum) is exact (|isum| <= 32 * 128 * 128 < 2^24). The scalar kernel below is this
// definition, line by line; the AVX-512 VNNI kernel (and the AMX one, for batches of 16
// rows or more) computes the same values (integer sums in
// any order are exact; the float steps are the same operations in the same order), so
// their outputs are equal bit for bit. Rows of a batch never interact, so a row's result
// does not depend on M (batch invariance, issue 8), and a shuffled or interleaved weight
// gives the plain layout's bits.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/registry.h"

namespace refit::cpu::int8dot {

constexpr int64_t kBlock = 32;  // values per activation / weight scale block
constexpr int64_t kLanes = 16;  // float accumulator lanes of the definition above
constexpr int64_t kTileRows = 16;
// The SIMD kernels make MXFP4 weights unsigned as 2 * e2m1 + kF4WeightOffset (0..24), Q8_0
// ones (AVX-512) as w + 128, and subtract the offset's share per block afterwards.
constexpr int32_t kF4WeightOffset = 12;

enum class Weights : uint8_t { q8_0, mxfp4 };

// One call's operands in plain layout (a shuffled weight is un-shuffled a tile at a time
// into a plain buffer first; an interleaved one is read in place by the AVX-512 kernel).
struct Operands {
  Weights kind;
  bool interleaved = false;  // tiles reach tile_avx512 as Q8_0 codes in Layout::interleaved_4x16
  int64_t M, K, N, S;        // S = K / 32
  const int8_t* xq;          // [M, K] activation codes, natural order
  int64_t ldxq;
  const float* xd;  // [M, S] activation scales
  int64_t ldxd;
  const float* bias;  // [N] or null
  float* out;         // [M, N] rows ldo apart
  int64_t ldo;
};

// A 16-row weight tile in plain layout: rows `row_bytes` apart, scales [rows, S] (f16 bits
// for Q8_0, e8m0 bytes for MXFP4).
struct Tile {
  const uint8_t* codes;
  int64_t row_bytes;
  const void* scales;
  int64_t n0, rows;
  const uint8_t* next;  // the next tile's codes, to prefetch (or null)
};

// The AVX-512 VNNI kernel's per-call activation data: xcorr[m, b] = offset * sum of the
// block's codes (offset 128 for Q8_0, 12 for MXFP4; see the kernel for why), padded to a
// multiple of 16 blocks; MXFP4's codes re-ordered for packed nibbles, 128 values at a
// time: [evens of 4 blocks][odds of 4 blocks]; for interleaved Q8_0 weights the codes in
// the weights' order, so that each byte meets its weight at the same offset.
struct Prepared {
  const int32_t* xcorr;  // [M, S16]
  int64_t S16;
  const int8_t* xperm;  // [M, K] (MXFP4 only)
  const int8_t* xil;  // [M, K] the codes in the weights' interleaved order (interleaved Q8_0 only)
};

// Whether the AVX-512 VNNI kernel may run: the CPU has it and REFIT_CPU_ISA allows avx3.
bool avx512_vnni_usable();
// The CPU has them (REFIT_CPU_ISA aside).
bool avx512_vnni_on_cpu();
// MXFP4 nibbles are decoded with vpermb where the CPU has AVX-512 VBMI (Ice Lake and
// later) and with vpshufb otherwise (Cascade Lake has VNNI without VBMI); both give the
// same integers. Tests turn VBMI off to run the other path on a CPU that has it.
bool vbmi_in_use();
void set_vbmi_allowed(bool allowed);
// The offset's share per activation row and block: the offset (128 for Q8_0, kF4WeightOffset for
// MXFP4) times the block's sum of codes, into corr [M, corrections_stride(S)], the blocks
// past S zero (kLanes-wide loads may read them).
int64_t corrections_stride(int64_t S);
void offset_corrections(const Operands& op, int32_t* corr);
// Bytes of scratch Prepared needs (64-byte aligned), and filling it.
int64_t prepared_bytes(const Operands& op);
void prepare_activations(const Operands& op, void* scratch, Prepared& p);
// Q8_0-style quantization of one activation row of S blocks (see quantize_row_definition
// in matmul_int8_dot.cpp): the same codes and scales, bit for bit.
void quantize_row_avx512(const float* row, int64_t S, int8_t* q, float* d);
// out[:, n0 .. n0 + 16) for every row of x from a tile stored shuffled (codes: its 16 x
// row_bytes bytes, scales: its 16 x S scales), read in place; weight bytes up to
// prefetch_end may be requested ahead.
void shuffled_tile_avx512(const Operands& op, const Prepared& p, const uint8_t* codes,
                          const void* scales, int64_t n0, const uint8_t* prefetch_end);
// out[:, tile rows] for every row of x.
void tile_avx512(const Operands& op, const Prepared& p, const Tile& tile);

// AMX (matmul_int8_dot_amx.cpp): batches of kAmxMinRows activation rows or more. Whether
// it may run (CPU, REFIT_CPU_ISA, and the kernel's permission to use tile registers).
constexpr int64_t kAmxMinRows = 16;
bool amx_usable();
int64_t amx_scratch_bytes(const Operands& op);
// count weight scales as the definition takes them (f16 for Q8_0, e8m0 * 0.5 for MXFP4),
// in f32, with AVX-512 (F16C).
void weight_scales_f32(Weights kind, const uint8_t* scales, int64_t count, float* out);
// Activations re-laid for AMX: xv [Mpad/16][S][8][16][4] int8, xdt [Mpad/16][S][16] f32
// (Mpad = M rounded up to 16; rows past M zero).
void prepare_amx_activations(const Operands& op, int64_t Mpad, int8_t* xv, float* xdt);
// out[:, tile rows] for every row of x; dw_plain: the tile's weight scales as the
// definition takes them, [rows, S] f32.
void tile_amx(const Operands& op, const int8_t* xv, const float* xdt, int64_t Mpad,
              const Tile& tile, const float* dw_plain, void* scratch);

// AVX2 (matmul_int8_dot_avx2.cpp), for CPUs without AVX-512 VNNI: whether it may run (the
// CPU has AVX2, FMA and F16C, and REFIT_CPU_ISA allows avx2).
bool avx2_int8_usable();
bool avx2_int8_on_cpu();
// MXFP4 only: each block's activation codes as [16 evens][16 odds], into xperm [M, K].
void prepare_activations_avx2(const Operands& op, int8_t* xperm);
// out[:, tile rows] for every row of x, from a plain tile; needs no activation code -128.
// e8m0_half: the 256 MXFP4 block scales as the definition takes them (e8m0 * 0.5); xcorr:
// MXFP4's offset_corrections (the AVX2 kernel offsets its weights like the VNNI one).
void tile_avx2(const Operands& op, const int8_t* xperm, const int32_t* xcorr,
               const float* e8m0_half, const Tile& tile);

void register_kernels(KernelRegistry& registry);

}  // namespace refit::cpu::int8dot
