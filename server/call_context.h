// Helpers shared by the service's handler files.
#ifndef ECHO_SERVER_CALL_CONTEXT_H_
#define ECHO_SERVER_CALL_CONTEXT_H_

#include <chrono>

#include "absl/status/status.h"
#include "echo/v1/device.pb.h"
#include "grpcpp/server_context.h"
#include "planner/recompute/plan.h"

namespace echo::server {

// The call's cancellation and deadline, for the planner's cooperative
// checks: heavy work stops once the client is gone.
inline planner::Interrupt InterruptFor(grpc::CallbackServerContext* context) {
  const auto deadline = context->deadline();
  return [context, deadline]() -> absl::Status {
    if (context->IsCancelled()) {
      return absl::CancelledError("the client cancelled the call");
    }
    if (std::chrono::system_clock::now() > deadline) {
      return absl::DeadlineExceededError("the call's deadline passed");
    }
    return absl::OkStatus();
  };
}

// Whether a request's device field names a device at all.
inline bool NamesDevice(const v1::DeviceSpec& device) {
  return !device.name().empty() || device.memory_bytes() != 0 ||
         device.peak_flops_size() > 0 ||
         device.memory_bandwidth_bytes_per_second() != 0;
}

}  // namespace echo::server

#endif  // ECHO_SERVER_CALL_CONTEXT_H_
