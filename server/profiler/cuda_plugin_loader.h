// Finds and loads libecho_cuda_plugin.so (see cuda_plugin_api.h) with
// dlopen. A plugin, once loaded, stays loaded for the life of the process:
// the objects it made (timers, their vtables) must outlive every caller, and
// the CUDA libraries do not support being unloaded.
#ifndef ECHO_SERVER_PROFILER_CUDA_PLUGIN_LOADER_H_
#define ECHO_SERVER_PROFILER_CUDA_PLUGIN_LOADER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/profiler/cuda_plugin_api.h"

namespace echo::server {

// Set to a plugin path: only that file is tried.
inline constexpr char kCudaPluginEnvVar[] = "ECHO_CUDA_PLUGIN";

// Whether this build made the plugin (ECHO_WITH_CUDA).
bool CudaPluginBuilt();

// Where the plugin is looked for, in order: $ECHO_CUDA_PLUGIN alone when set
// and not empty; else <dir of /proc/self/exe>/libecho_cuda_plugin.so, then
// <exe dir>/../lib/echo/libecho_cuda_plugin.so (installed layouts).
std::vector<std::string> CudaPluginCandidates();

// dlopen(path, RTLD_NOW | RTLD_LOCAL), the entry point, its ABI version.
// FAILED_PRECONDITION with dlerror's text (a missing file, or a CUDA library
// the plugin needs), a missing entry point or another ABI version. A loaded
// plugin is never unloaded, also after an ABI mismatch.
absl::StatusOr<const CudaPluginApi*> LoadCudaPlugin(const std::string& path);

// The plugin of this process, loaded on the first call: $ECHO_CUDA_PLUGIN
// when set, else the first default candidate that exists (NOT_FOUND naming
// the places looked in when none does). FAILED_PRECONDITION "not built"
// without ECHO_WITH_CUDA. Thread-safe; later calls return the first result.
const absl::StatusOr<const CudaPluginApi*>& ProcessCudaPlugin();

}  // namespace echo::server

#endif  // ECHO_SERVER_PROFILER_CUDA_PLUGIN_LOADER_H_
