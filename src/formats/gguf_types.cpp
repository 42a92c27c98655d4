#include "formats/gguf_types.h"

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"
#include "core/float_formats.h"

namespace refit {
namespace {

using T = GgmlType;
// Sizes from ggml-common.h (sizeof(block_*)) and ggml.c's type_traits; QK_K = 256.
constexpr GgmlTypeTraits kTraits[] = {
    {T::f32, "f32", 1, 4, DType::f32, true},
    {T::f16, "f16", 1, 2, DType::f16, true},
    {T::q4_0, "q4_0", 32, 18, std::nullopt, true},
    {T::q4_1, "q4_1", 32, 20, std::nullopt, false},
    {T::q5_0, "q5_0", 32, 22, std::nullopt, false},
    {T::q5_1, "q5_1", 32, 24, std::nullopt, false},
    {T::q8_0, "q8_0", 32, 34, std::nullopt, true},
    {T::q8_1, "q8_1", 32, 36, std::nullopt, false},
    {T::q2_k, "q2_K", 256, 84, std::nullopt, false},
    {T::q3_k, "q3_K", 256, 110, std::nullopt, false},
    {T::q4_k, "q4_K", 256, 144, std::nullopt, false},
    {T::q5_k, "q5_K", 256, 176, std::nullopt, false},
    {T::q6_k, "q6_K", 256, 210, std::nullopt, false},
    {T::q8_k, "q8_K", 256, 292, std::nullopt, false},
    {T::iq2_xxs, "iq2_xxs", 256, 66, std::nullopt, false},
    {T::iq2_xs, "iq2_xs", 256, 74, std::nullopt, false},
    {T::iq3_xxs, "iq3_xxs", 256, 98, std::nullopt, false},
    {T::iq1_s, "iq1_s", 256, 50, std::nullopt, false},
    {T::iq4_nl, "iq4_nl", 32, 18, std::nullopt, false},
    {T::iq3_s, "iq3_s", 256, 110, std::nullopt, false},
    {T::iq2_s, "iq2_s", 256, 82, std::nullopt, false},
    {T::iq4_xs, "iq4_xs", 256, 136, std::nullopt, false},
    {T::i8, "i8", 1, 1, DType::i8, false},
    {T::i16, "i16", 1, 2, DType::i16, false},
    {T::i32, "i32", 1, 4, DType::i32, false},
    {T::i64, "i64", 1, 8, DType::i64, false},
    {T::f64, "f64", 1, 8, DType::f64, false},
    {T::iq1_m, "iq1_m", 256, 56, std::nullopt, false},
    {T::bf16, "bf16", 1, 2, DType::bf16, true},
    {T::tq1_0, "tq1_0", 256, 54, std::nullopt, false},
    {T::tq2_0, "tq2_0", 256, 66, std::nullopt, false},
    {T::mxfp4, "mxfp4", 32, 17, std::nullopt, true},
};

}  // namespace

const GgmlTypeTraits* ggml_type_traits(uint32_t id) {
  for (const auto& t : kTraits)
    if (static_cast<uint32_t>(t.type) == id) return &t;
  return nullptr;
}

const GgmlTypeTraits& ggml_type_traits(GgmlType type) {
  const GgmlTypeTraits* t = ggml_type_traits(static_cast<uint32_t>(type));
  REFIT_ASSERT(t != nullptr);
  return *t;
}

std::string_view ggml_type_name(GgmlType type) { return ggml_type_traits(type).name; }

bool ggml_type_is_quantized(GgmlType type) { return !ggml_type_traits(type).dtype.has_value(); }

std::optional<GgmlType> ggml_type_of(DType dtype) {
  for (const auto& t : kTraits)
    if (t.dtype == dtype) return t.type;
  return std::nullopt;
}

std::optional<uint64_t> ggml_nbytes(GgmlType type, uint64_t n) {
  const auto& t = ggml_type_traits(type);
  uint64_t bs = static_cast<uint64_t>(t.block_size);
  if (n % bs != 0) return std::nullopt;
  uint64_t bytes;
  if (__builtin_mul_overflow(n / bs, static_cast<uint64_t>(t.type_size), &bytes))
    return std::nullopt;
  return bytes;
}

float e8m0_to_f32_half(uint8_t e) {
  // Bit patterns exactly as ggml-impl.h's ggml_e8m0_to_fp32_half: 2^(e-128), which for
  // e = 0 and 1 is a float32 subnormal.
  uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

void dequantize_row(GgmlType type, const void* src, size_t src_bytes, float* dst, int64_t n) {
  const auto& traits = ggml_type_traits(type);
  if (!traits.can_dequantize) fail("dequantize: no f32 conversion for ggml type {}", traits.name);
  if (n < 0) fail("dequantize: negative count {}", n);
  auto need = ggml_nbytes(type, static_cast<uint64_t>(n));
  if (!need)
    fail("dequantize: {} values is not a multiple of the {} block size {}", n, traits.name,
         traits.block_size);
  if (*need != src_bytes)
    fail("dequantize: {} values of {} need {} bytes, got {}", n, traits.name, *need, src_bytes);
  const auto* p = static_cast<const uint8_t*>(src);
  const int64_t nb = n / traits.block_size;
  switch (type) {
    case GgmlType::f32:
      std::memcpy(dst, p, src_bytes);
      return;
    case GgmlType::f16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    case GgmlType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    case GgmlType::q8_0:
      for (int64_t b = 0; b < nb; ++b) {
        BlockQ8_0 blk;
        std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
        const float d = f16_to_f32(blk.d);
        for (int j = 0; j < kQK8_0; ++j) dst[b * kQK8_0 + j] = blk.qs[j] * d;
      }
      return;
    case GgmlType::q4_0:
      for (int64_t b = 0; b < nb; ++b) {
        BlockQ4_0 blk;
        std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
        const float d = f16_to_f32(blk.d);
        for (int j = 0; j < kQK4_0 / 2; ++j) {
          dst[b * kQK4_0 + j] = ((blk.qs[j] & 0x0F) - 8) * d;
          dst[b * kQK4_0 + j + kQK4_0 / 2] = ((blk.qs[j] >> 4) - 8) * d;
        }
      }
      return;
    case GgmlType::mxfp4:
      for (int64_t b = 0; b < nb; ++b) {
        BlockMxfp4 blk;
        std::memcpy(&blk, p + b * sizeof blk, sizeof blk);
        const float d = e8m0_to_f32_half(blk.e);
        for (int j = 0; j < kQK_MXFP4 / 2; ++j) {
          dst[b * kQK_MXFP4 + j] = kMxfp4Values[blk.qs[j] & 0x0F] * d;
          dst[b * kQK_MXFP4 + j + kQK_MXFP4 / 2] = kMxfp4Values[blk.qs[j] >> 4] * d;
        }
      }
      return;
    default:
      fail("dequantize: no f32 conversion for ggml type {}", traits.name);
  }
}

}  // namespace refit
