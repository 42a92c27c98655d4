// GGUF metadata values and the typed accessors (gguf.h). Parsing is in gguf.cpp.
#include <fmt/format.h>

#include <cstring>
#include <limits>

#include "formats/gguf.h"

namespace refit {

std::string_view gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8:
      return "u8";
    case GgufValueType::i8:
      return "i8";
    case GgufValueType::u16:
      return "u16";
    case GgufValueType::i16:
      return "i16";
    case GgufValueType::u32:
      return "u32";
    case GgufValueType::i32:
      return "i32";
    case GgufValueType::f32:
      return "f32";
    case GgufValueType::boolean:
      return "bool";
    case GgufValueType::string:
      return "string";
    case GgufValueType::array:
      return "array";
    case GgufValueType::u64:
      return "u64";
    case GgufValueType::i64:
      return "i64";
    case GgufValueType::f64:
      return "f64";
  }
  return "unknown";
}

std::string GgufValue::type_str() const {
  if (type_ != GgufValueType::array) return std::string(gguf_value_type_name(type_));
  return fmt::format("array[{}]", gguf_value_type_name(array_type_));
}

namespace {
bool is_integer_type(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8:
    case GgufValueType::i8:
    case GgufValueType::u16:
    case GgufValueType::i16:
    case GgufValueType::u32:
    case GgufValueType::i32:
    case GgufValueType::u64:
    case GgufValueType::i64:
      return true;
    default:
      return false;
  }
}
bool is_signed_type(GgufValueType t) {
  return t == GgufValueType::i8 || t == GgufValueType::i16 || t == GgufValueType::i32 ||
         t == GgufValueType::i64;
}
}  // namespace

bool GgufValue::is_integer() const { return is_integer_type(type_); }

int64_t GgufValue::as_i64() const {
  REFIT_ASSERT(is_integer());
  if (!is_signed_type(type_)) REFIT_ASSERT(bits_ <= static_cast<uint64_t>(INT64_MAX));
  return static_cast<int64_t>(bits_);
}

uint64_t GgufValue::as_u64() const {
  REFIT_ASSERT(is_integer());
  if (is_signed_type(type_)) REFIT_ASSERT(static_cast<int64_t>(bits_) >= 0);
  return bits_;
}

double GgufValue::as_f64() const {
  REFIT_ASSERT(is_float());
  double d;
  std::memcpy(&d, &bits_, sizeof d);
  return d;
}

bool GgufValue::as_bool() const {
  REFIT_ASSERT(type_ == GgufValueType::boolean);
  return bits_ != 0;
}

const std::string& GgufValue::as_string() const {
  REFIT_ASSERT(type_ == GgufValueType::string);
  return string_;
}

size_t GgufValue::array_size() const {
  REFIT_ASSERT(type_ == GgufValueType::array);
  switch (array_type_) {
    case GgufValueType::string:
      return strings_.size();
    case GgufValueType::array:
      return elements_.size();
    default:
      break;
  }
  size_t width = 0;
  switch (array_type_) {
    case GgufValueType::u8:
    case GgufValueType::i8:
    case GgufValueType::boolean:
      width = 1;
      break;
    case GgufValueType::u16:
    case GgufValueType::i16:
      width = 2;
      break;
    case GgufValueType::u32:
    case GgufValueType::i32:
    case GgufValueType::f32:
      width = 4;
      break;
    default:
      width = 8;
      break;
  }
  return raw_.size() / width;
}

GgufValue GgufValue::at(size_t i) const {
  REFIT_ASSERT(type_ == GgufValueType::array && i < array_size());
  if (array_type_ == GgufValueType::array) return elements_[i];
  GgufValue v;
  v.type_ = array_type_;
  if (array_type_ == GgufValueType::string) {
    v.string_ = strings_[i];
    return v;
  }
  const uint8_t* p = raw_.data();
  auto load = [&](auto zero) {
    decltype(zero) x;
    std::memcpy(&x, p + i * sizeof x, sizeof x);
    return x;
  };
  double d;
  switch (array_type_) {
    case GgufValueType::u8:
      v.bits_ = load(uint8_t{});
      break;
    case GgufValueType::boolean:
      v.bits_ = load(uint8_t{});
      break;
    case GgufValueType::i8:
      v.bits_ = static_cast<uint64_t>(int64_t{load(int8_t{})});
      break;
    case GgufValueType::u16:
      v.bits_ = load(uint16_t{});
      break;
    case GgufValueType::i16:
      v.bits_ = static_cast<uint64_t>(int64_t{load(int16_t{})});
      break;
    case GgufValueType::u32:
      v.bits_ = load(uint32_t{});
      break;
    case GgufValueType::i32:
      v.bits_ = static_cast<uint64_t>(int64_t{load(int32_t{})});
      break;
    case GgufValueType::u64:
      v.bits_ = load(uint64_t{});
      break;
    case GgufValueType::i64:
      v.bits_ = static_cast<uint64_t>(load(int64_t{}));
      break;
    case GgufValueType::f32:
      d = load(float{});
      std::memcpy(&v.bits_, &d, 8);
      break;
    case GgufValueType::f64:
      d = load(double{});
      std::memcpy(&v.bits_, &d, 8);
      break;
    default:
      REFIT_ASSERT(false);
  }
  return v;
}

