// Times one op on a device. GpuOpTimer does it on the local GPU (through
// the CUDA plugin); FakeOpTimer stands in for it in tests.
#ifndef ECHO_SERVER_PROFILER_OP_TIMER_H_
#define ECHO_SERVER_PROFILER_OP_TIMER_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "planner/graph.h"

namespace echo::server {

struct TimingLimits {
  // Device memory the timing may allocate in all (buffers + workspace).
  int64_t max_memory_bytes = 0;
  // Stop repeating after this; at least one timed run is made.
  std::chrono::steady_clock::time_point deadline =
      std::chrono::steady_clock::time_point::max();
  int warmup_runs = 3;
  int timed_runs = 20;
};

class OpTimer {
 public:
  virtual ~OpTimer() = default;
  // As CUDA names it, e.g. "NVIDIA H100 80GB HBM3".
  virtual std::string DeviceName() const = 0;
  virtual int64_t DeviceMemoryBytes() const = 0;
  // GPU model, compute capability, driver and library versions: a profile
  // is reused only while all of them are unchanged.
  virtual std::string DeviceKey() const = 0;
  virtual absl::StatusOr<int64_t> FreeMemoryBytes() = 0;
  // Median seconds of one execution of `op`. Errors: UNIMPLEMENTED (op or
  // dtype the timer cannot reproduce), RESOURCE_EXHAUSTED (over
  // max_memory_bytes), anything else is a failure of the device.
  virtual absl::StatusOr<double> TimeOp(const planner::Graph& graph,
                                        planner::OpIndex op,
                                        const TimingLimits& limits) = 0;
};

}  // namespace echo::server

#endif  // ECHO_SERVER_PROFILER_OP_TIMER_H_
