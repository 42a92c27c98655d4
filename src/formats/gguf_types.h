// ggml tensor types as GGUF stores them: the type ids (append-only, with gaps, exactly
// ggml.h's `enum ggml_type`), a traits table (block size, bytes per block, the plain
// refit DType where one exists), and the quantized block structs with their sizes asserted
// so a mapped GGUF tensor can be used in place, byte for byte as ggml lays it out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "core/dtype.h"

namespace refit {

enum class GgmlType : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  // 4, 5: Q4_2 / Q4_3, removed from ggml
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  iq2_xxs = 16,
  iq2_xs = 17,
  iq3_xxs = 18,
  iq1_s = 19,
  iq4_nl = 20,
  iq3_s = 21,
  iq2_s = 22,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  iq1_m = 29,
  bf16 = 30,
  // 31..33: Q4_0_4_4 / 4_8 / 8_8, removed from GGUF files
  tq1_0 = 34,
  tq2_0 = 35,
  // 36..38: IQ4_NL_4_4 / 4_8 / 8_8, removed
  mxfp4 = 39,
};

struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;       // ggml's name: "f32", "q8_0", "mxfp4", ...
  int64_t block_size;          // values per block (1 for plain types)
  size_t type_size;            // bytes per block
  std::optional<DType> dtype;  // the plain element type, nullopt for quantized types
  bool can_dequantize;         // refit has a to-f32 routine for it (dequantize_row below)
};

// Traits for a raw type id read from a file; nullptr when the id is not a ggml type.
const GgmlTypeTraits* ggml_type_traits(uint32_t id);
const GgmlTypeTraits& ggml_type_traits(GgmlType type);
std::string_view ggml_type_name(GgmlType type);
bool ggml_type_is_quantized(GgmlType type);
// The ggml type of a plain refit dtype (f32, f16, bf16, f64, i8, i16, i32, i64).
std::optional<GgmlType> ggml_type_of(DType dtype);

// ---- block layouts (ggml-common.h), little-endian, no padding ----
inline constexpr int kQK4_0 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK_MXFP4 = 32;

// 32 values: value[j] = (nibble - 8) * d; low nibbles are values 0..15, high nibbles 16..31.
struct BlockQ4_0 {
  uint16_t d;  // f16 scale
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18, "ggml block_q4_0 is 18 bytes");

// 32 values: value[j] = qs[j] * d.
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34, "ggml block_q8_0 is 34 bytes");

// 32 values: value[j] = kMxfp4Values[nibble] * 2^(e - 128); low nibbles are values 0..15,
// high nibbles 16..31. The table holds *twice* the e2m1 values (so they are integers),
// which is why the scale is 2^(e-128) rather than the OCP 2^(e-127).
struct BlockMxfp4 {
  uint8_t e;  // e8m0 shared exponent
  uint8_t qs[kQK_MXFP4 / 2];
};
static_assert(sizeof(BlockMxfp4) == 17, "ggml block_mxfp4 is 17 bytes");

inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// ggml's GGML_E8M0_TO_FP32_HALF: 2^(e - 128) for every e (no NaN case).
float e8m0_to_f32_half(uint8_t e);

// Decodes `n` values of `type` from `src` (which holds `src_bytes` bytes) into `dst`.
// Throws Error when the type has no dequantizer here, when n is not a multiple of the
// block size, or when src_bytes is not exactly the bytes n values need.
void dequantize_row(GgmlType type, const void* src, size_t src_bytes, float* dst, int64_t n);

// Bytes needed for n values of type (n must be a multiple of the block size); nullopt when
// it is not, or on overflow.
std::optional<uint64_t> ggml_nbytes(GgmlType type, uint64_t n);

}  // namespace refit
