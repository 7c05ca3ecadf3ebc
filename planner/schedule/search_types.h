// The scheduler searches' options and answers (batch_search.h): plain
// data, no search, so that the adapter converts them without linking the
// passes (as FitOptions in plan.h).
#ifndef ECHO_PLANNER_SCHEDULE_SEARCH_TYPES_H_
#define ECHO_PLANNER_SCHEDULE_SEARCH_TYPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/memory_simulator.h"
#include "planner/recompute/plan.h"

namespace echo::planner {

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
  // AUTO's chunked loss regions, as in RecomputePlanOptions: every plan the
  // search makes, and the lower bound that bounds it, use them.
  ChunkingOptions chunking;
  Interrupt interrupted;
};

struct BatchFit {
  bool found = false;  // false: not even the smallest candidate fits
  int64_t batch = 0;
  int64_t peak_bytes = 0;
  double recompute_overhead_ratio = 0;
  // The candidate above `batch` (when one was evaluated), and why it fails:
  // its peak (without recompute: the plain peak; with: AUTO's under the
  // usable memory), above the usable memory when memory is why, and the
  // extra compute of that plan, above the budget when compute is.
  int64_t next_batch_peak_bytes = 0;
  double next_batch_overhead_ratio = 0;
};

struct MaxBatchResult {
  BatchFit without_recompute;
  BatchFit with_recompute;  // AUTO within the overhead budget
  int64_t graph_batch = 0;  // the batch the graph was given at
  int64_t usable_bytes = 0;
  int32_t plans_evaluated = 0;
  std::string message;
};

struct FrontierOptions {
  int32_t max_points = kDefaultFrontierPoints;  // 2..kMaxFrontierPoints
  int32_t max_ops = kDefaultFrontierMaxOps;
  double time_budget_seconds = kDefaultFrontierTimeBudgetSeconds;
  int max_recompute_depth = 0;  // as RecomputePlanOptions
  MemoryModelOptions memory;
  // As RecomputePlanOptions; a point's plan comes back from
  // GenerateRecomputePlan with the same chunking options.
  ChunkingOptions chunking;
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
  // PlanPeakLowerBound: no plan with these options peaks lower.
  int64_t peak_lower_bound_bytes = 0;
  double baseline_compute_cost = 0;
  // Pareto-optimal, by peak descending (the plain schedule first) and so
  // by extra compute ascending.
  std::vector<FrontierPoint> points;
  int32_t plans_evaluated = 0;
  // The time budget cut the sweep short: fewer limits were planned.
  bool truncated = false;
};

}  // namespace echo::planner

#endif  // ECHO_PLANNER_SCHEDULE_SEARCH_TYPES_H_
