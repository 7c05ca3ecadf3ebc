#include "server/pass_codec.h"

#include "absl/strings/str_cat.h"

namespace echo::server {

void PassOptionsToProto(const planner::RecomputePlanOptions& options,
                        internal::PassOptions* proto) {
  proto->set_policy(static_cast<int32_t>(options.policy));
  if (options.memory_limit_bytes.has_value()) {
    proto->set_memory_limit_bytes(*options.memory_limit_bytes);
  }
  proto->set_objective(static_cast<int32_t>(options.objective));
  proto->set_solver_time_limit_seconds(options.solver_time_limit_seconds);
  proto->set_solver_max_nonzeros(options.solver_max_nonzeros);
  proto->set_max_recompute_depth(options.max_recompute_depth);
  proto->set_rounding_bytes(options.memory.rounding_bytes);
  proto->set_auto_effort(options.auto_effort);
}

absl::StatusOr<planner::RecomputePlanOptions> PassOptionsFromProto(
    const internal::PassOptions& proto) {
  constexpr int32_t kLastPolicy =
      static_cast<int32_t>(planner::RecomputePolicy::kOptimal);
  constexpr int32_t kLastObjective =
      static_cast<int32_t>(planner::RecomputeObjective::kStashBytes);
  if (proto.policy() < 0 || proto.policy() > kLastPolicy) {
    return absl::InvalidArgumentError(
        absl::StrCat("pass options: unknown policy ", proto.policy()));
  }
  if (proto.objective() < 0 || proto.objective() > kLastObjective) {
    return absl::InvalidArgumentError(
        absl::StrCat("pass options: unknown objective ", proto.objective()));
  }
  planner::RecomputePlanOptions options;
  options.policy = static_cast<planner::RecomputePolicy>(proto.policy());
  if (proto.has_memory_limit_bytes()) {
    options.memory_limit_bytes = proto.memory_limit_bytes();
  }
  options.objective =
      static_cast<planner::RecomputeObjective>(proto.objective());
  options.solver_time_limit_seconds = proto.solver_time_limit_seconds();
  options.solver_max_nonzeros = proto.solver_max_nonzeros();
  options.max_recompute_depth = proto.max_recompute_depth();
  options.memory.rounding_bytes = proto.rounding_bytes();
  options.auto_effort = proto.auto_effort();
  return options;
}

}  // namespace echo::server
