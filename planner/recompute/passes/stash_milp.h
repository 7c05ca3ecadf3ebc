// The stash objective solved exactly: the fewest bytes the forward leaves
// for the backward within a recompute cost budget, in the model the minimum
// cut solves (search/stash_cut.h: a tensor the backward needs is stashed or
// re-made by its producer, whose inputs the backward then needs; each
// recomputed op runs once; peaks aside), as a MILP for CBC. The cut relaxes
// the budget (a Lagrangian price per cost); here it is a constraint, so the
// answer is the optimum, not a bound. Small: one binary per op a plan may
// re-run, two continuous columns per forward-made tensor. Policy OPTIMAL with
// objective stash_bytes, and the reference AUTO's stash plans are measured
// against (echo_plan_bench quality).
#ifndef ECHO_PLANNER_RECOMPUTE_PASSES_STASH_MILP_H_
#define ECHO_PLANNER_RECOMPUTE_PASSES_STASH_MILP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "planner/recompute/plan.h"
#include "planner/recompute/recompute_problem.h"

namespace echo::planner {

class ExactStash {
 public:
  struct Options {
    // The most recompute cost a plan may spend (PassInput::cost_budget).
    double cost_budget = 0;
    double time_limit_seconds = kDefaultSolverTimeLimitSeconds;
    int64_t max_nonzeros = kDefaultSolverMaxNonzeros;
  };
  struct Result {
    // The ops to re-run (all 0 when none, or when no solution was found).
    RecomputeSet recompute;
    // "optimal" | "time_limit_feasible" | "time_limit_no_solution".
    std::string status;
    // The model's stash under `recompute` (StashModel::StashBytesOf).
    int64_t stash_bytes = 0;
    // No plan within the budget stashes fewer bytes in the model: the
    // optimum when optimal, CBC's bound at a time limit.
    int64_t bound_bytes = 0;
  };

  explicit ExactStash(Options options) : options_(options) {}
  // `may_recompute`: per op, whether a plan may re-run it (the problem's
  // `eligible` for AUTO's plans).
  // FAILED_PRECONDITION when the model would have over max_nonzeros
  // nonzeros, counted in O(graph); Run checks it first.
  absl::Status CheckModelSize(const RecomputeProblem& problem,
                              const std::vector<uint8_t>& may_recompute) const;
  absl::StatusOr<Result> Run(const RecomputeProblem& problem,
                             const std::vector<uint8_t>& may_recompute) const;

 private:
  Options options_;
};

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_PASSES_STASH_MILP_H_
