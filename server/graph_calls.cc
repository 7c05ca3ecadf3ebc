// The handlers of the graph registry: ServeGraphCall (graph or fingerprint,
// cached answers), RegisterGraph and CheckFit over one device or many.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "adapter/plan_convert.h"
#include "planner/device_catalog.h"
#include "planner/recompute/fit_check.h"
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
    if (name == "all") {
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

grpc::ServerUnaryReactor* PlannerService::ServeGraphCall(
    grpc::CallbackServerContext* context, const char* method,
    const google::protobuf::Message& request, const v1::Graph* graph,
    const std::string& fingerprint, google::protobuf::Message* response,
    bool heavy, std::function<absl::Status(const GraphRef&)> body) {
  if (fingerprint.empty()) {
    // Inline graph: converted in the handler, on the worker pool if heavy.
    heavy = heavy || (graph != nullptr && IsHeavy(*graph));
    return Serve(context, method, heavy,
                 [this, graph, body = std::move(body)]() -> absl::Status {
                   ASSIGN_OR_RETURN(const GraphRef ref,
                                    ResolveGraph(graph, ""));
                   return body(ref);
                 });
  }
  absl::StatusOr<GraphRef> ref = ResolveGraph(graph, fingerprint);
  if (!ref.ok()) {
    return Serve(context, method, /*heavy=*/false,
                 [status = ref.status()] { return status; });
  }
  std::string key = GraphRegistry::AnswerKey(method, request);
  if (std::optional<std::string> cached = registry_->FindAnswer(key)) {
    return Serve(context, method, /*heavy=*/false,
                 [response, cached = std::move(*cached)]() -> absl::Status {
                   if (!response->ParseFromString(cached)) {
                     return absl::InternalError("a cached answer is corrupt");
                   }
                   return absl::OkStatus();
                 });
  }
  heavy = heavy || ref->graph->num_ops() >= options_.heavy_graph_ops;
  return Serve(context, method, heavy,
               [this, response, ref = *std::move(ref), key = std::move(key),
                body = std::move(body)]() -> absl::Status {
                 RETURN_IF_ERROR(body(ref));
                 registry_->StoreAnswer(key, response->SerializeAsString());
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* PlannerService::RegisterGraph(
    grpc::CallbackServerContext* context,
    const v1::RegisterGraphRequest* request,
    v1::RegisterGraphResponse* response) {
  return Serve(
      context, "RegisterGraph", IsHeavy(request->graph()),
      [this, request, response]() -> absl::Status {
        ASSIGN_OR_RETURN(const GraphRegistry::Registration registration,
                         registry_->Register(request->graph()));
        response->set_graph_fingerprint(registration.ref.fingerprint);
        response->set_newly_registered(registration.newly_registered);
        response->set_charged_bytes(registration.charged_bytes);
        response->set_op_count(registration.ref.graph->num_ops());
        response->set_tensor_count(registration.ref.graph->num_tensors());
        if (metrics_ != nullptr) {
          metrics_->RecordGraphOps("RegisterGraph",
                                   registration.ref.graph->num_ops());
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* PlannerService::CheckFit(
    grpc::CallbackServerContext* context, const v1::CheckFitRequest* request,
    v1::CheckFitResponse* response) {
  return ServeGraphCall(
      context, "CheckFit", *request, GraphOf(*request),
      request->graph_fingerprint(), response,
      /*heavy=*/request->device_names_size() > 1,
      [this, context, request, response](const GraphRef& ref) {
        return FitDevices(context, *request, ref, response);
      });
}

absl::Status PlannerService::FitDevices(grpc::CallbackServerContext* context,
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
  options.interrupted = InterruptFor(context);
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
    ASSIGN_OR_RETURN(
        const planner::FitResult fit,
        planner::CheckFit(*costed.graph, costed.costs.Costs(), options));
    v1::DeviceFit* answer = response->add_devices();
    adapter::FillDeviceFit(spec.name, options.device_memory_bytes, fit, answer);
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
