// echo.v1.MemoryPlanner over the gRPC callback API. Each handler converts
// the request to the planner IR with the adapter, runs the planner (or the
// profiler), and fills the response with the adapter; every error leaves
// through ToGrpcStatus.
#ifndef ECHO_SERVER_PLANNER_SERVICE_H_
#define ECHO_SERVER_PLANNER_SERVICE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "echo/v1/planner.grpc.pb.h"
#include "planner/cost_model.h"
#include "planner/engine/engine.h"
#include "planner/graph.h"
#include "planner/recompute/plan.h"
#include "planner/schedule/batch_search.h"
#include "server/call_authorizer.h"
#include "server/call_context.h"
#include "server/graph_registry.h"
#include "server/host_limits.h"
#include "server/memory_budget.h"
#include "server/metrics.h"
#include "server/optimal_worker.h"
#include "server/profiler/node_profiler.h"
#include "server/worker_pool.h"

namespace echo::server {

// The server's defaults, used by PlannerServiceOptions, ServerOptions and
// echod's flags.
inline constexpr int kDefaultMaxConcurrentRequests = 64;
inline constexpr int64_t kDefaultMaxRequestBytes = int64_t{64} << 20;

// How much lower than gRPC's threads the worker pool's threads run (nice).
inline constexpr int kWorkerNiceIncrement = 10;

// Graphs with at least this many ops are planned on the worker pool.
inline constexpr int kDefaultHeavyGraphOps = 1000;
// Requests of more bytes are parsed on the worker pool, not on gRPC's
// threads (which also answer health checks). About 1,700 ops: graphs that
// big are planned on the pool anyway (DeepSpeech2: 153 bytes an op).
inline constexpr int64_t kDefaultMaxInlineRequestBytes = int64_t{256} << 10;

struct PlannerServiceOptions {
  // Requests beyond this many in flight get RESOURCE_EXHAUSTED.
  int max_concurrent_requests = kDefaultMaxConcurrentRequests;
  // Threads of the worker pool that runs heavy requests (profiling,
  // OPTIMAL, plans and fit checks of graphs of heavy_graph_ops or more);
  // 0: the CPUs echod may use (host.cpus: its affinity and its cgroup's
  // CPU quota). OPTIMAL's children run on workers, so this also bounds them.
  int worker_threads = 0;
  int heavy_graph_ops = kDefaultHeavyGraphOps;
  // A request of more bytes is parsed, and served whatever its lane, on the
  // worker pool: the lane is picked from the raw size before parsing.
  int64_t max_inline_request_bytes = kDefaultMaxInlineRequestBytes;
  // Checks every call's credentials first; nullptr: all calls allowed.
  // Must outlive the service.
  const CallAuthorizer* authorizer = nullptr;
  // Where and under which limits OPTIMAL's child processes run.
  OptimalWorkerOptions optimal;
  // Bounds of the graph registry and of the cache of answers
  // (graph_registry.h).
  int64_t graph_cache_bytes = kDefaultGraphCacheBytes;
  int64_t answer_cache_bytes = kDefaultAnswerCacheBytes;
  // The host's CPUs and memory as echod may use them (host_limits.h).
  HostLimits host;
  // Memory echod may use in all (memory_budget.h); 0: the default from
  // host.memory_limit_bytes. Requests get what the caches and echod's base
  // leave of it.
  int64_t memory_budget_bytes = 0;
  // Plans, fit checks, batch searches and frontiers run in a fork of echod
  // (contained_call.h): a crash answers INTERNAL with a request id and
  // echod serves on. Off: in echod's own process, as before.
  bool contain_plans = true;
  // Where the request of a contained crash is written (<request id>.pb,
  // the serialized request), to reproduce it; empty: not written.
  std::string crash_dump_dir;
  // The largest request gRPC accepts: what a generic call's read reserves
  // (at most the whole budget) before its request is read.
  int64_t max_request_bytes = kDefaultMaxRequestBytes;
};

// The memory the requests in flight may use: the budget less the caches'
// bounds and echod's own base; <= 0 when the budget cannot hold them.
int64_t RequestMemoryBytes(const PlannerServiceOptions& options);

// Every method is a raw handler: the service parses the request itself
// (server/request_codec.h) so that an unparsable request gets
// INVALID_ARGUMENT naming the field, and is counted, like any other error.
// The methods that carry graphs are generic (unregistered) methods, served
// by PlannerService::gated_methods(): gRPC reads a registered method's
// request whole before any handler sees it, while a generic call's request
// is read only when echod asks, once its memory is reserved (issue 49).
// GetNodeInfo stays registered, so that server reflection lists the
// service.
using RawPlannerService = v1::MemoryPlanner::WithGenericMethod_EstimateMemory<
    v1::MemoryPlanner::WithGenericMethod_GenerateRecomputePlan<
        v1::MemoryPlanner::WithGenericMethod_CheckFit<
            v1::MemoryPlanner::WithGenericMethod_FindMaxBatchSize<
                v1::MemoryPlanner::WithGenericMethod_GetMemoryFrontier<
                    v1::MemoryPlanner::WithGenericMethod_ProfileOps<
                        v1::MemoryPlanner::WithGenericMethod_RegisterGraph<
                            v1::MemoryPlanner::
                                WithRawCallbackMethod_GetNodeInfo<
                                    v1::MemoryPlanner::Service>>>>>>>>;

class PlannerService final : public RawPlannerService {
 public:
  // `profiler` serves ProfileOps, GetNodeInfo and profiled op times; it
  // must outlive the service.
  PlannerService(PlannerServiceOptions options, ServerMetrics* metrics,
                 NodeProfiler* profiler);
  ~PlannerService() override;

