// A read-only image of a whole file: either its pages mapped (tensors read from checkpoints
// are then views over the page cache, see Storage::view_of_mapping, so loading costs no
// copy), or a private copy read at open (a snapshot the file's later changes cannot reach).
//
// Checkpoint files are written by other processes, which may truncate, rewrite or replace
// them while refit reads. Neither form can crash the process: a mapping is a GuardedRegion
// (reads past a truncation see zeros and mark it torn), and check_unchanged() tells a
// reader whether what it read is the file as it was at open.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/sigbus_guard.h"

namespace refit {

enum class FileAccess : uint8_t {
  // The file's pages, read on demand: fast and no extra memory, but a writer can change
  // what a later read sees (check_unchanged() after reading says whether one did).
  mapped,
  // Read into memory at open and checked then: bytes that stay as they were, at the cost of
  // the file's size in memory. For reads whose result must be all-or-nothing (a refit).
  copied,
};

class MappedFile {
 public:
  // Throws FormatError naming the path when it cannot be opened, mapped or read, or (copied)
  // when the file changed while it was read.
  static std::shared_ptr<MappedFile> open(const std::string& path,
                                          FileAccess access = FileAccess::mapped);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  FileAccess access() const { return access_; }

  // Throws FormatError "<path>: changed while it was read (...)" when a read of the mapping
  // ran past a truncation, or the file's size or modification time is no longer what it was
  // at open (rewritten in place). A file replaced by rename is not a change: the mapping
  // keeps the old file's bytes, whole. A copy was checked when it was made and never throws.
  void check_unchanged() const;

  // Test seam: called with the path once a file is open and its size taken, before any of
  // its bytes is read, so a test can change the file at that point of a read. nullptr: none.
  using OpenedHook = void (*)(const std::string& path);
  static void set_opened_hook_for_testing(OpenedHook hook);

 private:
  MappedFile() = default;
  void copy_contents(int fd);
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_bytes_ = 0;  // the extent to unmap
  std::string path_;
  FileAccess access_ = FileAccess::mapped;
  int fd_ = -1;  // kept open (mapped) to ask the same file, not the path, whether it changed
  int64_t mtime_ns_ = 0;
  std::unique_ptr<GuardedRegion> guard_;
};

}  // namespace refit
