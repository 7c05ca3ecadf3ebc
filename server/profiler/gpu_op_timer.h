// The OpTimer of a local GPU: maps an op to a device problem (a GEMM, a
// convolution, a streaming pass, a row softmax) and has the CUDA plugin's
// GpuKernelTimer time it. Holds no CUDA code itself, so it is tested with a
// fake GpuKernelTimer on any machine.
#ifndef ECHO_SERVER_PROFILER_GPU_OP_TIMER_H_
#define ECHO_SERVER_PROFILER_GPU_OP_TIMER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/profiler/cuda_plugin_api.h"
#include "server/profiler/gpu_backend.h"
#include "server/profiler/op_timer.h"

namespace echo::server {

class GpuOpTimer : public OpTimer {
 public:
  // `device_key`: see OpTimer::DeviceKey (GpuDeviceKey builds it).
  GpuOpTimer(std::unique_ptr<GpuKernelTimer> kernels, GpuDevice device,
             std::string device_key);

  std::string DeviceName() const override { return device_.name; }
  int64_t DeviceMemoryBytes() const override { return device_.memory_bytes; }
  std::string DeviceKey() const override { return device_key_; }
  absl::StatusOr<int64_t> FreeMemoryBytes() override {
    return kernels_->FreeMemoryBytes();
  }
  // GEMMs and convolutions (f32, f16, bf16, f64) from their inferred
  // shapes; memory-bound classes as the bytes they move; views take 0 s
  // without a launch; collectives are UNIMPLEMENTED.
  absl::StatusOr<double> TimeOp(const planner::Graph& graph,
                                planner::OpIndex op,
                                const TimingLimits& limits) override;

 private:
  absl::StatusOr<double> TimeMemoryBound(const planner::Graph& graph,
                                         planner::OpIndex op,
                                         const TimingLimits& limits);

  const std::unique_ptr<GpuKernelTimer> kernels_;
  const GpuDevice device_;
  const std::string device_key_;
};

// GPU model, compute capability, driver and library versions of `gpu`: a
// cached profile is reused only while all of them are unchanged.
std::string GpuDeviceKey(const GpuDiscovery& discovery, const GpuDevice& gpu);

}  // namespace echo::server

#endif  // ECHO_SERVER_PROFILER_GPU_OP_TIMER_H_
