#include "core/dtype.h"

#include "core/error.h"

namespace refit {

int dtype_bits(DType t) {
  switch (t) {
    case DType::f64:
    case DType::i64:
      return 64;
    case DType::f32:
    case DType::i32:
      return 32;
    case DType::f16:
    case DType::bf16:
    case DType::i16:
      return 16;
    case DType::f8_e4m3fn:
    case DType::f8_e5m2:
    case DType::e8m0:
    case DType::i8:
    case DType::u8:
    case DType::boolean:
      return 8;
    case DType::f4_e2m1:
      return 4;
  }
  REFIT_ASSERT(false);
}

size_t dtype_nbytes(DType t, int64_t n) { return static_cast<size_t>((n * dtype_bits(t) + 7) / 8); }

bool dtype_is_floating(DType t) {
  switch (t) {
    case DType::f32:
    case DType::f64:
    case DType::f16:
    case DType::bf16:
    case DType::f8_e4m3fn:
    case DType::f8_e5m2:
    case DType::f4_e2m1:
    case DType::e8m0:
      return true;
    default:
      return false;
  }
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::f8_e4m3fn:
      return "f8_e4m3fn";
    case DType::f8_e5m2:
      return "f8_e5m2";
    case DType::f4_e2m1:
      return "f4_e2m1";
    case DType::e8m0:
      return "e8m0";
    case DType::i8:
      return "i8";
    case DType::u8:
      return "u8";
    case DType::i16:
      return "i16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::boolean:
      return "bool";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (DType t : kAllDTypes)
    if (dtype_name(t) == name) return t;
  return std::nullopt;
}

}  // namespace refit
