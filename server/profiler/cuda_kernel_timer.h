// The plugin's GpuKernelTimer: cuBLAS for GEMMs, cuDNN for convolutions,
// own kernels (profiler_kernels.cu) for memory-bound problems, timed with
// CUDA events on a low-priority stream. Only in libecho_cuda_plugin.so.
#ifndef ECHO_SERVER_PROFILER_CUDA_KERNEL_TIMER_H_
#define ECHO_SERVER_PROFILER_CUDA_KERNEL_TIMER_H_

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/profiler/cuda_plugin_api.h"

namespace echo::server {

class CudaKernelTimer final : public GpuKernelTimer {
 public:
  explicit CudaKernelTimer(int device_index);
  ~CudaKernelTimer() override;

  absl::StatusOr<int64_t> FreeMemoryBytes() override;
  absl::StatusOr<double> TimeGemm(const planner::GemmShape& shape,
                                  const TimingLimits& limits) override;
  absl::StatusOr<double> TimeConv(const planner::ConvShape& shape,
                                  const TimingLimits& limits) override;
  absl::StatusOr<double> TimeStreamBytes(int64_t in_bytes, int64_t out_bytes,
                                         const TimingLimits& limits) override;
  absl::StatusOr<double> TimeRowSoftmax(int64_t rows, int64_t cols,
                                        const TimingLimits& limits) override;

 private:
  struct Handles;  // CUDA stream, events, cuBLAS and cuDNN handles

  // Creates the stream, events and handles on first use. Called only under
  // NodeProfiler's profile mutex.
  absl::Status EnsureInitialized();
  // EnsureInitialized, then `time`; clears a non-sticky CUDA error of a
  // failed timing so that it does not fail the next one.
  absl::StatusOr<double> Timed(
      const std::function<absl::StatusOr<double>()>& time);
  absl::StatusOr<double> DoTimeGemm(const planner::GemmShape& shape,
                                    const TimingLimits& limits);
  absl::StatusOr<double> DoTimeConv(const planner::ConvShape& shape,
                                    const TimingLimits& limits);
  // Warm-up, then timed runs of `run` until timed_runs or the deadline.
  absl::StatusOr<double> Measure(const std::function<absl::Status()>& run,
                                 const TimingLimits& limits);

  const int device_index_;
  std::unique_ptr<Handles> handles_;
};

}  // namespace echo::server

#endif  // ECHO_SERVER_PROFILER_CUDA_KERNEL_TIMER_H_
