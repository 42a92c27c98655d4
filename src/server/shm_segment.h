// Read-only access to a POSIX shared-memory segment a trainer on the same machine filled
// (python/refit/weight_bucket.py: write_shm_bucket). The weight-update carrier names one
// instead of inlining base64 bytes, so a bucket crosses with one copy and no encoding.
//
// The name is untrusted input: only a plain segment name is accepted ("psm_1a2b",
// "/psm_1a2b" or "/dev/shm/psm_1a2b": letters, digits, '.', '_', '-', no '/', not
// starting with '.'), so a request can never open a path outside /dev/shm. The segment is
// opened O_RDONLY|O_NOFOLLOW (a symlink planted in /dev/shm is refused), must be a regular
// file, and the byte range asked for is checked against its size before it is mapped.
// The trainer may shrink the segment while refit copies out of it: the mapping is guarded
// (core/sigbus_guard.h), so that read sees zeros instead of ending the process, and torn()
// tells the reader to refuse it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/sigbus_guard.h"

namespace refit {

class ShmSegment {
 public:
  // Maps bytes [offset, offset + nbytes) of the segment read-only; nbytes < 0 means "to
  // the end". Throws Error naming the segment and what was wrong.
  static std::unique_ptr<ShmSegment> open(const std::string& name, int64_t offset, int64_t nbytes);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // True once a read of the mapping ran past the segment's end (it shrank under the read).
  bool torn() const { return guard_ && guard_->torn(); }

 private:
  ShmSegment() = default;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  std::unique_ptr<GuardedRegion> guard_;
};

// "/dev/shm/<name>" for a valid segment name (any of the three spellings above); throws
// Error saying what a valid name is otherwise.
std::string shm_segment_path(const std::string& name);

}  // namespace refit
