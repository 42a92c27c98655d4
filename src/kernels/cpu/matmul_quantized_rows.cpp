#include "kernels/cpu/matmul_quantized_rows.h"

#include <fmt/format.h>

#include <cstring>

#include "kernels/op_names.h"

namespace refit::cpu {
namespace {

std::string dense_args(std::span<const Tensor* const> a, bool f4_needs_k32, bool f4) {
  const Tensor& x = *a[0];
  const Tensor& x_scale = *a[1];
  if (std::string why = dense_operands_reason(a); !why.empty()) return why;
  if (x.dtype() == DType::f8_e4m3fn) {
    if (!x_scale.defined()) return "f8 activations need x_scale (per token)";
    if (!x.is_contiguous()) return "f8 activations must be contiguous";
  } else if (x_scale.defined()) {
    return "x_scale is only taken with f8 activations";
  }
  if (f4 && f4_needs_k32 && x.size(1) % 32 != 0)
    return fmt::format("packed f4 needs K % 32 == 0, got K {}", x.size(1));
  return {};
}

}  // namespace

std::string dense_operands_reason(std::span<const Tensor* const> a) {
  if (a[0]->stride(-1) != 1 || a[5]->stride(-1) != 1) return "x and out need stride 1 along K/N";
  if (!a[2]->is_contiguous() || !a[3]->is_contiguous()) return "w and w_scale must be contiguous";
  if (a[4]->defined() && !a[4]->is_contiguous()) return "bias must be contiguous";
  return {};
}

void register_quantized_family(KernelRegistry& registry, const QuantizedKernelFamily& family) {
  struct Row {
    const char* name;
    DType code, scale;
    std::vector<DType> x_dtypes;
    bool shuffled, tiled_scales;
    const void* fn;
  };
  const std::vector<DType> f32_only = {DType::f32}, f32_or_f8 = {DType::f32, DType::f8_e4m3fn};
  const Row rows[] = {
      {"f8_plain", DType::f8_e4m3fn, DType::f32, f32_or_f8, false, false, family.f8_plain},
      {"f8_shuffled_16x16", DType::f8_e4m3fn, DType::f32, f32_or_f8, true, false,
       family.f8_shuffled},
      {"mxfp4_plain", DType::f4_e2m1, DType::e8m0, f32_only, false, false, family.f4_plain},
      {"mxfp4_shuffled_16x16", DType::f4_e2m1, DType::e8m0, f32_only, true, true,
       family.f4_shuffled},
      {"q8_0_plain", DType::i8, DType::f16, f32_only, false, false, family.i8_plain},
      {"q8_0_shuffled_16x16", DType::i8, DType::f16, f32_only, true, true, family.i8_shuffled},
  };
  for (const Row& row : rows) {
    Kernel k;
    k.op = op_names::matmul_quantized;
    k.name = family.name_prefix + row.name;
    k.device = DeviceType::cpu;
    k.priority = family.priority;
    const Layout wl = row.shuffled ? Layout::shuffled_16x16 : Layout::strided;
    const Layout sl = row.tiled_scales ? Layout::shuffled_16x16 : Layout::strided;
    k.args = {{"x", row.x_dtypes, {Layout::strided}, false},
              {"x_scale", {DType::f32}, {Layout::strided}, true},
              {"w", {row.code}, {wl}, false},
              {"w_scale", {row.scale}, {sl}, false},
              {"bias", {DType::f32}, {Layout::strided}, true},
              {"out", {DType::f32}, {Layout::strided}, false}};
    const bool shuffled = row.shuffled, f4 = row.code == DType::f4_e2m1;
    const bool f4_needs_k32 = family.f4_needs_k_multiple_of_32;
    k.constraint = [shuffled, f4, f4_needs_k32](std::span<const Tensor* const> a) -> std::string {
      if (shuffled) {
        const Tensor& w = *a[2];
        if (w.size(0) % 16 != 0 || (w.size(1) / (f4 ? 2 : 1)) % 32 != 0)
          return fmt::format("shuffled codes need N % 16 == 0 and 32-byte rows tiles, got {}",
                             shape_str(w.shape()));
      }
      return dense_args(a, f4_needs_k32, f4);
    };
    k.constraint_text = std::string(row.shuffled ? "w: 16 x 32-byte tiles; " : "") +
                        (f4 && f4_needs_k32 ? "K % 32 == 0; " : "") + "w, w_scale contiguous" +
                        family.constraint_suffix;
    k.fn = row.fn;
    k.selectable = !family.covered_by_simd || (f4 && !shuffled);
    registry.add(std::move(k));
  }
}

void unshuffle_code_tile(const uint8_t* codes, int64_t t, int64_t row_bytes, uint8_t* out) {
  const int64_t pieces = row_bytes / 32;
  for (int64_t kt = 0; kt < pieces; ++kt)
    for (int64_t h = 0; h < 2; ++h) {
      const uint8_t* src = codes + (t * pieces + kt) * 512 + h * 256;
      for (int64_t r = 0; r < 16; ++r)
        std::memcpy(out + r * row_bytes + kt * 32 + h * 16, src + r * 16, 16);
    }
}

}  // namespace refit::cpu
