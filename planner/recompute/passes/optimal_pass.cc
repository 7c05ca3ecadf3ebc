// OPTIMAL's pass: the Checkmate MILP (checkmate_milp.h) under a memory
// limit; the exact stash MILP (stash_milp.h) for objective stash_bytes.
#include <algorithm>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "planner/recompute/passes/auto_pass.h"
#include "planner/recompute/passes/checkmate_milp.h"
#include "planner/recompute/passes/passes.h"
#include "planner/recompute/passes/stash_milp.h"
#include "planner/recompute/plan_report.h"
#include "planner/status_macros.h"

namespace echo::planner {
namespace {

// OPTIMAL: the Checkmate MILP, warm-started with AUTO's plan when that meets
// the limit.
class OptimalPass final : public RecomputePass {
 public:
  RecomputePolicy policy() const override { return RecomputePolicy::kOptimal; }
  // CBC has crashed and aborted, its root LP cannot be interrupted, and its
  // memory grows with the model.
  bool isolated() const override { return true; }
  absl::Status CheckOptions(
      const RecomputePlanOptions& options) const override {
    if (!options.memory_limit_bytes.has_value() && !ByStash(options)) {
      return absl::InvalidArgumentError(
          "policy OPTIMAL minimizes the recompute cost under a peak: set "
          "memory_limit_bytes (or objective stash_bytes with "
          "max_overhead_ratio: the fewest stashed bytes within it)");
    }
    if (!(options.solver_time_limit_seconds > 0)) {
      return absl::InvalidArgumentError(
          "solver_time_limit_seconds must be positive");
    }
    return absl::OkStatus();
  }
  absl::Status Precheck(const PassInput& input) const override {
    if (ByStash(input.options)) {
      return ExactStash(StashOptions(input))
          .CheckModelSize(input.problem, input.problem.eligible);
    }
    if (ProvenInfeasible(input)) return absl::OkStatus();  // no MILP
    return OptimalRecompute(MilpOptions(input)).CheckModelSize(input.problem);
  }
  absl::StatusOr<PassOutput> Run(const PassInput& input) const override {
    if (ByStash(input.options)) return RunByStash(input);
    const Graph& graph = input.problem.graph;
    PassOutput output;
    if (ProvenInfeasible(input)) {
      output.solver_status = "infeasible";
      output.limit_reachable = false;
      output.schedule = PlainSchedule(graph);
      return output;
    }
    OptimalRecompute::Options milp_options = MilpOptions(input);
    const int64_t limit = milp_options.memory_limit_bytes;
    ASSIGN_OR_RETURN(Evaluated start, RunAuto(input));
    const bool start_fits = start.peak <= limit;
    if (start_fits) milp_options.warm_start = start.schedule;
    ASSIGN_OR_RETURN(
        OptimalRecompute::Result result,
        OptimalRecompute(std::move(milp_options)).Run(input.problem));
    output.solver_status = result.status;
    output.solver_bound_cost = result.bound_cost;
    // AUTO's plan is the floor: a solver that ends without a better one
    // (its time limit, or CBC calling a model infeasible that has a known
    // solution) answers it, never "cannot meet".
    if (start_fits &&
        (result.schedule.empty() ||
         RecomputeCost(input.problem.op_costs, result.schedule) > start.cost)) {
      if (result.status != "optimal") {
        output.solver_status = "time_limit_feasible";
        output.solver_bound_cost = std::min(result.bound_cost, start.cost);
      }
      output.schedule = std::move(start.schedule);
      return output;
    }
    output.limit_reachable = !result.schedule.empty();
    output.schedule = output.limit_reachable ? std::move(result.schedule)
                                             : PlainSchedule(graph);
    return output;
  }

 private:
  static bool ByStash(const RecomputePlanOptions& options) {
    return options.objective == RecomputeObjective::kStashBytes;
  }
  static ExactStash::Options StashOptions(const PassInput& input) {
    ExactStash::Options options;
    options.cost_budget = input.cost_budget;
    options.time_limit_seconds = input.options.solver_time_limit_seconds;
    options.max_nonzeros = input.options.solver_max_nonzeros;
    return options;
  }
  // The fewest stashed bytes within the budget, over the recompute sets of
  // the ops AUTO may re-run.
  static absl::StatusOr<PassOutput> RunByStash(const PassInput& input) {
    ASSIGN_OR_RETURN(const ExactStash::Result exact,
                     ExactStash(StashOptions(input))
                         .Run(input.problem, input.problem.eligible));
    PassOutput output = OutputFromRecomputeSet(input.problem, exact.recompute);
    output.solver_status = exact.status;
    // The optimum over AUTO's ops bounds every plan only when no op a plan
    // could re-run was left out (a "stash" hint makes an op ineligible).
    if (!AnyForwardOpHeld(input.problem)) {
      output.stash_bound_bytes = exact.bound_bytes;
    }
    return output;
  }
  // Whether a forward op that could be cloned is not eligible: only a
  // "stash" hint does that (RecomputeProblem's eligible).
  static bool AnyForwardOpHeld(const RecomputeProblem& problem) {
    for (OpIndex o = 0; o < problem.num_ops(); ++o) {
      if (problem.can_clone[o] && !problem.eligible[o] &&
          problem.graph.op(o).phase == Phase::kForward) {
        return true;
      }
    }
    return false;
  }
  // The limit is below every schedule's peak: proven without the solver.
  static bool ProvenInfeasible(const PassInput& input) {
    return *input.options.memory_limit_bytes <
           PeakLowerBound(input.problem.graph, input.problem.memory);
  }
  static OptimalRecompute::Options MilpOptions(const PassInput& input) {
    OptimalRecompute::Options options;
    options.memory_limit_bytes = *input.options.memory_limit_bytes;
    options.time_limit_seconds = input.options.solver_time_limit_seconds;
    options.max_nonzeros = input.options.solver_max_nonzeros;
    return options;
  }
};

}  // namespace

std::unique_ptr<RecomputePass> MakeOptimalPass() {
  return std::make_unique<OptimalPass>();
}

}  // namespace echo::planner
