// Helpers shared by the kernels_*_test.cpp files: random tensors, normalised error, and
// running a check under every SIMD target this CPU supports.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/cpu_isa.h"

namespace refit::testing {

// Contiguous f32 tensor with values uniform in [lo, hi), deterministic per seed.
inline Tensor random_tensor(Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::empty(std::move(shape), DType::f32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

// Normalised mean squared error sum((a-b)^2) / sum(b^2), as llama.cpp's test-backend-ops.
inline double nmse(const Tensor& actual, const Tensor& expected) {
  std::vector<float> a = actual.to_floats(), b = expected.to_floats();
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  if (den == 0) return num;
  return num / den;
}

// Same dtype, shape and bytes (views compared by their values, in row-major order).
inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.contiguous().raw_data(), b.contiguous().raw_data(), a.nbytes()) == 0;
}

// Thresholds: f32 results differ from the double-precision reference only by f32
// rounding in the kernel's accumulation order.
inline constexpr double kNmseF32 = 1e-9;

// Runs `check` once per SIMD target this CPU runs (best first), then restores the cap
// that REFIT_CPU_ISA (or nothing) set.
inline void for_each_isa(const std::function<void()>& check) {
  std::vector<std::string> isas = cpu::cpu_isas_available();
  ASSERT_FALSE(isas.empty());
  for (const std::string& isa : isas) {
    SCOPED_TRACE("ISA " + isa);
    cpu::set_cpu_isa(isa);
    check();
  }
  const char* env = std::getenv("REFIT_CPU_ISA");
  cpu::set_cpu_isa(env && *env ? env : isas.front());
}

}  // namespace refit::testing
