// CPU kernels the serving path adds to the dispatch table: paged attention and the
// batch-invariant f32 matmul. register_serve_cpu_kernels() is called once from
// register_cpu_kernels() (kernels/cpu/register.cpp).
#pragma once

#include "core/tensor.h"
#include "kernels/registry.h"

namespace refit {

// Adds "paged_attention.cpu.hwy" and, when batch_invariant (by default unless
// REFIT_BATCH_INVARIANT=0 at start-up), "matmul.cpu.f32_invariant" for f32 weights in place
// of OpenBLAS (see serve_kernels.cpp).
void register_serve_cpu_kernels(KernelRegistry& registry, bool batch_invariant);

// True when the batch-invariant f32 matmul was registered above OpenBLAS.
bool batch_invariant_f32_matmul();

namespace cpu {
void paged_attention_hwy(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                         const Tensor& block_tables, const Tensor& query_starts,
                         const Tensor& start_positions, float scale, Tensor& out, int64_t window,
                         const Tensor& sinks);
}  // namespace cpu

}  // namespace refit
