// One wake-up for a handler that waits on several requests at once (a batch, n > 1):
// every request's RequestSpec::on_event notifies it, so the handler sleeps until any of
// them has an event instead of polling each handle in turn.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

namespace refit {

class EventSignal : public std::enable_shared_from_this<EventSignal> {
 public:
  static std::shared_ptr<EventSignal> make() {
    return std::shared_ptr<EventSignal>(new EventSignal());
  }
  // For RequestSpec::on_event: keeps the signal alive as long as the request may call it.
  std::function<void()> notifier() {
    return [self = shared_from_this()] {
      {
        std::lock_guard lock(self->mutex_);
        ++self->events_;
      }
      self->cv_.notify_all();
    };
  }
  // Waits until an event came after the last wait() returned, or the timeout.
  void wait(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, timeout, [&] { return events_ != seen_; });
    seen_ = events_;
  }

 private:
  EventSignal() = default;
  std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t events_ = 0, seen_ = 0;
};

}  // namespace refit
