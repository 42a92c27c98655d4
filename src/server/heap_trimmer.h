// Gives the memory of large request bodies back to the OS once they are freed.
//
// glibc gives each thread that allocates under contention its own heap arena and keeps
// what is freed in it for reuse. A tensor update parsed on one of the many HTTP threads
// (its body, the decoded JSON, the base64 strings: hundreds of MB) leaves that much
// resident in that thread's arena, and the next one lands in another arena: RSS climbs
// by a body's size per arena until every arena holds one. After a large request the
// trimmer runs malloc_trim(0) (which returns free pages of every arena) on its own
// thread, a moment after the request ended, when its body and JSON are freed, and gives
// back the large buffers core/host_buffer_cache.h keeps (a decoded update's tensors).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>

namespace refit {

class HeapTrimmer {
 public:
  // Bodies at least this large are worth a trim (small ones stay in the arenas' reuse).
  static constexpr size_t kLargeBody = size_t{4} << 20;

  HeapTrimmer();
  ~HeapTrimmer();
  HeapTrimmer(const HeapTrimmer&) = delete;
  HeapTrimmer& operator=(const HeapTrimmer&) = delete;

  // A request of `body_bytes` is being handled: trim once it has been quiet for `delay`.
  void note_request(size_t body_bytes);
  size_t trims() const;

 private:
  void run();
  static constexpr std::chrono::milliseconds delay{250};
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool pending_ = false;
  std::chrono::steady_clock::time_point due_;
  size_t trims_ = 0;
  std::thread thread_;
};

}  // namespace refit
