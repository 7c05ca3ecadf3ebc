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
#include "server/call_context.h"
#include "server/guarded_call.h"
#include "server/status_map.h"
#include "spdlog/spdlog.h"

#ifndef ECHO_VERSION
#define ECHO_VERSION "dev"
#endif

namespace echo::server {

PlannerService::PlannerService(PlannerServiceOptions options,
                               ServerMetrics* metrics, NodeProfiler* profiler)
    : options_(options),
      metrics_(metrics),
      profiler_(profiler),
      registry_(std::make_unique<GraphRegistry>(
          options_.graph_cache_bytes, options_.answer_cache_bytes, metrics)) {
  int threads = options_.worker_threads;
  if (threads <= 0) {
    threads =
        std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  }
  // Admission control already bounds the calls in flight; the queue bound
  // only makes that explicit.
  workers_ = std::make_unique<WorkerPool>(
      threads,
      static_cast<size_t>(std::max(1, options_.max_concurrent_requests)));
}

grpc::ServerUnaryReactor* PlannerService::Serve(
    grpc::CallbackServerContext* context, const char* method, bool heavy,
    std::function<absl::Status()> handler) {
  const auto start = std::chrono::steady_clock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const int in_flight = in_flight_.fetch_add(1) + 1;
  if (draining_) {
    Complete(
        context, reactor, method, start,
        absl::UnavailableError("echod is draining; retry on another node"));
  } else if (in_flight > options_.max_concurrent_requests) {
    Complete(
        context, reactor, method, start,
        absl::ResourceExhaustedError(absl::StrCat(
            "echod is overloaded: ", in_flight - 1, " requests in flight (max ",
            options_.max_concurrent_requests, "); retry with backoff")));
  } else if (!heavy) {
    Complete(context, reactor, method, start, RunGuarded(method, handler));
  } else if (!workers_->TrySubmit([this, context, reactor, method, start,
                                   handler = std::move(handler)] {
               Complete(context, reactor, method, start,
                        RunGuarded(method, handler));
             })) {
    Complete(context, reactor, method, start,
             absl::ResourceExhaustedError(
                 "echod's worker queue is full; retry with backoff"));
  }
  return reactor;
}

void PlannerService::Complete(grpc::CallbackServerContext* context,
                              grpc::ServerUnaryReactor* reactor,
                              const char* method,
                              std::chrono::steady_clock::time_point start,
                              const absl::Status& status) {
  in_flight_.fetch_sub(1);
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
  return CostedGraph{std::move(graph), std::move(resolved), std::move(costs)};
}

grpc::ServerUnaryReactor* PlannerService::EstimateMemory(
    grpc::CallbackServerContext* context,
    const v1::EstimateMemoryRequest* request,
    v1::EstimateMemoryResponse* response) {
  return ServeGraphCall(
      context, "EstimateMemory", *request, GraphOf(*request),
      request->graph_fingerprint(), response, /*heavy=*/false,
      [this, request, response](const GraphRef& ref) -> absl::Status {
        ASSIGN_OR_RETURN(
            CostedGraph costed,
            PrepareGraph("EstimateMemory", ref.graph, &request->device()));
        ASSIGN_OR_RETURN(planner::MemoryModelOptions memory,
                         adapter::MemoryModelFromProto(request->allocator()));
        if (request->max_live_tensors() < -1) {
          return absl::InvalidArgumentError(
              absl::StrCat("max_live_tensors must be >= -1, got ",
                           request->max_live_tensors()));
        }
        const planner::SimulationResult result =
            planner::SimulatePlain(*costed.graph, memory);
        const int max_live =
            request->max_live_tensors() == 0 ? 20 : request->max_live_tensors();
        adapter::FillEstimate(*costed.graph, result, max_live, response);
        if (costed.device && costed.costs.unit == planner::kSecondsUnit) {
          response->set_compute_time_seconds(costed.costs.TotalCost());
        }
        adapter::CostSourceSummaryToProto(costed.costs.Summary(),
                                          response->mutable_cost_sources());
        if (metrics_ != nullptr)
          metrics_->RecordEstimatedPeak(result.peak_bytes);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* PlannerService::GenerateRecomputePlan(
    grpc::CallbackServerContext* context,
    const v1::GenerateRecomputePlanRequest* request,
    v1::GenerateRecomputePlanResponse* response) {
  return ServeGraphCall(
      context, "GenerateRecomputePlan", *request, GraphOf(*request),
      request->graph_fingerprint(), response,
      /*heavy=*/request->policy() == v1::RECOMPUTE_POLICY_OPTIMAL,
      [this, context, request, response](const GraphRef& ref) -> absl::Status {
        ASSIGN_OR_RETURN(planner::RecomputePlanOptions options,
                         adapter::PlanOptionsFromProto(*request));
        options.interrupted = InterruptFor(context);
        const std::string policy(planner::RecomputePolicyName(options.policy));
        absl::StatusOr<CostedGraph> costed = PrepareGraph(
            "GenerateRecomputePlan", ref.graph, &request->device());
        absl::StatusOr<planner::RecomputePlan> plan =
            costed.ok()
                ? planner::GenerateRecomputePlan(*costed->graph,
                                                 costed->costs.Costs(), options)
                : absl::StatusOr<planner::RecomputePlan>(costed.status());
        if (!plan.ok()) {
          if (metrics_ != nullptr)
            metrics_->RecordPlan(policy, "error", 0, 0, 0);
          return plan.status();
        }
        adapter::FillPlanResponse(*costed->graph, *plan, options.policy,
                                  response);
        response->set_cost_unit(costed->costs.unit);
        adapter::CostSourceSummaryToProto(costed->costs.Summary(),
                                          response->mutable_cost_sources());
        if (metrics_ != nullptr) {
          metrics_->RecordPlan(
              policy, plan->feasible ? "feasible" : "infeasible",
              plan->baseline_peak_bytes - plan->planned_peak_bytes,
              plan->recompute_overhead_ratio, plan->solve_time_seconds);
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* PlannerService::ProfileOps(
    grpc::CallbackServerContext* context, const v1::ProfileOpsRequest* request,
    v1::ProfileOpsResponse* response) {
  return Serve(
      context, "ProfileOps", /*heavy=*/true,
      [this, request, response]() -> absl::Status {
        ASSIGN_OR_RETURN(
            const GraphRef ref,
            ResolveGraph(GraphOf(*request), request->graph_fingerprint()));
        const planner::Graph& graph = *ref.graph;
        std::vector<planner::OpIndex> ops;
        for (const std::string& id : request->op_ids()) {
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
                         profiler_->ProfileOps(graph, ops, request->force()));
        adapter::ProfileReportToProto(report, response);
        // Profiled times change op costs: cached answers may be stale.
        registry_->ClearAnswers();
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* PlannerService::GetNodeInfo(
    grpc::CallbackServerContext* context, const v1::GetNodeInfoRequest*,
    v1::GetNodeInfoResponse* response) {
  return Serve(context, "GetNodeInfo", /*heavy=*/false,
               [this, response]() -> absl::Status {
                 if (profiler_ != nullptr) {
                   adapter::NodeReportToProto(profiler_->NodeInfo(), response);
                 }
                 response->set_server_version(ECHO_VERSION);
                 return absl::OkStatus();
               });
}

}  // namespace echo::server
