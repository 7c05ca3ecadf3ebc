// The scheduler's questions over plans (docs/design.md section 5,
// "Schedulers"): the largest batch that fits a device, without and with
// recomputation, and the memory/compute frontier of a graph.
//
// FindMaxBatchSize searches over candidate batches k * multiple_of in
// [min_batch, max_batch]: galloping (1, 2, 4, ... steps) from the smallest
// candidate, then a bracket narrowed by estimates of where the predicate
// flips, with bisection as the fallback (batch_bracket.h). Without
// recomputation the predicate "plain peak <= usable memory" is monotone
// (every size and workspace grows with the batch), so the answer is exact.
// With recomputation the predicate is CheckFit's: the plain schedule where
// it fits (no plan), else "an AUTO plan under the usable memory costs <= the
// overhead budget". Its necessary condition, PeakLowerBound <= usable, is
// monotone, and the schedule of a plan at batch B+1 replayed at batch B has
// a peak no larger and extra compute no larger (op costs scale with the
// batch), so the best plan is monotone up to the ratio's denominator (ops
// that do not scale, e.g. optimizer steps, weigh more at small batches).
// AUTO plans are the search's cost (each ~100x a replay), so over a wide
// range it starts at a guess, where the lowest-peak AUTO plan within the
// overhead budget (planned once; it hardly changes with the batch) stops
// fitting when replayed, then steps by where the extra compute crosses the
// budget. AUTO is a heuristic: the answer is the largest batch for which
// the search found a fitting plan (the next candidate's plan does not fit,
// or no schedule can); each reported point is a real plan, and the unit
// tests check the search against a scan of every batch on small graphs.
//
// MemoryFrontier runs AUTO at a sweep of memory limits from the plain peak
// down to the smallest peak AUTO reaches (in bisection order, within a time
// budget) and keeps the Pareto set of (peak, extra compute). Each point carries
// the memory limit it was planned at: GenerateRecomputePlan(AUTO,
// memory_limit_bytes = that limit) on the same graph, costs and options returns
// the same plan, whose fingerprint (PlanFingerprint, plan.h) is the point's.
#ifndef ECHO_PLANNER_SCHEDULE_BATCH_SEARCH_H_
#define ECHO_PLANNER_SCHEDULE_BATCH_SEARCH_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/graph.h"
#include "planner/recompute/plan.h"

namespace echo::planner {

// The op costs of a graph (the cost model on the graph at some batch).
using OpCostFn =
    std::function<absl::StatusOr<std::vector<double>>(const Graph& graph)>;

// Batches above this are not searched (no device holds them).
inline constexpr int64_t kMaxBatchSearchLimit = int64_t{1} << 30;
inline constexpr int32_t kDefaultFrontierPoints = 12;
inline constexpr int32_t kMaxFrontierPoints = 64;
// Larger graphs get RESOURCE_EXHAUSTED from MemoryFrontier (one AUTO plan
// per point would take minutes).
inline constexpr int32_t kDefaultFrontierMaxOps = 200000;
// The sweep plans no further limits once this much time has passed (the
// points found are exact; MemoryFrontier::truncated says so).
inline constexpr double kDefaultFrontierTimeBudgetSeconds = 1.0;

struct MaxBatchOptions {
  int64_t device_memory_bytes = 0;
  int64_t reserved_bytes = 0;
  // As FitOptions: unset means kDefaultMaxOverheadRatio, 0 no extra compute.
  std::optional<double> max_overhead_ratio;
  int64_t min_batch = 1;
  // 0: up to kMaxBatchSearchLimit.
  int64_t max_batch = 0;
  int64_t multiple_of = 1;
  MemoryModelOptions memory;
  Interrupt interrupted;
};

struct BatchFit {
  bool found = false;  // false: not even the smallest candidate fits
  int64_t batch = 0;
  int64_t peak_bytes = 0;
  double recompute_overhead_ratio = 0;
  // The candidate above `batch` (when one was evaluated): why it fails.
  int64_t next_batch_peak_bytes = 0;
};

struct MaxBatchResult {
  BatchFit without_recompute;
  BatchFit with_recompute;  // AUTO within the overhead budget
  int64_t graph_batch = 0;  // the batch the graph was given at
  int64_t usable_bytes = 0;
  int32_t plans_evaluated = 0;
  std::string message;
};

// INVALID_ARGUMENT naming the field for min_batch < 1, max_batch < min_batch,
// multiple_of < 1, no multiple of multiple_of in the range, a negative
// ratio or reserve; FAILED_PRECONDITION when the graph has no batch
// dimension.
absl::StatusOr<MaxBatchResult> FindMaxBatchSize(const Graph& graph,
                                                const OpCostFn& op_costs,
                                                const MaxBatchOptions& options);

struct FrontierOptions {
  int32_t max_points = kDefaultFrontierPoints;  // 2..kMaxFrontierPoints
  int32_t max_ops = kDefaultFrontierMaxOps;
  double time_budget_seconds = kDefaultFrontierTimeBudgetSeconds;
  int max_recompute_depth = 0;  // as RecomputePlanOptions
  MemoryModelOptions memory;
  Interrupt interrupted;
};

struct FrontierPoint {
  int64_t peak_bytes = 0;
  double recompute_cost = 0;
  double recompute_overhead_ratio = 0;
  // Send as GenerateRecomputePlan's memory_limit_bytes (policy AUTO) to get
  // this plan back.
  int64_t memory_limit_bytes = 0;
  std::string plan_fingerprint;
  int32_t recompute_count = 0;  // re-executions in the schedule
};

struct MemoryFrontier {
  int64_t baseline_peak_bytes = 0;
  int64_t peak_lower_bound_bytes = 0;
  double baseline_compute_cost = 0;
  // Pareto-optimal, by peak descending (the plain schedule first) and so
  // by extra compute ascending.
  std::vector<FrontierPoint> points;
  int32_t plans_evaluated = 0;
  // The time budget cut the sweep short: fewer limits were planned.
  bool truncated = false;
};

absl::StatusOr<MemoryFrontier> ComputeMemoryFrontier(
    const Graph& graph, const std::vector<double>& op_costs,
    const FrontierOptions& options);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_SCHEDULE_BATCH_SEARCH_H_
