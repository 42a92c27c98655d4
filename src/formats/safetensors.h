// safetensors reader, memory-mapped, treating the file as untrusted input.
//
// Layout: u64 N (little-endian), N bytes of UTF-8 JSON
//   { "<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//     "__metadata__": {"<key>": "<string>"} }
// then the data section; offsets are relative to its start (8 + N). Checked: N within
// bounds, the JSON, every dtype name, shape × dtype size == end - begin, every range inside
// the data section, no two tensors overlapping.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "formats/byte_source.h"

namespace refit {

// safetensors dtype names ("BF16", "F8_E4M3", ...) to refit dtypes; nullopt when unknown.
std::optional<DType> safetensors_dtype(std::string_view name);

struct SafetensorsTensorInfo {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0;  // byte range relative to the data section
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
};

class SafetensorsFile {
 public:
  // The header may not exceed this (as the reference implementation's limit): a lying
  // length never makes us allocate or parse more.
  static constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

  static std::shared_ptr<SafetensorsFile> open(const std::string& path,
                                               FileAccess access = FileAccess::mapped);
  static std::shared_ptr<SafetensorsFile> parse(ByteSource source);

  const std::string& path() const { return source_.path(); }
  const ByteSource& source() const { return source_; }
  uint64_t data_offset() const { return data_offset_; }  // 8 + N
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // In data-offset order.
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  const SafetensorsTensorInfo* find_tensor(std::string_view name) const;
  const SafetensorsTensorInfo& tensor_info(std::string_view name) const;  // throws when absent
  // Zero-copy read-only view with the stored dtype and shape.
  Tensor tensor(std::string_view name) const;

 private:
  void parse_header();
  ByteSource source_;
  uint64_t data_offset_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace refit
