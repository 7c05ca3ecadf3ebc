// The backend of a build without CUDA: no GPU, no timer.
#include "server/profiler/gpu_backend.h"

namespace echo::server {

GpuDiscovery DiscoverGpus() {
  GpuDiscovery discovery;
  discovery.status = "no GPU (built without CUDA)";
  return discovery;
}

std::unique_ptr<OpTimer> MakeGpuOpTimer(const GpuDiscovery&) { return nullptr; }

}  // namespace echo::server
