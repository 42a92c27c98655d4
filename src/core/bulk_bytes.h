// memset and memcpy for large host buffers, run on every pool thread. On fresh memory the
// cost is the first write to each page, which the kernel clears in the faulting thread; on a
// 2-vCPU VM one thread filled a fresh 2 GiB buffer at 0.3-0.6 GB/s (pages the host had not
// backed lately) or 5-6 GB/s (pages touched before), two threads at 1.6 and 9 GB/s. Small
// buffers (under two 8 MiB chunks) take the plain call. Called from inside a pool job they
// run inline; from another thread while a job runs they wait for it (one job at a time).
#pragma once

#include <cstddef>

namespace refit {

void bulk_fill(void* p, int value, size_t n);
// dst and src must not overlap.
void bulk_copy(void* dst, const void* src, size_t n);

}  // namespace refit
