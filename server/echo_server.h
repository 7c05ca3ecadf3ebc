// echod's gRPC server, health service, reflection and metrics endpoint, as a
// class so that tests can run it in-process.
#ifndef ECHO_SERVER_ECHO_SERVER_H_
#define ECHO_SERVER_ECHO_SERVER_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/server.h"
#include "server/call_authorizer.h"
#include "server/metrics.h"
#include "server/metrics_http.h"
#include "server/planner_service.h"
#include "server/profiler/node_profiler.h"
#include "server/transport_security.h"

namespace echo::server {

struct ServerOptions {
  std::string grpc_address = "127.0.0.1:50051";
  std::string unix_socket;                         // empty: none
  std::string metrics_address = "127.0.0.1:9464";  // empty: no endpoint
  int64_t max_request_bytes = kDefaultMaxRequestBytes;
  int max_concurrent_requests = kDefaultMaxConcurrentRequests;
  // The worker pool for heavy requests (PlannerServiceOptions).
  int worker_threads = 0;
  int heavy_graph_ops = kDefaultHeavyGraphOps;
  int64_t max_inline_request_bytes = kDefaultMaxInlineRequestBytes;
  // The graph registry's and the answer cache's bounds.
  int64_t graph_cache_bytes = kDefaultGraphCacheBytes;
  int64_t answer_cache_bytes = kDefaultAnswerCacheBytes;
  // Memory echod may use in all (PlannerServiceOptions); 0: the default.
  int64_t memory_budget_bytes = 0;
  std::string tls_cert_file;
  std::string tls_key_file;
  // PEM CA bundle: TCP clients must present a certificate it signed (mTLS).
  std::string tls_client_ca_file;
  // Group (name or number) the Unix socket is chowned to; it is created
  // 0660. Empty: echod's own group.
  std::string unix_socket_group;
  AuthOptions auth;
  // Server reflection (the API's descriptors, to any caller: it is exempt
  // from tokens). kAuto: on unless tokens are required.
  enum class Reflection { kAuto, kOn, kOff };
  Reflection reflection = Reflection::kAuto;
  double drain_timeout_seconds = 10;
  // OPTIMAL's child processes (PlannerServiceOptions).
  OptimalWorkerOptions optimal;
  // Planning in forks of echod, and where a crash's request is written
  // (PlannerServiceOptions).
  bool contain_plans = true;
  std::string crash_dump_dir;
  NodeProfilerOptions profiler;
};

class EchoServer {
 public:
  static absl::StatusOr<std::unique_ptr<EchoServer>> Start(
      const ServerOptions& options);
  ~EchoServer();

  // Port bound for grpc_address (resolves ":0").
  int grpc_port() const { return grpc_port_; }
  // "host:port" of the metrics endpoint, empty when disabled.
  std::string metrics_endpoint() const { return metrics_endpoint_; }
  ServerMetrics& metrics() { return *metrics_; }
  NodeProfiler& profiler() { return *profiler_; }
  // OPTIMAL's worker processes running now.
  int live_optimal_workers() const {
    return service_->optimal_worker().live_children();
  }

  // Health to NOT_SERVING, new requests UNAVAILABLE, in-flight requests get
  // up to drain_timeout_seconds (then OPTIMAL's children are killed and the
  // rest is cancelled); then stops. Idempotent.
  void Drain();
  void Wait();

 private:
  EchoServer() = default;

  ServerOptions options_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<MetricsHttpServer> metrics_server_;
  std::unique_ptr<NodeProfiler> profiler_;
  std::unique_ptr<CallAuthorizer> authorizer_;
  std::unique_ptr<PlannerService> service_;
  std::unique_ptr<grpc::Server> server_;
  int grpc_port_ = 0;
  // The Unix socket as bound, removed at drain only while still at its path.
  std::optional<FileIdentity> unix_socket_identity_;
  std::string metrics_endpoint_;
  bool drained_ = false;
};

}  // namespace echo::server

#endif  // ECHO_SERVER_ECHO_SERVER_H_
