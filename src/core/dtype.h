// Element types. Sub-byte types (f4_e2m1) pack two values per byte, low nibble first,
// as ggml's MXFP4 and the OCP MX spec do; a tensor of them must be contiguous along its
// last dimension, which must be even.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace refit {

enum class DType : uint8_t {
  f32,
  f64,
  f16,
  bf16,
  f8_e4m3fn,  // 1-4-3, bias 7, no infinities, 0x7F/0xFF are NaN, max 448
  f8_e5m2,    // 1-5-2, bias 15, IEEE-like with infinities
  f4_e2m1,    // 1-2-1, bias 1, values {0, .5, 1, 1.5, 2, 3, 4, 6}, no inf/NaN, 2 per byte
  e8m0,       // exponent-only scale 2^(e-127), 0xFF is NaN (OCP MX)
  i8,
  u8,
  i16,
  i32,
  i64,
  boolean,
};

inline constexpr DType kAllDTypes[] = {
    DType::f32,     DType::f64,     DType::f16,  DType::bf16,   DType::f8_e4m3fn,
    DType::f8_e5m2, DType::f4_e2m1, DType::e8m0, DType::i8,     DType::u8,
    DType::i16,     DType::i32,     DType::i64,  DType::boolean};

// Bits per element (4 for f4_e2m1, else a multiple of 8).
int dtype_bits(DType t);
// Bytes needed for n elements (rounded up for sub-byte types).
size_t dtype_nbytes(DType t, int64_t n);
bool dtype_is_floating(DType t);       // every float format, including f8/f4/e8m0
std::string_view dtype_name(DType t);  // "f32", "bf16", "f8_e4m3fn", ...
std::optional<DType> dtype_from_name(std::string_view name);

}  // namespace refit
