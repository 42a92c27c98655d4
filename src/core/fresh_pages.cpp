#include "core/fresh_pages.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__unix__)
#include <sys/mman.h>
#include <unistd.h>

#include <vector>
#endif

namespace refit::fresh_pages {

#if defined(__unix__)
void* map(size_t bytes) {
  // One alignment more than asked, then the unaligned ends given back.
  const size_t span = bytes + kAlignment;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (begin + kAlignment - 1) / kAlignment * kAlignment;
  if (aligned > begin) munmap(raw, aligned - begin);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t end = aligned + (bytes + page - 1) / page * page;  // munmap takes whole pages
  if (begin + span > end) munmap(reinterpret_cast<void*>(end), begin + span - end);
#if defined(MADV_HUGEPAGE)
  // Linux's default transparent-huge-page mode ("madvise") grants them only on request.
  madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);  // advice only
#endif
  return reinterpret_cast<void*>(aligned);
}

void unmap(void* p, size_t bytes) noexcept { munmap(p, bytes); }

size_t resident_bytes(const void* p, size_t bytes) noexcept {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const auto end = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  if (end <= begin) return 0;
  try {
    std::vector<unsigned char> in((end - begin) / page);
    if (mincore(reinterpret_cast<void*>(begin), end - begin, in.data()) != 0) return end - begin;
    size_t pages = 0;
    for (unsigned char c : in) pages += c & 1;
    return pages * page;
  } catch (...) {  // no memory for the vector: say all of it
    return end - begin;
  }
}
#else
void* map(size_t bytes) {
  void* p = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (p) std::memset(p, 0, bytes);
  return p;
}

void unmap(void* p, size_t) noexcept { std::free(p); }

size_t resident_bytes(const void*, size_t bytes) noexcept { return bytes; }
#endif

}  // namespace refit::fresh_pages
