// Matmul kernels for weights stored in a kernel layout (law L3: registered for that
// layout and chosen by dispatch from the weight tensor itself):
//   * transposed: the weight arrives as a [N, K] view of [K, N] storage (stride(0) == 1);
//   * shuffled_16x16: AITER's tile shuffle, read in place tile by tile;
//   * a plain strided fallback for any other float weight view.
// Each output element sums over K in increasing k, like the reference.
#include <cblas.h>

#include <cstring>

#include "core/element_access.h"
#include "core/float_formats.h"
#include "core/thread_pool.h"
#include "kernels/op_fns.h"
#include "kernels/registry.h"

namespace refit::cpu {
namespace {

inline float load_weight(const uint8_t* base, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::f32: {
      float v;
      std::memcpy(&v, base + index * 4, 4);
      return v;
    }
    case DType::f16: {
      uint16_t h;
      std::memcpy(&h, base + index * 2, 2);
      return f16_to_f32(h);
    }
    case DType::bf16: {
      uint16_t h;
      std::memcpy(&h, base + index * 2, 2);
      return bf16_to_f32(h);
    }
    default: return static_cast<float>(load_element(base, dtype, index));
  }
}

void add_bias(const Tensor& bias, Tensor& out) {
  if (!bias.defined()) return;
  const int64_t M = out.size(0), N = out.size(1);
  const float* b = bias.data<float>();
  for (int64_t m = 0; m < M; ++m) {
    float* o = out.data<float>() + m * out.stride(0);
    for (int64_t n = 0; n < N; ++n) o[n] += b[n];
  }
}

// w: [N, K] view with stride(0) == 1, i.e. [K, N] row-major storage.
void matmul_transposed(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0), ldw = w.stride(1);
  if (w.dtype() == DType::f32) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(M), static_cast<int>(N),
                static_cast<int>(K), 1.0f, x.data<float>(), static_cast<int>(x.stride(0)), w.data<float>(),
                static_cast<int>(ldw), 0.0f, out.data<float>(), static_cast<int>(out.stride(0)));
  } else {
    const uint8_t* base = static_cast<const uint8_t*>(w.raw_data());
    parallel_for(N, [&](int64_t n0, int64_t n1, int) {
      std::vector<float> row(static_cast<size_t>(n1 - n0));
      for (int64_t m = 0; m < M; ++m) {
        std::fill(row.begin(), row.end(), 0.0f);
        const float* xr = x.data<float>() + m * x.stride(0);
        for (int64_t k = 0; k < K; ++k) {
          const float xv = xr[k];
          for (int64_t n = n0; n < n1; ++n) row[n - n0] += xv * load_weight(base, w.dtype(), k * ldw + n);
        }
        std::memcpy(out.data<float>() + m * out.stride(0) + n0, row.data(), row.size() * sizeof(float));
      }
    }, 16);
  }
  add_bias(bias, out);
}

// Element (n, k) of a shuffled [N, K] weight: tile (n/16, k/32), inside it [32/KP][16][KP].
inline int64_t shuffled_index(int64_t n, int64_t k, int64_t K, int64_t kp) {
  const int64_t tile = (n / 16) * (K / 32) + k / 32;
  const int64_t kk = k % 32;
  return tile * 512 + (kk / kp) * 16 * kp + (n % 16) * kp + kk % kp;
}

void matmul_shuffled(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const int64_t kp = 128 / dtype_bits(w.dtype());
  const uint8_t* base = static_cast<const uint8_t*>(w.raw_data());
  // One 16-row tile at a time: its 16 x K values are contiguous in the shuffled buffer.
  parallel_for(N / 16, [&](int64_t t0, int64_t t1, int) {
    std::vector<float> tile(static_cast<size_t>(16 * K));
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t i = 0; i < 16; ++i)
        for (int64_t k = 0; k < K; ++k)
          tile[i * K + k] = load_weight(base, w.dtype(), shuffled_index(t * 16 + i, k, K, kp));
      for (int64_t m = 0; m < M; ++m) {
        const float* xr = x.data<float>() + m * x.stride(0);
        float* o = out.data<float>() + m * out.stride(0) + t * 16;
        for (int64_t i = 0; i < 16; ++i) {
          float acc = 0.0f;
          for (int64_t k = 0; k < K; ++k) acc += xr[k] * tile[i * K + k];
          o[i] = acc;
        }
      }
    }
  });
  add_bias(bias, out);
}

// Any float weight view: element access through strides.
void matmul_strided_fallback(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const uint8_t* base = static_cast<const uint8_t*>(w.storage()->data());
  parallel_for(N, [&](int64_t n0, int64_t n1, int) {
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t m = 0; m < M; ++m) {
        const float* xr = x.data<float>() + m * x.stride(0);
        float acc = 0.0f;
        for (int64_t k = 0; k < K; ++k)
          acc += xr[k] * load_weight(base, w.dtype(), w.offset() + n * w.stride(0) + k * w.stride(1));
        out.data<float>()[m * out.stride(0) + n] = acc;
      }
  });
  add_bias(bias, out);
}

std::string x_out_rows_dense(std::span<const Tensor* const> a) {
  for (size_t i : {size_t{0}, size_t{3}})
    if (a[i]->stride(-1) != 1) return "x and out need stride 1 along K/N";
  if (a[2] && a[2]->defined() && !a[2]->is_contiguous()) return "bias must be contiguous";
  return {};
}

}  // namespace

void register_layout_matmul_kernels(KernelRegistry& registry) {
  const std::vector<DType> floats = {DType::f32, DType::f16, DType::bf16};
  auto rules = [&](std::vector<Layout> w_layouts, std::vector<DType> w_dtypes) {
    return std::vector<ArgRule>{{"x", {DType::f32}, {}, false},
                                {"w", w_dtypes, w_layouts, false},
                                {"bias", {DType::f32}, {}, true},
                                {"out", {DType::f32}, {}, false}};
  };
  Kernel transposed{"matmul", "matmul.cpu.transposed_weight", DeviceType::cpu, 8,
                    rules({Layout::strided}, floats),
                    [](std::span<const Tensor* const> a) -> std::string {
                      if (a[1]->stride(0) != 1 || a[1]->size(0) <= 1)
                        return "w must be a transposed view (stride 1 along N)";
                      return x_out_rows_dense(a);
                    },
                    "w stored [K, N] (stride(0) == 1)",
                    reinterpret_cast<const void*>(&matmul_transposed)};
  registry.add(transposed);
  Kernel shuffled{"matmul", "matmul.cpu.shuffled_16x16", DeviceType::cpu, 10,
                  rules({Layout::shuffled_16x16}, floats),
                  [](std::span<const Tensor* const> a) -> std::string {
                    const Tensor& w = *a[1];
                    if (!w.is_contiguous()) return "w must be contiguous";
                    if (w.size(0) % 16 != 0 || w.size(1) % 32 != 0) return "needs N % 16 == 0 and K % 32 == 0";
                    return x_out_rows_dense(a);
                  },
                  "N % 16 == 0, K % 32 == 0",
                  reinterpret_cast<const void*>(&matmul_shuffled)};
  registry.add(shuffled);
  Kernel fallback{"matmul", "matmul.cpu.strided_fallback", DeviceType::cpu, 1,
                  rules({Layout::strided}, floats), x_out_rows_dense, "any weight strides (slow)",
                  reinterpret_cast<const void*>(&matmul_strided_fallback)};
  registry.add(fallback);
}

}  // namespace refit::cpu
