#include "formats/byte_source.h"

#include <fmt/format.h>

#include <algorithm>

namespace refit {

ByteSource ByteSource::map_file(const std::string& path, FileAccess access) {
  ByteSource s;
  s.mapping_ = MappedFile::open(path, access);
  s.data_ = s.mapping_->data();
  s.size_ = s.mapping_->size();
  s.path_ = path;
  return s;
}

ByteSource ByteSource::from_bytes(std::string name, const uint8_t* data, size_t size) {
  ByteSource s;
  // Never an empty vector: data() of one may be null, and views need a real address.
  s.owned_ = std::make_shared<std::vector<uint8_t>>(size + 1);
  if (size) std::memcpy(s.owned_->data(), data, size);
  s.data_ = s.owned_->data();
  s.size_ = size;
  s.path_ = std::move(name);
  return s;
}

Tensor ByteSource::view(size_t offset, size_t nbytes, DType dtype, Shape shape) const {
  if (offset > size_ || nbytes > size_ - offset)
    format_fail(path_, "tensor bytes [{}, {}) lie outside the file ({} bytes)", offset,
                static_cast<uint64_t>(offset) + nbytes, size_);
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(numel, d, &numel))
      format_fail(path_, "tensor shape {} overflows", shape_str(shape));
  }
  if (dtype_nbytes(dtype, numel) != nbytes)
    format_fail(path_, "tensor shape {} of {} needs {} bytes, the file gives {}", shape_str(shape),
                dtype_name(dtype), dtype_nbytes(dtype, numel), nbytes);
  // An element that is not naturally aligned in memory (a file whose offsets ignore its
  // own alignment rules) cannot be a view without undefined behaviour: copy it instead.
  const size_t align = std::max<size_t>(1, static_cast<size_t>(dtype_bits(dtype) / 8));
  if (reinterpret_cast<uintptr_t>(data_ + offset) % align != 0) {
    Tensor copy = Tensor::empty(std::move(shape), dtype);
    std::memcpy(copy.raw_data(), data_ + offset, nbytes);
    copy.set_read_only(true);
    return copy;
  }
  std::shared_ptr<Storage> storage;
  if (mapping_) {
    storage = Storage::view_of_mapping(mapping_, offset, nbytes);
  } else {
    auto keep = owned_;
    storage = Storage::wrap(
        const_cast<uint8_t*>(data_ + offset), nbytes, Device::cpu(), [keep] {}, /*writable=*/false);
  }
  return Tensor::from_storage(std::move(storage), dtype, std::move(shape));
}

void ByteReader::seek(size_t offset, std::string_view what) {
  if (offset > size_)
    format_fail(path_, "{} at offset {} lies past the end of the file ({} bytes)", what, offset,
                size_);
  pos_ = offset;
}

void ByteReader::check_count(uint64_t count, uint64_t min_item_bytes, std::string_view what) const {
  uint64_t total;
  if (mul_overflows(count, min_item_bytes, &total) || total > remaining())
    format_fail(path_,
                "{} count {} at offset {} is impossible: {} items need at least {} bytes each, "
                "only {} bytes remain",
                what, count, pos_, count, min_item_bytes, remaining());
}

void ByteReader::truncated(uint64_t n, std::string_view what) const {
  format_fail(path_, "truncated: need {} bytes for {} at offset {}, only {} left", n, what, pos_,
              remaining());
}

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;  // continuation byte, overlong lead (C0, C1) or > F4
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

std::string printable(std::string_view s, size_t max_len) {
  std::string out;
  bool valid = is_valid_utf8(s);
  // Cut valid text at a code point boundary so the message itself stays valid UTF-8.
  if (valid && s.size() > max_len)
    while (max_len > 0 && (static_cast<unsigned char>(s[max_len]) & 0xC0) == 0x80) --max_len;
  for (size_t i = 0; i < s.size() && i < max_len; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F || (!valid && c >= 0x80))
      out += fmt::format("\\x{:02x}", c);
    else
      out += static_cast<char>(c);
  }
  if (s.size() > max_len) out += "...";
  return out;
}

}  // namespace refit
