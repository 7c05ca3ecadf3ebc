// Shared by the CUDA plugin's translation units: status conversion, device
// buffers, and the timer's handles.
#ifndef ECHO_SERVER_PROFILER_CUDA_INTERNAL_H_
#define ECHO_SERVER_PROFILER_CUDA_INTERNAL_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>
#if ECHO_HAVE_CUDNN
#include <cudnn.h>
#endif

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "planner/graph.h"
#include "planner/status_macros.h"
#include "server/profiler/cuda_kernel_timer.h"

namespace echo::server {

inline absl::Status CudaStatus(cudaError_t error, absl::string_view call) {
  if (error == cudaSuccess) return absl::OkStatus();
  const std::string message =
      absl::StrCat(call, ": ", cudaGetErrorName(error), " (",
                   static_cast<int>(error), "): ", cudaGetErrorString(error));
  return error == cudaErrorMemoryAllocation
             ? absl::ResourceExhaustedError(message)
             : absl::InternalError(message);
}

inline absl::Status CublasStatus(cublasStatus_t status,
                                 absl::string_view call) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, ": ",
                                          cublasGetStatusName(status), " (",
                                          static_cast<int>(status), ")"));
}

#if ECHO_HAVE_CUDNN
inline absl::Status CudnnStatus(cudnnStatus_t status, absl::string_view call) {
  if (status == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, ": ",
                                          cudnnGetErrorString(status), " (",
                                          static_cast<int>(status), ")"));
}
#endif

// Device memory freed on scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  absl::Status Allocate(int64_t bytes) {
    return CudaStatus(
        cudaMalloc(&data_, static_cast<size_t>(std::max<int64_t>(bytes, 16))),
        "cudaMalloc");
  }
  void* get() const { return data_; }

 private:
  void* data_ = nullptr;
};

// The host (GpuOpTimer) rejects other dtypes, naming them; a guard only.
inline absl::Status UnsupportedDType(planner::DType dtype) {
  return absl::UnimplementedError(absl::StrCat(
      "the CUDA timer does not support dtype #", static_cast<int>(dtype)));
}

inline absl::Status CheckMemoryLimit(int64_t needed_bytes,
                                     int64_t limit_bytes) {
  if (needed_bytes <= limit_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "needs ", needed_bytes, " bytes of device memory; the limit is ",
      limit_bytes, " (the profiler's fraction of free memory)"));
}

struct CudaKernelTimer::Handles {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  cublasHandle_t cublas = nullptr;
#if ECHO_HAVE_CUDNN
  cudnnHandle_t cudnn = nullptr;
#endif
  ~Handles() {
#if ECHO_HAVE_CUDNN
    if (cudnn != nullptr) cudnnDestroy(cudnn);
#endif
    if (cublas != nullptr) cublasDestroy(cublas);
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

}  // namespace echo::server

#endif  // ECHO_SERVER_PROFILER_CUDA_INTERNAL_H_
