#include "server/worker_pool.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace echo::server {

WorkerPool::WorkerPool(int threads, size_t max_queued, int nice_increment)
    : max_queued_(max_queued), nice_increment_(nice_increment) {
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

bool WorkerPool::TrySubmit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || queue_.size() >= max_queued_) return false;
    queue_.push_back(std::move(task));
  }
  ready_.notify_one();
  return true;
}

void WorkerPool::Work() {
  if (nice_increment_ != 0) {
    // Best effort: without it heavy work only competes on equal terms.
    const id_t thread = static_cast<id_t>(::gettid());
    errno = 0;
    const int nice = ::getpriority(PRIO_PROCESS, thread);
    if (errno == 0) {
      ::setpriority(PRIO_PROCESS, thread, nice + nice_increment_);
    }
  }
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      // Stopping still drains the queue: every queued RPC gets its answer.
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace echo::server
