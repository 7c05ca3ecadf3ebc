// A fixed set of threads with a bounded queue, for RPC work too heavy for
// gRPC's callback threads (profiling, OPTIMAL, AUTO on large graphs): those
// threads also serve health checks and every other call, and must not
// block for seconds.
#ifndef ECHO_SERVER_WORKER_POOL_H_
#define ECHO_SERVER_WORKER_POOL_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace echo::server {

class WorkerPool {
 public:
  // threads >= 1; at most max_queued tasks wait (running ones excluded).
  // Each thread raises its nice value by `nice_increment` (Linux: nice is
  // per thread), so that the threads serving health checks and cheap calls
  // win the CPU from heavy work.
  WorkerPool(int threads, size_t max_queued, int nice_increment = 0);
  // Runs what is queued, then joins the threads.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // False, without running it, when the queue is full.
  bool TrySubmit(std::function<void()> task);
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void Work();

  const size_t max_queued_;
  const int nice_increment_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace echo::server

#endif  // ECHO_SERVER_WORKER_POOL_H_
