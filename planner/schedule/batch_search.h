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
// memory_limit_bytes = that limit) on the same graph, costs and options
// (chunking included) returns the same plan, whose fingerprint
// (PlanFingerprint over PlanGraph, plan.h) is the point's.
//
// With chunking (ChunkingOptions::enabled), every plan either search makes
// may run the loss in chunks, and the lower bounds (the batch search's
// bound, the frontier's peak_lower_bound_bytes) are PlanPeakLowerBound's,
// which counts chunked graphs.
#ifndef ECHO_PLANNER_SCHEDULE_BATCH_SEARCH_H_
#define ECHO_PLANNER_SCHEDULE_BATCH_SEARCH_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/graph.h"
#include "planner/recompute/plan.h"
#include "planner/schedule/search_types.h"

namespace echo::planner {

// The op costs of a graph (the cost model on the graph at some batch).
using OpCostFn =
    std::function<absl::StatusOr<std::vector<double>>(const Graph& graph)>;

// INVALID_ARGUMENT naming the field for min_batch < 1, max_batch < min_batch,
// multiple_of < 1, no multiple of multiple_of in the range, a negative
// ratio or reserve; FAILED_PRECONDITION when the graph has no batch
// dimension.
absl::StatusOr<MaxBatchResult> FindMaxBatchSize(const Graph& graph,
                                                const OpCostFn& op_costs,
                                                const MaxBatchOptions& options);

absl::StatusOr<MemoryFrontier> ComputeMemoryFrontier(
    const Graph& graph, const std::vector<double>& op_costs,
    const FrontierOptions& options);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_SCHEDULE_BATCH_SEARCH_H_
