// The typed function pointer each op's kernels register (Kernel::fn in registry.h).
// A kernel has exactly its op's signature from kernels/ops.h, so ops.cpp can call
// whatever select() returned after checking shapes once. The order of the argument
// tensors handed to select() is the order of the tensors in these signatures.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace refit::kernels {

// select() args: {x, w, bias, out}
using MatmulFn = void (*)(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out);
// select() args: {x, weight, out}
using RmsNormFn = void (*)(const Tensor& x, const Tensor& weight, float eps, Tensor& out,
                           float weight_offset);
// select() args: {x, positions, cos_sin}
using RopeFn = void (*)(Tensor& x, const Tensor& positions, const Tensor& cos_sin,
                        ops::RopeStyle style);
// select() args: {x}
using SoftmaxFn = void (*)(Tensor& x);
// select() args: {gate, up, out}
using SiluMulFn = void (*)(const Tensor& gate, const Tensor& up, Tensor& out);
// select() args: {gate, up, out}
using GeluTanhMulFn = void (*)(const Tensor& gate, const Tensor& up, Tensor& out);
using GeluErfMulFn = void (*)(const Tensor& gate, const Tensor& up, Tensor& out);
// select() args: {x, out}
using ScaleFn = void (*)(const Tensor& x, float s, Tensor& out);
// select() args: {table, ids, out}
using EmbeddingFn = void (*)(const Tensor& table, const Tensor& ids, Tensor& out);
// select() args: {a, b, out}
using AddFn = void (*)(const Tensor& a, const Tensor& b, Tensor& out);
// select() args: {q, k_cache, v_cache, out, sinks} (sinks optional)
using AttentionFn = void (*)(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                             int64_t start_pos, float scale, Tensor& out, int64_t window,
                             const Tensor& sinks);

// select() args: {logits, ids, weights}
using MoeRouteFn = void (*)(const Tensor& logits, int64_t k, ops::RouterScoring scoring,
                            bool renormalize, Tensor& ids, Tensor& weights);
// select() args: {expert_out, weights, out}
using MoeCombineFn = void (*)(const Tensor& expert_out, const Tensor& weights, Tensor& out);
// select() args: {gate, up, out}
using SwigluOaiMulFn = void (*)(const Tensor& gate, const Tensor& up, float alpha, float limit,
                                Tensor& out);

}  // namespace refit::kernels
