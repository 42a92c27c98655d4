// The one pool every CPU kernel runs on. parallel_for splits [0, n) into contiguous
// ranges among the threads (a thread that falls behind has the rest of its share taken
// over) and returns when all are done. Nested calls run inline.
#pragma once

#include <cstdint>
#include <functional>

namespace refit {

// Number of threads the pool uses (default: hardware concurrency, or REFIT_THREADS).
int num_threads();
// Resize the pool (>= 1). Not thread-safe against concurrent parallel_for calls.
void set_num_threads(int n);
// fn(begin, end, thread_index), possibly several times per thread; each range is at least
// `grain` long (unless n is shorter), calls with the same thread_index never overlap, and
// where the cuts fall depends on timing, so fn's results must not depend on them.
void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                  int64_t grain = 1);

}  // namespace refit
