// The wire format of the commands the tensor-parallel lead broadcasts to its workers
// (parallel/rank_group.h, parallel/weight_sync.h): little-endian int64 fields, length-prefixed
// strings and int32 arrays, read back with bounds checks. A short or lying payload is a
// protocol bug, never a crash: the reader throws naming what was wrong, prefixed with
// `context` ("tensor-parallel serving", "weight sync").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace refit {

class WireWriter {
 public:
  void i64(int64_t v);
  void str(const std::string& s);
  void i32s(std::span<const int32_t> v);
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class WireReader {
 public:
  WireReader(const std::string& in, const char* context) : in_(in), context_(context) {}
  int64_t i64();
  std::string str();
  // `n` int32s (n as read before, checked against what the payload still holds).
  std::vector<int32_t> i32s(int64_t n);
  // An int64 that counts something (`what`): refused when negative or above `limit`.
  int64_t count(int64_t limit, const char* what);

 private:
  const char* take(size_t n);
  const std::string& in_;
  const char* context_;
  size_t at_ = 0;
};

}  // namespace refit
