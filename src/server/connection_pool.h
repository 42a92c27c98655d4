// The threads that serve `refit serve`'s connections (cpp-httplib's TaskQueue; each task
// is one connection, from its first request to its close).
//
// cpp-httplib's ThreadPool has a fixed number of threads and queues the connections it
// has no thread for, so as many stalled clients as threads make every later connection,
// /health included, wait behind them. This pool starts a thread for each connection that
// finds none idle, up to `max_threads`; a connection beyond that is run at once on the
// accepting thread in refusal mode (refusing() is true there), where the server answers
// it 503 without reading it. Threads idle for a minute end, down to a few kept warm.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace refit {

class ConnectionPool : public httplib::TaskQueue {
 public:
  explicit ConnectionPool(size_t max_threads);
  ~ConnectionPool() override;
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  void enqueue(std::function<void()> task) override;
  // Lets the tasks running finish (the server ends idle connections), then joins.
  void shutdown() override;
  // True while this thread runs a task no thread was free for: it must not block.
  static bool refusing();
  size_t threads() const;

 private:
  void work();
  void reap_finished();  // under mutex_

  const size_t max_threads_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  std::map<std::thread::id, std::thread> threads_;
  std::vector<std::thread::id> finished_;  // ended on their own, not joined yet
  size_t idle_ = 0;
  bool stopping_ = false;
};

}  // namespace refit
