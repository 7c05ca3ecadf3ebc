#include "server/profiler/gpu_backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/profiler/cuda_plugin_api.h"
#include "server/profiler/cuda_plugin_loader.h"
#include "server/profiler/gpu_op_timer.h"

namespace echo::server {

std::string NoGpuStatus(absl::string_view call, absl::string_view error_name,
                        int code) {
  return absl::StrCat("no GPU (", call, ": ", error_name, " (", code, "))");
}

std::string CudaVersionString(int version) {
  if (version <= 0) return "none";
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

GpuDiscovery DiscoveryFromProbe(const CudaProbe& probe) {
  GpuDiscovery discovery;
  discovery.cuda_runtime_version = CudaVersionString(probe.runtime_version);
  discovery.driver_version = CudaVersionString(probe.driver_version);
  if (probe.cublas_major >= 0) {
    discovery.cublas_version = absl::StrCat(
        probe.cublas_major, ".", probe.cublas_minor, ".", probe.cublas_patch);
  }
  // cuDNN 9: major * 10000 + minor * 100 + patch.
  discovery.cudnn_version =
      probe.cudnn_version < 0
          ? "none"
          : absl::StrCat(probe.cudnn_version / 10000, ".",
                         (probe.cudnn_version % 10000) / 100, ".",
                         probe.cudnn_version % 100);
  if (probe.device_count_error != 0) {
    discovery.status =
        NoGpuStatus("cudaGetDeviceCount", probe.device_count_error_name,
                    probe.device_count_error);
    return discovery;
  }
  discovery.gpus = probe.gpus;
  if (discovery.gpus.empty()) {
    discovery.status =
        absl::StrCat("no GPU (cudaGetDeviceCount: ", probe.device_count,
                     " devices, none readable)");
  } else {
    discovery.status = absl::StrCat(
        discovery.gpus.size(), discovery.gpus.size() == 1 ? " GPU" : " GPUs");
  }
  return discovery;
}

GpuDiscovery DiscoverGpus(const absl::StatusOr<const CudaPluginApi*>& plugin) {
  if (!plugin.ok()) {
    GpuDiscovery discovery;
    discovery.status =
        absl::StrCat("no GPU (CUDA plugin: ", plugin.status().message(), ")");
    return discovery;
  }
  return DiscoveryFromProbe((*plugin)->probe());
}

GpuDiscovery DiscoverGpus() {
  if (!CudaPluginBuilt()) {
    GpuDiscovery discovery;
    discovery.status = "no GPU (built without CUDA)";
    return discovery;
  }
  return DiscoverGpus(ProcessCudaPlugin());
}

std::unique_ptr<OpTimer> MakeGpuOpTimer(const GpuDiscovery& discovery,
                                        const CudaPluginApi& plugin) {
  if (discovery.gpus.empty()) return nullptr;
  const GpuDevice& gpu = discovery.gpus.front();
  return std::make_unique<GpuOpTimer>(plugin.make_timer(gpu.index), gpu,
                                      GpuDeviceKey(discovery, gpu));
}

std::unique_ptr<OpTimer> MakeGpuOpTimer(const GpuDiscovery& discovery) {
  if (discovery.gpus.empty() || !CudaPluginBuilt()) return nullptr;
  const absl::StatusOr<const CudaPluginApi*>& plugin = ProcessCudaPlugin();
  return plugin.ok() ? MakeGpuOpTimer(discovery, **plugin) : nullptr;
}

}  // namespace echo::server
