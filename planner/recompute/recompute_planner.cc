#include "planner/recompute/recompute_planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "planner/recompute/auto_recompute.h"
#include "planner/recompute/checkmate_milp.h"
#include "planner/recompute/chen_recompute.h"
#include "planner/recompute/echo_recompute.h"
#include "planner/recompute/plan_report.h"
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
  if (options.max_recompute_depth < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_recompute_depth is negative: ", options.max_recompute_depth));
  }
  if (options.memory.rounding_bytes < 0) {
    return absl::InvalidArgumentError("rounding_bytes is negative");
  }
  if (options.policy == RecomputePolicy::kOptimal) {
    if (!options.memory_limit_bytes.has_value()) {
      return absl::InvalidArgumentError(
          "policy OPTIMAL minimizes the recompute cost under a peak: set "
          "memory_limit_bytes");
    }
    if (!(options.solver_time_limit_seconds > 0)) {
      return absl::InvalidArgumentError(
          "solver_time_limit_seconds must be positive");
    }
  }
  return absl::OkStatus();
}

struct Evaluated {
  Schedule schedule;
  int64_t peak = 0;
  double cost = 0;
};

// Replays each candidate and keeps the best under the budget: with a memory
// limit, the cheapest plan that meets it (else the lowest peak); with an
// overhead budget, the lowest peak within it. The plain schedule is always a
// candidate, so the result is never worse than it.
Evaluated SelectBest(const RematProblem& problem,
                     const std::vector<RematPlan>& candidates,
                     const std::optional<int64_t>& memory_limit,
                     double cost_budget) {
  std::optional<Evaluated> best;
  auto better = [&](const Evaluated& a, const Evaluated& b) {
    if (memory_limit.has_value()) {
      const bool a_fits = a.peak <= *memory_limit;
      const bool b_fits = b.peak <= *memory_limit;
      if (a_fits != b_fits) return a_fits;
      if (a_fits)
        return a.cost < b.cost || (a.cost == b.cost && a.peak < b.peak);
      return a.peak < b.peak || (a.peak == b.peak && a.cost < b.cost);
    }
    return a.peak < b.peak || (a.peak == b.peak && a.cost < b.cost);
  };
  auto consider = [&](const RematPlan& plan) {
    Evaluated e;
    e.schedule = ScheduleFromRematPlan(problem, plan);
    absl::StatusOr<SimulationResult> replay =
        ReplaySchedule(problem.graph, e.schedule, problem.memory);
    if (!replay.ok()) return;  // cannot happen for a remat plan
    e.peak = replay->peak_bytes;
    for (const Execution& x : e.schedule) {
      if (x.recompute) e.cost += problem.op_costs[x.op];
    }
    if (!memory_limit.has_value() && e.cost > cost_budget) return;
    if (!best.has_value() || better(e, *best)) best = std::move(e);
  };
  consider(RematPlan{RematSet(problem.num_ops(), 0), {}});
  for (const RematPlan& plan : candidates) consider(plan);
  return *std::move(best);
}

// AUTO: its search, seeded with the ECHO and CHEN_SQRT plans, then the best
// candidate by replay. The default depth bound is kDefaultMaxRecomputeDepth,
// raised to the chain depth of the seeds so that AUTO can always fall back on
// them; an explicit bound applies to every candidate.
absl::StatusOr<Evaluated> RunAuto(const RematProblem& problem,
                                  const RecomputePlanOptions& options,
                                  double ratio, double cost_budget) {
  ASSIGN_OR_RETURN(RematSet echo_seed, EchoRecompute().Run(problem));
  ASSIGN_OR_RETURN(RematSet chen_seed, ChenSqrtRecompute().Run(problem));
  std::vector<RematPlan> seeds = {RematPlan{std::move(echo_seed), {}},
                                  RematPlan{std::move(chen_seed), {}}};
  int32_t depth = options.max_recompute_depth;
  if (depth == 0) {
    depth = kDefaultMaxRecomputeDepth;
    for (const RematPlan& seed : seeds) {
      depth = std::max(depth, RematChainDepth(problem, seed));
    }
  }
  AutoRecompute::Options auto_options;
  auto_options.memory_limit_bytes = options.memory_limit_bytes;
  auto_options.max_overhead_ratio = ratio;
  auto_options.max_depth = depth;
  auto_options.effort = options.auto_effort;
  for (RematPlan& seed : seeds) {
    if (RematChainDepth(problem, seed) <= depth) {
      auto_options.seeds.push_back(std::move(seed));
    }
  }
  AutoRecompute pass(std::move(auto_options));
  ASSIGN_OR_RETURN(std::vector<RematPlan> candidates, pass.Run(problem));
  std::vector<RematPlan> within;
  for (RematPlan& candidate : candidates) {
    if (RematChainDepth(problem, candidate) <= depth) {
      within.push_back(std::move(candidate));
    }
  }
  return SelectBest(problem, within, options.memory_limit_bytes, cost_budget);
}

}  // namespace

