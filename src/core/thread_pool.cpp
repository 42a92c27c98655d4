// The one thread pool every CPU kernel runs on.
//
// Why this shape: decode runs hundreds of small parallel ops per token (a matmul of a
// few microseconds each), so waking threads through a condition variable on every call
// would cost more than the work. Workers therefore spin for a short while after each job
// (kSpinTime) and only then sleep on a futex (std::atomic::wait). The calling thread takes
// part in every job, so `n` threads means n - 1 workers.
//
// Work is split so that a slow or descheduled thread does not hold the others up (on a
// shared VM a vCPU loses several percent of its time, and decode runs ~110 parallel ops
// per token): [0, n) is cut into units (at least `grain` long, at most kUnitsPerThread
// per thread) and each participant owns a contiguous share of them. It runs its share
// front to back, each claim a quarter of what is left (claims shrink toward the end, so
// the threads finish close together); when its share is empty it steals half of what is
// left of another's, from the back. A thread's claims follow each other, so a streaming
// kernel's prefetch of the next rows stays useful. Against two fixed halves this raised
// quantized decode on `medium` by 3-18% (bench/RESULTS.md): one thread no longer idles
// at every join. Each participant's (job id, first, end) sits in one atomic word on its
// own cache line; a late worker sees the job id moved on and claims nothing. fn receives
// the participant's index: calls with the same index never overlap, so per-thread scratch
// indexed by it stays private. Results must not depend on where ranges are cut (every
// caller computes each index on its own), as the cuts now depend on timing.
#include "core/thread_pool.h"

#include <algorithm>
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
constexpr int kMaxPoolThreads = 1024;  // one share (a cache line) per thread is preallocated

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
    return hw == 0 ? 1 : std::min(static_cast<int>(hw), kMaxPoolThreads);
  }
  char* end = nullptr;
  long v = std::strtol(env, &end, 10);
  if (end == env || *end != '\0' || v < 1 || v > kMaxPoolThreads)
    fail("REFIT_THREADS='{}' is not a thread count (expected an integer in 1..{})", env,
         kMaxPoolThreads);
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

  void run(int64_t n, int64_t participants, int64_t grain,
           const std::function<void(int64_t, int64_t, int)>& fn) {
    std::lock_guard lock(submit_mutex_);  // one job at a time from any number of callers
    fn_ = &fn;
    const int64_t units = std::min<int64_t>(n / grain, participants * kUnitsPerThread);
    // Relaxed atomics: a late worker of an earlier job may read them while they change; it
    // then fails the job-id check on every share and uses nothing it read.
    n_.store(n, std::memory_order_relaxed);
    units_.store(units, std::memory_order_relaxed);
    participants_.store(participants, std::memory_order_relaxed);
    error_ = nullptr;
    remaining_.store(static_cast<uint32_t>(units), std::memory_order_relaxed);
    const uint32_t job = job_seq_.load(std::memory_order_relaxed) + 1;
    for (int64_t p = 0; p < participants; ++p)
      shares_[p].word.store(pack(job, units * p / participants, units * (p + 1) / participants),
                            std::memory_order_relaxed);
    job_seq_.store(job, std::memory_order_release);
    job_seq_.notify_all();

    work_on(job, 0);
    // Wait for units claimed by workers: spin first, they are usually about to finish.
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
  static constexpr int64_t kUnitsPerThread = 32;
  struct alignas(64) Share {
    std::atomic<uint64_t> word{0};  // (job id << 32) | (first unit << 16) | end unit
  };
  static uint64_t pack(uint32_t job, int64_t first, int64_t last) {
    return (uint64_t{job} << 32) | (static_cast<uint64_t>(first) << 16) |
           static_cast<uint64_t>(last);
  }

  void start(int n) {
    size_ = n < 1 ? 1 : n;
    stopping_.store(false);
    // A worker must compare against the job counter as it is now, not as it is when the
    // thread first runs: a job or stop() posted in between would otherwise be missed.
    const uint32_t seen = job_seq_.load(std::memory_order_acquire);
    for (int i = 1; i < size_; ++i)
      workers_.emplace_back([this, seen, i] { worker_loop(seen, i); });
  }

  void stop() {
    stopping_.store(true);
    job_seq_.fetch_add(1, std::memory_order_release);
    job_seq_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  // Takes units [first, last) from share s of `job`: from the front (the owner) or the back
  // (a thief). False when the share is empty or belongs to another job.
  bool claim(int64_t s, uint32_t job, bool front, int64_t& first, int64_t& last) {
    uint64_t word = shares_[s].word.load(std::memory_order_acquire);
    for (;;) {
      if (static_cast<uint32_t>(word >> 32) != job) return false;
      const int64_t lo = static_cast<int64_t>((word >> 16) & 0xffff),
                    hi = static_cast<int64_t>(word & 0xffff);
      if (lo >= hi) return false;
      // The owner takes a quarter of what is left (claims shrink toward the end, so the
      // threads finish close together); a thief takes half of what is left.
      const int64_t take = std::max<int64_t>(1, (hi - lo) / (front ? 4 : 2));
      first = front ? lo : hi - take;
      last = front ? lo + take : hi;
      const uint64_t next = front ? pack(job, last, hi) : pack(job, lo, first);
      if (shares_[s].word.compare_exchange_weak(word, next, std::memory_order_acq_rel)) return true;
    }
  }

  // Runs participant `self`'s share of `job`, then steals until no share has work left.
  void work_on(uint32_t job, int self) {
    const int64_t participants = participants_.load(std::memory_order_relaxed);
    for (;;) {
      int64_t first = 0, last = 0;
      bool got = claim(self, job, true, first, last);
      for (int64_t v = 1; !got && v < participants; ++v)
        got = claim((self + v) % participants, job, false, first, last);
      if (!got) return;
      // Parameters are stable here: the job cannot finish before these units do.
      const int64_t n = n_.load(std::memory_order_relaxed),
                    units = units_.load(std::memory_order_relaxed);
      const int64_t begin = n * first / units, end = n * last / units;
      t_inside_job = true;
      try {
        (*fn_)(begin, end, self);
      } catch (...) {
        std::lock_guard lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      t_inside_job = false;
      const auto done = static_cast<uint32_t>(last - first);
      if (remaining_.fetch_sub(done, std::memory_order_acq_rel) == done) remaining_.notify_all();
    }
  }

  void worker_loop(uint32_t seen, int self) {
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
      // Only the job's participants own shares; the others would find nothing to claim.
      if (self < participants_.load(std::memory_order_relaxed)) work_on(job, self);
    }
  }

  int size_ = 1;
  std::vector<std::thread> workers_;
  std::mutex submit_mutex_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint32_t> job_seq_{0};
  std::atomic<uint32_t> remaining_{0};  // units of the current job not yet finished
  Share shares_[kMaxPoolThreads];
  const std::function<void(int64_t, int64_t, int)>* fn_ = nullptr;
  std::atomic<int64_t> n_{0}, units_{1}, participants_{0};
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
  if (n < 1 || n > kMaxPoolThreads)
    fail("set_num_threads({}): need a thread count in 1..{}", n, kMaxPoolThreads);
  pool().resize(n);
}

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn, int64_t grain) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t participants = 1;
  if (!t_inside_job) {
    participants = std::min<int64_t>(pool().size(), n / grain);
    if (participants < 1) participants = 1;
  }
  if (participants == 1) {
    fn(0, n, 0);
    return;
  }
  pool().run(n, participants, grain, fn);
}

}  // namespace refit