  // While draining, new requests get UNAVAILABLE; at `abort_at` the work
  // still in flight is interrupted (OPTIMAL's children killed, AUTO stopped)
  // and answers UNAVAILABLE.
  void StartDraining(std::chrono::steady_clock::time_point abort_at =
                         std::chrono::steady_clock::time_point::max()) {
    abort_at_ = abort_at;
    draining_ = true;
  }

  const OptimalWorker& optimal_worker() const { return optimal_; }
  int worker_threads() const { return workers_->threads(); }
  // Admitted calls not yet completed.
  int in_flight() const { return in_flight_.load(); }
  // Planning workers (forks of echod, contained_call.h) running now.
  int planning_children() const { return planning_children_.load(); }
  const MemoryBudget& memory_budget() const { return *budget_; }

  grpc::ServerUnaryReactor* GetNodeInfo(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;

  // Serves the methods that carry graphs (RawPlannerService): register it
  // with the server builder beside the service.
  grpc::CallbackGenericService* gated_methods();

  // The one place a request's graph or graph_fingerprint becomes the
  // planner's graph (GraphRegistry::Resolve): every handler calls it. Its
  // size is counted in the graph-size metric of `method`.
  template <typename Request>
  absl::StatusOr<GraphRef> ResolveGraph(const char* method,
                                        const Request& request) {
    absl::StatusOr<GraphRef> ref =
        registry_->Resolve(request.has_graph() ? &request.graph() : nullptr,
                           request.graph_fingerprint());
    if (ref.ok() && metrics_ != nullptr) {
      metrics_->RecordGraphOps(method, ref->graph->num_ops());
    }
    return ref;
  }
  const GraphRegistry& registry() const { return *registry_; }

 private:
  // A graph priced for the device a request names (engine::PriceGraph),
  // with this node's profiled times.
  absl::StatusOr<engine::PricedGraph> PriceOn(
      std::shared_ptr<const planner::Graph> graph,
      const v1::DeviceSpec& device) const;
  // This node's profiled times per device, for the engine.
  engine::ProfiledTimesFor ProfiledTimes() const;

  // The answer-cache key of a question about a registered graph (the
  // planning methods with graph_fingerprint set); empty: not cached.
  template <typename Request>
  static std::string AnswerKeyOf(const char* method, const Request& request) {
    if constexpr (std::is_same_v<Request, v1::EstimateMemoryRequest> ||
                  std::is_same_v<Request, v1::GenerateRecomputePlanRequest> ||
                  std::is_same_v<Request, v1::CheckFitRequest> ||
                  std::is_same_v<Request, v1::FindMaxBatchSizeRequest> ||
                  std::is_same_v<Request, v1::GetMemoryFrontierRequest>) {
      if (!request.graph_fingerprint().empty()) {
        return GraphRegistry::AnswerKey(method, request);
      }
    }
    return "";
  }
  // Runs `work` (the planning part of a request, filling `response`) in a
  // fork of echod when options_.contain_plans (contained_call.h), else
  // here. A crash is logged with the request id, the graph's fingerprint
  // (the registered one's, else that of `graph`, the request's inline one)
  // and, under --crash_dump_dir, the request written out. `*interrupted`
  // is what `work` should poll: the call's own checks here, nothing in a
  // fork (its parent kills it on cancel, deadline or drain; the call's
  // context is not the child's to read).
  absl::Status RunPlanning(const char* method,
                           grpc::CallbackServerContext* context,
                           const google::protobuf::Message& request,
                           const v1::Graph& graph, const GraphRef& ref,
                           google::protobuf::Message* response,
                           planner::Interrupt* interrupted,
                           const std::function<absl::Status()>& work);
  // CheckFit's work: one device or many (graph_calls.cc).
  absl::Status FitDevices(const planner::Interrupt& interrupted,
                          const v1::CheckFitRequest& request,
                          const GraphRef& ref, v1::CheckFitResponse* response);

  // Where a request runs: on the calling gRPC thread (cheap work) or on the
  // worker pool (heavy work).
  enum class Lane { kInline, kPool };

  // A call as gRPC hands it over, before its request is parsed.
  struct RawCall {
    grpc::CallbackServerContext* context;
    // Ends the call with the status (and, when OK, *response).
    std::function<void(const grpc::Status&)> finish;
    const char* method;
    std::chrono::steady_clock::time_point start;
    bool admitted;  // holds an admission slot, for Complete to release
    const grpc::ByteBuffer* request;
    grpc::ByteBuffer* response;
    // The request's memory (MemoryBudget), shared by the copies of the call
    // and given back by Complete.
    std::shared_ptr<MemoryBudget::Reservation> memory;
  };
  template <typename Request, typename Response>
  using Handler = absl::Status (PlannerService::*)(grpc::CallbackServerContext*,
                                                   const Request&, Response*);

  // A method served through gated_methods(): its name and how its read
  // request is served (ServeRequest with its types, lane and handler).
  struct Route {
    const char* method;
    void (*serve)(PlannerService* service, const RawCall& call);
  };
  // The route of a generic call's path ("/echo.v1.MemoryPlanner/<Method>");
  // nullptr for any other path.
  static const Route* RouteOf(const std::string& path);
  // A Route's serve: ServeRequest, metered, with the method's lane and
  // handler.
  template <auto kLane, auto kHandle>
  static void ServeMetered(PlannerService* service, const RawCall& call);
  // A generic call: admitted, then its memory (as much as the biggest
  // request, --max_request_bytes) waited for, then its request read, then
  // served by its Route (gated_call.cc).
  class GatedCall;
  class GatedMethods;

  // Authorization, then admission control when `metered` (GetNodeInfo is
  // not: it answers whatever the load). False when the call was refused
  // (and completed).
  bool Open(RawCall& call, bool metered);
  // A registered method's call, read by gRPC: Open, then ServeRequest.
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* ServeRaw(
      grpc::CallbackServerContext* context, const char* method,
      const grpc::ByteBuffer* raw_request, grpc::ByteBuffer* raw_response,
      bool metered, Lane (PlannerService::*lane_of)(const Request&) const,
      Handler<Request, Response> handle);
  // A read request's memory, when `metered`: its working set from its wire
  // bytes (call.memory, the read's reservation, resized to it; else
  // reserved), then Serve: on the calling thread, or on the worker pool
  // when the request has more than max_inline_request_bytes.
  template <typename Request, typename Response>
  void ServeRequest(RawCall call, bool metered,
                    Lane (PlannerService::*lane_of)(const Request&) const,
                    Handler<Request, Response> handle);
  // Parses the request, answers a question about a registered graph asked
  // before from the answer cache, else runs `handle` in the lane `lane_of`
  // picks (here when `on_worker`), caching the answer of a registered graph
  // and serializing the response; Complete ends the call on every path.
  template <typename Request, typename Response>
  void Serve(const RawCall& call, bool on_worker,
             Lane (PlannerService::*lane_of)(const Request&) const,
             Handler<Request, Response> handle);
  // Queues `task` on the worker pool; a full queue ends the call with
  // RESOURCE_EXHAUSTED.
  void Submit(const RawCall& call, std::function<void()> task);
  // Takes an admission slot; the error (UNAVAILABLE while draining,
  // RESOURCE_EXHAUSTED beyond max_concurrent_requests) still holds it, for
  // Complete to release.
  absl::Status Admit();
  // Ends a served call: in-flight count (when it took a slot), metrics,
  // log, Finish.
  void Complete(const RawCall& call, const absl::Status& status);
  // The call's cancellation and deadline, and the drain's abort time, for
  // the planner's cooperative checks and OPTIMAL's child processes.
  planner::Interrupt InterruptFor(grpc::CallbackServerContext* context) const;
  Lane LaneFor(const v1::Graph& graph, const std::string& fingerprint) const;
  Lane RegisterLane(const v1::RegisterGraphRequest& request) const {
    return LaneFor(request.graph(), "");
  }
  Lane EstimateLane(const v1::EstimateMemoryRequest& request) const;
  Lane PlanLane(const v1::GenerateRecomputePlanRequest& request) const;
  Lane FitLane(const v1::CheckFitRequest& request) const;
  // Many plans per answer: always on the worker pool.
  Lane MaxBatchLane(const v1::FindMaxBatchSizeRequest&) const {
    return Lane::kPool;
  }
  Lane FrontierLane(const v1::GetMemoryFrontierRequest&) const {
    return Lane::kPool;
  }
  Lane ProfileLane(const v1::ProfileOpsRequest&) const { return Lane::kPool; }
  Lane InfoLane(const v1::GetNodeInfoRequest&) const { return Lane::kInline; }

  // The methods' work, on parsed requests.
  absl::Status DoEstimateMemory(grpc::CallbackServerContext* context,
                                const v1::EstimateMemoryRequest& request,
                                v1::EstimateMemoryResponse* response);
  absl::Status DoGenerateRecomputePlan(
      grpc::CallbackServerContext* context,
      const v1::GenerateRecomputePlanRequest& request,
      v1::GenerateRecomputePlanResponse* response);
  absl::Status DoCheckFit(grpc::CallbackServerContext* context,
                          const v1::CheckFitRequest& request,
                          v1::CheckFitResponse* response);
  // scheduler_handlers.cc
  absl::Status DoFindMaxBatchSize(grpc::CallbackServerContext* context,
                                  const v1::FindMaxBatchSizeRequest& request,
                                  v1::FindMaxBatchSizeResponse* response);
  absl::Status DoGetMemoryFrontier(grpc::CallbackServerContext* context,
                                   const v1::GetMemoryFrontierRequest& request,
                                   v1::GetMemoryFrontierResponse* response);
  absl::Status DoProfileOps(grpc::CallbackServerContext* context,
                            const v1::ProfileOpsRequest& request,
                            v1::ProfileOpsResponse* response);
  absl::Status DoRegisterGraph(grpc::CallbackServerContext* context,
                               const v1::RegisterGraphRequest& request,
                               v1::RegisterGraphResponse* response);
  absl::Status DoGetNodeInfo(grpc::CallbackServerContext* context,
                             const v1::GetNodeInfoRequest& request,
                             v1::GetNodeInfoResponse* response);

  PlannerServiceOptions options_;
  ServerMetrics* metrics_;
  NodeProfiler* profiler_;
  std::atomic<int> in_flight_{0};
  std::atomic<int> planning_children_{0};
  std::atomic<bool> draining_{false};
  // Written before draining_ is set, read after it is seen set.
  std::chrono::steady_clock::time_point abort_at_ =
      std::chrono::steady_clock::time_point::max();
  OptimalWorker optimal_;
  std::unique_ptr<GraphRegistry> registry_;
  std::unique_ptr<MemoryBudget> budget_;
  std::unique_ptr<GatedMethods> gated_methods_;
  // Declared last: destroyed first, finishing what it has queued while the
  // members its tasks use (budget_ too: each task trims it) are still alive.
  std::unique_ptr<WorkerPool> workers_;
};

}  // namespace echo::server

#endif  // ECHO_SERVER_PLANNER_SERVICE_H_
