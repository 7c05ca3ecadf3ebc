// GPU discovery with the CUDA runtime; any failure reads as "no GPU".
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <library_types.h>
#if ECHO_HAVE_CUDNN
#include <cudnn.h>
#endif

#include "absl/strings/str_cat.h"
#include "server/profiler/cuda_op_timer.h"
#include "server/profiler/gpu_backend.h"

namespace echo::server {
namespace {

std::string CublasVersion() {
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS) {
    return "";
  }
  return absl::StrCat(major, ".", minor, ".", patch);
}

std::string CudnnVersion() {
#if ECHO_HAVE_CUDNN
  // cuDNN 9: major * 10000 + minor * 100 + patch.
  const size_t version = cudnnGetVersion();
  return absl::StrCat(version / 10000, ".", (version % 10000) / 100, ".",
                      version % 100);
#else
  return "none";
#endif
}

}  // namespace

GpuDiscovery DiscoverGpus() {
  GpuDiscovery discovery;
  int runtime = 0, driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  discovery.cuda_runtime_version = CudaVersionString(runtime);
  discovery.driver_version = CudaVersionString(driver);
  discovery.cublas_version = CublasVersion();
  discovery.cudnn_version = CudnnVersion();
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    discovery.status = NoGpuStatus(
        "cudaGetDeviceCount", cudaGetErrorName(error), static_cast<int>(error));
    cudaGetLastError();  // not sticky; keep it from reaching later calls
    return discovery;
  }
  for (int i = 0; i < count; ++i) {
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
    gpu.compute_capability = absl::StrCat(prop.major, ".", prop.minor);
    discovery.gpus.push_back(gpu);
  }
  if (discovery.gpus.empty()) {
    discovery.status = absl::StrCat("no GPU (cudaGetDeviceCount: ", count,
                                    " devices, none readable)");
  } else {
    discovery.status = absl::StrCat(
        discovery.gpus.size(), discovery.gpus.size() == 1 ? " GPU" : " GPUs");
  }
  return discovery;
}

std::unique_ptr<OpTimer> MakeGpuOpTimer(const GpuDiscovery& discovery) {
  if (discovery.gpus.empty()) return nullptr;
  const GpuDevice& gpu = discovery.gpus.front();
  std::string key = absl::StrCat(
      gpu.name, "|cc ", gpu.compute_capability, "|driver ",
      discovery.driver_version, "|cudart ", discovery.cuda_runtime_version,
      "|cublas ", discovery.cublas_version, "|cudnn ", discovery.cudnn_version);
  return std::make_unique<CudaOpTimer>(gpu, std::move(key));
}

}  // namespace echo::server
