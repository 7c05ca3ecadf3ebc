// AUTO's plans with chunked loss regions (plan_with_chunks.cc): the graph
// planned with each region run in more chunks while the plan improves.
#ifndef ECHO_PLANNER_COMPOSE_PLAN_WITH_CHUNKS_H_
#define ECHO_PLANNER_COMPOSE_PLAN_WITH_CHUNKS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/chunk/chunk_search.h"
#include "planner/graph.h"
#include "planner/memory_simulator.h"
#include "planner/recompute/plan.h"
#include "planner/recompute/plan_one_graph.h"
#include "planner/recompute/recompute_pass.h"

namespace echo::planner {

// Whether AUTO weighs chunked loss regions for these options.
bool ChunkingApplies(const RecomputePlanOptions& options);

// The lower bound over the graph and its chunked graphs (`found`).
absl::StatusOr<int64_t> ChunkedPeakLowerBound(
    const Graph& graph, const ChunkRegionSearch& found,
    const RecomputePlanOptions& options);

// More than chunking takes off any step or the stash (plan_with_chunks.cc).
int64_t MaxChunkRelief(const Graph& graph, const ChunkRegionSearch& found,
                       const MemoryModelOptions& memory);

// AUTO with chunking: the unchunked plan, then plans of the graph with its
// regions chunked while the plan improves, or until a plan is acceptable.
absl::StatusOr<RecomputePlan> PlanWithChunks(
    const Graph& graph, const std::vector<double>& op_costs,
    const RecomputePlanOptions& options, const RecomputePass& pass,
    const PlanBudget& budget, const ChunkRegionSearch& found);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_COMPOSE_PLAN_WITH_CHUNKS_H_
