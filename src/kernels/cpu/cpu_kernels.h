// The optimised CPU kernels, each with its op's signature from kernels/ops.h. They
// assume the shape and layout checks in ops.cpp and the ArgRules/constraints they are
// registered with (register.cpp); call them through refit::ops unless testing.
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor.h"
#include "kernels/ops.h"
#include "kernels/registry.h"

namespace refit::cpu {

// The kernels of this file's ops (one per op and weight dtype), without the extra
// layouts and serving kernels register_cpu_kernels() adds; tests use it for a table
// whose contents they know. f32_blas: add the OpenBLAS and Highway-decode f32 matmul rows
// (register_cpu_kernels() leaves them out when the batch-invariant row replaces them).
void register_core_cpu_kernels(KernelRegistry& registry, bool f32_blas = true);

// Once per process before the first BLAS call: pins OpenBLAS to one thread and corrects
// its core detection where old versions fall back to SSE3 kernels (matmul_blas.cpp).
void prepare_openblas();
// f32 weights: OpenBLAS sgemm, N split across the refit pool (OpenBLAS kept to 1 thread).
void matmul_f32_blas(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out);
// f16/bf16 (and f32) weights, f32 activations, Highway; batch-invariant (matmul_cpu.cpp).
void matmul_hwy(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out);
// Whether matmul_hwy's prefill path widens f16 weights in its register tile (true) or
// converts each block of rows to f32 first (false): REFIT_F16_PREFILL=registers|block,
// else cpu_converts_f16_at_fma_rate(). Same bits either way; set_... overrides it for
// tests (nullopt: back to the default). Not to be called while matmuls run.
bool f16_prefill_in_registers();
void set_f16_prefill_in_registers(std::optional<bool> in_registers);
// Decode (M <= 4) with a shuffled_16x16 f32/f16/bf16 weight read in place, the plain
// layout's bits; false (nothing done) where this CPU target or the shape cannot.
bool matmul_shuffled_decode_hwy(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out);
// Decode (M <= 4) with a transposed weight view (stride(0) == 1: [K, N] storage), rows of
// the storage streamed, the plain layout's bits; false (nothing done) for other shapes.
bool matmul_transposed_decode_hwy(const Tensor& x, const Tensor& w, const Tensor& bias,
                                  Tensor& out);

void rms_norm_hwy(const Tensor& x, const Tensor& weight, float eps, Tensor& out,
                  float weight_offset);
void rope_hwy(Tensor& x, const Tensor& positions, const Tensor& cos_sin, ops::RopeStyle style);
void softmax_hwy(Tensor& x);
void silu_mul_hwy(const Tensor& gate, const Tensor& up, Tensor& out);
void gelu_tanh_mul_hwy(const Tensor& gate, const Tensor& up, Tensor& out);
// Scalar std::erf per element (Highway has no erf), split across the pool.
void gelu_erf_mul_cpu(const Tensor& gate, const Tensor& up, Tensor& out);
void scale_hwy(const Tensor& x, float s, Tensor& out);
void embedding_hwy(const Tensor& table, const Tensor& ids, Tensor& out);
void add_hwy(const Tensor& a, const Tensor& b, Tensor& out);
void attention_hwy(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start_pos,
                   float scale, Tensor& out, int64_t window, const Tensor& sinks);

// Mixture of experts (moe_cpu.cpp): scalar f32, a row at a time.
void moe_route_cpu(const Tensor& logits, int64_t k, ops::RouterScoring scoring, bool renormalize,
                   Tensor& ids, Tensor& weights);
void moe_combine_cpu(const Tensor& expert_out, const Tensor& weights, Tensor& out);
void swiglu_oai_mul_cpu(const Tensor& gate, const Tensor& up, float alpha, float limit,
                        Tensor& out);

}  // namespace refit::cpu
