// An OpTimer for tests: times from a table, with the limits it was given
// recorded, optional failures, and a count of concurrent calls.
#ifndef ECHO_SERVER_PROFILER_FAKE_OP_TIMER_H_
#define ECHO_SERVER_PROFILER_FAKE_OP_TIMER_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "planner/cost_model.h"
#include "server/profiler/op_timer.h"

namespace echo::server {

class FakeOpTimer : public OpTimer {
 public:
  struct Call {
    std::string signature;
    TimingLimits limits;
  };

  explicit FakeOpTimer(std::string device_name = "NVIDIA H100 80GB HBM3",
                       int64_t free_memory_bytes = int64_t{64} << 30)
      : device_name_(std::move(device_name)),
        free_memory_bytes_(free_memory_bytes) {}

  // Every op of `op_class` takes `seconds` (default 1 ms).
  void SetTime(planner::OpClass op_class, double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    times_[op_class] = seconds;
  }
  // Ops with this signature fail with `status`.
  void SetFailure(const std::string& signature, absl::Status status) {
    std::lock_guard<std::mutex> lock(mutex_);
    failures_[signature] = std::move(status);
  }
  // Device memory a timing needs; over the limit gives RESOURCE_EXHAUSTED.
  void SetRequiredBytes(int64_t bytes) { required_bytes_ = bytes; }
  void SetFreeMemoryBytes(int64_t bytes) { free_memory_bytes_ = bytes; }
  // Wall time each TimeOp call takes (to observe concurrency).
  void SetCallDuration(std::chrono::milliseconds duration) {
    call_duration_ = duration;
  }
  void SetDeviceKey(std::string key) { device_key_ = std::move(key); }

  std::vector<Call> calls() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }
  int max_concurrent_calls() const { return max_concurrent_; }
  // TimeOp calls under way now.
  int running_calls() const { return running_; }

  std::string DeviceName() const override { return device_name_; }
  int64_t DeviceMemoryBytes() const override { return int64_t{80} << 30; }
  std::string DeviceKey() const override {
    return device_key_.empty() ? absl::StrCat(device_name_, "|fake")
                               : device_key_;
  }
  absl::StatusOr<int64_t> FreeMemoryBytes() override {
    return free_memory_bytes_.load();
  }

  absl::StatusOr<double> TimeOp(const planner::Graph& graph,
                                planner::OpIndex op,
                                const TimingLimits& limits) override {
    const int now_running = ++running_;
    int seen = max_concurrent_.load();
    while (now_running > seen &&
           !max_concurrent_.compare_exchange_weak(seen, now_running)) {
    }
    std::this_thread::sleep_for(call_duration_.load());
    --running_;
    const std::string signature = planner::OpSignature(graph, op);
    std::lock_guard<std::mutex> lock(mutex_);
    calls_.push_back({signature, limits});
    if (auto it = failures_.find(signature); it != failures_.end()) {
      return it->second;
    }
    if (required_bytes_ > limits.max_memory_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("needs ", required_bytes_.load(), " bytes, limit ",
                       limits.max_memory_bytes));
    }
    auto it = times_.find(graph.op(op).op_class);
    return it == times_.end() ? 1e-3 : it->second;
  }

 private:
  const std::string device_name_;
  std::string device_key_;
  std::atomic<int64_t> free_memory_bytes_;
  std::atomic<int64_t> required_bytes_{0};
  std::atomic<std::chrono::milliseconds> call_duration_{
      std::chrono::milliseconds(0)};
  std::atomic<int> running_{0};
  std::atomic<int> max_concurrent_{0};
  mutable std::mutex mutex_;
  std::map<planner::OpClass, double> times_;
  std::map<std::string, absl::Status> failures_;
  std::vector<Call> calls_;
};

}  // namespace echo::server

#endif  // ECHO_SERVER_PROFILER_FAKE_OP_TIMER_H_
