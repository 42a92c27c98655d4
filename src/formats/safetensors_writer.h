// safetensors writer. The header (every tensor's dtype, shape and byte range) is written
// first, then the tensor bytes are streamed in the declared order, so a multi-GB checkpoint
// never has to exist in memory: a caller generates or converts one tensor at a time.
//
// Layout written (what formats/safetensors.h reads):
//   u64 N, N bytes of JSON padded with spaces to a multiple of 8 (so the data section, and
//   every tensor in it when sizes allow, stays 8-byte aligned), then the tensors back to back.
//   The JSON holds {"__metadata__": {...}, "<name>": {"dtype", "shape", "data_offsets"}}.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace refit {

class FileSink;

// The safetensors name of a refit dtype ("F32", "BF16", "F8_E4M3", ...); throws for dtypes
// safetensors cannot store (f4_e2m1).
std::string_view safetensors_dtype_name(DType dtype);

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t nbytes() const;
};

class SafetensorsWriter {
 public:
  // Creates the file and writes the header. Names must be unique and not "__metadata__".
  SafetensorsWriter(const std::string& path, std::vector<SafetensorsEntry> entries,
                    std::map<std::string, std::string> metadata = {{"format", "pt"}});
  ~SafetensorsWriter();  // without finish(): the partial file is deleted

  // The next tensor's bytes: tensors come in the declared order, each with exactly its
  // nbytes(). `name` is checked against that order.
  void write(std::string_view name, const void* data, size_t nbytes);
  // Same, from a tensor of the declared dtype and shape (any strides: made contiguous).
  void write(std::string_view name, const Tensor& tensor);
  // Checks that every tensor was written, then closes the file under its final name.
  void finish();

  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  size_t next_index() const { return next_; }

 private:
  std::vector<SafetensorsEntry> entries_;
  std::unique_ptr<FileSink> sink_;
  size_t next_ = 0;
};

// Whole tensors already in memory, in the given order.
void write_safetensors(const std::string& path,
                       std::span<const std::pair<std::string, Tensor>> tensors,
                       std::map<std::string, std::string> metadata = {{"format", "pt"}});

}  // namespace refit
