// Large host buffers kept for reuse after the storage that held them is freed.
//
// A prefill allocates activations of the same few sizes layer after layer (at 512 tokens of
// a 1B model, 4-12 MiB each, ~70 MiB a layer). Each fresh buffer of that size is a new
// mapping: the kernel faults in and zeroes its 2 MiB pages as they are first written, and
// frees them on release, which took 5-6% of a pp512 on one core. Buffers kept here are
// handed out again for an allocation of exactly their size, already mapped.
//
// Bounded: no buffer above kMaxEach is kept, and at most kMaxTotal bytes in all (the least
// recently kept go first); REFIT_BUFFER_CACHE_MIB sets the total (0: keep nothing).
#pragma once

#include <cstddef>

namespace refit::host_buffer_cache {

constexpr size_t kMaxEach = size_t{128} << 20;
constexpr size_t kMaxTotal = size_t{256} << 20;

// A kept buffer of exactly `bytes`, now the caller's (its contents are stale), or nullptr.
void* take(size_t bytes);

// Keeps `p` (fresh_pages::map-ed, `bytes` long) for reuse, or returns false when it is
// not to be kept (the caller frees it).
bool keep(void* p, size_t bytes) noexcept;

// Frees every kept buffer (so that memory given back to the system stays given back);
// returns the bytes of theirs that were backed by memory.
size_t release_all();

// Bytes kept now.
size_t kept_bytes();

}  // namespace refit::host_buffer_cache
