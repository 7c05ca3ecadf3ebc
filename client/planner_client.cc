#include "client/planner_client.h"

#include <chrono>

#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "planner/status_macros.h"

namespace echo::client {

PlannerClient::PlannerClient(const ClientOptions& options) : options_(options) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(-1);
  arguments.SetMaxSendMessageSize(-1);
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options.tls_root_certs.empty()) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_root_certs;
    credentials = grpc::SslCredentials(ssl);
  }
  channel_ = grpc::CreateCustomChannel(options.server, credentials, arguments);
  planner_ = v1::MemoryPlanner::NewStub(channel_);
  health_ = grpc::health::v1::Health::NewStub(channel_);
}

template <typename Request, typename Response, typename Method>
absl::StatusOr<Response> PlannerClient::Call(Method method,
                                             const Request& request) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(
                           options_.timeout_seconds * 1000)));
  Response response;
  const grpc::Status status = method(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        status.error_message());
  }
  return response;
}

absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus>
PlannerClient::Health(const std::string& service) {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  using grpc::health::v1::HealthCheckRequest;
  using grpc::health::v1::HealthCheckResponse;
  ASSIGN_OR_RETURN(HealthCheckResponse response,
                   (Call<HealthCheckRequest, HealthCheckResponse>(
                       [&](auto* c, const auto& req, auto* resp) {
                         return health_->Check(c, req, resp);
                       },
                       request)));
  return response.status();
}

#define ECHO_CLIENT_UNARY(Name, Request, Response)  \
  absl::StatusOr<v1::Response> PlannerClient::Name( \
      const v1::Request& request) {                 \
    return Call<v1::Request, v1::Response>(         \
        [&](auto* c, const auto& req, auto* resp) { \
          return planner_->Name(c, req, resp);      \
        },                                          \
        request);                                   \
  }

ECHO_CLIENT_UNARY(EstimateMemory, EstimateMemoryRequest, EstimateMemoryResponse)
ECHO_CLIENT_UNARY(GenerateRecomputePlan, GenerateRecomputePlanRequest,
                  GenerateRecomputePlanResponse)
ECHO_CLIENT_UNARY(CheckFit, CheckFitRequest, CheckFitResponse)
ECHO_CLIENT_UNARY(ProfileOps, ProfileOpsRequest, ProfileOpsResponse)
ECHO_CLIENT_UNARY(RegisterGraph, RegisterGraphRequest, RegisterGraphResponse)
#undef ECHO_CLIENT_UNARY

absl::StatusOr<v1::GetNodeInfoResponse> PlannerClient::GetNodeInfo() {
  return Call<v1::GetNodeInfoRequest, v1::GetNodeInfoResponse>(
      [&](auto* c, const auto& req, auto* resp) {
        return planner_->GetNodeInfo(c, req, resp);
      },
      v1::GetNodeInfoRequest());
}

}  // namespace echo::client
