#include "server/profiler/gpu_backend.h"

#include "absl/strings/str_cat.h"

namespace echo::server {

std::string NoGpuStatus(absl::string_view call, absl::string_view error_name,
                        int code) {
  return absl::StrCat("no GPU (", call, ": ", error_name, " (", code, "))");
}

std::string CudaVersionString(int version) {
  if (version <= 0) return "none";
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

}  // namespace echo::server
