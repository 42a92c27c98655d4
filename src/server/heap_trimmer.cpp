#include "server/heap_trimmer.h"

#include <malloc.h>

#include "core/host_buffer_cache.h"

namespace refit {

HeapTrimmer::HeapTrimmer() : thread_([this] { run(); }) {}

HeapTrimmer::~HeapTrimmer() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HeapTrimmer::note_request(size_t body_bytes) {
  if (body_bytes < kLargeBody) return;
  {
    std::lock_guard lock(mutex_);
    pending_ = true;
    due_ = std::chrono::steady_clock::now() + delay;
  }
  cv_.notify_all();
}

size_t HeapTrimmer::trims() const {
  std::lock_guard lock(mutex_);
  return trims_;
}

void HeapTrimmer::run() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    if (!pending_) {
      cv_.wait(lock, [&] { return stop_ || pending_; });
      continue;
    }
    // A later large request moves the deadline: trim once, after the last of a burst.
    if (cv_.wait_until(lock, due_, [&] { return stop_; })) break;
    if (std::chrono::steady_clock::now() < due_) continue;
    pending_ = false;
    lock.unlock();
    malloc_trim(0);
    // A weight update's decoded tensors (4-128 MiB each) are kept for reuse once freed,
    // outside the arenas malloc_trim reaches: given back too, as the request's memory.
    host_buffer_cache::release_all();
    lock.lock();
    ++trims_;
  }
}

}  // namespace refit
