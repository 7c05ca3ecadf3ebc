#include "planner/compose/plan_composer.h"

#include <algorithm>
#include <chrono>

#include "planner/chunk/chunk_search.h"
#include "planner/compose/plan_with_chunks.h"
#include "planner/cost_model.h"
#include "planner/memory_simulator.h"
#include "planner/recompute/plan_one_graph.h"
#include "planner/recompute/plan_report.h"
#include "planner/recompute/recompute_problem.h"
#include "planner/status_macros.h"

namespace echo::planner {

absl::StatusOr<int64_t> PlanPeakLowerBound(
    const Graph& graph, const RecomputePlanOptions& options) {
  const ChunkRegionSearch found =
      ChunkingApplies(options) ? FindChunkRegions(graph) : ChunkRegionSearch{};
  return ChunkedPeakLowerBound(graph, found, options);
}

absl::StatusOr<int64_t> PlanStashLowerBound(const Graph& graph,
                                            const std::vector<double>& op_costs,
                                            const RecomputePlanOptions& options,
                                            double cost_budget) {
  RETURN_IF_ERROR(CheckedPass(graph, op_costs, options).status());
  const RecomputeProblem problem(graph, op_costs, options.memory);
  ASSIGN_OR_RETURN(const int64_t bound,
                   StashLowerBound(problem, cost_budget, /*with_cut=*/false,
                                   options.interrupted));
  if (!ChunkingApplies(options)) return bound;
  return std::max<int64_t>(
      0,
      bound - MaxChunkRelief(graph, FindChunkRegions(graph), options.memory));
}

absl::StatusOr<RecomputePlan> GenerateRecomputePlan(
    const Graph& graph, const std::vector<double>& op_costs,
    const RecomputePlanOptions& options) {
  ASSIGN_OR_RETURN(const RecomputePass* pass,
                   CheckedPass(graph, op_costs, options));
  const auto start = std::chrono::steady_clock::now();
  PlanBudget budget;
  budget.baseline_cost = BaselineCost(graph, op_costs);
  budget.baseline_peak = SimulatePlain(graph, options.memory).peak_bytes;
  const bool chunking = ChunkingApplies(options);
  const ChunkRegionSearch found =
      chunking ? FindChunkRegions(graph) : ChunkRegionSearch{};
  absl::StatusOr<RecomputePlan> planned =
      found.regions.empty()
          ? PlanOneGraph(graph, op_costs, options, *pass, budget)
          : PlanWithChunks(graph, op_costs, options, *pass, budget, found);
  if (!planned.ok()) return planned.status();
  RecomputePlan& plan = *planned;
  if (chunking) plan.chunking_notes = found.rejected;
  plan.solve_time_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  plan.message = PlanMessage(graph, plan, options);
  return planned;
}

}  // namespace echo::planner
