// Large host buffers taken straight from the kernel: anonymous mappings aligned to 2 MiB (so
// that they can live on huge pages) that read as zeros until written. A page nobody writes
// is never backed by memory, so a zeroed buffer costs nothing until it is used. Storage
// relies on that: a weight allocated at its checkpoint dtype and then replaced by quantized
// codes at load (a mixture of experts' bf16 experts, 1.6 GB a layer of gpt-oss) used to be
// written with zeros first, and every layer's placeholder was resident at once.
#pragma once

#include <cstddef>

namespace refit::fresh_pages {

constexpr size_t kAlignment = size_t{2} << 20;

// `bytes` of zero pages at a kAlignment-aligned address, advised onto huge pages, or
// nullptr when the system has none to give.
void* map(size_t bytes);

// Gives back what map returned (the same `bytes`).
void unmap(void* p, size_t bytes) noexcept;

// How many of the bytes of the whole pages in [p, p + bytes) are mapped now (mincore):
// what giving them back would return to the system. A page read but never written maps the
// kernel's shared zero page and counts too (memory that is never read before it is written,
// weights and KV blocks, is counted exactly). All of them where the system cannot tell.
size_t resident_bytes(const void* p, size_t bytes) noexcept;

}  // namespace refit::fresh_pages
