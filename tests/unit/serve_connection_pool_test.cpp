// The connection pool starts a thread for each task that finds none idle, up to its
// limit, and runs a task beyond that at once on the caller's thread, marked as refused,
// instead of queueing it behind tasks that may never end (server/connection_pool.h).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "server/connection_pool.h"

namespace refit {
namespace {

// Tasks that block until released, counting how many are running at once.
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  int running = 0;
  bool open = false;

  void task() {
    std::unique_lock lock(m);
    ++running;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
    --running;
    cv.notify_all();
  }
  // "Does not hang" bound: far beyond what starting a thread takes.
  bool wait_running(int n) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, std::chrono::seconds(20), [&] { return running == n; });
  }
  void release() {
    std::lock_guard lock(m);
    open = true;
    cv.notify_all();
  }
};

TEST(ConnectionPool, grows_a_thread_per_blocked_task_up_to_its_limit) {
  ConnectionPool pool(16);
  Gate gate;
  for (int i = 0; i < 12; ++i) pool.enqueue([&] { gate.task(); });
  EXPECT_TRUE(gate.wait_running(12));  // a fixed pool of 8 would hold 4 back
  EXPECT_EQ(pool.threads(), 12u);
  gate.release();
  EXPECT_TRUE(gate.wait_running(0));
  pool.shutdown();
}

TEST(ConnectionPool, runs_a_task_beyond_its_limit_at_once_as_refused) {
  ConnectionPool pool(2);
  Gate gate;
  pool.enqueue([&] { gate.task(); });
  pool.enqueue([&] { gate.task(); });
  ASSERT_TRUE(gate.wait_running(2));
  bool ran = false, refused = false;
  std::thread::id where;
  pool.enqueue([&] {
    ran = true;
    refused = ConnectionPool::refusing();
    where = std::this_thread::get_id();
  });
  EXPECT_TRUE(ran);  // already run, on this thread, while both threads are busy
  EXPECT_TRUE(refused);
  EXPECT_EQ(where, std::this_thread::get_id());
  EXPECT_FALSE(ConnectionPool::refusing());
  gate.release();
  pool.shutdown();
  EXPECT_EQ(gate.running, 0);
}

}  // namespace
}  // namespace refit
