#include "parallel/command_wire.h"

#include <cstring>

#include "core/error.h"

namespace refit {

void WireWriter::i64(int64_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); }

void WireWriter::str(const std::string& s) {
  i64(static_cast<int64_t>(s.size()));
  out_ += s;
}

void WireWriter::i32s(std::span<const int32_t> v) {
  out_.append(reinterpret_cast<const char*>(v.data()), v.size_bytes());
}

int64_t WireReader::i64() {
  int64_t v;
  std::memcpy(&v, take(sizeof v), sizeof v);
  return v;
}

std::string WireReader::str() {
  const int64_t n = i64();
  if (n < 0 || static_cast<uint64_t>(n) > in_.size() - at_)
    fail("{}: a string length {} out of range in a command", context_, n);
  return std::string(take(static_cast<size_t>(n)), static_cast<size_t>(n));
}

std::vector<int32_t> WireReader::i32s(int64_t n) {
  if (n < 0 || static_cast<uint64_t>(n) > (in_.size() - at_) / sizeof(int32_t))
    fail("{}: a count {} out of range in a command", context_, n);
  std::vector<int32_t> v(static_cast<size_t>(n));
  if (n > 0) std::memcpy(v.data(), take(v.size() * sizeof(int32_t)), v.size() * sizeof(int32_t));
  return v;
}

int64_t WireReader::count(int64_t limit, const char* what) {
  const int64_t n = i64();
  if (n < 0 || n > limit) fail("{}: {} {} out of range in a command", context_, what, n);
  return n;
}

const char* WireReader::take(size_t n) {
  if (n > in_.size() - at_) fail("{}: a command is shorter than its fields", context_);
  const char* p = in_.data() + at_;
  at_ += n;
  return p;
}

}  // namespace refit
