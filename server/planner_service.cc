#include "server/planner_service.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "adapter/device_convert.h"
#include "adapter/graph_convert.h"
#include "adapter/plan_convert.h"
#include "adapter/profile_convert.h"
#include "planner/memory_simulator.h"
#include "planner/recompute/fit_check.h"
#include "planner/recompute/recompute_planner.h"
#include "planner/status_macros.h"
#include "server/guarded_call.h"
#include "server/request_codec.h"
#include "server/status_map.h"
#include "spdlog/spdlog.h"

#ifndef ECHO_VERSION
#define ECHO_VERSION "dev"
#endif

namespace echo::server {

// The call's cancellation and deadline, for the planner's cooperative
// checks: heavy work stops once the client is gone.
planner::Interrupt InterruptFor(grpc::CallbackServerContext* context) {
  const auto deadline = context->deadline();
  return [context, deadline]() -> absl::Status {
    if (context->IsCancelled()) {
      return absl::CancelledError("the client cancelled the call");
    }
    if (std::chrono::system_clock::now() > deadline) {
      return absl::DeadlineExceededError("the call's deadline passed");
    }
    return absl::OkStatus();
  };
}

bool NamesDevice(const v1::DeviceSpec& device) {
  return !device.name().empty() || device.memory_bytes() != 0 ||
         device.peak_flops_size() > 0 ||
         device.memory_bandwidth_bytes_per_second() != 0;
}

namespace {

// The timeline fields of EstimateMemory and GenerateRecomputePlan requests,
// checked before any work whether or not a timeline is asked for.
template <typename Request>
absl::Status ValidateTimelineRequest(const Request& request) {
  RETURN_IF_ERROR(
      planner::ValidateTimelinePoints(request.timeline_max_points()));
  if (request.max_live_tensors() < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_live_tensors must be >= -1, got ", request.max_live_tensors()));
  }
  return absl::OkStatus();
}

int MaxLiveTensors(int32_t requested) {
  return requested == 0 ? 20 : requested;
}

// The memory timeline of `schedule` into the response (callers ask only
// when the request has include_timeline).
template <typename Request, typename Response>
absl::Status AddTimeline(const Request& request, const planner::Graph& graph,
                         const planner::Schedule& schedule,
                         const planner::MemoryModelOptions& memory,
                         Response* response) {
  ASSIGN_OR_RETURN(const planner::MemoryTimeline timeline,
                   planner::SimulateTimeline(graph, schedule, memory,
                                             request.timeline_max_points()));
  adapter::FillTimeline(graph, schedule, timeline,
                        response->mutable_timeline());
  return absl::OkStatus();
}

}  // namespace

PlannerService::PlannerService(PlannerServiceOptions options,
                               ServerMetrics* metrics, NodeProfiler* profiler)
    : options_(options), metrics_(metrics), profiler_(profiler) {
  int threads = options_.worker_threads;
  if (threads <= 0) {
    threads =
        std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  }
  // Admission control already bounds the calls in flight; the queue bound
  // only makes that explicit. Workers run at a lower priority than gRPC's
  // threads: health checks answer while plans use every core.
  workers_ = std::make_unique<WorkerPool>(
      threads,
      static_cast<size_t>(std::max(1, options_.max_concurrent_requests)),
      kWorkerNiceIncrement);
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* PlannerService::ServeRaw(
    grpc::CallbackServerContext* context, const char* method,
    const grpc::ByteBuffer* raw_request, grpc::ByteBuffer* raw_response,
    bool metered, Lane (PlannerService::*lane_of)(const Request&) const,
    absl::Status (PlannerService::*handle)(grpc::CallbackServerContext*,
                                           const Request&, Response*)) {
  const auto start = std::chrono::steady_clock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Authentication and authorization first: a refused caller takes no
  // slot and costs no parse.
  if (options_.authorizer != nullptr) {
    const absl::Status authorized = options_.authorizer->Authorize(
        method, CallAuthorizer::CredentialsOf(*context));
    if (!authorized.ok()) {
      Complete(context, reactor, method, start, false, authorized);
      return reactor;
    }
  }
  // Admission before parsing: a refused call costs no parse.
  if (metered) {
    if (absl::Status admitted = Admit(); !admitted.ok()) {
      Complete(context, reactor, method, start, true, admitted);
      return reactor;
    }
  }
  // Shared: the handler may run on a worker after this returns.
  auto call = std::make_shared<std::pair<Request, Response>>();
  const absl::Status parsed = RunGuarded(
      method, [&] { return ParseRequest(*raw_request, &call->first); });
  if (!parsed.ok()) {
    Complete(context, reactor, method, start, metered, parsed);
    return reactor;
  }
  auto run = [this, context, reactor, method, start, metered, raw_response,
              handle, call] {
    Complete(
        context, reactor, method, start, metered,
        RunGuarded(method, [&]() -> absl::Status {
          RETURN_IF_ERROR((this->*handle)(context, call->first, &call->second));
          return SerializeResponse(call->second, raw_response);
        }));
  };
  if ((this->*lane_of)(call->first) == Lane::kInline) {
    run();
  } else if (!workers_->TrySubmit(std::move(run))) {
    Complete(context, reactor, method, start, metered,
             absl::ResourceExhaustedError(
                 "echod's worker queue is full; retry with backoff"));
  }
  return reactor;
}

absl::Status PlannerService::Admit() {
  const int in_flight = in_flight_.fetch_add(1) + 1;
  if (draining_) {
    return absl::UnavailableError("echod is draining; retry on another node");
  }
  if (in_flight > options_.max_concurrent_requests) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "echod is overloaded: ", in_flight - 1, " requests in flight (max ",
        options_.max_concurrent_requests, "); retry with backoff"));
  }
  return absl::OkStatus();
}

