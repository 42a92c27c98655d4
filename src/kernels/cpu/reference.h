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
void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out);
void rope(Tensor& x, const Tensor& positions, const Tensor& cos_sin, ops::RopeStyle style);
void softmax(Tensor& x);
void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out);
void embedding(const Tensor& table, const Tensor& ids, Tensor& out);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start_pos,
               float scale, Tensor& out);

}  // namespace refit::cpu::reference
