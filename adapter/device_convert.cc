#include "adapter/device_convert.h"

#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "adapter/graph_convert.h"
#include "planner/status_macros.h"

namespace echo::adapter {

absl::StatusOr<planner::DeviceSpec> DeviceSpecFromProto(
    const v1::DeviceSpec& proto) {
  planner::DeviceSpec spec;
  spec.name = proto.name();
  spec.memory_bytes = proto.memory_bytes();
  spec.memory_bandwidth_bytes_per_second =
      proto.memory_bandwidth_bytes_per_second();
  spec.sm_count = proto.sm_count();
  spec.first_touch_seconds_per_byte = proto.first_touch_seconds_per_byte();
  for (int i = 0; i < proto.peak_flops_size(); ++i) {
    const v1::PeakFlops& peak = proto.peak_flops(i);
    const planner::DType dtype = DTypeFromProto(peak.dtype());
    if (dtype == planner::DType::kUnspecified) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device '", proto.name(), "': peak_flops[", i, "] has no dtype"));
    }
    std::map<planner::DType, double>& rates =
        peak.tensor_core() ? spec.tensor_core_flops : spec.vector_flops;
    if (!rates.emplace(dtype, peak.flops_per_second()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("device '", proto.name(), "': peak_flops[", i,
                       "] repeats ", planner::DTypeName(dtype),
                       peak.tensor_core() ? " tensor-core" : "", " peak"));
    }
  }
  return spec;
}

absl::StatusOr<planner::DeviceSpec> ResolveDevice(const v1::DeviceSpec& proto) {
  // No status macro on the request's way (server/planner_service.cc).
  const absl::StatusOr<planner::DeviceSpec> spec = DeviceSpecFromProto(proto);
  if (!spec.ok()) return spec.status();
  return planner::ResolveDeviceSpec(*spec);
}

void DeviceSpecToProto(const planner::DeviceSpec& spec, v1::DeviceSpec* proto) {
  proto->set_name(spec.name);
  proto->set_memory_bytes(spec.memory_bytes);
  proto->set_memory_bandwidth_bytes_per_second(
      spec.memory_bandwidth_bytes_per_second);
  proto->set_sm_count(spec.sm_count);
  proto->set_first_touch_seconds_per_byte(spec.first_touch_seconds_per_byte);
  for (const auto& [rates, tensor_core] :
       {std::pair{&spec.tensor_core_flops, true},
        std::pair{&spec.vector_flops, false}}) {
    for (const auto& [dtype, rate] : *rates) {
      v1::PeakFlops* peak = proto->add_peak_flops();
      peak->set_dtype(DTypeToProto(dtype));
      peak->set_flops_per_second(rate);
      peak->set_tensor_core(tensor_core);
    }
  }
}

void CostSourceSummaryToProto(const planner::CostSourceSummary& summary,
                              v1::CostSourceSummary* proto) {
  using planner::CostSource;
  proto->set_measured_ops(summary.count(CostSource::kMeasured));
  proto->set_profiled_ops(summary.count(CostSource::kProfiled));
  proto->set_analytic_ops(summary.count(CostSource::kAnalytic));
  proto->set_relative_ops(summary.count(CostSource::kRelative));
  proto->set_unknown_ops(summary.count(CostSource::kUnknown));
  proto->set_measured_cost_fraction(summary.fraction(CostSource::kMeasured));
  proto->set_profiled_cost_fraction(summary.fraction(CostSource::kProfiled));
  proto->set_analytic_cost_fraction(summary.fraction(CostSource::kAnalytic));
  proto->set_relative_cost_fraction(summary.fraction(CostSource::kRelative));
}

}  // namespace echo::adapter
