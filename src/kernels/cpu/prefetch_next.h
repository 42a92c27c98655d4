// Requests a cache line that a decode kernel reads after the tile it is on (the next
// tile's bytes at the same place), into L2 (locality 2: a tile is up to ~90 KiB, more than
// L1 holds beside the current one).
//
// Each line is requested twice, one request right after the other. Measured on AMD EPYC
// Zen 5 (2 vCPUs, `medium`, decode tokens alternating between one request and two in the
// same run, median of the paired ratios): q8_0-w8a8 +2 to +4%, mxfp4-w8a8 +1 to +5%,
// fp8-channel-w8a8 +2%, shuffled fp8-channel-w8a8 +3 to +4%, shuffled bf16 +2%, shuffled
// mxfp4-w8a8 0%; a request of a line already in L1 in place of the second gained ~1%,
// three requests were not better, and doubling the burst of 32 scale requests per tile
// (matmul_int8_dot_avx512.cpp) lost. Not measurable here (the VM exposes no miss counters)
// is why; the likeliest reason is that the core drops a software prefetch that finds its
// miss queue full, and the repeat gets a second chance. The W8A16 kernels
// (matmul_quantized_hwy.cpp) are bound by compute at these thread counts and request once.
#pragma once

namespace refit::cpu {

static inline void prefetch_next(const void* p) {
  __builtin_prefetch(p, 0, 2);
  __builtin_prefetch(p, 0, 2);
}

}  // namespace refit::cpu