absl::StatusOr<RecomputePlan> GenerateRecomputePlan(
    const Graph& graph, const std::vector<double>& op_costs,
    const RecomputePlanOptions& options) {
  RETURN_IF_ERROR(Validate(graph, op_costs, options));
  const auto start = std::chrono::steady_clock::now();
  const RematProblem problem(graph, op_costs, options.memory);
  const int64_t baseline_peak = SimulatePlain(graph, options.memory).peak_bytes;
  const double ratio =
      options.max_overhead_ratio.value_or(kDefaultMaxOverheadRatio);
  const double cost_budget = ratio * problem.baseline_cost * (1 + kBudgetSlack);

  Schedule schedule;
  std::string solver_status = "heuristic";
  double solver_bound = 0;
  bool optimal_feasible = true;
  switch (options.policy) {
    case RecomputePolicy::kNone:
      schedule = PlainSchedule(graph);
      break;
    case RecomputePolicy::kEcho: {
      EchoRecompute pass;
      ASSIGN_OR_RETURN(RematSet remat, pass.Run(problem));
      schedule = ScheduleFromRematSet(problem, remat);
      break;
    }
    case RecomputePolicy::kChenSqrt: {
      ChenSqrtRecompute pass;
      ASSIGN_OR_RETURN(RematSet remat, pass.Run(problem));
      schedule = ScheduleFromRematSet(problem, remat);
      break;
    }
    case RecomputePolicy::kAuto: {
      ASSIGN_OR_RETURN(Evaluated best,
                       RunAuto(problem, options, ratio, cost_budget));
      schedule = std::move(best.schedule);
      break;
    }
    case RecomputePolicy::kOptimal: {
      if (*options.memory_limit_bytes < PeakLowerBound(graph, options.memory)) {
        // Proven without the solver.
        solver_status = "infeasible";
        optimal_feasible = false;
        schedule = PlainSchedule(graph);
        break;
      }
      OptimalRecompute::Options milp_options;
      milp_options.memory_limit_bytes = *options.memory_limit_bytes;
      milp_options.time_limit_seconds = options.solver_time_limit_seconds;
      milp_options.max_nonzeros = options.solver_max_nonzeros;
      // AUTO's plan, when it meets the limit, is CBC's starting incumbent.
      ASSIGN_OR_RETURN(Evaluated start,
                       RunAuto(problem, options, ratio, cost_budget));
      if (start.peak <= *options.memory_limit_bytes) {
        milp_options.warm_start = std::move(start.schedule);
      }
      OptimalRecompute pass(std::move(milp_options));
      ASSIGN_OR_RETURN(OptimalRecompute::Result result, pass.Run(problem));
      solver_status = result.status;
      solver_bound = result.bound_cost;
      optimal_feasible = !result.schedule.empty();
      schedule =
          optimal_feasible ? std::move(result.schedule) : PlainSchedule(graph);
      break;
    }
  }

  absl::StatusOr<RecomputePlan> plan = BuildPlanFromSchedule(
      graph, op_costs, options.memory, baseline_peak, std::move(schedule));
  if (!plan.ok()) {
    return absl::InternalError(absl::StrCat(
        "policy ", RecomputePolicyName(options.policy),
        " produced an invalid schedule: ", plan.status().message()));
  }
  plan->peak_lower_bound_bytes = PeakLowerBound(graph, options.memory);
  plan->solver_status = solver_status;
  plan->solver_bound_cost = solver_bound;
  plan->feasible = optimal_feasible &&
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
  if (options.policy == RecomputePolicy::kOptimal) {
    absl::StrAppend(&plan->message, "; solver: ", solver_status);
  }
  return plan;
}

}  // namespace echo::planner
