// Matmul kernels for weights stored in a kernel layout (law L3: registered for that
// layout and chosen by dispatch from the weight tensor itself):
//   * transposed: the weight arrives as a [N, K] view of [K, N] storage (stride(0) == 1);
//     decode streams the storage's rows (matmul_cpu.cpp), batches transpose it block by
//     block into the plain SIMD kernel; both give the plain layout's bits;
//   * shuffled_16x16: AITER's tile shuffle; decode reads the tiles in place on AVX-512
//     (matmul_cpu.cpp), otherwise they are un-shuffled tile by tile into the plain SIMD
//     kernel; both give the plain layout's bits;
//   * a plain strided fallback for any other float weight view.
// Each output element sums over K in increasing k, like the reference.
#include <algorithm>
#include <cstring>

#include "core/element_access.h"
#include "core/float_formats.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/op_fns.h"
#include "kernels/op_names.h"
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
    default:
      return static_cast<float>(load_element(base, dtype, index));
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

// w: [N, K] view with stride(0) == 1, i.e. [K, N] row-major storage. Blocks of 16 output
// rows are transposed into a row-major buffer and multiplied by the plain SIMD kernel: the
// result is bitwise the plain layout's (so batch-invariant, unlike a BLAS call whose
// blocking depends on M), and f16/bf16 weights get SIMD instead of a scalar loop. Decode
// (M <= 4) takes matmul_transposed_decode_hwy instead, which streams the storage's rows.
void matmul_transposed(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  if (matmul_transposed_decode_hwy(x, w, bias, out)) return;  // decode: storage rows streamed
  const int64_t K = x.size(1), N = w.size(0), ldw = w.stride(1);
  const int64_t esize = dtype_bits(w.dtype()) / 8;
  const uint8_t* base = static_cast<const uint8_t*>(w.raw_data());
  const int64_t ld = K + 64 / esize;  // a cache line of padding per row
  parallel_for((N + 15) / 16, [&](int64_t b0, int64_t b1, int) {
    Tensor buffer = Tensor::empty({16, ld}, w.dtype());
    uint8_t* const dst = static_cast<uint8_t*>(buffer.raw_data());
    const int64_t row_bytes = ld * esize, stride = ldw * esize, n_all = N, k_all = K, es = esize;
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n0 = b * 16, rows = std::min<int64_t>(16, n_all - n0);
      for (int64_t k = 0; k < k_all; ++k) {
        const uint8_t* src = base + k * stride + n0 * es;
        uint8_t* d = dst + k * es;
        if (es == 4)
          for (int64_t r = 0; r < rows; ++r) std::memcpy(d + r * row_bytes, src + r * 4, 4);
        else
          for (int64_t r = 0; r < rows; ++r) std::memcpy(d + r * row_bytes, src + r * 2, 2);
      }
      Tensor out_cols = out.narrow(1, n0, rows);
      matmul_hwy(x, buffer.narrow(0, 0, rows).narrow(1, 0, k_all),
                 bias.defined() ? bias.narrow(0, n0, rows) : Tensor(), out_cols);
    }
  });
}

