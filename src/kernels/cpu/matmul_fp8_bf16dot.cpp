// FP8 W8A8 matmul on AVX-512 BF16 (see matmul_fp8_bf16dot.h): the code tables, the
// activation re-ordering, the tile loop (un-shuffling shuffled weights) and the dispatch rows.
#include "kernels/cpu/matmul_fp8_bf16dot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/float_formats.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/matmul_quantized_rows.h"
#include "kernels/matmul_quantized.h"
#include "kernels/op_names.h"

namespace refit::cpu::fp8dot {

namespace {

// bf16 bits of every e4m3 code (exact; the NaN codes give 0x7FC0 / 0xFFC0), and the low
// and high bytes of the magnitude codes 0..127 as the kernel's lookups take them.
struct Bf16Tables {
  uint16_t of_code[256];
  alignas(64) uint8_t low[128];
  alignas(64) uint8_t high[128];
};
const Bf16Tables& tables() {
  static const Bf16Tables t = [] {
    Bf16Tables t{};
    for (int c = 0; c < 256; ++c)
      t.of_code[c] = f32_to_bf16(f8_e4m3fn_to_f32(static_cast<uint8_t>(c)));
    for (int c = 0; c < 128; ++c) {
      t.low[c] = static_cast<uint8_t>(t.of_code[c] & 0xFF);
      t.high[c] = static_cast<uint8_t>(t.of_code[c] >> 8);
    }
    return t;
  }();
  return t;
}

template <bool Shuffled>
void matmul_fp8_bf16dot(const Tensor& x, const Tensor& x_scale, const Tensor& w,
                        const Tensor& w_scale, int64_t group, const Tensor& bias, Tensor& out) {
  Operands op{};
  op.M = x.size(0), op.K = x.size(1), op.N = w.size(0);
  if (op.M == 0 || op.N == 0) return;
  op.S = w_scale.size(1);
  if (op.S > 1 && group % 64 != 0) {
    // Scale groups that split a 64-code vector (no scheme makes them; fp8-block's are 128):
    // the Highway kernel takes them. `group` is not a tensor, so dispatch cannot see it.
    const std::string name =
        std::string("matmul_quantized.cpu.hwy_f8_") + (Shuffled ? "shuffled_16x16" : "plain");
    for (const Kernel* k : KernelRegistry::global().kernels("matmul_quantized"))
      if (k->name == name)
        return reinterpret_cast<kernels::MatmulQuantizedFn>(k->fn)(x, x_scale, w, w_scale, group,
                                                                   bias, out);
    fail("matmul_quantized: FP8 scale groups of {} need kernel {}, which is not registered", group,
         name);
  }
  op.group = group;
  op.Kp = (op.K + 63) / 64 * 64;
  std::vector<uint16_t> xb(static_cast<size_t>(op.M * op.Kp));
  prepare_activations(static_cast<const uint8_t*>(x.raw_data()), x.stride(0), op.M, op.K, op.Kp,
                      xb.data());
  op.xb = xb.data();
  op.bf16_low = tables().low;
  op.bf16_high = tables().high;
  op.xs = x_scale.data<const float>();
  op.w_scale = w_scale.data<const float>();
  op.bias = bias.defined() ? bias.data<const float>() : nullptr;
  op.out = out.data<float>();
  op.ldo = out.stride(0);
  const auto* codes = static_cast<const uint8_t*>(w.raw_data());
  const int64_t tiles = (op.N + 15) / 16;
  parallel_for(tiles, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n0 = t * 16, rows = std::min<int64_t>(16, op.N - n0);
      if constexpr (Shuffled) {
        // Tiles are 16 x K bytes, one after the other (N % 16 == 0 for this layout).
        const uint8_t* tile = codes + n0 * op.K;
        shuffled_tile_avx512(op, tile, n0, n0 + 32 <= op.N ? tile + 16 * op.K : nullptr);
      } else {
        // The next tile's bytes are requested while this one is multiplied.
        const uint8_t* next = n0 + 32 <= op.N ? codes + (n0 + 16) * op.K : nullptr;
        rows_avx512(op, codes + n0 * op.K, n0, rows, next);
      }
    }
  });
}

}  // namespace

bool on_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512bf16") &&
                          __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("fma");
  return cpu;
#else
  return false;
#endif
}

bool usable() { return on_cpu() && avx512_allowed(); }

void prepare_activations(const uint8_t* x_codes, int64_t ldx, int64_t M, int64_t K, int64_t Kp,
                         uint16_t* xb) {
  const uint16_t* bf16 = tables().of_code;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < Kp; c += 64)
      for (int64_t j = 0; j < 64; ++j) {
        // Vector word j of a chunk: the first 32 are codes 0-7, 16-23, 32-39, 48-55.
        const int64_t half = j / 32, i = j % 32, k = c + (i / 8) * 16 + half * 8 + i % 8;
        xb[m * Kp + c + j] = k < K ? bf16[x_codes[m * ldx + k]] : 0;
      }
}

void register_kernels(KernelRegistry& registry) {
  using Fn = kernels::MatmulQuantizedFn;
  for (const bool shuffled : {false, true}) {
    Kernel k;
    k.op = op_names::matmul_quantized;
    k.name = std::string("matmul_quantized.cpu.avx512bf16_f8_w8a8_") +
             (shuffled ? "shuffled_16x16" : "plain");
    k.device = DeviceType::cpu;
    k.priority = 30;  // above the Highway kernels (20), which take what this refuses
    k.args = {
        {"x", {DType::f8_e4m3fn}, {Layout::strided}, false},
        {"x_scale", {DType::f32}, {Layout::strided}, false},
        {"w", {DType::f8_e4m3fn}, {shuffled ? Layout::shuffled_16x16 : Layout::strided}, false},
        {"w_scale", {DType::f32}, {Layout::strided}, false},
        {"bias", {DType::f32}, {Layout::strided}, true},
        {"out", {DType::f32}, {Layout::strided}, false}};
    k.constraint = [shuffled](std::span<const Tensor* const> a) -> std::string {
      if (!usable())
        return "needs AVX-512 BF16 and VBMI, which this CPU lacks or REFIT_CPU_ISA caps below avx3";
      if (std::string why = dense_operands_reason(a); !why.empty()) return why;
      const Tensor& x = *a[0];
      const Tensor& w = *a[2];
      const Tensor& ws = *a[3];
      // One scale per row, or per group of 128 (fp8-block): S = ceil(K / 128).
      const int64_t K = x.size(1), S = ws.size(1);
      if (S != 1 && S != (K + 127) / 128) return "scales must be per row or per 128 columns";
      if (shuffled && (w.size(0) % 16 != 0 || K % 32 != 0))
        return fmt::format("shuffled codes need N % 16 == 0 and K % 32 == 0, got {}",
                           shape_str(w.shape()));
      return {};
    };
    k.constraint_text = std::string("AVX-512 BF16 + VBMI; ") +
                        (shuffled ? "w: 16 x 32-byte tiles; " : "") +
                        "scales per row or per 128 columns";
    k.fn = shuffled ? kernel_fn<Fn>(&matmul_fp8_bf16dot<true>)
                    : kernel_fn<Fn>(&matmul_fp8_bf16dot<false>);
    k.cpu_lacks = [] { return on_cpu() ? std::string() : "AVX-512 BF16 and VBMI"; };
    registry.add(std::move(k));
  }
}

}  // namespace refit::cpu::fp8dot
