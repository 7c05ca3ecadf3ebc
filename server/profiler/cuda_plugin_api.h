// The interface between echo_profiler (in echod, which links no CUDA
// library) and libecho_cuda_plugin.so (everything that calls CUDA, cuBLAS or
// cuDNN), loaded at run time with dlopen by cuda_plugin_loader.cc.
//
// Why a plugin: libcublasLt has a 94 KB static TLS segment; linked into the
// executable it is carved out of every thread's stack, and civetweb's
// 100 KB-stack threads (the /metrics server) then fail to start. A library
// loaded with dlopen gets dynamic TLS instead. And an echod that links no
// CUDA library starts on nodes without one, reporting "no GPU (...)".
//
// Both sides are built from the same tree with the same compiler, so the
// interface passes C++ types (std::string, absl::StatusOr, planner's plain
// shape structs) by value. kCudaPluginAbiVersion guards against a plugin
// from another build (ECHO_CUDA_PLUGIN pointing elsewhere): bump it whenever
// anything in this file, or a struct it passes, changes.
#ifndef ECHO_SERVER_PROFILER_CUDA_PLUGIN_API_H_
#define ECHO_SERVER_PROFILER_CUDA_PLUGIN_API_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/cost_model.h"
#include "server/profiler/gpu_backend.h"
#include "server/profiler/op_timer.h"

namespace echo::server {

inline constexpr int kCudaPluginAbiVersion = 1;
inline constexpr char kCudaPluginFileName[] = "libecho_cuda_plugin.so";
// extern "C" const CudaPluginApi* EchoCudaPluginApi(void);
inline constexpr char kCudaPluginEntryPoint[] = "EchoCudaPluginApi";

// What the plugin read from the CUDA runtime, unformatted: the host turns it
// into a GpuDiscovery (gpu_backend.cc), so every status text lives there.
struct CudaProbe {
  int runtime_version = 0;  // cudaRuntimeGetVersion, 0 when it fails
  int driver_version = 0;   // cudaDriverGetVersion, 0 without a driver
  // cublasGetProperty; all -1 when it fails.
  int cublas_major = -1, cublas_minor = -1, cublas_patch = -1;
  // cudnnGetVersion (major * 10000 + minor * 100 + patch); -1 when the
  // plugin was built without cuDNN.
  int64_t cudnn_version = -1;
  // cudaGetDeviceCount: its cudaError_t (0: success), the error's name, and
  // the count it returned.
  int device_count_error = 0;
  std::string device_count_error_name;
  int device_count = 0;
  // The devices whose properties could be read; index = CUDA ordinal.
  std::vector<GpuDevice> gpus;
};

// Times device-level problems on one GPU, each with its own buffers, on a
// low-priority stream: warm-up runs, then timed runs, the median in seconds.
// GpuOpTimer (the host) maps an op to one of these problems. The context,
// stream and handles are created on the first Time* call. Errors as
// OpTimer::TimeOp: UNIMPLEMENTED, RESOURCE_EXHAUSTED (over
// limits.max_memory_bytes), anything else is a failure of the device.
class GpuKernelTimer {
 public:
  virtual ~GpuKernelTimer() = default;
  // Needs a context only (any thread, also while a timing runs).
  virtual absl::StatusOr<int64_t> FreeMemoryBytes() = 0;
  // Row-major C[m,n] = A[m,k] B[k,n], `batch` times, with cuBLAS; dtype is
  // f32, f16, bf16 or f64 (the host rejects others).
  virtual absl::StatusOr<double> TimeGemm(const planner::GemmShape& shape,
                                          const TimingLimits& limits) = 0;
  // The passes of `shape` with cuDNN; dtype as TimeGemm. UNIMPLEMENTED when
  // the plugin was built without cuDNN.
  virtual absl::StatusOr<double> TimeConv(const planner::ConvShape& shape,
                                          const TimingLimits& limits) = 0;
  // One streaming pass reading `in_bytes` and writing `out_bytes`.
  virtual absl::StatusOr<double> TimeStreamBytes(
      int64_t in_bytes, int64_t out_bytes, const TimingLimits& limits) = 0;
  // A softmax over `rows` rows of `cols` floats.
  virtual absl::StatusOr<double> TimeRowSoftmax(int64_t rows, int64_t cols,
                                                const TimingLimits& limits) = 0;
};

// What the entry point returns: a static object, valid while the plugin is
// loaded (the loader never unloads it).
struct CudaPluginApi {
  // Stays the first member in every version: the loader reads it before
  // anything else and rejects a mismatch.
  int abi_version;
  // Never fails; errors of the runtime are in the probe.
  CudaProbe (*probe)();
  // The timer of CUDA device `device_index`; creates nothing on the device.
  std::unique_ptr<GpuKernelTimer> (*make_timer)(int device_index);
};

using CudaPluginEntryFunction = const CudaPluginApi* (*)();

}  // namespace echo::server

#endif  // ECHO_SERVER_PROFILER_CUDA_PLUGIN_API_H_
