// Weight quantization schemes and their math: how one sub-shard's rows (f32 [n, K], the
// rows a single checkpoint tensor fills on this rank) become codes and scales.
//
// A quantized parameter stores
//   codes  [N, K] in the scheme's code dtype (f8_e4m3fn, f4_e2m1 packed two per byte low
//          nibble first, or i8), row-major like the float weight;
//   scales [N, S] one scale per row and per group of `group` columns (S = ceil(K / group)).
// Scales are kept per row even where the scheme's scale covers several rows (per-tensor:
// one value per sub-shard; 128x128 blocks: one per block of 128 rows of one sub-shard), so
// a kernel reads the scale of element (n, k) as scales[n, k / group] whatever the scheme,
// and a fused weight (q/k/v, gate/up) keeps its sub-shards' scales apart: each stored
// byte, code or scale, derives from one checkpoint tensor, and a partial reload is exact.
//
// Rounding: codes of f8/f4 round to nearest, ties to even, saturating (the OCP and torch
// "satfinite" conversions); Q8_0 reproduces ggml's quantize_row_q8_0_ref byte for byte
// (round half away from zero), so an online Q8_0 load equals llama-quantize's output.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/tensor.h"

namespace refit {

enum class QuantMethod : uint8_t {
  none,
  fp8_tensor,   // e4m3fn codes, one f32 scale per sub-shard (amax / 448)
  fp8_channel,  // e4m3fn codes, one f32 scale per output row
  fp8_block,    // e4m3fn codes, one f32 scale per 128x128 block (DeepSeek-V3 style)
  mxfp4,        // OCP MX: e2m1 codes, one e8m0 scale per 32 values along K
  q8_0,         // GGUF Q8_0: i8 codes, one f16 scale per 32 values along K
};

struct QuantScheme {
  QuantMethod method = QuantMethod::none;
  // Activations quantized at run time (W8A8); else kept in f32 (W8A16). FP8: per token to
  // e4m3 (products still in f32). Q8_0 and MXFP4: per block of 32 to int8, as llama.cpp
  // does, so that blocks are exact integer dot products (kernels/cpu/matmul_int8_dot.h):
  // several times fewer instructions per weight, at ~1e-2 relative error in the outputs
  // where f32 activations give ~1e-6.
  bool w8a8 = false;
  // W8A8 FP8 with static per-tensor activation scales (compressed-tensors
  // `input_activations: {strategy tensor, dynamic false}`): x is quantized with the
  // checkpoint's `input_scale` s, e4m3(x / s), instead of per token; the scales are
  // parameters of their own (Parameter::input_scales), the max over a fused weight's
  // sub-shards taken at run time, as vLLM's Fp8LinearOp does. Only from a checkpoint (there
  // is no --quant for it: the scales come from calibration); requires w8a8 and fp8-tensor
  // or fp8-channel weights.
  bool static_activations = false;

  bool enabled() const { return method != QuantMethod::none; }
  // Whether W8A8 quantizes activations to int8 blocks (Q8_0, MXFP4) rather than e4m3.
  bool int8_activations() const {
    return method == QuantMethod::mxfp4 || method == QuantMethod::q8_0;
  }
  DType code_dtype() const;
  DType scale_dtype() const;
  // Columns sharing one scale along K: 32, 128, or K itself (per-row scales).
  int64_t group(int64_t k) const;
  int64_t scale_cols(int64_t k) const;  // S
  int64_t block_rows() const { return method == QuantMethod::fp8_block ? 128 : 1; }
  // "" if a [rows, k] weight can take this scheme, else why not.
  std::string unsupported_reason(int64_t k) const;
  std::string name() const;  // "fp8-channel-w8a8", "fp8-tensor-w8a8-static", "q8_0-w8a8", ...
  bool operator==(const QuantScheme&) const = default;
};

// "" / "none", "fp8" (= fp8-tensor), "fp8-tensor", "fp8-channel", "fp8-block", "mxfp4",
// "q8_0", each with an optional "-w8a8" suffix. Throws naming the accepted names.
QuantScheme parse_quant_scheme(std::string_view name);

// Quantizes rows f32 [n, k] (contiguous) of one sub-shard into codes (n * k codes, packed
// for f4) and scales [n, S]. Deterministic: a pure function of these rows. Runs the SIMD,
// multi-threaded path of kernels/quant/quantize.h; kernels/quant/quant_reference.h is the scalar
// specification it equals byte for byte.
void quantize_rows(const QuantScheme& scheme, const float* rows, int64_t n, int64_t k, void* codes,
                   void* scales);
// The scalar reference inverse: out f32 [n, k] = code * scale, plain (unshuffled) layout.
void dequantize_rows(const QuantScheme& scheme, const void* codes, const void* scales, int64_t n,
                     int64_t k, float* out);

// The scale layout matching the (16, 16) tile shuffle of the codes' bytes: a 16-row x
// 32-byte code tile covers `groups_per_tile` scale columns (1 for Q8_0, 2 for MXFP4), and
// its 16 x groups_per_tile scales are stored together in tile order:
// [N, S] viewed [N/16, 16, S/g, g], permuted (0, 2, 1, 3). Per-row (fp8) scales need no
// rearranging: the kernel indexes them by output row.
int64_t scale_groups_per_tile(const QuantScheme& scheme);
bool scales_follow_tiles(const QuantScheme& scheme);
// In place on [n, s] scales of `elem_size` bytes each; n % 16 == 0, s % g == 0.
void shuffle_scales_16(void* scales, int64_t n, int64_t s, int64_t g, size_t elem_size,
                       bool inverse = false);

// Bytes of one row of codes: k for 8-bit codes, k / 2 for packed f4.
int64_t code_row_bytes(const QuantScheme& scheme, int64_t k);

}  // namespace refit