void PlannerService::Complete(grpc::CallbackServerContext* context,
                              grpc::ServerUnaryReactor* reactor,
                              const char* method,
                              std::chrono::steady_clock::time_point start,
                              bool admitted, const absl::Status& status) {
  if (admitted) in_flight_.fetch_sub(1);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  const grpc::Status grpc_status = ToGrpcStatus(status);
  if (metrics_ != nullptr) {
    metrics_->RecordRequest(method, grpc_status.error_code(), seconds);
  }
  if (status.ok()) {
    spdlog::debug("{} from {}: OK in {:.3f} ms", method, context->peer(),
                  seconds * 1e3);
  } else {
    spdlog::warn("{} from {}: {} in {:.3f} ms", method, context->peer(),
                 status.ToString(), seconds * 1e3);
  }
  reactor->Finish(grpc_status);
}

absl::StatusOr<PlannerService::CostedGraph> PlannerService::PrepareGraph(
    const char* method, const v1::Graph& proto, const v1::DeviceSpec* device) {
  ASSIGN_OR_RETURN(planner::Graph graph, adapter::GraphFromProto(proto));
  if (metrics_ != nullptr) metrics_->RecordGraphOps(method, graph.num_ops());
  std::optional<planner::DeviceSpec> resolved;
  if (device != nullptr && NamesDevice(*device)) {
    ASSIGN_OR_RETURN(resolved, adapter::ResolveDevice(*device));
  }
  const planner::DeviceSpec* device_ptr = resolved ? &*resolved : nullptr;
  const planner::ProfiledTimes* profiled =
      profiler_ != nullptr ? profiler_->TimesFor(device_ptr) : nullptr;
  ASSIGN_OR_RETURN(planner::CostTable costs,
                   planner::EstimateOpCosts(graph, device_ptr, profiled));
  return CostedGraph{std::move(graph), std::move(resolved), std::move(costs)};
}

grpc::ServerUnaryReactor* PlannerService::EstimateMemory(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeRaw(context, "EstimateMemory", request, response,
                  /*metered=*/true, &PlannerService::EstimateLane,
                  &PlannerService::DoEstimateMemory);
}

