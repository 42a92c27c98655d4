// GGUF reader (versions 2 and 3), memory-mapped, treating the file as untrusted input.
//
// File layout (ggml/docs/gguf.md; all little-endian):
//   "GGUF" u32 version u64 n_tensors u64 n_kv
//   n_kv × { string key, u32 value_type, value }      string = u64 len + bytes (UTF-8)
//                                                      array  = u32 elem_type + u64 count + elems
//   n_tensors × { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
//   padding to general.alignment (default 32), then the tensor data; each tensor lives at
//   data_start + offset, offsets aligned.
//
// Shapes: ggml's ne[0] is the fastest-varying dimension. refit shapes are row-major (last
// dimension fastest), so a tensor with ne = [64, 512] is exposed with shape [512, 64].
//
// Every count, length and offset is checked against the bytes that remain before it is used;
// failures throw FormatError "<path>: <what was wrong>".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "formats/byte_source.h"
#include "formats/gguf_types.h"

namespace refit {

enum class GgufValueType : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};
std::string_view gguf_value_type_name(GgufValueType t);  // "u32", "string", "array", ...

// One metadata value. Scalars keep their exact type; arrays keep their element type and
// hold strings, scalars or nested arrays.
class GgufValue {
 public:
  GgufValueType type() const { return type_; }
  // "u32", "string", or "array[string]" / "array[array]" — for error messages.
  std::string type_str() const;

  bool is_integer() const;  // u8..u64, i8..i64 (not bool)
  bool is_float() const { return type_ == GgufValueType::f32 || type_ == GgufValueType::f64; }

  // Scalar readers; REFIT_ASSERT on the wrong kind (check type() first, or use the
  // GgufMetadata accessors, which give a user-facing error).
  int64_t as_i64() const;   // any signed or unsigned integer type (u64 > INT64_MAX asserts)
  uint64_t as_u64() const;  // any integer type whose value is >= 0
  double as_f64() const;    // f32 or f64
  bool as_bool() const;
  const std::string& as_string() const;

  // Arrays.
  GgufValueType array_type() const { return array_type_; }
  size_t array_size() const;
  const std::vector<std::string>& strings() const { return strings_; }  // array of string
  // Element i of any array as a value of its own (a copy; scalars are cheap).
  GgufValue at(size_t i) const;

 private:
  friend class GgufParser;
  GgufValueType type_ = GgufValueType::u8;
  GgufValueType array_type_ = GgufValueType::u8;
  uint64_t bits_ = 0;  // scalar: integers zero/sign-extended to 64 bits, floats as double bits
  std::string string_;
  std::vector<std::string> strings_;  // array of string
  std::vector<uint8_t> raw_;          // array of scalars: the little-endian element bytes
  std::vector<GgufValue> elements_;   // array of arrays
};

// The key/value section. Accessors come in two forms: get_*() returns nullopt when the key
// is absent, require_*() throws when it is; both throw FormatError naming the file, the key,
// the wanted and the actual type when the key has another type. Integer getters accept any
// integer type whose value fits (files disagree on u32 versus i32 for the same key).
class GgufMetadata {
 public:
  const std::string& path() const { return path_; }
  size_t size() const { return entries_.size(); }
  // In file order.
  const std::vector<std::pair<std::string, GgufValue>>& entries() const { return entries_; }
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const GgufValue* find(std::string_view key) const;

  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<uint32_t> get_u32(std::string_view key) const;
  std::optional<int32_t> get_i32(std::string_view key) const;
  std::optional<uint64_t> get_u64(std::string_view key) const;
  std::optional<float> get_f32(std::string_view key) const;  // f32 or f64
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::vector<std::string>> get_array_strings(std::string_view key) const;
  std::optional<std::vector<float>> get_array_f32(std::string_view key) const;
  std::optional<std::vector<int32_t>> get_array_i32(std::string_view key) const;

  std::string require_string(std::string_view key) const;
  uint32_t require_u32(std::string_view key) const;
  int32_t require_i32(std::string_view key) const;
  uint64_t require_u64(std::string_view key) const;
  float require_f32(std::string_view key) const;
  bool require_bool(std::string_view key) const;
  std::vector<std::string> require_array_strings(std::string_view key) const;
  std::vector<float> require_array_f32(std::string_view key) const;
  std::vector<int32_t> require_array_i32(std::string_view key) const;

  // Without copying: the strings of an array-of-string value (for 100k+ token vocabularies).
  const std::vector<std::string>* find_array_strings(std::string_view key) const;

 private:
  friend class GgufParser;
  [[noreturn]] void wrong_type(std::string_view key, std::string_view wanted,
                               const GgufValue& actual) const;
  [[noreturn]] void missing(std::string_view key, std::string_view wanted) const;
  std::string path_;
  std::vector<std::pair<std::string, GgufValue>> entries_;
  std::unordered_map<std::string, size_t> index_;
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::f32;
  std::vector<uint64_t> ne;  // ggml order: ne[0] fastest
  Shape shape;               // row-major refit order: ne reversed
  uint64_t offset = 0;       // relative to the start of the data section
  uint64_t nbytes = 0;       // exact bytes of the tensor (blocks for quantized types)
  int64_t numel() const;
};

// A tensor of a quantized (or any) ggml type, exposed without dequantizing: the raw block
// bytes as a read-only u8 tensor over the mapping, plus what they mean.
struct GgmlTensorView {
  GgmlType type = GgmlType::f32;
  Shape shape;   // logical row-major shape of the values
  Tensor bytes;  // u8 [nbytes], zero-copy view over the file
  int64_t numel() const;
  // Row r of the logical 2-D matrix [rows, shape.back()] as raw blocks.
  int64_t row_bytes() const;
};

class GgufFile {
 public:
  static constexpr uint32_t kDefaultAlignment = 32;
  static constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

  // Maps and parses the file; throws FormatError naming the path.
  static std::shared_ptr<GgufFile> open(const std::string& path);
  // Parses bytes already in memory (fuzzers, tests); `source` keeps them alive.
  static std::shared_ptr<GgufFile> parse(ByteSource source);

  const std::string& path() const { return source_.path(); }
  const ByteSource& source() const { return source_; }
  uint32_t version() const { return version_; }
  const GgufMetadata& metadata() const { return metadata_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute file offset of tensor data
  std::optional<std::string> architecture() const {
    return metadata_.get_string("general.architecture");
  }

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  const GgufTensorInfo& tensor_info(std::string_view name) const;  // throws when absent

  // Plain-typed tensor (f32, f16, bf16, f64, i8..i64) as a zero-copy read-only view with the
  // row-major shape. Throws for quantized types: use raw() or dequantize().
  Tensor tensor(std::string_view name) const;
  // Any type: raw bytes + ggml type + logical shape, no copy.
  GgmlTensorView raw(std::string_view name) const;
  // A new f32 tensor with the values (Q8_0, Q4_0, MXFP4, F16, BF16, F32).
  Tensor dequantize(std::string_view name) const;

 private:
  friend class GgufParser;
  ByteSource source_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  GgufMetadata metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace refit
