#include "planner/recompute/recompute_planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "planner/byte_size.h"
#include "planner/recompute/plan_report.h"
#include "planner/recompute/recompute_pass.h"
#include "planner/recompute/remat_problem.h"
#include "planner/status_macros.h"

namespace echo::planner {
namespace {

// Budgets compare with this relative slack, so that a plan that spends
// exactly the budget (computed in another summation order) still fits.
constexpr double kBudgetSlack = 1e-9;

absl::Status Validate(const Graph& graph, const std::vector<double>& op_costs,
                      const RecomputePlanOptions& options) {
  if (static_cast<int64_t>(op_costs.size()) != graph.num_ops()) {
    return absl::InvalidArgumentError(
        absl::StrCat("op_costs has ", op_costs.size(),
                     " entries; the graph has ", graph.num_ops(), " ops"));
  }
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    if (!std::isfinite(op_costs[o]) || op_costs[o] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("op '", graph.op(o).id, "' has cost ", op_costs[o],
                       "; costs must be finite and non-negative"));
    }
  }
  if (options.memory_limit_bytes.has_value() &&
      options.max_overhead_ratio.has_value()) {
    return absl::InvalidArgumentError(
        "set at most one of memory_limit_bytes and max_overhead_ratio");
  }
  if (options.memory_limit_bytes.has_value() &&
      *options.memory_limit_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory_limit_bytes is negative: ", *options.memory_limit_bytes));
  }
  if (options.max_overhead_ratio.has_value() &&
      (!std::isfinite(*options.max_overhead_ratio) ||
       *options.max_overhead_ratio < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_overhead_ratio must be finite and non-negative, got ",
                     *options.max_overhead_ratio));
  }
  if (options.objective == RecomputeObjective::kStashBytes &&
      (options.policy != RecomputePolicy::kAuto ||
       options.memory_limit_bytes.has_value())) {
    return absl::InvalidArgumentError(
        "objective stash_bytes is AUTO's with an overhead budget: use policy "
        "AUTO and max_overhead_ratio, not memory_limit_bytes");
  }
  if (options.max_recompute_depth < 0 ||
      options.max_recompute_depth > kMaxRecomputeDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_recompute_depth must be in [0, ", kMaxRecomputeDepth,
                     "], got ", options.max_recompute_depth));
  }
  return ValidateMemoryModelOptions(options.memory);
}

// The policy's pass, once the inputs and its options are valid.
absl::StatusOr<const RecomputePass*> CheckedPass(
    const Graph& graph, const std::vector<double>& op_costs,
    const RecomputePlanOptions& options) {
  RETURN_IF_ERROR(Validate(graph, op_costs, options));
  const RecomputePass& pass = RecomputePassFor(options.policy);
  RETURN_IF_ERROR(pass.CheckOptions(options));
  return &pass;
}

PassInput MakePassInput(const RematProblem& problem,
                        const RecomputePlanOptions& options) {
  PassInput input{problem, options};
  input.max_overhead_ratio =
      options.max_overhead_ratio.value_or(kDefaultMaxOverheadRatio);
  input.cost_budget =
      input.max_overhead_ratio * problem.baseline_cost * (1 + kBudgetSlack);
  return input;
}

}  // namespace

absl::Status PrecheckRecomputePlan(const Graph& graph,
                                   const std::vector<double>& op_costs,
                                   const RecomputePlanOptions& options) {
  ASSIGN_OR_RETURN(const RecomputePass* pass,
                   CheckedPass(graph, op_costs, options));
  const RematProblem problem(graph, op_costs, options.memory);
  return pass->Precheck(MakePassInput(problem, options));
}

