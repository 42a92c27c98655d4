// GGUF v3 writer: metadata of every value type, tensor infos, then the tensor data streamed
// in the declared order (a multi-GB model never has to be in memory at once). What it writes
// is what formats/gguf.h reads and what llama.cpp's gguf-py writes:
//   "GGUF" u32 3, u64 n_tensors, u64 n_kv, the key/values in insertion order, the tensor
//   infos (ggml ne order: the reverse of refit's row-major shape), zero padding to the
//   alignment, then each tensor at an aligned offset, zero-padded to the alignment.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "core/tensor.h"
#include "formats/gguf.h"
#include "formats/gguf_types.h"

namespace refit {

class FileSink;

class GgufWriter {
 public:
  static constexpr uint32_t kVersion = 3;

  // A non-default alignment (power of two) is recorded as general.alignment.
  explicit GgufWriter(uint32_t alignment = GgufFile::kDefaultAlignment);
  ~GgufWriter();

  // ---- metadata (insertion order is file order; a key added twice throws) ----
  void add_u8(std::string_view key, uint8_t v);
  void add_i8(std::string_view key, int8_t v);
  void add_u16(std::string_view key, uint16_t v);
  void add_i16(std::string_view key, int16_t v);
  void add_u32(std::string_view key, uint32_t v);
  void add_i32(std::string_view key, int32_t v);
  void add_u64(std::string_view key, uint64_t v);
  void add_i64(std::string_view key, int64_t v);
  void add_f32(std::string_view key, float v);
  void add_f64(std::string_view key, double v);
  void add_bool(std::string_view key, bool v);
  void add_string(std::string_view key, std::string_view v);
  void add_array_strings(std::string_view key, std::span<const std::string> values);
  void add_array_f32(std::string_view key, std::span<const float> values);
  void add_array_i32(std::string_view key, std::span<const int32_t> values);
  void add_array_u32(std::string_view key, std::span<const uint32_t> values);
  void add_array_i64(std::string_view key, std::span<const int64_t> values);
  void add_array_u8(std::string_view key, std::span<const uint8_t> values);

  // ---- tensors: declare all, then write the file ----
  // `shape` is row-major (refit order); at most 4 dims; for block types the last dimension
  // must be a multiple of the block size. Returns the tensor's byte size.
  uint64_t add_tensor(std::string_view name, GgmlType type, const Shape& shape);
  size_t tensor_count() const { return tensors_.size(); }

  // The header (magic through tensor infos and the padding to the data section). With no
  // tensors declared this is a complete GGUF file (e.g. a vocabulary-only GGUF in memory).
  std::vector<uint8_t> header_bytes() const;

  // Streaming: open() writes the header; write_tensor() takes the tensors in declaration
  // order, each exactly its byte size; finish() checks all were written and closes.
  void open(const std::string& path);
  void write_tensor(std::string_view name, const void* data, size_t nbytes);
  // From a plain tensor whose dtype matches the declared ggml type (made contiguous).
  void write_tensor(std::string_view name, const Tensor& tensor);
  void finish();

 private:
  struct TensorDecl {
    std::string name;
    GgmlType type;
    Shape shape;
    uint64_t offset;  // relative to the data section
    uint64_t nbytes;
  };
  void begin_kv(std::string_view key, GgufValueType type);
  template <typename T>
  void put(T v);
  void put_string(std::string_view s);
  template <typename T>
  void add_array(std::string_view key, GgufValueType elem, std::span<const T> values);

  uint32_t alignment_;
  uint64_t n_kv_ = 0;
  std::vector<uint8_t> kv_bytes_;  // encoded key/values
  std::unordered_set<std::string> keys_;
  std::vector<TensorDecl> tensors_;
  std::unordered_set<std::string> tensor_names_;
  uint64_t data_bytes_ = 0;
  std::unique_ptr<FileSink> sink_;
  uint64_t data_start_ = 0;
  size_t next_ = 0;
};

}  // namespace refit
