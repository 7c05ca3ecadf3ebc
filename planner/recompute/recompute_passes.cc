// The registered recompute passes: one per policy, behind RecomputePass.
#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "planner/recompute/auto_recompute.h"
#include "planner/recompute/checkmate_milp.h"
#include "planner/recompute/chen_recompute.h"
#include "planner/recompute/echo_recompute.h"
#include "planner/recompute/plan_report.h"
#include "planner/recompute/recompute_pass.h"
#include "planner/recompute/remat_problem.h"
#include "planner/recompute/stash_cut.h"
#include "planner/status_macros.h"

namespace echo::planner {
namespace {

struct Evaluated {
  Schedule schedule;
  int64_t peak = 0;
  double cost = 0;
  int64_t stash_bytes = 0;
};

// Replays each candidate and keeps the best under the budget: with a memory
// limit, the cheapest plan that meets it (else the lowest peak); with an
// overhead budget, the lowest peak within it (stash objective: the fewest
// stashed bytes within it and the plain peak). The plain schedule is always
// a candidate, so the result is never worse than it.
Evaluated SelectBest(const RematProblem& problem,
                     const std::vector<RematPlan>& candidates,
                     const std::optional<int64_t>& memory_limit,
                     double cost_budget, RecomputeObjective objective) {
  const bool by_stash =
      objective == RecomputeObjective::kStashBytes && !memory_limit.has_value();
  std::optional<Evaluated> best;
  std::optional<int64_t> plain_peak;
  auto better = [&](const Evaluated& a, const Evaluated& b) {
    if (by_stash) {
      return std::make_tuple(a.stash_bytes, a.peak, a.cost) <
             std::make_tuple(b.stash_bytes, b.peak, b.cost);
    }
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
    if (!plain_peak.has_value()) plain_peak = e.peak;  // the first: plain
    if (by_stash) {
      if (e.peak > *plain_peak) return;
      e.stash_bytes = StashBytes(problem.graph, e.schedule, problem.memory);
    }
    if (!best.has_value() || better(e, *best)) best = std::move(e);
  };
  consider(RematPlan{RematSet(problem.num_ops(), 0), {}});
  for (const RematPlan& plan : candidates) consider(plan);
  return *std::move(best);
}

// AUTO: its search, seeded with the ECHO and CHEN_SQRT plans (and for the
// stash objective, the minimum cuts within the budget), then the best
// candidate by replay. The default depth bound is kDefaultMaxRecomputeDepth,
// raised to the chain depth of the seeds so that AUTO can always fall back on
// them; an explicit bound applies to every candidate.
absl::StatusOr<Evaluated> RunAuto(const PassInput& input) {
  const RematProblem& problem = input.problem;
  const RecomputePlanOptions& options = input.options;
  ASSIGN_OR_RETURN(RematSet echo_seed, EchoRecompute().Run(problem));
  ASSIGN_OR_RETURN(RematSet chen_seed, ChenSqrtRecompute().Run(problem));
  std::vector<RematPlan> seeds = {RematPlan{std::move(echo_seed), {}},
                                  RematPlan{std::move(chen_seed), {}}};
  const bool by_stash = options.objective == RecomputeObjective::kStashBytes &&
                        !options.memory_limit_bytes.has_value();
  if (by_stash) {
    // The exact cut within the budget (each op re-run once, peaks aside):
    // the search starts from it too and spends what budget it leaves.
    ASSIGN_OR_RETURN(
        StashCutPlans cuts,
        StashCutsWithinBudget(problem, problem.eligible,
                              FirstBackwardOp(problem.graph), input.cost_budget,
                              options.interrupted));
    for (RematSet& remat : cuts.plans) {
      seeds.push_back(RematPlan{std::move(remat), {}});
    }
  }
  int32_t depth = options.max_recompute_depth;
  if (depth == 0) {
    depth = kDefaultMaxRecomputeDepth;
    for (const RematPlan& seed : seeds) {
      depth = std::max(depth, RematChainDepth(problem, seed));
    }
  }
  AutoRecompute::Options auto_options;
  auto_options.memory_limit_bytes = options.memory_limit_bytes;
  auto_options.max_overhead_ratio = input.max_overhead_ratio;
  auto_options.max_depth = depth;
  auto_options.effort = options.auto_effort;
  auto_options.interrupted = options.interrupted;
  if (by_stash) auto_options.first_backward_op = FirstBackwardOp(problem.graph);
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
  return SelectBest(problem, within, options.memory_limit_bytes,
                    input.cost_budget, options.objective);
}

// NONE: the plain schedule.
class NonePass final : public RecomputePass {
 public:
  RecomputePolicy policy() const override { return RecomputePolicy::kNone; }
  absl::StatusOr<PassOutput> Run(const PassInput& input) const override {
    PassOutput output;
    output.schedule = PlainSchedule(input.problem.graph);
    return output;
  }
};

// ECHO and CHEN_SQRT: a published algorithm's remat set, placed by
// remat_problem.h; both ignore the budgets.
template <typename Algorithm, RecomputePolicy kPolicy>
class RematSetPass final : public RecomputePass {
 public:
  RecomputePolicy policy() const override { return kPolicy; }
  absl::StatusOr<PassOutput> Run(const PassInput& input) const override {
    ASSIGN_OR_RETURN(RematSet remat, Algorithm().Run(input.problem));
    PassOutput output;
    output.schedule = ScheduleFromRematSet(input.problem, remat);
    return output;
  }
};

class AutoPass final : public RecomputePass {
 public:
  RecomputePolicy policy() const override { return RecomputePolicy::kAuto; }
  absl::StatusOr<PassOutput> Run(const PassInput& input) const override {
    ASSIGN_OR_RETURN(Evaluated best, RunAuto(input));
    PassOutput output;
    output.schedule = std::move(best.schedule);
    return output;
  }
};

// OPTIMAL: the Checkmate MILP, warm-started with AUTO's plan when that meets
// the limit.
class OptimalPass final : public RecomputePass {
 public:
  RecomputePolicy policy() const override { return RecomputePolicy::kOptimal; }
  absl::Status CheckOptions(
      const RecomputePlanOptions& options) const override {
    if (!options.memory_limit_bytes.has_value()) {
      return absl::InvalidArgumentError(
          "policy OPTIMAL minimizes the recompute cost under a peak: set "
          "memory_limit_bytes");
    }
    if (!(options.solver_time_limit_seconds > 0)) {
      return absl::InvalidArgumentError(
          "solver_time_limit_seconds must be positive");
    }
    return absl::OkStatus();
  }
  absl::Status Precheck(const PassInput& input) const override {
    if (ProvenInfeasible(input)) return absl::OkStatus();  // no MILP
    return OptimalRecompute(MilpOptions(input)).CheckModelSize(input.problem);
  }
  absl::StatusOr<PassOutput> Run(const PassInput& input) const override {
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
    if (start.peak <= limit)
      milp_options.warm_start = std::move(start.schedule);
    ASSIGN_OR_RETURN(
        OptimalRecompute::Result result,
        OptimalRecompute(std::move(milp_options)).Run(input.problem));
    output.solver_status = result.status;
    output.solver_bound_cost = result.bound_cost;
    output.limit_reachable = !result.schedule.empty();
    output.schedule = output.limit_reachable ? std::move(result.schedule)
                                             : PlainSchedule(graph);
    return output;
  }

 private:
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

const RecomputePass& RecomputePassFor(RecomputePolicy policy) {
  static const auto* const kRegistry = [] {
    auto* passes = new std::vector<std::unique_ptr<RecomputePass>>();
    passes->push_back(std::make_unique<AutoPass>());
    passes->push_back(std::make_unique<NonePass>());
    passes->push_back(std::make_unique<
                      RematSetPass<EchoRecompute, RecomputePolicy::kEcho>>());
    passes->push_back(
        std::make_unique<
            RematSetPass<ChenSqrtRecompute, RecomputePolicy::kChenSqrt>>());
    passes->push_back(std::make_unique<OptimalPass>());
    return passes;
  }();
  for (const std::unique_ptr<RecomputePass>& pass : *kRegistry) {
    if (pass->policy() == policy) return *pass;
  }
  // Every enumerator is registered above; an out-of-range value plans as
  // AUTO rather than crash.
  return *kRegistry->front();
}

}  // namespace echo::planner
