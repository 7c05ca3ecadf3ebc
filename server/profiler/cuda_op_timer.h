// Times ops on a local GPU with CUDA events: cuBLAS for GEMMs, cuDNN for
// convolutions, own kernels for memory-bound classes. Warm-up runs, then
// timed runs on a low-priority stream; the median. Only built with CUDA.
#ifndef ECHO_SERVER_PROFILER_CUDA_OP_TIMER_H_
#define ECHO_SERVER_PROFILER_CUDA_OP_TIMER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "planner/cost_model.h"
#include "server/profiler/gpu_backend.h"
#include "server/profiler/op_timer.h"

namespace echo::server {

class CudaOpTimer : public OpTimer {
 public:
  CudaOpTimer(GpuDevice device, std::string device_key);
  ~CudaOpTimer() override;

  std::string DeviceName() const override { return device_.name; }
  int64_t DeviceMemoryBytes() const override { return device_.memory_bytes; }
  std::string DeviceKey() const override { return device_key_; }
  absl::StatusOr<int64_t> FreeMemoryBytes() override;
  absl::StatusOr<double> TimeOp(const planner::Graph& graph,
                                planner::OpIndex op,
                                const TimingLimits& limits) override;

 private:
  struct Handles;  // CUDA stream, events, cuBLAS and cuDNN handles

  // Creates the stream, events and handles on first use. Called only under
  // NodeProfiler's profile mutex.
  absl::Status EnsureInitialized();
  absl::StatusOr<double> TimeGemm(const planner::GemmShape& shape,
                                  const TimingLimits& limits);
  absl::StatusOr<double> TimeConv(const planner::ConvShape& shape,
                                  const TimingLimits& limits);
  absl::StatusOr<double> TimeMemoryBound(const planner::Graph& graph,
                                         planner::OpIndex op,
                                         const TimingLimits& limits);
  // Warm-up, then timed runs of `run` until timed_runs or the deadline.
  absl::StatusOr<double> Measure(const std::function<absl::Status()>& run,
                                 const TimingLimits& limits);

  const GpuDevice device_;
  const std::string device_key_;
  std::unique_ptr<Handles> handles_;
};

}  // namespace echo::server

#endif  // ECHO_SERVER_PROFILER_CUDA_OP_TIMER_H_