// ---- GgufMetadata ----

const GgufValue* GgufMetadata::find(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void GgufMetadata::wrong_type(std::string_view key, std::string_view wanted,
                              const GgufValue& actual) const {
  throw FormatError(fmt::format("{}: metadata key '{}' should be {}, but the file stores {}", path_,
                                key, wanted, actual.type_str()));
}

void GgufMetadata::missing(std::string_view key, std::string_view wanted) const {
  throw FormatError(
      fmt::format("{}: required metadata key '{}' ({}) is missing", path_, key, wanted));
}

namespace {
// An integer value in [lo, hi], or a FormatError naming the key.
template <typename Int>
Int checked_int(const GgufMetadata& md, std::string_view key, const GgufValue& v,
                std::string_view wanted) {
  constexpr auto lo = std::numeric_limits<Int>::min();
  constexpr auto hi = std::numeric_limits<Int>::max();
  bool ok;
  if (is_signed_type(v.type())) {
    int64_t x = v.as_i64();
    ok = x >= static_cast<int64_t>(lo) &&
         (x < 0 || static_cast<uint64_t>(x) <= static_cast<uint64_t>(hi));
    if (ok) return static_cast<Int>(x);
    throw FormatError(fmt::format("{}: metadata key '{}' = {} ({}) does not fit in {}", md.path(),
                                  key, x, v.type_str(), wanted));
  }
  uint64_t x = v.as_u64();
  if (x <= static_cast<uint64_t>(hi)) return static_cast<Int>(x);
  throw FormatError(fmt::format("{}: metadata key '{}' = {} ({}) does not fit in {}", md.path(),
                                key, x, v.type_str(), wanted));
}
}  // namespace

std::optional<std::string> GgufMetadata::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type() != GgufValueType::string) wrong_type(key, "string", *v);
  return v->as_string();
}

std::optional<uint32_t> GgufMetadata::get_u32(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer()) wrong_type(key, "an integer (u32)", *v);
  return checked_int<uint32_t>(*this, key, *v, "u32");
}

std::optional<int32_t> GgufMetadata::get_i32(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer()) wrong_type(key, "an integer (i32)", *v);
  return checked_int<int32_t>(*this, key, *v, "i32");
}

std::optional<uint64_t> GgufMetadata::get_u64(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer()) wrong_type(key, "an integer (u64)", *v);
  return checked_int<uint64_t>(*this, key, *v, "u64");
}

std::optional<float> GgufMetadata::get_f32(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_float()) wrong_type(key, "a float (f32)", *v);
  return static_cast<float>(v->as_f64());
}

std::optional<bool> GgufMetadata::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type() != GgufValueType::boolean) wrong_type(key, "bool", *v);
  return v->as_bool();
}

const std::vector<std::string>* GgufMetadata::find_array_strings(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  if (v->type() != GgufValueType::array || v->array_type() != GgufValueType::string)
    wrong_type(key, "array[string]", *v);
  return &v->strings();
}

std::optional<std::vector<std::string>> GgufMetadata::get_array_strings(
    std::string_view key) const {
  const auto* s = find_array_strings(key);
  if (!s) return std::nullopt;
  return *s;
}

std::optional<std::vector<float>> GgufMetadata::get_array_f32(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type() != GgufValueType::array ||
      (v->array_type() != GgufValueType::f32 && v->array_type() != GgufValueType::f64))
    wrong_type(key, "array[f32]", *v);
  std::vector<float> out(v->array_size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(v->at(i).as_f64());
  return out;
}

std::optional<std::vector<int32_t>> GgufMetadata::get_array_i32(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type() != GgufValueType::array || !is_integer_type(v->array_type()))
    wrong_type(key, "array[i32]", *v);
  std::vector<int32_t> out(v->array_size());
  for (size_t i = 0; i < out.size(); ++i) {
    GgufValue e = v->at(i);
    out[i] = checked_int<int32_t>(*this, fmt::format("{}[{}]", key, i), e, "i32");
  }
  return out;
}

#define REFIT_GGUF_REQUIRE(Ret, name, wanted)                    \
  Ret GgufMetadata::require_##name(std::string_view key) const { \
    auto v = get_##name(key);                                    \
    if (!v) missing(key, wanted);                                \
    return std::move(*v);                                        \
  }
REFIT_GGUF_REQUIRE(std::string, string, "string")
REFIT_GGUF_REQUIRE(uint32_t, u32, "u32")
REFIT_GGUF_REQUIRE(int32_t, i32, "i32")
REFIT_GGUF_REQUIRE(uint64_t, u64, "u64")
REFIT_GGUF_REQUIRE(float, f32, "f32")
REFIT_GGUF_REQUIRE(bool, bool, "bool")
REFIT_GGUF_REQUIRE(std::vector<std::string>, array_strings, "array[string]")
REFIT_GGUF_REQUIRE(std::vector<float>, array_f32, "array[f32]")
REFIT_GGUF_REQUIRE(std::vector<int32_t>, array_i32, "array[i32]")
#undef REFIT_GGUF_REQUIRE

}  // namespace refit
