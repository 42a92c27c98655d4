#include "formats/file_sink.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace refit {

namespace {
constexpr size_t kBufferBytes = 8u << 20;  // few, large write() calls for multi-GB files
}

FileSink::FileSink(std::string path) : path_(std::move(path)), partial_path_(path_ + ".partial") {
  file_ = std::fopen(partial_path_.c_str(), "wb");
  if (file_ == nullptr) fail("{}: cannot create file: {}", partial_path_, std::strerror(errno));
  std::setvbuf(file_, nullptr, _IOFBF, kBufferBytes);
}

FileSink::~FileSink() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::error_code ignored;
    std::filesystem::remove(partial_path_, ignored);
  }
}

void FileSink::write(const void* data, size_t nbytes) {
  REFIT_ASSERT(file_ != nullptr);
  if (nbytes == 0) return;
  if (std::fwrite(data, 1, nbytes, file_) != nbytes)
    fail("{}: write of {} bytes at offset {} failed: {}", partial_path_, nbytes, offset_,
         std::strerror(errno));
  offset_ += nbytes;
}

void FileSink::write_zeros(size_t nbytes) {
  static const std::vector<uint8_t> zeros(4096, 0);
  while (nbytes > 0) {
    size_t n = std::min(nbytes, zeros.size());
    write(zeros.data(), n);
    nbytes -= n;
  }
}

void FileSink::pad_to(uint64_t alignment) {
  REFIT_ASSERT(alignment > 0);
  uint64_t rem = offset_ % alignment;
  if (rem != 0) write_zeros(static_cast<size_t>(alignment - rem));
}

void FileSink::finish() {
  REFIT_ASSERT(file_ != nullptr);
  std::FILE* f = file_;
  file_ = nullptr;
  bool ok = std::fflush(f) == 0;
  int flush_errno = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::error_code ignored;
    std::filesystem::remove(partial_path_, ignored);
    fail("{}: closing the file failed: {}", partial_path_, std::strerror(flush_errno));
  }
  std::error_code ec;
  std::filesystem::rename(partial_path_, path_, ec);
  if (ec) fail("{}: cannot rename to {}: {}", partial_path_, path_, ec.message());
}

}  // namespace refit
