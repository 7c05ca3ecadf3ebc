// echo.v1.MemoryPlanner over the gRPC callback API. Each handler adapts the
// request to the planner IR, runs the planner, and adapts the result back;
// every error leaves through ToGrpcStatus.
#ifndef ECHO_SERVER_PLANNER_SERVICE_H_
#define ECHO_SERVER_PLANNER_SERVICE_H_

#include <atomic>
#include <functional>

#include "absl/status/status.h"
#include "echo/v1/planner.grpc.pb.h"
#include "server/metrics.h"

namespace echo::server {

struct PlannerServiceOptions {
  // Requests beyond this many in flight get RESOURCE_EXHAUSTED.
  int max_concurrent_requests = 64;
};

class PlannerService final : public v1::MemoryPlanner::CallbackService {
 public:
  PlannerService(PlannerServiceOptions options, ServerMetrics* metrics);

  // While draining, new requests get UNAVAILABLE.
  void StartDraining() { draining_ = true; }

  grpc::ServerUnaryReactor* EstimateMemory(
      grpc::CallbackServerContext* context,
      const v1::EstimateMemoryRequest* request,
      v1::EstimateMemoryResponse* response) override;

 private:
  // Admission control, timing, metrics and logging around one handler.
  grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* context,
                                  const char* method,
                                  const std::function<absl::Status()>& handler);

  PlannerServiceOptions options_;
  ServerMetrics* metrics_;
  std::atomic<int> in_flight_{0};
  std::atomic<bool> draining_{false};
};

}  // namespace echo::server

#endif  // ECHO_SERVER_PLANNER_SERVICE_H_
