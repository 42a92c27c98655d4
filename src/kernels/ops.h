// The ops a Llama-family forward pass needs. Each function checks its arguments, asks
// the registry for a kernel (by the tensors' device, dtype and layout) and runs it.
// Shapes are documented here once; kernels may assume them after the checks.
#pragma once

#include "core/tensor.h"
#include "kernels/registry.h"

namespace refit::ops {

// out[M, N] = x[M, K] · w[N, K]^T (+ bias[N]).
// x: f32, rows contiguous. w: [N, K] row-major (nn.Linear layout) in any dtype a kernel
// accepts (f32, f16, bf16, ... or a kernel layout such as shuffled_16x16). bias: f32 [N]
// or undefined. out: f32 [M, N] contiguous, preallocated.
void matmul(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out);

// out[T, D] = x / sqrt(mean(x^2) + eps) * (weight[D] + weight_offset). x, out f32; weight
// f32. Llama's weight multiplies as stored (offset 0); Gemma stores w and scales by (1 + w)
// computed in f32 (offset 1). Offset 0 gives exactly the bits of a plain `* weight`.
void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out,
              float weight_offset = 0.0f);

enum class RopeStyle : uint8_t {
  interleaved,  // pairs (x[2i], x[2i+1]): llama2.c, GGUF "llama" arch
  neox,         // pairs (x[i], x[i + rot/2]): HF rotate_half, Qwen2/3, GGUF "qwen2"
};
// In place on x[T, n_heads, head_dim] (f32). positions: i32 [T]. cos_sin: f32
// [max_pos, rot_dim] where row p holds cos(p*f_0..f_{r/2-1}) then sin(...), r = rot_dim
// <= head_dim; dims >= rot_dim are left unchanged.
void rope(Tensor& x, const Tensor& positions, const Tensor& cos_sin, RopeStyle style);

// In place softmax over the last dimension of a f32 tensor (rows contiguous).
void softmax(Tensor& x);

// out[T, F] = silu(gate) * up; gate, up, out f32 [T, F]. On the CPU, rows may be strided
// (stride 1 along each), as are the gate and up halves of one matmul output; likewise
// gelu_tanh_mul and gelu_erf_mul.
void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out);

// out[T, F] = gelu_tanh(gate) * up, gate, up, out f32 [T, F]: Gemma's GeGLU, with
// PyTorch's gelu(approximate="tanh") = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out);

// out[T, F] = gelu(gate) * up with the exact GELU, 0.5 g (1 + erf(g / sqrt(2))): Hugging
// Face's hidden_act "gelu" (torch.nn.functional.gelu, approximate="none"). gate, up, out f32.
void gelu_erf_mul(const Tensor& gate, const Tensor& up, Tensor& out);

// out = x * s, same shape, f32 (out may alias x). Gemma scales its embeddings by
// sqrt(hidden).
void scale(const Tensor& x, float s, Tensor& out);

// out[T, D] (f32) = table[ids[t], :]; table [V, D] in f32/f16/bf16; ids i32 [T]. Ids out
// of range throw naming the id.
void embedding(const Tensor& table, const Tensor& ids, Tensor& out);

// out = a + b, same shape, f32 (out may alias a).
void add(const Tensor& a, const Tensor& b, Tensor& out);

// Causal grouped-query attention over a KV cache.
// q: f32 [T, n_heads, head_dim], the T new tokens at positions start_pos .. start_pos+T-1.
// k_cache, v_cache: f32 [max_seq, n_kv_heads, head_dim]; rows < start_pos + T are valid
// (the new tokens' k/v are already written). Query head h uses kv head h / (n_heads /
// n_kv_heads). Token t, at position p = start_pos + t, attends to cache rows k <= p; with
// a sliding window (window > 0) only to those with p - k < window, i.e. the last `window`
// positions including its own (Hugging Face's and llama.cpp's standard SWA rule: a key is
// masked when p - k >= window). window 0: no limit. out: f32 [T, n_heads, head_dim].
// sinks: optional f32 [n_heads] (gpt-oss's learned sinks): head h's logit joins the softmax
// denominator only, as Hugging Face's extra score column that is dropped after the softmax
// and llama.cpp's ggml_soft_max_add_sinks: with scores s_k and m = max(max_k s_k, sink),
// p_k = exp(s_k - m) / (sum_j exp(s_j - m) + exp(sink - m)). An undefined Tensor: none, and
// the sink-less result bit for bit.
void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start_pos,
               float scale, Tensor& out, int64_t window = 0, const Tensor& sinks = Tensor());

// ---- mixture of experts (layers/moe_feed_forward.h) ----

// How a router turns its logits into the k experts a token uses and their weights.
enum class RouterScoring : uint8_t {
  softmax_topk,  // p = softmax over all E logits, the k largest p (Qwen3-MoE, Mixtral)
  topk_softmax,  // the k largest logits, then softmax over those k only (gpt-oss)
};
// logits: f32 [T, E] (rows contiguous). Per token the k (1 <= k <= E) best experts, best
// first; equal scores go to the lowest expert index. ids: i32 [T, k]; weights: f32 [T, k].
// softmax_topk: weights are the chosen p, divided by their sum when `renormalize`;
// topk_softmax: softmax of the chosen logits (`renormalize` is meaningless and ignored).
void moe_route(const Tensor& logits, int64_t k, RouterScoring scoring, bool renormalize,
               Tensor& ids, Tensor& weights);

// out[t, :] = sum over slots j = 0..k-1, in that order, of weights[t, j] * expert_out[t, j, :].
// expert_out: f32 [T, k, D]; weights f32 [T, k]; out f32 [T, D]. The fixed slot order makes
// a token's output independent of which other tokens share the batch.
void moe_combine(const Tensor& expert_out, const Tensor& weights, Tensor& out);

// gpt-oss's clamped SwiGLU: g = min(gate, limit), u = clamp(up, -limit, limit),
// out = (u + 1) * g * sigmoid(alpha * g). gate, up, out f32 [T, F].
void swiglu_oai_mul(const Tensor& gate, const Tensor& up, float alpha, float limit, Tensor& out);

}  // namespace refit::ops
