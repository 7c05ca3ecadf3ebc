// The worker pool that runs heavy RPCs off gRPC's callback threads.
#include "server/worker_pool.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "gtest/gtest.h"

namespace echo::server {
namespace {

TEST(WorkerPoolTest, RunsEveryTaskOnItsThreads) {
  std::atomic<int> ran{0};
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> on_caller{false};
  {
    WorkerPool pool(3, 100);
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(pool.TrySubmit([&] {
        on_caller = on_caller || std::this_thread::get_id() == caller;
        ++ran;
      }));
    }
  }  // the destructor runs what is queued
  EXPECT_EQ(ran, 50);
  EXPECT_FALSE(on_caller);
}

TEST(WorkerPoolTest, AFullQueueRefusesWithoutRunning) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> started;
  std::atomic<int> ran{0};
  WorkerPool pool(1, 1);
  // The only thread blocks; one task may wait; the next is refused.
  ASSERT_TRUE(pool.TrySubmit([&] {
    started.set_value();
    released.wait();
    ++ran;
  }));
  started.get_future().wait();
  ASSERT_TRUE(pool.TrySubmit([&] { ++ran; }));
  EXPECT_FALSE(pool.TrySubmit([&] { ran += 100; }));
  release.set_value();
  while (ran < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(ran, 2);
}

TEST(WorkerPoolTest, ThreadsRunAtALowerPriority) {
  const int base = ::getpriority(PRIO_PROCESS, 0);
  std::promise<int> nice;
  WorkerPool pool(1, 1, 10);
  ASSERT_TRUE(pool.TrySubmit([&] {
    nice.set_value(::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid())));
  }));
  EXPECT_EQ(nice.get_future().get(), std::min(19, base + 10));
  EXPECT_EQ(::getpriority(PRIO_PROCESS, 0), base);  // the caller's unchanged
}

}  // namespace
}  // namespace echo::server
