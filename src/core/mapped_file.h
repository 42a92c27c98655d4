// A read-only memory mapping of a whole file. Tensors read from checkpoints are views
// over it (see Storage::view_of_mapping), so loading costs no copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace refit {

class MappedFile {
 public:
  // Throws FormatError naming the path when it cannot be opened or mapped.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace refit