grpc::ServerUnaryReactor* PlannerService::GenerateRecomputePlan(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeRaw(context, "GenerateRecomputePlan", request, response,
                  /*metered=*/true, &PlannerService::PlanLane,
                  &PlannerService::DoGenerateRecomputePlan);
}

grpc::ServerUnaryReactor* PlannerService::CheckFit(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeRaw(context, "CheckFit", request, response, /*metered=*/true,
                  &PlannerService::FitLane, &PlannerService::DoCheckFit);
}

grpc::ServerUnaryReactor* PlannerService::FindMaxBatchSize(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeRaw(context, "FindMaxBatchSize", request, response,
                  /*metered=*/true, &PlannerService::MaxBatchLane,
                  &PlannerService::DoFindMaxBatchSize);
}

grpc::ServerUnaryReactor* PlannerService::GetMemoryFrontier(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeRaw(context, "GetMemoryFrontier", request, response,
                  /*metered=*/true, &PlannerService::FrontierLane,
                  &PlannerService::DoGetMemoryFrontier);
}

grpc::ServerUnaryReactor* PlannerService::ProfileOps(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeRaw(context, "ProfileOps", request, response, /*metered=*/true,
                  &PlannerService::ProfileLane, &PlannerService::DoProfileOps);
}

grpc::ServerUnaryReactor* PlannerService::GetNodeInfo(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeRaw(context, "GetNodeInfo", request, response, /*metered=*/false,
                  &PlannerService::InfoLane, &PlannerService::DoGetNodeInfo);
}

PlannerService::Lane PlannerService::EstimateLane(
    const v1::EstimateMemoryRequest& request) const {
  return LaneFor(request.graph());
}

PlannerService::Lane PlannerService::PlanLane(
    const v1::GenerateRecomputePlanRequest& request) const {
  return request.policy() == v1::RECOMPUTE_POLICY_OPTIMAL
             ? Lane::kPool
             : LaneFor(request.graph());
}

PlannerService::Lane PlannerService::FitLane(
    const v1::CheckFitRequest& request) const {
  return LaneFor(request.graph());
}

absl::Status PlannerService::DoEstimateMemory(
    grpc::CallbackServerContext*, const v1::EstimateMemoryRequest& request,
    v1::EstimateMemoryResponse* response) {
  ASSIGN_OR_RETURN(
      CostedGraph costed,
      PrepareGraph("EstimateMemory", request.graph(), &request.device()));
  ASSIGN_OR_RETURN(planner::MemoryModelOptions memory,
                   adapter::MemoryModelFromProto(request.allocator()));
  RETURN_IF_ERROR(ValidateTimelineRequest(request));
  const planner::SimulationResult result =
      planner::SimulatePlain(costed.graph, memory);
  adapter::FillEstimate(costed.graph, result,
                        MaxLiveTensors(request.max_live_tensors()), response);
  if (request.include_timeline()) {
    RETURN_IF_ERROR(AddTimeline(request, costed.graph,
                                planner::PlainSchedule(costed.graph), memory,
                                response));
  }
  if (costed.device && costed.costs.unit == planner::kSecondsUnit) {
    response->set_compute_time_seconds(costed.costs.TotalCost());
  }
  adapter::CostSourceSummaryToProto(costed.costs.Summary(),
                                    response->mutable_cost_sources());
  if (metrics_ != nullptr) metrics_->RecordEstimatedPeak(result.peak_bytes);
  return absl::OkStatus();
}

