// OPTIMAL's pass options to and from the worker's message
// (milp_worker.proto): echod sends the engine's input, not the client's
// request, so that the child plans exactly what the engine asked for.
#ifndef ECHO_SERVER_PASS_CODEC_H_
#define ECHO_SERVER_PASS_CODEC_H_

#include "absl/status/statusor.h"
#include "planner/recompute/plan.h"
#include "server/milp_worker.pb.h"

namespace echo::server {

void PassOptionsToProto(const planner::RecomputePlanOptions& options,
                        internal::PassOptions* proto);
// INVALID_ARGUMENT naming the field when a value is out of range.
absl::StatusOr<planner::RecomputePlanOptions> PassOptionsFromProto(
    const internal::PassOptions& proto);

}  // namespace echo::server

#endif  // ECHO_SERVER_PASS_CODEC_H_
