// Plain scalar reference kernels: the definition of each op that the optimised kernels
// are tested against. Loops are written for clarity, accumulate in double and honour
// any strides, so a disagreement points at the optimised kernel. Same signatures and
// shape contracts as kernels/ops.h; they are not registered for dispatch.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace refit::cpu::reference {

void matmul(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out);
void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out,
              float weight_offset = 0.0f);
void rope(Tensor& x, const Tensor& positions, const Tensor& cos_sin, ops::RopeStyle style);
void softmax(Tensor& x);
void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out);
void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out);
void gelu_erf_mul(const Tensor& gate, const Tensor& up, Tensor& out);
void scale(const Tensor& x, float s, Tensor& out);
void embedding(const Tensor& table, const Tensor& ids, Tensor& out);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start_pos,
               float scale, Tensor& out, int64_t window = 0, const Tensor& sinks = Tensor());
// kernels/paged_attention.h.
void paged_attention(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                     const Tensor& block_tables, const Tensor& query_starts,
                     const Tensor& start_positions, float scale, Tensor& out, int64_t window = 0,
                     const Tensor& sinks = Tensor());
// kernels/matmul_quantized.h: x and w decoded from their codes and scales (w in any of its
// layouts: plain, shuffled_16x16 with tiled scales, interleaved_4x16), then matmul in double.
void matmul_quantized(const Tensor& x, const Tensor& x_scale, const Tensor& w,
                      const Tensor& w_scale, int64_t group, const Tensor& bias, Tensor& out);
// Per-token e4m3 codes with scale fp8_group_scale(amax) (kernels/quant/quant_reference.h).
void quantize_per_token_fp8(const Tensor& x, Tensor& xq, Tensor& x_scale);
// Blocks of 32: scale d = amax / 127 in f32, codes x * (1 / d) (f32) rounded to nearest
// even, as llama.cpp's Q8_0 activations; a block holding inf or NaN gets scale NaN and
// codes 0.
void quantize_per_block_q8(const Tensor& x, Tensor& xq, Tensor& x_scale);

// Mixture of experts (reference_moe.cpp): scores in double.
void moe_route(const Tensor& logits, int64_t k, ops::RouterScoring scoring, bool renormalize,
               Tensor& ids, Tensor& weights);
void moe_combine(const Tensor& expert_out, const Tensor& weights, Tensor& out);
void swiglu_oai_mul(const Tensor& gate, const Tensor& up, float alpha, float limit, Tensor& out);

}  // namespace refit::cpu::reference
