// What a node reports about its GPU and its op profiles: plain data, filled
// by the node profiler (server/profiler) and turned into echo.v1 messages by
// the adapter, so that the profiler never builds a proto.
#ifndef ECHO_PLANNER_NODE_REPORT_H_
#define ECHO_PLANNER_NODE_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "planner/device_catalog.h"

namespace echo::planner {

// One op of a profile request.
struct OpProfile {
  std::string op_id;
  bool measured = false;
  double time_seconds = 0;
  bool from_cache = false;
  // Why not measured, when measured is false.
  std::string reason;
  // The cost model's time on the profiled GPU; 0 when unknown.
  double analytic_time_seconds = 0;
};

struct ProfileReport {
  std::string gpu_name;
  std::vector<OpProfile> profiles;
};

struct GpuReport {
  int32_t index = 0;
  std::string name;
  int64_t memory_bytes = 0;
  // 0 when not read (it needs a CUDA context).
  int64_t free_memory_bytes = 0;
  int32_t sm_count = 0;
  std::string compute_capability;  // "9.0"
};

struct NodeReport {
  std::string hostname;
  std::vector<GpuReport> gpus;
  // Human-readable, e.g. "no GPU (cudaGetDeviceCount: error 35)".
  std::string gpu_status;
  std::string driver_version;
  std::string cuda_runtime_version;
  std::string cublas_version;
  std::string cudnn_version;
  std::vector<DeviceSpec> device_catalog;
  int64_t profile_cache_entries = 0;
  bool profiling_enabled = false;
};

}  // namespace echo::planner

#endif  // ECHO_PLANNER_NODE_REPORT_H_
