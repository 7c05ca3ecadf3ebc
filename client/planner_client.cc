#include "client/planner_client.h"

#include <chrono>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "planner/status_macros.h"

namespace echo::client {

namespace {

absl::Status ReadInto(const std::string& flag, const std::string& path,
                      std::string* contents) {
  if (path.empty()) return absl::OkStatus();
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  *contents = buffer.str();
  return absl::OkStatus();
}

}  // namespace

absl::Status LoadCredentialFiles(const ClientCredentialFiles& files,
                                 ClientOptions* options) {
  if (files.tls_cert_file.empty() != files.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file must be given together");
  }
  if (!files.tls_cert_file.empty() && files.tls_ca_file.empty() &&
      options->tls_root_certs.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file needs --tls_ca_file (the CA of echod's certificate)");
  }
  RETURN_IF_ERROR(
      ReadInto("--tls_ca_file", files.tls_ca_file, &options->tls_root_certs));
  RETURN_IF_ERROR(ReadInto("--tls_cert_file", files.tls_cert_file,
                           &options->tls_cert_chain));
  RETURN_IF_ERROR(ReadInto("--tls_key_file", files.tls_key_file,
                           &options->tls_private_key));
  std::string token;
  RETURN_IF_ERROR(ReadInto("--auth_token_file", files.auth_token_file, &token));
  if (!files.auth_token_file.empty()) {
    const std::vector<std::string> fields =
        absl::StrSplit(token, absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty());
    if (fields.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--auth_token_file: ", files.auth_token_file,
          " must hold exactly one token, found ", fields.size(), " words"));
    }
    options->auth_token = fields.front();
  }
  return absl::OkStatus();
}

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
    ssl.pem_cert_chain = options.tls_cert_chain;
    ssl.pem_private_key = options.tls_private_key;
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
  if (!options_.auth_token.empty()) {
    context.AddMetadata("authorization",
                        absl::StrCat("Bearer ", options_.auth_token));
  }
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
ECHO_CLIENT_UNARY(FindMaxBatchSize, FindMaxBatchSizeRequest,
                  FindMaxBatchSizeResponse)
ECHO_CLIENT_UNARY(GetMemoryFrontier, GetMemoryFrontierRequest,
                  GetMemoryFrontierResponse)
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
