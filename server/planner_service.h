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
#include "server/metrics.h"
#include "server/optimal_worker.h"
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
  // Where and under which limits OPTIMAL's child processes run.
  OptimalWorkerOptions optimal;
};

class PlannerService final : public v1::MemoryPlanner::CallbackService {
 public:
  // `profiler` serves ProfileOps, GetNodeInfo and profiled op times; it
  // must outlive the service.
  PlannerService(PlannerServiceOptions options, ServerMetrics* metrics,
                 NodeProfiler* profiler);

  // While draining, new requests get UNAVAILABLE; at `abort_at` the work
  // still in flight is interrupted (OPTIMAL's children killed, AUTO stopped)
  // and answers UNAVAILABLE.
  void StartDraining(std::chrono::steady_clock::time_point abort_at =
                         std::chrono::steady_clock::time_point::max()) {
    abort_at_ = abort_at;
    draining_ = true;
  }

  const OptimalWorker& optimal_worker() const { return optimal_; }

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

 private:
  // A request's graph in the IR, its device (when it names one) and the
  // cost of every op.
  struct CostedGraph {
    planner::Graph graph;
    std::optional<planner::DeviceSpec> device;
    planner::CostTable costs;
  };
  absl::StatusOr<CostedGraph> PrepareGraph(const char* method,
                                           const v1::Graph& graph,
                                           const v1::DeviceSpec* device);

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
  // The call's cancellation and deadline, and the drain's abort time, for
  // the planner's cooperative checks and OPTIMAL's child processes.
  planner::Interrupt InterruptFor(grpc::CallbackServerContext* context) const;
  // OPTIMAL in a child process; the caller fills the cost unit and sources.
  absl::Status PlanOptimal(const v1::GenerateRecomputePlanRequest& request,
                           const CostedGraph& costed,
                           const planner::RecomputePlanOptions& options,
                           v1::GenerateRecomputePlanResponse* response);
  bool IsHeavy(const v1::Graph& graph) const {
    return graph.ops_size() >= options_.heavy_graph_ops;
  }

  PlannerServiceOptions options_;
  ServerMetrics* metrics_;
  NodeProfiler* profiler_;
  std::atomic<int> in_flight_{0};
  std::atomic<bool> draining_{false};
  // Written before draining_ is set, read after it is seen set.
  std::chrono::steady_clock::time_point abort_at_ =
      std::chrono::steady_clock::time_point::max();
  OptimalWorker optimal_;
  // Declared last: destroyed first, finishing what it has queued while the
  // members its tasks use are still alive.
  std::unique_ptr<WorkerPool> workers_;
};

}  // namespace echo::server

#endif  // ECHO_SERVER_PLANNER_SERVICE_H_