// A shuffled [N, K] weight: tile (n/16, k/32) holds 512 elements as [32/KP][16][KP], KP the
// elements of a 16-byte piece.
void matmul_shuffled(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  if (matmul_shuffled_decode_hwy(x, w, bias, out)) return;  // decode on AVX-512: in place
  const int64_t K = x.size(1), N = w.size(0);
  const int64_t kp = 128 / dtype_bits(w.dtype());  // elements per 16-byte piece
  const int64_t esize = dtype_bits(w.dtype()) / 8;
  const uint8_t* base = static_cast<const uint8_t*>(w.raw_data());
  // One 16-row tile at a time: its 16 x K values are contiguous in the shuffled buffer.
  // Its 16-byte pieces are put back in row order (a copy, no conversion) and multiplied
  // by the plain-layout SIMD kernel, so results are bitwise those of the same weights in
  // the plain layout and batch-invariant (decode on AVX-512 took the in-place path above:
  // this copy left DRAM idle while the copied tile was multiplied).
  // Row stride of the buffer: K plus one cache line, so that the 16 rows (written 16 bytes
  // at a time, row after row) do not all map to the same L1 sets when K is a power of two.
  const int64_t ld = K + 64 / esize;
  const int64_t tile_bytes = 16 * K * esize, n_tiles = N / 16;
  parallel_for(n_tiles, [&](int64_t t0, int64_t t1, int) {
    Tensor buffer = Tensor::empty({16, ld}, w.dtype());
    Tensor rows = buffer.narrow(1, 0, K);
    uint8_t* const dst = static_cast<uint8_t*>(buffer.raw_data());
    // Locals, not captures: the byte copies below may alias anything the lambda reads
    // through a reference, which would reload each bound on every iteration.
    const int64_t row_bytes = ld * esize, piece_cols = kp * esize, pieces = 32 / kp;
    const int64_t tiles_k = K / 32, last = n_tiles - 1, bytes = tile_bytes;
    for (int64_t t = t0; t < t1; ++t) {
      const uint8_t* src = base + t * bytes;
      // The next tile is requested while this one is copied and multiplied (as the
      // quantized kernels do), so DRAM does not idle during the multiply.
      const int64_t ahead = t < last ? bytes : 0;
      for (int64_t c = 0; c < tiles_k; ++c)
        for (int64_t g = 0; g < pieces; ++g) {
          uint8_t* d = dst + c * 32 * esize + g * piece_cols;
          for (int64_t r = 0; r < 16; ++r, src += 16) {  // the tile's pieces in storage order
            if ((r & 3) == 0) __builtin_prefetch(src + ahead, 0, 2);
            std::memcpy(d + r * row_bytes, src, 16);
          }
        }
      Tensor out_cols = out.narrow(1, t * 16, 16);
      matmul_hwy(x, rows, bias.defined() ? bias.narrow(0, t * 16, 16) : Tensor(), out_cols);
    }
  });
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
          acc +=
              xr[k] * load_weight(base, w.dtype(), w.offset() + n * w.stride(0) + k * w.stride(1));
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
  Kernel transposed{op_names::matmul,
                    "matmul.cpu.transposed_weight",
                    DeviceType::cpu,
                    8,
                    rules({Layout::strided}, floats),
                    [](std::span<const Tensor* const> a) -> std::string {
                      if (a[1]->stride(0) != 1 || a[1]->size(0) <= 1)
                        return "w must be a transposed view (stride 1 along N)";
                      return x_out_rows_dense(a);
                    },
                    "w stored [K, N] (stride(0) == 1)",
                    reinterpret_cast<const void*>(&matmul_transposed)};
  registry.add(transposed);
  Kernel shuffled{op_names::matmul,
                  "matmul.cpu.shuffled_16x16",
                  DeviceType::cpu,
                  10,
                  rules({Layout::shuffled_16x16}, floats),
                  [](std::span<const Tensor* const> a) -> std::string {
                    const Tensor& w = *a[1];
                    if (!w.is_contiguous()) return "w must be contiguous";
                    if (w.size(0) % 16 != 0 || w.size(1) % 32 != 0)
                      return "needs N % 16 == 0 and K % 32 == 0";
                    return x_out_rows_dense(a);
                  },
                  "N % 16 == 0, K % 32 == 0",
                  reinterpret_cast<const void*>(&matmul_shuffled)};
  registry.add(shuffled);
  Kernel fallback{op_names::matmul,
                  "matmul.cpu.strided_fallback",
                  DeviceType::cpu,
                  1,
                  rules({Layout::strided}, floats),
                  x_out_rows_dense,
                  "any weight strides (slow)",
                  reinterpret_cast<const void*>(&matmul_strided_fallback)};
  registry.add(fallback);
}

}  // namespace refit::cpu
