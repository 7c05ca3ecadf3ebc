#include "server/planner_service.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "server/adapter/graph_convert.h"
#include "server/status_map.h"
#include "spdlog/spdlog.h"

namespace echo::server {

PlannerService::PlannerService(PlannerServiceOptions options,
                               ServerMetrics* metrics)
    : options_(options), metrics_(metrics) {}

grpc::ServerUnaryReactor* PlannerService::Serve(
    grpc::CallbackServerContext* context, const char* method,
    const std::function<absl::Status()>& handler) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status status;
  const int in_flight = in_flight_.fetch_add(1) + 1;
  if (draining_) {
    status = absl::UnavailableError("echod is draining; retry on another node");
  } else if (in_flight > options_.max_concurrent_requests) {
    status = absl::ResourceExhaustedError(absl::StrCat(
        "echod is overloaded: ", in_flight - 1, " requests in flight (max ",
        options_.max_concurrent_requests, "); retry with backoff"));
  } else {
    status = handler();
  }
  in_flight_.fetch_sub(1);
  const double seconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - start)
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
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc_status);
  return reactor;
}

grpc::ServerUnaryReactor* PlannerService::EstimateMemory(
    grpc::CallbackServerContext* context,
    const v1::EstimateMemoryRequest* request,
    v1::EstimateMemoryResponse* response) {
  return Serve(context, "EstimateMemory", [&]() -> absl::Status {
    absl::StatusOr<planner::Graph> graph =
        adapter::GraphFromProto(request->graph());
    if (!graph.ok()) return graph.status();
    if (metrics_ != nullptr) {
      metrics_->RecordGraphOps("EstimateMemory", graph->num_ops());
    }
    absl::StatusOr<planner::MemoryModelOptions> memory =
        adapter::MemoryModelFromProto(request->allocator());
    if (!memory.ok()) return memory.status();
    const planner::SimulationResult result =
        planner::SimulatePlain(*graph, *memory);
    const int max_live =
        request->max_live_tensors() == 0 ? 20 : request->max_live_tensors();
    adapter::FillEstimate(*graph, result, max_live, response);
    if (metrics_ != nullptr) metrics_->RecordEstimatedPeak(result.peak_bytes);
    return absl::OkStatus();
  });
}

}  // namespace echo::server
