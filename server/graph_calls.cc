// CheckFit over one device or many (device_names, "all").
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "adapter/call_convert.h"
#include "adapter/plan_convert.h"
#include "planner/batch.h"
#include "planner/device_catalog.h"
#include "planner/engine/engine.h"
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
  if (single && !adapter::NamesDevice(request.device())) {
    return absl::InvalidArgumentError(
        "CheckFit needs a device (a catalog name or a full spec) or "
        "device_names");
  }
  if (!single && adapter::NamesDevice(request.device())) {
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
    ASSIGN_OR_RETURN(const engine::PricedGraph priced,
                     PriceOn(ref.graph, device));
    ASSIGN_OR_RETURN(const engine::FitAnswer fit,
                     engine::Fit(priced, options, request.include_max_batch(),
                                 ProfiledTimes()));
    v1::DeviceFit* answer = response->add_devices();
    adapter::FillDeviceFit(priced.device->name, priced.device->memory_bytes,
                           fit.fit, answer);
    if (fit.max_batch.has_value() && fit.max_batch->with_recompute.found) {
      answer->set_max_batch_size(fit.max_batch->with_recompute.batch);
    }
    if (fit.fit.fits) fitting.push_back(priced.device->name);
    response->set_iteration(priced.iteration);
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
