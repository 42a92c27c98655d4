// Bytes of one checkpoint file and a bounds-checked cursor over them. Every reader in
// formats/ parses untrusted input through ByteReader, so no length, count or offset is used
// before it has been checked against the bytes that are actually there.
//
// A ByteSource is either a file's image (MappedFile: its pages mapped, the normal case where
// tensors become zero-copy views, or a private copy read at open) or an owned in-memory
// buffer (fuzzers and tests), so parsing code does not care where the bytes came from.
// A file can change under its reader; readers call check_unchanged() once they have read
// what they need, so bytes torn by a truncation or a rewrite are refused, never used.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/tensor.h"

namespace refit {

class ByteSource {
 public:
  ByteSource() = default;
  // Maps (or copies) the file read-only. Throws FormatError naming the path.
  static ByteSource map_file(const std::string& path, FileAccess access = FileAccess::mapped);
  // Copies `bytes`; `name` stands in for a path in error messages.
  static ByteSource from_bytes(std::string name, const uint8_t* data, size_t size);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Throws FormatError "<path>: changed while it was read (...)" when the file is no longer
  // what it was at open (see MappedFile::check_unchanged); in-memory bytes never change.
  void check_unchanged() const {
    if (mapping_) mapping_->check_unchanged();
  }
  // Runs `parse` over this source; when it throws or returns, a change of the file under it
  // is reported first, as the real cause of whatever the torn bytes looked like.
  template <typename Parse>
  void parse_checked(Parse&& parse) const {
    try {
      parse();
    } catch (...) {
      check_unchanged();
      throw;
    }
    check_unchanged();
  }

  // Read-only view of [offset, offset + nbytes) as a tensor; keeps the bytes alive.
  // Checks the range against the file and `shape × dtype` against nbytes.
  Tensor view(size_t offset, size_t nbytes, DType dtype, Shape shape) const;

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  std::shared_ptr<MappedFile> mapping_;
  std::shared_ptr<std::vector<uint8_t>> owned_;
};

// Little-endian cursor over [begin, end) of a buffer. Each read checks the remaining
// length first and throws FormatError "<path>: truncated: need N bytes for <what> at
// offset X, only M left".
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size, std::string_view path)
      : data_(data), size_(size), path_(path) {}

  size_t offset() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  std::string_view path() const { return path_; }

  template <typename T>
  T read(std::string_view what) {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  // Returns a pointer to the next `n` bytes and advances past them.
  const uint8_t* bytes(uint64_t n, std::string_view what) {
    need(n, what);
    const uint8_t* p = data_ + pos_;
    pos_ += static_cast<size_t>(n);
    return p;
  }
  void skip(uint64_t n, std::string_view what) { bytes(n, what); }
  void seek(size_t offset, std::string_view what);

  // Throws unless `count` items of at least `min_item_bytes` each could still fit: the
  // guard that keeps a lying count from driving a huge allocation or a long loop.
  void check_count(uint64_t count, uint64_t min_item_bytes, std::string_view what) const;

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining()) truncated(n, what);
  }
  [[noreturn]] void truncated(uint64_t n, std::string_view what) const;

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string_view path_;
};

// Throws FormatError "<path>: <message>".
template <typename... Args>
[[noreturn]] void format_fail(std::string_view path, fmt::format_string<Args...> format,
                              Args&&... args) {
  throw FormatError(fmt::format("{}: {}", path, fmt::format(format, std::forward<Args>(args)...)));
}

// Strict UTF-8 check (no overlong forms, no surrogates, nothing above U+10FFFF).
bool is_valid_utf8(std::string_view s);
// `s` with control bytes and invalid UTF-8 escaped, cut to `max_len` bytes: safe to put
// an untrusted string into an error message.
std::string printable(std::string_view s, size_t max_len = 80);

// a * b and a + b with overflow detection (false on overflow).
inline bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}
inline bool add_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_add_overflow(a, b, out);
}

}  // namespace refit
