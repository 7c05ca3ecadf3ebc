#include "planner/recompute/plan.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace echo::planner {

absl::StatusOr<RecomputePolicy> ParseRecomputePolicy(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "auto") return RecomputePolicy::kAuto;
  if (lower == "none") return RecomputePolicy::kNone;
  if (lower == "echo") return RecomputePolicy::kEcho;
  if (lower == "chen_sqrt") return RecomputePolicy::kChenSqrt;
  if (lower == "optimal") return RecomputePolicy::kOptimal;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown recompute policy '", name,
                   "'; expected auto, none, echo, chen_sqrt or optimal"));
}

absl::string_view RecomputePolicyName(RecomputePolicy policy) {
  switch (policy) {
    case RecomputePolicy::kAuto:
      return "auto";
    case RecomputePolicy::kNone:
      return "none";
    case RecomputePolicy::kEcho:
      return "echo";
    case RecomputePolicy::kChenSqrt:
      return "chen_sqrt";
    case RecomputePolicy::kOptimal:
      return "optimal";
  }
  return "unknown";
}

absl::StatusOr<RecomputeObjective> ParseRecomputeObjective(
    absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "peak_bytes" || lower == "peak") {
    return RecomputeObjective::kPeakBytes;
  }
  if (lower == "stash_bytes" || lower == "stash") {
    return RecomputeObjective::kStashBytes;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown recompute objective '", name,
                   "'; expected peak_bytes or stash_bytes"));
}

absl::string_view RecomputeObjectiveName(RecomputeObjective objective) {
  switch (objective) {
    case RecomputeObjective::kPeakBytes:
      return "peak_bytes";
    case RecomputeObjective::kStashBytes:
      return "stash_bytes";
  }
  return "unknown";
}

std::string PlanFingerprint(const Graph& graph, const Schedule& schedule) {
  uint64_t hash = 14695981039346656037ull;
  const auto mix = [&hash](unsigned char byte) {
    hash ^= byte;
    hash *= 1099511628211ull;
  };
  for (const Execution& execution : schedule) {
    for (char c : graph.op(execution.op).id) mix(static_cast<unsigned char>(c));
    mix(execution.recompute ? 1 : 0);
  }
  return absl::StrFormat("%016x", hash);
}

}  // namespace echo::planner
