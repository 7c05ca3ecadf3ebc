// CheckFit over one device or many (device_names, "all").
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "adapter/plan_convert.h"
#include "planner/batch.h"
#include "planner/device_catalog.h"
#include "planner/schedule/fit_check.h"
#include "planner/status_macros.h"
#include "server/call_context.h"
#include "server/planner_service.h"

namespace echo::server {
namespace {

// CheckFit's device_names with "all" expanded and repeats dropped, in the
// order given; NOT_FOUND names an unknown one.
absl::StatusOr<std::vector<std::string>> ExpandDeviceNames(
    const v1::CheckFitRequest& request) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  auto add = [&](const std::string& name) {
    if (seen.insert(name).second) names.push_back(name);
  };
  for (const std::string& name : request.device_names()) {
    if (NamesAllDevices(name)) {
      for (const std::string& known : planner::CatalogDeviceNames()) add(known);
      continue;
    }
    ASSIGN_OR_RETURN(const planner::DeviceSpec spec,
                     planner::FindCatalogDevice(name));
    add(spec.name);
  }
  return names;
}

}  // namespace

absl::Status PlannerService::FitDevices(const planner::Interrupt& interrupted,
                                        const v1::CheckFitRequest& request,
                                        const GraphRef& ref,
                                        v1::CheckFitResponse* response) {
  const bool single = request.device_names().empty();
  if (single && !NamesDevice(request.device())) {
    return absl::InvalidArgumentError(
        "CheckFit needs a device (a catalog name or a full spec) or "
        "device_names");
  }
  if (!single && NamesDevice(request.device())) {
    return absl::InvalidArgumentError(
        "give either device or device_names, not both");
  }
  ASSIGN_OR_RETURN(planner::FitOptions options,
                   adapter::FitOptionsFromProto(request));
  options.interrupted = interrupted;
  std::vector<v1::DeviceSpec> devices;
  if (single) {
    devices.push_back(request.device());
  } else {
    ASSIGN_OR_RETURN(const std::vector<std::string> names,
                     ExpandDeviceNames(request));
    for (const std::string& name : names) {
      devices.emplace_back().set_name(name);
    }
  }
  std::vector<std::string> fitting;
  for (const v1::DeviceSpec& device : devices) {
    ASSIGN_OR_RETURN(CostedGraph costed,
                     PrepareGraph("CheckFit", ref.graph, &device));
    if (!costed.device.has_value()) {
      return absl::InvalidArgumentError("CheckFit needs a device");
    }
    const planner::DeviceSpec& spec = *costed.device;
    options.device_memory_bytes = spec.memory_bytes;
    PriceChunkLaunches(costed.costs, &options.chunking);
    ASSIGN_OR_RETURN(
        const planner::FitResult fit,
        planner::CheckFit(*costed.graph, costed.costs.Costs(), options));
    v1::DeviceFit* answer = response->add_devices();
    adapter::FillDeviceFit(spec.name, options.device_memory_bytes, fit, answer);
    if (request.include_max_batch() &&
        planner::HasBatchDimension(*costed.graph)) {
      // The largest batch under the same budget and reserve.
      planner::MaxBatchOptions batch_options;
      batch_options.memory = options.memory;
      batch_options.reserved_bytes = fit.reserved_bytes;
      batch_options.max_overhead_ratio = options.max_overhead_ratio;
      batch_options.chunking = options.chunking;
      batch_options.interrupted = options.interrupted;
      ASSIGN_OR_RETURN(const planner::MaxBatchResult batch,
                       MaxBatchOn(*costed.graph, spec, batch_options));
      if (batch.with_recompute.found) {
        answer->set_max_batch_size(batch.with_recompute.batch);
      }
    }
    if (fit.fits) fitting.push_back(spec.name);
  }
  if (single) {
    adapter::FillSingleFitResponse(response->devices(0), response);
  } else {
    response->set_fits(!fitting.empty());
    response->set_message(absl::StrCat(
        "fits on ", fitting.size(), " of ", devices.size(), " device(s)",
        fitting.empty() ? "" : ": ", absl::StrJoin(fitting, ", ")));
  }
  return absl::OkStatus();
}

}  // namespace echo::server
