#include "server/planner_service.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "adapter/call_convert.h"
#include "adapter/device_convert.h"
#include "adapter/profile_convert.h"
#include "planner/cost_model.h"
#include "planner/engine/engine.h"
#include "planner/status_macros.h"
#include "server/call_context.h"
#include "server/contained_call.h"
#include "server/gated_call.h"
#include "spdlog/spdlog.h"

#ifndef ECHO_VERSION
#define ECHO_VERSION "dev"
#endif

namespace echo::server {

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
  if (metrics_ != nullptr) {
    budget_->SetObserver([metrics = metrics_](int64_t in_use, int waiting) {
      metrics->SetRequestMemory(in_use, waiting);
    });
  }
  gated_methods_ = std::make_unique<GatedMethods>(this);
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
    // The drain before the client: past the drain's timeout gRPC's
    // Shutdown cancels the calls left, and the log should say why.
    if (draining_ && std::chrono::steady_clock::now() >= abort_at_) {
      return absl::UnavailableError(
          "echod is shutting down and its drain timeout passed; retry on "
          "another node");
    }
    if (context->IsCancelled()) {
      return absl::CancelledError("the client cancelled the call");
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

absl::StatusOr<engine::PricedGraph> PlannerService::PriceOn(
    std::shared_ptr<const planner::Graph> graph,
    const v1::DeviceSpec& device) const {
  ASSIGN_OR_RETURN(std::optional<planner::DeviceSpec> resolved,
                   adapter::DeviceOf(device));
  return engine::PriceGraph(std::move(graph), std::move(resolved),
                            ProfiledTimes());
}

engine::ProfiledTimesFor PlannerService::ProfiledTimes() const {
  if (profiler_ == nullptr) return nullptr;
  return [this](const planner::DeviceSpec* spec) {
    return profiler_->TimesFor(spec);
  };
}

absl::Status PlannerService::DoEstimateMemory(
    grpc::CallbackServerContext*, const v1::EstimateMemoryRequest& request,
    v1::EstimateMemoryResponse* response) {
  absl::StatusOr<engine::EstimateCall> call =
      adapter::EstimateCallFromProto(request);
  if (!call.ok()) return call.status();
  RETURN_IF_ERROR(engine::CheckTimeline(call->timeline));
  ASSIGN_OR_RETURN(const GraphRef ref, ResolveGraph("EstimateMemory", request));
  ASSIGN_OR_RETURN(
      const engine::PricedGraph priced,
      engine::PriceGraph(ref.graph, call->device, ProfiledTimes()));
  ASSIGN_OR_RETURN(const engine::EstimateAnswer answer,
                   engine::Estimate(priced, *call));
  adapter::FillEstimateAnswer(priced, *call, answer, response);
  if (metrics_ != nullptr) {
    metrics_->RecordEstimatedPeak(answer.result.peak_bytes);
  }
  return absl::OkStatus();
}

absl::Status PlannerService::DoGenerateRecomputePlan(
    grpc::CallbackServerContext* context,
    const v1::GenerateRecomputePlanRequest& request,
    v1::GenerateRecomputePlanResponse* response) {
  // Decode (adapter), plan (engine), encode (adapter); the status macros
  // are not used on the request's way, so that it visits each layer once.
  const absl::StatusOr<GraphRef> ref =
      ResolveGraph("GenerateRecomputePlan", request);
  if (!ref.ok()) return ref.status();
  absl::StatusOr<engine::PlanCall> call = adapter::PlanCallFromProto(request);
  if (!call.ok()) return call.status();
  // Before any work, and before the plan's fork.
  if (absl::Status timeline = engine::CheckTimeline(call->timeline);
      !timeline.ok()) {
    return timeline;
  }
  const absl::StatusOr<engine::PricedGraph> priced =
      engine::PriceGraph(ref->graph, call->device, ProfiledTimes());
  auto plan = [&]() -> absl::Status {
    RETURN_IF_ERROR(priced.status());
    ASSIGN_OR_RETURN(const engine::PlanAnswer answer,
                     engine::Plan(*priced, *call));
    adapter::FillPlanAnswer(*priced, *call, answer, response);
    return absl::OkStatus();
  };
  absl::Status planned;
  if (!priced.ok()) {
    planned = priced.status();
  } else if (call->options.policy == planner::RecomputePolicy::kOptimal) {
    // Already isolated: its solver runs in a child of its own.
    call->options.interrupted = InterruptFor(context);
    call->options.run_isolated_pass = [this](const planner::PassInput& in) {
      return optimal_.RunPass(in);
    };
    planned = plan();
  } else {
    planned =
        RunPlanning("GenerateRecomputePlan", context, request, request.graph(),
                    *ref, response, &call->options.interrupted, plan);
  }
  if (metrics_ != nullptr) {
    const std::string policy(
        planner::RecomputePolicyName(call->options.policy));
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
  ASSIGN_OR_RETURN(const GraphRef ref, ResolveGraph("CheckFit", request));
  planner::Interrupt interrupted;
  return RunPlanning("CheckFit", context, request, request.graph(), ref,
                     response, &interrupted, [&] {
                       return FitDevices(interrupted, request, ref, response);
                     });
}

absl::Status PlannerService::DoProfileOps(grpc::CallbackServerContext* context,
                                          const v1::ProfileOpsRequest& request,
                                          v1::ProfileOpsResponse* response) {
  ASSIGN_OR_RETURN(const GraphRef ref, ResolveGraph("ProfileOps", request));
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