absl::StatusOr<RecomputePlan> GenerateRecomputePlan(
    const Graph& graph, const std::vector<double>& op_costs,
    const RecomputePlanOptions& options) {
  ASSIGN_OR_RETURN(const RecomputePass* pass,
                   CheckedPass(graph, op_costs, options));
  const auto start = std::chrono::steady_clock::now();
  const RematProblem problem(graph, op_costs, options.memory);
  const int64_t baseline_peak = SimulatePlain(graph, options.memory).peak_bytes;
  const PassInput input = MakePassInput(problem, options);
  RETURN_IF_ERROR(pass->Precheck(input));
  if (options.interrupted) RETURN_IF_ERROR(options.interrupted());
  ASSIGN_OR_RETURN(PassOutput output, pass->Run(input));
  if (options.interrupted) RETURN_IF_ERROR(options.interrupted());

  absl::StatusOr<RecomputePlan> plan =
      BuildPlanFromSchedule(graph, op_costs, options.memory, baseline_peak,
                            std::move(output.schedule));
  if (!plan.ok()) {
    return absl::InternalError(absl::StrCat(
        "policy ", RecomputePolicyName(options.policy),
        " produced an invalid schedule: ", plan.status().message()));
  }
  // ECHO and CHEN_SQRT reproduce their papers' plans as published; OPTIMAL's
  // cost is the MILP's.
  // The stash objective's regions save stash, not peak: they all stay.
  if (options.prune.enabled && options.policy == RecomputePolicy::kAuto &&
      options.objective == RecomputeObjective::kPeakBytes) {
    *plan = PruneIdleRegions(graph, op_costs, options, *std::move(plan));
  }
  SortRegionsBySaving(*plan);
  plan->peak_lower_bound_bytes = PeakLowerBound(graph, options.memory);
  if (!options.memory_limit_bytes.has_value()) {
    // The cut's bound costs ~20 max-flows: only where the stash is the
    // objective (AUTO only, whose plans there start from the same cut).
    ASSIGN_OR_RETURN(
        plan->stash_lower_bound_bytes,
        StashLowerBound(problem, input.cost_budget,
                        options.objective == RecomputeObjective::kStashBytes,
                        options.interrupted));
  }
  plan->solver_status = output.solver_status;
  plan->solver_bound_cost = output.solver_bound_cost;
  plan->feasible = output.limit_reachable &&
                   (!options.memory_limit_bytes.has_value() ||
                    plan->planned_peak_bytes <= *options.memory_limit_bytes);
  plan->solve_time_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  const double reduction =
      plan->planned_peak_bytes > 0
          ? static_cast<double>(plan->baseline_peak_bytes) /
                static_cast<double>(plan->planned_peak_bytes)
          : 1.0;
  plan->message = absl::StrFormat(
      "%s: peak %s -> %s (%.2fx smaller) for %.2f%% extra compute in %d "
      "recompute region(s)",
      RecomputePolicyName(options.policy),
      HumanBytes(plan->baseline_peak_bytes),
      HumanBytes(plan->planned_peak_bytes), reduction,
      100 * plan->recompute_overhead_ratio, plan->regions.size());
  if (options.memory_limit_bytes.has_value()) {
    absl::StrAppend(
        &plan->message, plan->feasible ? "; meets" : "; CANNOT meet",
        " the memory limit of ", HumanBytes(*options.memory_limit_bytes));
  }
  if (!plan->feasible &&
      plan->peak_lower_bound_bytes > options.memory_limit_bytes.value_or(0)) {
    absl::StrAppend(&plan->message, " (no schedule can go below ",
                    HumanBytes(plan->peak_lower_bound_bytes), ")");
  }
  if (options.objective == RecomputeObjective::kStashBytes) {
    absl::StrAppend(
        &plan->message, "; stash ",
        HumanBytes(StashBytes(graph, PlainSchedule(graph), options.memory)),
        " -> ", HumanBytes(plan->stash_bytes),
        " (no plan within the budget "
        "below ",
        HumanBytes(plan->stash_lower_bound_bytes), ")");
  }
  if (options.policy == RecomputePolicy::kOptimal) {
    absl::StrAppend(&plan->message, "; solver: ", output.solver_status);
  }
  return plan;
}

}  // namespace echo::planner
