// A read-only sweep over memory at the widest SIMD width, for measuring read bandwidth:
// decode reads its weights this way (once per token, in full vectors), so a bandwidth
// figure taken with narrower or dependent loads would understate what decode can reach.
#pragma once

#include <cstddef>
#include <cstdint>

namespace refit::cpu {

// A checksum of bytes [p, p + n) (wrapping 64-bit lane sums), computed with independent
// full-width loads; the result only keeps the loads from being optimised away.
uint64_t read_sweep(const void* p, size_t n);
// The same bytes as 16 equal parts read side by side (many streams in flight, as a matmul
// reads many weight rows). For n a multiple of 1 KiB, the same checksum as read_sweep.
uint64_t read_sweep_streams(const void* p, size_t n);

}  // namespace refit::cpu
