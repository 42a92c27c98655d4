// Sequential binary output for the checkpoint writers: a file written front to back with
// large buffered writes, every failure (open, short write, close) reported with the path.
// The file is created as "<path>.partial" and renamed to `path` only by finish(), so an
// interrupted writer never leaves a truncated checkpoint under the real name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace refit {

class FileSink {
 public:
  explicit FileSink(std::string path);
  ~FileSink();  // without finish(): closes and deletes the partial file
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  const std::string& path() const { return path_; }
  uint64_t offset() const { return offset_; }  // bytes written so far

  void write(const void* data, size_t nbytes);
  void write_zeros(size_t nbytes);
  // Zero bytes up to the next multiple of `alignment`.
  void pad_to(uint64_t alignment);
  // Flushes, closes and renames the partial file to the final path.
  void finish();

 private:
  std::string path_;
  std::string partial_path_;
  std::FILE* file_ = nullptr;
  uint64_t offset_ = 0;
};

}  // namespace refit
