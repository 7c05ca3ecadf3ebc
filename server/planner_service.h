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

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "echo/v1/planner.grpc.pb.h"
#include "planner/cost_model.h"
#include "planner/graph.h"
#include "server/graph_registry.h"
#include "server/metrics.h"
#include "server/profiler/node_profiler.h"
#include "server/worker_pool.h"

namespace echo::server {

// The server's defaults, used by PlannerServiceOptions, ServerOptions and
// echod's flags.
inline constexpr int kDefaultMaxConcurrentRequests = 64;
inline constexpr int64_t kDefaultMaxRequestBytes = int64_t{64} << 20;

// Graphs with at least this many ops are planned on the worker pool.
inline constexpr int kDefaultHeavyGraphOps = 1000;

struct PlannerServiceOptions {
  // Requests beyond this many in flight get RESOURCE_EXHAUSTED.
  int max_concurrent_requests = kDefaultMaxConcurrentRequests;
  // Threads of the worker pool that runs heavy requests (profiling,
  // OPTIMAL, plans and fit checks of graphs of heavy_graph_ops or more);
  // 0: the machine's hardware threads, at least 2.
  int worker_threads = 0;
  int heavy_graph_ops = kDefaultHeavyGraphOps;
  // Bounds of the graph registry and of the cache of answers
  // (graph_registry.h).
  int64_t graph_cache_bytes = kDefaultGraphCacheBytes;
  int64_t answer_cache_bytes = kDefaultAnswerCacheBytes;
};

class PlannerService final : public v1::MemoryPlanner::CallbackService {
 public:
  // `profiler` serves ProfileOps, GetNodeInfo and profiled op times; it
  // must outlive the service.
  PlannerService(PlannerServiceOptions options, ServerMetrics* metrics,
                 NodeProfiler* profiler);

  // While draining, new requests get UNAVAILABLE.
  void StartDraining() { draining_ = true; }

  grpc::ServerUnaryReactor* EstimateMemory(
      grpc::CallbackServerContext* context,
      const v1::EstimateMemoryRequest* request,
      v1::EstimateMemoryResponse* response) override;
  grpc::ServerUnaryReactor* GenerateRecomputePlan(
      grpc::CallbackServerContext* context,
      const v1::GenerateRecomputePlanRequest* request,
      v1::GenerateRecomputePlanResponse* response) override;
  grpc::ServerUnaryReactor* CheckFit(grpc::CallbackServerContext* context,
                                     const v1::CheckFitRequest* request,
                                     v1::CheckFitResponse* response) override;
  grpc::ServerUnaryReactor* ProfileOps(
      grpc::CallbackServerContext* context,
      const v1::ProfileOpsRequest* request,
      v1::ProfileOpsResponse* response) override;
  grpc::ServerUnaryReactor* GetNodeInfo(
      grpc::CallbackServerContext* context,
      const v1::GetNodeInfoRequest* request,
      v1::GetNodeInfoResponse* response) override;
  grpc::ServerUnaryReactor* RegisterGraph(
      grpc::CallbackServerContext* context,
      const v1::RegisterGraphRequest* request,
      v1::RegisterGraphResponse* response) override;

  // The one place a request's graph or graph_fingerprint becomes the
  // planner's graph (GraphRegistry::Resolve): any handler calls it.
  absl::StatusOr<GraphRef> ResolveGraph(const v1::Graph* graph,
                                        const std::string& fingerprint) {
    return registry_->Resolve(graph, fingerprint);
  }
  // The request's graph field, null when unset.
  template <typename Request>
  static const v1::Graph* GraphOf(const Request& request) {
    return request.has_graph() ? &request.graph() : nullptr;
  }
  const GraphRegistry& registry() const { return *registry_; }

 private:
  // A request's graph in the IR, its device (when it names one) and the
  // cost of every op.
  struct CostedGraph {
    std::shared_ptr<const planner::Graph> graph;
    std::optional<planner::DeviceSpec> device;
    planner::CostTable costs;
  };
  absl::StatusOr<CostedGraph> PrepareGraph(
      const char* method, std::shared_ptr<const planner::Graph> graph,
      const v1::DeviceSpec* device);

  // Serve for a request with a graph or a graph_fingerprint: resolves it
  // (an inline graph in the handler, on the worker pool when heavy), answers
  // a repeated fingerprint question from the answer cache on the calling
  // thread, else runs `body` (on the worker pool when `heavy` or the graph
  // has heavy_graph_ops ops) and caches its answer when the graph was given
  // by fingerprint.
  grpc::ServerUnaryReactor* ServeGraphCall(
      grpc::CallbackServerContext* context, const char* method,
      const google::protobuf::Message& request, const v1::Graph* graph,
      const std::string& fingerprint, google::protobuf::Message* response,
      bool heavy, std::function<absl::Status(const GraphRef&)> body);
  // CheckFit's work: one device or many (graph_calls.cc).
  absl::Status FitDevices(grpc::CallbackServerContext* context,
                          const v1::CheckFitRequest& request,
                          const GraphRef& ref, v1::CheckFitResponse* response);

  // Admission control, timing, metrics and logging around one handler,
  // which runs on the worker pool when `heavy`, else on the calling gRPC
  // thread. The handler may run after Serve returns: it must capture the
  // request and response pointers by value, not the caller's locals.
  grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* context,
                                  const char* method, bool heavy,
                                  std::function<absl::Status()> handler);
  // Ends a served call: in-flight count, metrics, log, Finish.
  void Complete(grpc::CallbackServerContext* context,
                grpc::ServerUnaryReactor* reactor, const char* method,
                std::chrono::steady_clock::time_point start,
                const absl::Status& status);
  bool IsHeavy(const v1::Graph& graph) const {
    return graph.ops_size() >= options_.heavy_graph_ops;
  }

  PlannerServiceOptions options_;
  ServerMetrics* metrics_;
  NodeProfiler* profiler_;
  std::atomic<int> in_flight_{0};
  std::atomic<bool> draining_{false};
  std::unique_ptr<GraphRegistry> registry_;
  // Declared last: destroyed first, finishing what it has queued while the
  // members its tasks use are still alive.
  std::unique_ptr<WorkerPool> workers_;
};

}  // namespace echo::server

#endif  // ECHO_SERVER_PLANNER_SERVICE_H_
