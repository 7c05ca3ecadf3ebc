// Recompute planning (design.md sections 2-3): which forward feature maps to
// stash and which to recompute in the backward pass, as an execution schedule
// whose every number is reproduced by ReplaySchedule.
//
// Policies:
//   kNone      the plain schedule: stash everything the backward reads.
//   kEcho      the published Echo algorithm (rule list, regions, frontier
//              greedy); ignores budgets.
//   kChenSqrt  sqrt(n) segment checkpointing (Chen et al. 2016); ignores
//              budgets.
//   kOptimal   the Checkmate MILP solved with CBC; needs memory_limit_bytes.
//   kAuto      ours: peak-aware, cost-aware, budgeted greedy + local search
//              over an interval model of memory, seeded with the Echo and
//              Chen plans; never worse than the plain schedule.
//
// Budgets: memory_limit_bytes minimizes the extra compute subject to the peak;
// max_overhead_ratio minimizes the peak subject to extra compute <= ratio *
// baseline compute. With neither, AUTO minimizes the peak with
// max_overhead_ratio = kDefaultMaxOverheadRatio (0.05).
#ifndef ECHO_PLANNER_RECOMPUTE_RECOMPUTE_PLANNER_H_
#define ECHO_PLANNER_RECOMPUTE_RECOMPUTE_PLANNER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/graph.h"
#include "planner/memory_simulator.h"

namespace echo::planner {

enum class RecomputePolicy { kAuto, kNone, kEcho, kChenSqrt, kOptimal };

// Overhead budget used when no budget is given.
inline constexpr double kDefaultMaxOverheadRatio = 0.05;

// Op attribute that overrides the policies' rules: "stash" never recomputes
// the op (e.g. the LSTM cell state), "recompute" makes a rule-heavy op cheap
// for ECHO. op.recomputable = false always wins.
inline constexpr char kRecomputeHintAttribute[] = "recompute_hint";

struct RecomputePlanOptions {
  RecomputePolicy policy = RecomputePolicy::kAuto;
  // Minimize extra cost subject to peak <= limit.
  std::optional<int64_t> memory_limit_bytes;
  // Minimize peak subject to recompute_cost <= ratio * baseline_cost.
  // Neither set: minimize the peak with ratio kDefaultMaxOverheadRatio.
  // Both set: InvalidArgument.
  std::optional<double> max_overhead_ratio;
  // OPTIMAL only. The limit bounds CBC's search; its root LP is not
  // interruptible, hence the model size cap (RESOURCE_EXHAUSTED beyond it;
  // VGG16 has 34k nonzeros, FCN8 94k, MobileNet 600k, whose root takes
  // minutes).
  double solver_time_limit_seconds = 60;
  int64_t solver_max_nonzeros = 250000;
  // Longest chain of ops one recomputation may re-run (AUTO). 0: the
  // default, kDefaultMaxRecomputeDepth or the chain depth of the ECHO and
  // CHEN_SQRT plans of the graph if deeper (AUTO falls back on them). ECHO
  // and CHEN_SQRT follow their papers and ignore it; OPTIMAL's chains are
  // unbounded.
  int max_recompute_depth = 0;
  // AUTO's search effort: 0 greedy + cleanup; 1 (default) + re-insertion
  // local search on graphs up to 600 ops; 2 local search on every graph and
  // op, and greedy restarts at tighter targets (slower, rarely better).
  int auto_effort = 1;
  MemoryModelOptions memory;
};

inline constexpr int kDefaultMaxRecomputeDepth = 16;

// A region: clones that run together (consecutive in the schedule) and are
// connected by data or by a shared stashed source.
struct RecomputeRegionReport {
  std::vector<OpIndex> ops;                 // re-executed ops, schedule order
  std::vector<TensorIndex> source_tensors;  // stashed tensors it reads
  std::vector<TensorIndex> freed_tensors;   // no longer stashed thanks to it
  int64_t bytes_saved_at_peak = 0;
  double recompute_cost = 0;
  std::string explanation;
};

struct RecomputePlan {
  // False: the memory limit cannot be met (not an error).
  bool feasible = true;
  // Always a valid schedule (the best found, or the plain one).
  Schedule schedule;
  // Forward-produced tensors kept for the backward, ascending.
  std::vector<TensorIndex> stash;
  std::vector<RecomputeRegionReport> regions;
  int64_t baseline_peak_bytes = 0;
  int64_t planned_peak_bytes = 0;
  // No valid schedule of this graph can have a lower peak.
  int64_t peak_lower_bound_bytes = 0;
  double baseline_compute_cost = 0;
  double recompute_cost = 0;
  double recompute_overhead_ratio = 0;
  double solve_time_seconds = 0;
  // OPTIMAL: "optimal" | "time_limit_feasible" | "time_limit_no_solution" |
  // "infeasible"; the other policies: "heuristic".
  std::string solver_status;
  // OPTIMAL: the MILP's best bound on the recompute cost.
  double solver_bound_cost = 0;
  std::string message;
};

// op_costs: one non-negative cost per op (seconds or relative units).
absl::StatusOr<RecomputePlan> GenerateRecomputePlan(
    const Graph& graph, const std::vector<double>& op_costs,
    const RecomputePlanOptions& options);

// Case-insensitive: auto none echo chen_sqrt optimal.
absl::StatusOr<RecomputePolicy> ParseRecomputePolicy(absl::string_view name);
// Lower case.
absl::string_view RecomputePolicyName(RecomputePolicy policy);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_RECOMPUTE_PLANNER_H_
