// The node's GPUs and software stack, and the real op timer, through the
// CUDA plugin (cuda_plugin_api.h) that echod loads at run time: echod itself
// links no CUDA library.
#ifndef ECHO_SERVER_PROFILER_GPU_BACKEND_H_
#define ECHO_SERVER_PROFILER_GPU_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/profiler/op_timer.h"

namespace echo::server {

struct GpuDevice {
  int32_t index = 0;
  std::string name;
  int64_t memory_bytes = 0;
  int32_t sm_count = 0;
  std::string compute_capability;  // "9.0"
};

struct GpuDiscovery {
  std::vector<GpuDevice> gpus;
  // "1 GPU" / "no GPU (cudaGetDeviceCount: cudaErrorNoDevice (100))" /
  // "no GPU (CUDA plugin: ...)" / "no GPU (built without CUDA)".
  std::string status;
  // Empty when unknown ("none" for a driver that is absent).
  std::string driver_version;
  std::string cuda_runtime_version;
  std::string cublas_version;
  std::string cudnn_version;
};

struct CudaPluginApi;
struct CudaProbe;

// Never fails: every failure reads as "no GPU (...)": "built without CUDA",
// "CUDA plugin: <why it did not load>" (dlerror's text, such as a missing
// libcudart), or the CUDA runtime's error. Uses the process's plugin
// (ProcessCudaPlugin in cuda_plugin_loader.h).
GpuDiscovery DiscoverGpus();
// With a given plugin, or why there is none.
GpuDiscovery DiscoverGpus(const absl::StatusOr<const CudaPluginApi*>& plugin);
// The plugin's raw probe, formatted ("1 GPU", "no GPU (cudaGetDeviceCount:
// cudaErrorInsufficientDriver (35))", versions as "13.0" / "13.1.0").
GpuDiscovery DiscoveryFromProbe(const CudaProbe& probe);

// "no GPU (<call>: <error name> (<code>))".
std::string NoGpuStatus(absl::string_view call, absl::string_view error_name,
                        int code);

// A CUDA version number (12040, as the runtime reports it) as "12.4".
std::string CudaVersionString(int version);

// The timer for GPU 0 of `discovery`; nullptr without a plugin or GPUs. It
// creates its CUDA context, handles and stream on first use, so a node
// that never profiles holds no GPU memory.
std::unique_ptr<OpTimer> MakeGpuOpTimer(const GpuDiscovery& discovery);
std::unique_ptr<OpTimer> MakeGpuOpTimer(const GpuDiscovery& discovery,
                                        const CudaPluginApi& plugin);

}  // namespace echo::server

#endif  // ECHO_SERVER_PROFILER_GPU_BACKEND_H_
