// The one thread pool every CPU kernel runs on.
//
// Why this shape: decode runs hundreds of small parallel ops per token (a matmul of a
// few microseconds each), so waking threads through a condition variable on every call
// would cost more than the work. Workers therefore spin for a short while after each job
// (kSpinTime) and only then sleep on a futex (std::atomic::wait). The calling thread takes
// part in every job, so `n` threads means n - 1 workers.
//
// Chunks are claimed dynamically: each participant claims the next unclaimed chunk with a
// compare-and-swap on a word holding (job id, next chunk). If a worker is descheduled
// (the machine is shared), the caller simply runs its chunk too; a late worker sees that
// the job id moved on and claims nothing. The chunk index is what fn receives as
// `thread_index`, so per-chunk scratch buffers indexed by it are never used concurrently.
#include "core/thread_pool.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/error.h"

namespace refit {
namespace {

constexpr auto kSpinTime = std::chrono::microseconds(100);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Set while a thread runs a chunk, so a nested parallel_for runs inline instead of
// deadlocking on the pool it is already part of.
thread_local bool t_inside_job = false;

int threads_from_env() {
  const char* env = std::getenv("REFIT_THREADS");
  if (env == nullptr || *env == '\0') {
    unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : static_cast<int>(hw);
  }
  char* end = nullptr;
  long v = std::strtol(env, &end, 10);
  if (end == env || *end != '\0' || v < 1 || v > 1024)
    fail("REFIT_THREADS='{}' is not a thread count (expected an integer in 1..1024)", env);
  return static_cast<int>(v);
}

class Pool {
 public:
  explicit Pool(int n) { start(n); }
  ~Pool() { stop(); }

  int size() const { return size_; }

  void resize(int n) {
    std::lock_guard lock(submit_mutex_);
    stop();
    start(n);
  }

  void run(int64_t n, int64_t chunks, const std::function<void(int64_t, int64_t, int)>& fn) {
    std::lock_guard lock(submit_mutex_);  // one job at a time from any number of callers
    fn_ = &fn;
    n_ = n;
    chunks_ = chunks;
    error_ = nullptr;
    remaining_.store(static_cast<uint32_t>(chunks), std::memory_order_relaxed);
    uint32_t job = job_seq_.load(std::memory_order_relaxed) + 1;
    claim_word_.store(uint64_t{job} << 32, std::memory_order_release);
    job_seq_.store(job, std::memory_order_release);
    job_seq_.notify_all();

    work_on(job);
    // Wait for chunks claimed by workers: spin first, they are usually about to finish.
    auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
    uint32_t left;
    while ((left = remaining_.load(std::memory_order_acquire)) != 0) {
      if (std::chrono::steady_clock::now() < spin_until) {
        cpu_relax();
      } else {
        remaining_.wait(left, std::memory_order_acquire);
      }
    }
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void start(int n) {
    size_ = n < 1 ? 1 : n;
    stopping_.store(false);
    // A worker must compare against the job counter as it is now, not as it is when the
    // thread first runs: a job or stop() posted in between would otherwise be missed.
    const uint32_t seen = job_seq_.load(std::memory_order_acquire);
    for (int i = 1; i < size_; ++i) workers_.emplace_back([this, seen] { worker_loop(seen); });
  }

  void stop() {
    stopping_.store(true);
    job_seq_.fetch_add(1, std::memory_order_release);
    job_seq_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  // Claims and runs chunks of `job` until none are left.
  void work_on(uint32_t job) {
    for (;;) {
      uint64_t word = claim_word_.load(std::memory_order_acquire);
      for (;;) {
        if (static_cast<uint32_t>(word >> 32) != job) return;  // that job is over
        if (static_cast<int64_t>(word & 0xffffffffu) >= chunks_) return;
        if (claim_word_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel)) break;
      }
      // Parameters are stable here: the job cannot finish before this chunk does.
      int64_t chunk = static_cast<int64_t>(word & 0xffffffffu);
      int64_t begin = n_ * chunk / chunks_;
      int64_t end = n_ * (chunk + 1) / chunks_;
      t_inside_job = true;
      try {
        (*fn_)(begin, end, static_cast<int>(chunk));
      } catch (...) {
        std::lock_guard lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      t_inside_job = false;
      if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) remaining_.notify_all();
    }
  }

  void worker_loop(uint32_t seen) {
    for (;;) {
      auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
      uint32_t job;
      while ((job = job_seq_.load(std::memory_order_acquire)) == seen) {
        if (std::chrono::steady_clock::now() < spin_until) {
          cpu_relax();
        } else {
          job_seq_.wait(seen, std::memory_order_acquire);
        }
      }
      seen = job;
      if (stopping_.load(std::memory_order_acquire)) return;
      work_on(job);
    }
  }

  int size_ = 1;
  std::vector<std::thread> workers_;
  std::mutex submit_mutex_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint32_t> job_seq_{0};
  std::atomic<uint64_t> claim_word_{0};  // (job id << 32) | next unclaimed chunk
  std::atomic<uint32_t> remaining_{0};   // chunks of the current job not yet finished
  const std::function<void(int64_t, int64_t, int)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunks_ = 0;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

Pool& pool() {
  static Pool p(threads_from_env());
  return p;
}

}  // namespace

int num_threads() { return pool().size(); }

void set_num_threads(int n) {
  if (n < 1) fail("set_num_threads({}): need at least one thread", n);
  pool().resize(n);
}

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                  int64_t grain) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t chunks = 1;
  if (!t_inside_job) {
    chunks = std::min<int64_t>(pool().size(), n / grain);
    if (chunks < 1) chunks = 1;
  }
  if (chunks == 1) {
    fn(0, n, 0);
    return;
  }
  pool().run(n, chunks, fn);
}

}  // namespace refit
