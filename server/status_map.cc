#include "server/status_map.h"

namespace echo::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl::StatusCode and grpc::StatusCode share the canonical numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

std::string GrpcCodeName(grpc::StatusCode code) {
  if (code == grpc::StatusCode::OK) return "OK";
  if (code < 0 || code > grpc::StatusCode::UNAUTHENTICATED) return "UNKNOWN";
  std::string name =
      absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  for (char& c : name) c = c == ' ' ? '_' : static_cast<char>(toupper(c));
  return name;
}

}  // namespace echo::server