absl::Status PlannerService::DoGenerateRecomputePlan(
    grpc::CallbackServerContext* context,
    const v1::GenerateRecomputePlanRequest& request,
    v1::GenerateRecomputePlanResponse* response) {
  ASSIGN_OR_RETURN(planner::RecomputePlanOptions options,
                   adapter::PlanOptionsFromProto(request));
  RETURN_IF_ERROR(ValidateTimelineRequest(request));
  options.interrupted = InterruptFor(context);
  const std::string policy(planner::RecomputePolicyName(options.policy));
  absl::StatusOr<CostedGraph> costed =
      PrepareGraph("GenerateRecomputePlan", request.graph(), &request.device());
  absl::StatusOr<planner::RecomputePlan> plan =
      costed.ok() ? planner::GenerateRecomputePlan(
                        costed->graph, costed->costs.Costs(), options)
                  : absl::StatusOr<planner::RecomputePlan>(costed.status());
  if (!plan.ok()) {
    if (metrics_ != nullptr) metrics_->RecordPlan(policy, "error", 0, 0, 0);
    return plan.status();
  }
  adapter::FillPlanResponse(costed->graph, *plan, options.policy, response);
  response->set_plan_fingerprint(
      planner::PlanFingerprint(costed->graph, plan->schedule));
  response->set_cost_unit(costed->costs.unit);
  adapter::CostSourceSummaryToProto(costed->costs.Summary(),
                                    response->mutable_cost_sources());
  if (request.include_timeline()) {
    ASSIGN_OR_RETURN(
        const planner::SimulationResult replay,
        planner::ReplaySchedule(costed->graph, plan->schedule, options.memory));
    adapter::FillLiveTensors(costed->graph, replay.live_at_peak,
                             MaxLiveTensors(request.max_live_tensors()),
                             response->mutable_live_at_peak());
    RETURN_IF_ERROR(AddTimeline(request, costed->graph, plan->schedule,
                                options.memory, response));
  }
  if (metrics_ != nullptr) {
    metrics_->RecordPlan(policy, plan->feasible ? "feasible" : "infeasible",
                         plan->baseline_peak_bytes - plan->planned_peak_bytes,
                         plan->recompute_overhead_ratio,
                         plan->solve_time_seconds);
  }
  return absl::OkStatus();
}

absl::Status PlannerService::DoCheckFit(grpc::CallbackServerContext* context,
                                        const v1::CheckFitRequest& request,
                                        v1::CheckFitResponse* response) {
  if (!NamesDevice(request.device())) {
    return absl::InvalidArgumentError(
        "CheckFit needs a device (a catalog name or a full spec)");
  }
  ASSIGN_OR_RETURN(planner::FitOptions options,
                   adapter::FitOptionsFromProto(request));
  options.interrupted = InterruptFor(context);
  ASSIGN_OR_RETURN(CostedGraph costed, PrepareGraph("CheckFit", request.graph(),
                                                    &request.device()));
  options.device_memory_bytes = costed.device->memory_bytes;
  ASSIGN_OR_RETURN(
      const planner::FitResult fit,
      planner::CheckFit(costed.graph, costed.costs.Costs(), options));
  response->set_device_memory_bytes(options.device_memory_bytes);
  adapter::FillFitResponse(fit, response);
  return absl::OkStatus();
}

absl::Status PlannerService::DoProfileOps(grpc::CallbackServerContext*,
                                          const v1::ProfileOpsRequest& request,
                                          v1::ProfileOpsResponse* response) {
  ASSIGN_OR_RETURN(planner::Graph graph,
                   adapter::GraphFromProto(request.graph()));
  std::vector<planner::OpIndex> ops;
  for (const std::string& id : request.op_ids()) {
    const planner::OpIndex op = graph.FindOp(id);
    if (op < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("op_ids names unknown op '", id, "'"));
    }
    ops.push_back(op);
  }
  if (profiler_ == nullptr) {
    return absl::FailedPreconditionError("this echod has no profiler");
  }
  ASSIGN_OR_RETURN(planner::ProfileReport report,
                   profiler_->ProfileOps(graph, ops, request.force()));
  adapter::ProfileReportToProto(report, response);
  return absl::OkStatus();
}

absl::Status PlannerService::DoGetNodeInfo(grpc::CallbackServerContext*,
                                           const v1::GetNodeInfoRequest&,
                                           v1::GetNodeInfoResponse* response) {
  if (profiler_ != nullptr) {
    adapter::NodeReportToProto(profiler_->NodeInfo(), response);
  }
  response->set_server_version(ECHO_VERSION);
  return absl::OkStatus();
}

}  // namespace echo::server
