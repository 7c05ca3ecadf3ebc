// libecho_cuda_plugin.so: the entry point, and GPU discovery with the CUDA
// runtime. Reports raw numbers; the host formats them (gpu_backend.cc).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <library_types.h>
#if ECHO_HAVE_CUDNN
#include <cudnn.h>
#endif

#include <memory>

#include "server/profiler/cuda_kernel_timer.h"
#include "server/profiler/cuda_plugin_api.h"

namespace echo::server {
namespace {

CudaProbe Probe() {
  CudaProbe probe;
  if (cudaRuntimeGetVersion(&probe.runtime_version) != cudaSuccess) {
    probe.runtime_version = 0;
  }
  if (cudaDriverGetVersion(&probe.driver_version) != cudaSuccess) {
    probe.driver_version = 0;
  }
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS) {
    probe.cublas_major = major;
    probe.cublas_minor = minor;
    probe.cublas_patch = patch;
  }
#if ECHO_HAVE_CUDNN
  probe.cudnn_version = static_cast<int64_t>(cudnnGetVersion());
#endif
  const cudaError_t error = cudaGetDeviceCount(&probe.device_count);
  if (error != cudaSuccess) {
    probe.device_count_error = static_cast<int>(error);
    probe.device_count_error_name = cudaGetErrorName(error);
    probe.device_count = 0;
    cudaGetLastError();  // not sticky; keep it from reaching later calls
    return probe;
  }
  for (int i = 0; i < probe.device_count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    GpuDevice gpu;
    gpu.index = i;
    gpu.name = prop.name;
    gpu.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    gpu.sm_count = prop.multiProcessorCount;
    gpu.compute_capability =
        std::to_string(prop.major) + "." + std::to_string(prop.minor);
    probe.gpus.push_back(gpu);
  }
  return probe;
}

std::unique_ptr<GpuKernelTimer> MakeTimer(int device_index) {
  return std::make_unique<CudaKernelTimer>(device_index);
}

constexpr CudaPluginApi kApi = {kCudaPluginAbiVersion, &Probe, &MakeTimer};

}  // namespace
}  // namespace echo::server

// The one symbol the plugin exports (everything else is hidden).
extern "C" __attribute__((visibility("default")))
const echo::server::CudaPluginApi*
EchoCudaPluginApi() {
  return &echo::server::kApi;
}
