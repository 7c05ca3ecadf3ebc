#include "server/planner_service.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "adapter/device_convert.h"
#include "adapter/graph_convert.h"
#include "adapter/plan_convert.h"
#include "adapter/profile_convert.h"
#include "planner/cost_model.h"
#include "planner/memory_simulator.h"
#include "planner/recompute/recompute_planner.h"
#include "planner/schedule/fit_check.h"
#include "planner/status_macros.h"
#include "server/call_context.h"
#include "server/contained_call.h"
#include "spdlog/spdlog.h"

#ifndef ECHO_VERSION
#define ECHO_VERSION "dev"
#endif

namespace echo::server {

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

int64_t RequestMemoryBytes(const PlannerServiceOptions& options) {
  const int64_t total =
      options.memory_budget_bytes > 0
          ? options.memory_budget_bytes
          : DefaultMemoryBudgetBytes(options.host.memory_limit_bytes);
  return total - options.graph_cache_bytes - options.answer_cache_bytes -
         kServerBaseBytes;
}

PlannerService::PlannerService(PlannerServiceOptions options,
                               ServerMetrics* metrics, NodeProfiler* profiler)
    : options_(options),
      metrics_(metrics),
      profiler_(profiler),
      optimal_(options.optimal),
      registry_(std::make_unique<GraphRegistry>(
          options_.graph_cache_bytes, options_.answer_cache_bytes, metrics)) {
  budget_ = std::make_unique<MemoryBudget>(RequestMemoryBytes(options_));
  int threads = options_.worker_threads;
  if (threads <= 0) threads = std::max(1, options_.host.cpus);
  // Admission control already bounds the calls in flight; the queue bound
  // only makes that explicit. Workers run at a lower priority than gRPC's
  // threads: health checks answer while plans use every core.
  workers_ = std::make_unique<WorkerPool>(
      threads,
      static_cast<size_t>(std::max(1, options_.max_concurrent_requests)),
      kWorkerNiceIncrement);
}

planner::Interrupt PlannerService::InterruptFor(
    grpc::CallbackServerContext* context) const {
  const auto deadline = context->deadline();
  return [this, context, deadline]() -> absl::Status {
    // The deadline first: gRPC marks a call past it cancelled too, and the
    // log should say which stopped it.
    if (std::chrono::system_clock::now() > deadline) {
      return absl::DeadlineExceededError("the call's deadline passed");
    }
    if (context->IsCancelled()) {
      return absl::CancelledError("the client cancelled the call");
    }
    if (draining_ && std::chrono::steady_clock::now() >= abort_at_) {
      return absl::UnavailableError(
          "echod is shutting down and its drain timeout passed; retry on "
          "another node");
    }
    return absl::OkStatus();
  };
}

absl::Status PlannerService::RunPlanning(
    const char* method, grpc::CallbackServerContext* context,
    const google::protobuf::Message& request, const v1::Graph& graph,
    const GraphRef& ref, google::protobuf::Message* response,
    planner::Interrupt* interrupted,
    const std::function<absl::Status()>& work) {
  if (!options_.contain_plans) {
    *interrupted = InterruptFor(context);
    return work();
  }
  *interrupted = nullptr;
  ContainedCall call;
  call.method = method;
  call.request_id = NewRequestId();
  call.interrupted = InterruptFor(context);
  // Op costs look up profiled times in the fork too (batch searches price
  // each batch).
  if (profiler_ != nullptr) call.held_across_fork = {profiler_->lookup_mutex()};
  ContainedRun run;
  absl::Status status =
      RunContained(call, response, work, &run, &planning_children_);
  if (!run.crashed) return status;
  if (metrics_ != nullptr) metrics_->RecordWorkerCrash(method);
  const std::string fingerprint =
      ref.fingerprint.empty() ? GraphFingerprint(graph) : ref.fingerprint;
  std::string dumped = "not kept (no --crash_dump_dir)";
  if (!options_.crash_dump_dir.empty()) {
    const std::string path = absl::StrCat(options_.crash_dump_dir, "/",
                                          call.request_id, ".", method, ".pb");
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    dumped = request.SerializeToOstream(&out) && out.flush()
                 ? absl::StrCat("written to ", path)
                 : absl::StrCat("could not be written to ", path);
  }
  spdlog::error(
      "{}: the planning worker crashed ({}) after {:.3f} s; request id {}, "
      "graph fingerprint {} ({} ops), request {}; echod serves on",
      method, run.crash, run.wall_seconds, call.request_id, fingerprint,
      ref.graph != nullptr ? ref.graph->num_ops() : 0, dumped);
  return status;
}

absl::StatusOr<PlannerService::CostedGraph> PlannerService::PrepareGraph(
    const char* method, std::shared_ptr<const planner::Graph> graph,
    const v1::DeviceSpec* device) {
  if (metrics_ != nullptr) metrics_->RecordGraphOps(method, graph->num_ops());
  std::optional<planner::DeviceSpec> resolved;
  if (device != nullptr && NamesDevice(*device)) {
    ASSIGN_OR_RETURN(resolved, adapter::ResolveDevice(*device));
  }
  const planner::DeviceSpec* device_ptr = resolved ? &*resolved : nullptr;
  const planner::ProfiledTimes* profiled =
      profiler_ != nullptr ? profiler_->TimesFor(device_ptr) : nullptr;
  ASSIGN_OR_RETURN(planner::CostTable costs,
                   planner::EstimateOpCosts(*graph, device_ptr, profiled));
  std::string note;
  if (device_ptr == nullptr && costs.unit == planner::kRelativeUnit &&
      costs.TotalCost() == 0 && graph->num_ops() > 0) {
    ASSIGN_OR_RETURN(
        planner::DeviceSpec fallback,
        planner::FindCatalogDevice(planner::kDefaultPricingDevice));
    profiled = profiler_ != nullptr ? profiler_->TimesFor(&fallback) : nullptr;
    ASSIGN_OR_RETURN(costs,
                     planner::EstimateOpCosts(*graph, &fallback, profiled));
    note = absl::StrCat("priced on ", planner::kDefaultPricingDevice,
                        ": no device was named and the graph has no op costs");
  }
  return CostedGraph{std::move(graph), std::move(resolved), std::move(costs),
                     std::move(note)};
}

void PlannerService::PriceChunkLaunches(const planner::CostTable& costs,
                                        planner::ChunkingOptions* chunking) {
  chunking->launch_cost =
      costs.unit == planner::kSecondsUnit
          ? planner::CostModelOptions().launch_overhead_seconds
          : planner::ChunkingOptions().launch_cost;
}

absl::Status PlannerService::DoEstimateMemory(
    grpc::CallbackServerContext*, const v1::EstimateMemoryRequest& request,
    v1::EstimateMemoryResponse* response) {
  ASSIGN_OR_RETURN(const GraphRef ref, ResolveGraph(request));
  ASSIGN_OR_RETURN(CostedGraph costed, PrepareGraph("EstimateMemory", ref.graph,
                                                    &request.device()));
  ASSIGN_OR_RETURN(planner::MemoryModelOptions memory,
                   adapter::MemoryModelFromProto(request.allocator()));
  RETURN_IF_ERROR(ValidateTimelineRequest(request));
  const planner::SimulationResult result =
      planner::SimulatePlain(*costed.graph, memory);
  adapter::FillEstimate(*costed.graph, result,
                        MaxLiveTensors(request.max_live_tensors()), response);
  if (request.include_timeline()) {
    RETURN_IF_ERROR(AddTimeline(request, *costed.graph,
                                planner::PlainSchedule(*costed.graph), memory,
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
  const std::string policy(planner::RecomputePolicyName(options.policy));
  ASSIGN_OR_RETURN(const GraphRef ref, ResolveGraph(request));
  absl::StatusOr<CostedGraph> costed =
      PrepareGraph("GenerateRecomputePlan", ref.graph, &request.device());
  if (!costed.ok()) {
    if (metrics_ != nullptr) metrics_->RecordPlan(policy, "error", 0, 0, 0);
    return costed.status();
  }
  auto plan = [&]() -> absl::Status {
    PriceChunkLaunches(costed->costs, &options.chunking);
    ASSIGN_OR_RETURN(planner::RecomputePlan plan,
                     planner::GenerateRecomputePlan(
                         *costed->graph, costed->costs.Costs(), options));
    adapter::FillPlanResponse(*costed->graph, plan, options.policy, response);
    response->set_cost_unit(costed->costs.unit);
    adapter::CostSourceSummaryToProto(costed->costs.Summary(),
                                      response->mutable_cost_sources());
    if (!costed->pricing_note.empty()) {
      response->set_message(
          absl::StrCat(response->message(), "; ", costed->pricing_note));
    }
    if (!request.include_timeline()) return absl::OkStatus();
    // The graph the schedule names: the chunked one when the plan runs
    // regions in chunks.
    const planner::Graph& plan_graph =
        plan.chunked_graph != nullptr ? *plan.chunked_graph : *costed->graph;
    ASSIGN_OR_RETURN(
        const planner::SimulationResult replay,
        planner::ReplaySchedule(plan_graph, plan.schedule, options.memory));
    adapter::FillLiveTensors(plan_graph, replay.live_at_peak,
                             MaxLiveTensors(request.max_live_tensors()),
                             response->mutable_live_at_peak());
    return AddTimeline(request, plan_graph, plan.schedule, options.memory,
                       response);
  };
  absl::Status planned;
  if (options.policy == planner::RecomputePolicy::kOptimal) {
    // Already isolated: its solver runs in a child of its own.
    options.interrupted = InterruptFor(context);
    options.run_isolated_pass = [this, &request](const planner::PassInput& in) {
      return optimal_.RunPass(request, in);
    };
    planned = plan();
  } else {
    planned =
        RunPlanning("GenerateRecomputePlan", context, request, request.graph(),
                    ref, response, &options.interrupted, plan);
  }
  if (metrics_ != nullptr) {
    if (planned.ok()) {
      metrics_->RecordPlan(
          policy, response->feasible() ? "feasible" : "infeasible",
          response->baseline_peak_bytes() - response->planned_peak_bytes(),
          response->recompute_overhead_ratio(), response->solve_time_seconds());
    } else {
      metrics_->RecordPlan(policy, "error", 0, 0, 0);
    }
  }
  return planned;
}

absl::Status PlannerService::DoCheckFit(grpc::CallbackServerContext* context,
                                        const v1::CheckFitRequest& request,
                                        v1::CheckFitResponse* response) {
  ASSIGN_OR_RETURN(const GraphRef ref, ResolveGraph(request));
  planner::Interrupt interrupted;
  return RunPlanning("CheckFit", context, request, request.graph(), ref,
                     response, &interrupted, [&] {
                       return FitDevices(interrupted, request, ref, response);
                     });
}

absl::Status PlannerService::DoProfileOps(grpc::CallbackServerContext* context,
                                          const v1::ProfileOpsRequest& request,
                                          v1::ProfileOpsResponse* response) {
  ASSIGN_OR_RETURN(const GraphRef ref, ResolveGraph(request));
  const planner::Graph& graph = *ref.graph;
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
                   profiler_->ProfileOps(graph, ops, request.force(),
                                         InterruptFor(context)));
  adapter::ProfileReportToProto(report, response);
  // Profiled times change op costs: cached answers may be stale.
  registry_->ClearAnswers();
  return absl::OkStatus();
}

absl::Status PlannerService::DoRegisterGraph(
    grpc::CallbackServerContext*, const v1::RegisterGraphRequest& request,
    v1::RegisterGraphResponse* response) {
  ASSIGN_OR_RETURN(const GraphRegistry::Registration registration,
                   registry_->Register(request.graph()));
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
}

absl::Status PlannerService::DoGetNodeInfo(grpc::CallbackServerContext*,
                                           const v1::GetNodeInfoRequest&,
                                           v1::GetNodeInfoResponse* response) {
  if (profiler_ != nullptr) {
    adapter::NodeReportToProto(profiler_->NodeInfo(), response);
  }
  response->set_server_version(ECHO_VERSION);
  response->set_worker_threads(workers_->threads());
  response->set_memory_limit_bytes(
      options_.host.memory_limit_bytes.value_or(0));
  response->set_request_memory_bytes(budget_->capacity_bytes());
  if (absl::Status optimal = optimal_.CheckUsable(); !optimal.ok()) {
    response->set_optimal_unavailable_reason(std::string(optimal.message()));
  }
  return absl::OkStatus();
}

}  // namespace echo::server
