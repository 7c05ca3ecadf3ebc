#include "server/profiler/cuda_plugin_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace echo::server {
namespace {

// The directory of the running executable; empty when unknown.
std::string ExecutableDir() {
  std::error_code error;
  const std::filesystem::path exe =
      std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::string() : exe.parent_path().string();
}

// $ECHO_CUDA_PLUGIN, or nullptr when unset or empty.
const char* PluginPathFromEnv() {
  const char* path = std::getenv(kCudaPluginEnvVar);
  return path != nullptr && *path != '\0' ? path : nullptr;
}

absl::StatusOr<const CudaPluginApi*> FindAndLoad() {
  if (!CudaPluginBuilt()) {
    return absl::FailedPreconditionError("not built (ECHO_WITH_CUDA=OFF)");
  }
  if (const char* path = PluginPathFromEnv()) return LoadCudaPlugin(path);
  const std::vector<std::string> candidates = CudaPluginCandidates();
  for (const std::string& path : candidates) {
    if (access(path.c_str(), F_OK) == 0) return LoadCudaPlugin(path);
  }
  return absl::NotFoundError(absl::StrCat(
      kCudaPluginFileName, " not found (looked for ",
      absl::StrJoin(candidates, ", "), "; set ", kCudaPluginEnvVar, ")"));
}

}  // namespace

bool CudaPluginBuilt() { return ECHO_WITH_CUDA != 0; }

std::vector<std::string> CudaPluginCandidates() {
  if (const char* path = PluginPathFromEnv()) return {path};
  const std::string dir = ExecutableDir();
  if (dir.empty()) return {};
  return {absl::StrCat(dir, "/", kCudaPluginFileName),
          absl::StrCat(dir, "/../lib/echo/", kCudaPluginFileName)};
}

absl::StatusOr<const CudaPluginApi*> LoadCudaPlugin(const std::string& path) {
  dlerror();  // clears an earlier error
  // RTLD_LOCAL: the CUDA libraries' symbols stay out of the global scope.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    return absl::FailedPreconditionError(
        error != nullptr ? error : absl::StrCat(path, ": dlopen failed"));
  }
  auto entry = reinterpret_cast<CudaPluginEntryFunction>(
      dlsym(handle, kCudaPluginEntryPoint));
  if (entry == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": no entry point ", kCudaPluginEntryPoint));
  }
  const CudaPluginApi* api = entry();
  if (api == nullptr || api->abi_version != kCudaPluginAbiVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": ABI version ",
                     api == nullptr ? -1 : api->abi_version, ", echod expects ",
                     kCudaPluginAbiVersion, " (a plugin from another build)"));
  }
  return api;
}

const absl::StatusOr<const CudaPluginApi*>& ProcessCudaPlugin() {
  static const absl::StatusOr<const CudaPluginApi*>* const plugin =
      new absl::StatusOr<const CudaPluginApi*>(FindAndLoad());
  return *plugin;
}

}  // namespace echo::server
