#include "server/connection_pool.h"

#include <chrono>
#include <system_error>

namespace refit {
namespace {

thread_local bool t_refusing = false;

// Threads kept when idle, so a quiet server answers its next requests without starting one.
constexpr size_t kWarmThreads = 8;
constexpr auto kIdleRetire = std::chrono::seconds(60);

}  // namespace

ConnectionPool::ConnectionPool(size_t max_threads) : max_threads_(max_threads ? max_threads : 1) {}

ConnectionPool::~ConnectionPool() { shutdown(); }

bool ConnectionPool::refusing() { return t_refusing; }

size_t ConnectionPool::threads() const {
  std::lock_guard lock(mutex_);
  return threads_.size() - finished_.size();
}

void ConnectionPool::reap_finished() {
  // A finished thread has left the mutex for good: joining it here cannot wait on us.
  for (const std::thread::id id : finished_) {
    auto it = threads_.find(id);
    if (it == threads_.end()) continue;
    it->second.join();
    threads_.erase(it);
  }
  finished_.clear();
}

void ConnectionPool::enqueue(std::function<void()> task) {
  {
    std::unique_lock lock(mutex_);
    reap_finished();
    if (!stopping_ && idle_ > tasks_.size()) {
      tasks_.push_back(std::move(task));
      wake_.notify_one();
      return;
    }
    if (!stopping_ && threads_.size() < max_threads_) {
      try {
        std::thread t([this] { work(); });
        const std::thread::id id = t.get_id();
        threads_.emplace(id, std::move(t));
        tasks_.push_back(std::move(task));
        return;
      } catch (const std::system_error&) {
        // The system has no thread to give (its limits): refused as when the pool is full.
      }
    }
  }
  t_refusing = true;
  task();
  t_refusing = false;
}

void ConnectionPool::work() {
  std::unique_lock lock(mutex_);
  while (true) {
    ++idle_;
    const bool woken =
        wake_.wait_for(lock, kIdleRetire, [this] { return !tasks_.empty() || stopping_; });
    --idle_;
    if (tasks_.empty()) {
      const size_t live = threads_.size() - finished_.size();
      if (stopping_ || (!woken && live > kWarmThreads)) break;
      continue;
    }
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
  if (!stopping_) finished_.push_back(std::this_thread::get_id());
}

void ConnectionPool::shutdown() {
  std::map<std::thread::id, std::thread> threads;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    threads.swap(threads_);
    finished_.clear();
  }
  wake_.notify_all();
  for (auto& [id, t] : threads) t.join();
}

}  // namespace refit
