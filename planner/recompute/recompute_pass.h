// One interface for every recompute policy, the way XLA's rematerialization
// is one pass with one options struct: a pass turns a RecomputeProblem and the
// request's RecomputePlanOptions into a schedule; GenerateRecomputePlan
// (recompute_planner.h) validates, dispatches through the registry, replays
// the schedule and reports.
#ifndef ECHO_PLANNER_RECOMPUTE_RECOMPUTE_PASS_H_
#define ECHO_PLANNER_RECOMPUTE_RECOMPUTE_PASS_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "planner/memory_simulator.h"
#include "planner/recompute/plan.h"
#include "planner/recompute/recompute_problem.h"

namespace echo::planner {

// What every pass reads: the problem, the options as given, and the overhead
// budget resolved once (options.max_overhead_ratio or its default).
struct PassInput {
  const RecomputeProblem& problem;
  const RecomputePlanOptions& options;
  double max_overhead_ratio = kDefaultMaxOverheadRatio;
  // max_overhead_ratio * baseline cost, with a relative slack so that a plan
  // that spends exactly the budget (summed in another order) still fits.
  double cost_budget = 0;
};

struct PassOutput {
  // A valid schedule of the graph (the plain one when nothing better).
  Schedule schedule;
  // False when the pass proved that the memory limit cannot be met.
  bool limit_reachable = true;
  // "heuristic", or the MILP's status (RecomputePlan::solver_status).
  std::string solver_status = "heuristic";
  double solver_bound_cost = 0;
  // A proven bound on the stash of every plan within the budget (OPTIMAL
  // with objective stash_bytes); 0: none. The plan's stash_lower_bound_bytes
  // is the larger of it and the minimum cut's.
  int64_t stash_bound_bytes = 0;
  // The schedule's replay, where the pass made it (AUTO's selection
  // replays the candidates it cannot prove): the plan reuses it.
  std::optional<SimulationResult> replay;
};

class RecomputePass {
 public:
  virtual ~RecomputePass() = default;
  virtual RecomputePolicy policy() const = 0;
  // Policy-specific option checks, after the common ones (INVALID_ARGUMENT).
  virtual absl::Status CheckOptions(const RecomputePlanOptions&) const {
    return absl::OkStatus();
  }
  // Refusals that need the problem but no planning (OPTIMAL: a model too
  // big, FAILED_PRECONDITION), in O(graph); GenerateRecomputePlan runs it
  // before Run.
  virtual absl::Status Precheck(const PassInput&) const {
    return absl::OkStatus();
  }
  virtual absl::StatusOr<PassOutput> Run(const PassInput& input) const = 0;
  // True when Run may crash, abort or exhaust memory (an external solver):
  // GenerateRecomputePlan then runs it through options.run_isolated_pass
  // when that is set. The pass is the same either way; only the process
  // differs.
  virtual bool isolated() const { return false; }
};

// The registered pass of a policy; every RecomputePolicy has one.
const RecomputePass& RecomputePassFor(RecomputePolicy policy);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_RECOMPUTE_PASS_H_
