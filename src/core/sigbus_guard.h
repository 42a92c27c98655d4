// Reads of a memory-mapped file that another process truncates fault with SIGBUS: the
// pages past the new end are gone, and the default action ends the process. A trainer that
// rewrites its checkpoint in place while refit reads it must cost an error, not the server.
//
// A guarded region is a mapping whose SIGBUS faults are absorbed: a process-wide handler
// (installed once, at the first registration, chaining to whatever handler was there before
// for every other fault) maps anonymous zero pages over the region from the faulting page to
// its end and marks the region torn. The reader then runs to completion on zeros, and whoever
// owns the mapping checks `torn` afterwards and refuses what it read (MappedFile does).
#pragma once

#include <cstddef>

namespace refit {

class GuardedRegion {
 public:
  // Registers [begin, begin + size). Throws Error when the fixed table of regions is full
  // (it is sized far above the files a process has open at once).
  GuardedRegion(const void* begin, size_t size);
  // Unregisters; call before the region is unmapped.
  ~GuardedRegion();
  GuardedRegion(const GuardedRegion&) = delete;
  GuardedRegion& operator=(const GuardedRegion&) = delete;

  // True once a read of the region faulted (the file shrank under it).
  bool torn() const;

 private:
  int slot_;
};

}  // namespace refit
