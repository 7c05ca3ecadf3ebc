// The one place that maps planner statuses to gRPC statuses.
#ifndef ECHO_SERVER_STATUS_MAP_H_
#define ECHO_SERVER_STATUS_MAP_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace echo::server {

grpc::Status ToGrpcStatus(const absl::Status& status);

// "OK", "INVALID_ARGUMENT", ...: bounded label values for metrics.
std::string GrpcCodeName(grpc::StatusCode code);

}  // namespace echo::server

#endif  // ECHO_SERVER_STATUS_MAP_H_
