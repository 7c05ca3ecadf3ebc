// C++ client of echo.v1.MemoryPlanner, for schedulers and tools. Errors keep
// the server's gRPC code (as absl::StatusCode) and message.
#ifndef ECHO_CLIENT_PLANNER_CLIENT_H_
#define ECHO_CLIENT_PLANNER_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "echo/v1/planner.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/channel.h"

namespace echo::client {

struct ClientOptions {
  // "host:port", "unix:///path" or "unix:path".
  std::string server = "127.0.0.1:50051";
  double timeout_seconds = 30;
  // PEM root certificates for TLS; empty: plaintext.
  std::string tls_root_certs;
  // PEM client certificate chain and its private key, for an echod that
  // verifies client certificates (--tls_client_ca_file); need
  // tls_root_certs.
  std::string tls_cert_chain;
  std::string tls_private_key;
  // Sent as "authorization: Bearer <token>" with every call (echod's
  // --auth_token_file); empty: none.
  std::string auth_token;
};

// Files of the client's credentials; an empty path is not read.
struct ClientCredentialFiles {
  std::string tls_ca_file;      // -> tls_root_certs
  std::string tls_cert_file;    // -> tls_cert_chain
  std::string tls_key_file;     // -> tls_private_key
  std::string auth_token_file;  // its one token (surrounding space dropped)
};

// Reads `files` into `options`. INVALID_ARGUMENT (naming the flag) for a
// certificate without its key or without a CA, or a token file that does
// not hold exactly one token; NOT_FOUND for an unreadable file.
absl::Status LoadCredentialFiles(const ClientCredentialFiles& files,
                                 ClientOptions* options);

class PlannerClient {
 public:
  explicit PlannerClient(const ClientOptions& options);

  // SERVING, NOT_SERVING, ... for "" (the whole server) or a service name.
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> Health(
      const std::string& service = "");
  absl::StatusOr<v1::EstimateMemoryResponse> EstimateMemory(
      const v1::EstimateMemoryRequest& request);
  absl::StatusOr<v1::GenerateRecomputePlanResponse> GenerateRecomputePlan(
      const v1::GenerateRecomputePlanRequest& request);
  absl::StatusOr<v1::CheckFitResponse> CheckFit(
      const v1::CheckFitRequest& request);
  absl::StatusOr<v1::FindMaxBatchSizeResponse> FindMaxBatchSize(
      const v1::FindMaxBatchSizeRequest& request);
  absl::StatusOr<v1::GetMemoryFrontierResponse> GetMemoryFrontier(
      const v1::GetMemoryFrontierRequest& request);
  absl::StatusOr<v1::ProfileOpsResponse> ProfileOps(
      const v1::ProfileOpsRequest& request);
  absl::StatusOr<v1::RegisterGraphResponse> RegisterGraph(
      const v1::RegisterGraphRequest& request);
  absl::StatusOr<v1::GetNodeInfoResponse> GetNodeInfo();

 private:
  template <typename Request, typename Response, typename Method>
  absl::StatusOr<Response> Call(Method method, const Request& request);

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::MemoryPlanner::Stub> planner_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

}  // namespace echo::client

#endif  // ECHO_CLIENT_PLANNER_CLIENT_H_
