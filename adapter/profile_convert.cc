#include "adapter/profile_convert.h"

#include "adapter/device_convert.h"

namespace echo::adapter {

void ProfileReportToProto(const planner::ProfileReport& report,
                          v1::ProfileOpsResponse* response) {
  response->set_gpu_name(report.gpu_name);
  for (const planner::OpProfile& op : report.profiles) {
    v1::OpProfile* profile = response->add_profiles();
    profile->set_op_id(op.op_id);
    profile->set_measured(op.measured);
    profile->set_time_seconds(op.time_seconds);
    profile->set_from_cache(op.from_cache);
    profile->set_reason(op.reason);
    profile->set_analytic_time_seconds(op.analytic_time_seconds);
  }
}

void NodeReportToProto(const planner::NodeReport& report,
                       v1::GetNodeInfoResponse* response) {
  response->set_hostname(report.hostname);
  for (const planner::GpuReport& gpu : report.gpus) {
    v1::GpuInfo* info = response->add_gpus();
    info->set_index(gpu.index);
    info->set_name(gpu.name);
    info->set_memory_bytes(gpu.memory_bytes);
    info->set_free_memory_bytes(gpu.free_memory_bytes);
    info->set_sm_count(gpu.sm_count);
    info->set_compute_capability(gpu.compute_capability);
  }
  response->set_gpu_status(report.gpu_status);
  response->set_driver_version(report.driver_version);
  response->set_cuda_runtime_version(report.cuda_runtime_version);
  response->set_cublas_version(report.cublas_version);
  response->set_cudnn_version(report.cudnn_version);
  for (const planner::DeviceSpec& spec : report.device_catalog) {
    DeviceSpecToProto(spec, response->add_device_catalog());
  }
  response->set_profile_cache_entries(report.profile_cache_entries);
  response->set_profiling_enabled(report.profiling_enabled);
}

}  // namespace echo::adapter
