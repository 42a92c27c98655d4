#include "core/element_access.h"

#include <cmath>
#include <cstring>

#include "core/float_formats.h"

namespace refit {
namespace {

template <typename T>
T read_as(const void* base, int64_t element) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(base) + element * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void write_as(void* base, int64_t element, T v) {
  std::memcpy(static_cast<uint8_t*>(base) + element * sizeof(T), &v, sizeof(T));
}

}  // namespace

double load_element(const void* base, DType dtype, int64_t element) {
  switch (dtype) {
    case DType::f32:
      return read_as<float>(base, element);
    case DType::f64:
      return read_as<double>(base, element);
    case DType::f16:
      return f16_to_f32(read_as<uint16_t>(base, element));
    case DType::bf16:
      return bf16_to_f32(read_as<uint16_t>(base, element));
    case DType::f8_e4m3fn:
      return f8_e4m3fn_to_f32(read_as<uint8_t>(base, element));
    case DType::f8_e5m2:
      return f8_e5m2_to_f32(read_as<uint8_t>(base, element));
    case DType::e8m0:
      return e8m0_to_f32(read_as<uint8_t>(base, element));
    case DType::f4_e2m1: {
      uint8_t byte = static_cast<const uint8_t*>(base)[element / 2];
      return f4_e2m1_to_f32(element % 2 == 0 ? byte & 0xF : byte >> 4);
    }
    case DType::i8:
      return read_as<int8_t>(base, element);
    case DType::u8:
      return read_as<uint8_t>(base, element);
    case DType::i16:
      return read_as<int16_t>(base, element);
    case DType::i32:
      return read_as<int32_t>(base, element);
    case DType::i64:
      return static_cast<double>(read_as<int64_t>(base, element));
    case DType::boolean:
      return read_as<uint8_t>(base, element) != 0 ? 1.0 : 0.0;
  }
  return 0;
}

void store_element(void* base, DType dtype, int64_t element, double value) {
  const float f = static_cast<float>(value);
  switch (dtype) {
    case DType::f32:
      write_as<float>(base, element, f);
      break;
    case DType::f64:
      write_as<double>(base, element, value);
      break;
    case DType::f16:
      write_as<uint16_t>(base, element, f32_to_f16(f));
      break;
    case DType::bf16:
      write_as<uint16_t>(base, element, f32_to_bf16(f));
      break;
    case DType::f8_e4m3fn:
      write_as<uint8_t>(base, element, f32_to_f8_e4m3fn(f));
      break;
    case DType::f8_e5m2:
      write_as<uint8_t>(base, element, f32_to_f8_e5m2(f));
      break;
    case DType::e8m0:
      write_as<uint8_t>(base, element, f32_to_e8m0(f));
      break;
    case DType::f4_e2m1: {
      uint8_t* byte = static_cast<uint8_t*>(base) + element / 2;
      uint8_t nibble = f32_to_f4_e2m1(f);
      *byte = element % 2 == 0 ? static_cast<uint8_t>((*byte & 0xF0) | nibble)
                               : static_cast<uint8_t>((*byte & 0x0F) | (nibble << 4));
      break;
    }
    // Float to integer truncates toward zero, as C++ and torch's .to() do.
    case DType::i8:
      write_as<int8_t>(base, element, static_cast<int8_t>(value));
      break;
    case DType::u8:
      write_as<uint8_t>(base, element, static_cast<uint8_t>(value));
      break;
    case DType::i16:
      write_as<int16_t>(base, element, static_cast<int16_t>(value));
      break;
    case DType::i32:
      write_as<int32_t>(base, element, static_cast<int32_t>(value));
      break;
    case DType::i64:
      write_as<int64_t>(base, element, static_cast<int64_t>(value));
      break;
    case DType::boolean:
      write_as<uint8_t>(base, element, value != 0 ? 1 : 0);
      break;
  }
}

}  // namespace refit
