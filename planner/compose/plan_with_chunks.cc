// AUTO's plans with chunked loss regions: recompute plans (planner/recompute/)
// of the graph with its regions chunked (planner/chunk/), weighed together.
#include "planner/compose/plan_with_chunks.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "planner/byte_size.h"
#include "planner/chunk/chunk_rewrite.h"
#include "planner/chunk/chunk_search.h"
#include "planner/memory_simulator.h"
#include "planner/recompute/plan_one_graph.h"
#include "planner/recompute/plan_report.h"
#include "planner/status_macros.h"

namespace echo::planner {
namespace {

// Chunk counts AUTO tries for regions of `rows` rows, ascending.
std::vector<int32_t> ChunkCounts(int64_t rows, const ChunkingOptions& options) {
  std::vector<int32_t> counts = {1};
  for (int32_t k = 2;
       k <= options.max_chunks && (rows + k - 1) / k >= options.min_chunk_rows;
       k *= 2) {
    counts.push_back(k);
  }
  return counts;
}

// The rows of the largest region: what the chunk counts are drawn for.
int64_t MaxRegionRows(const ChunkRegionSearch& found) {
  int64_t rows = 0;
  for (const ChunkRegion& region : found.regions) {
    rows = std::max(rows, region.rows);
  }
  return rows;
}

// The plan of chunked graph `chunked`, told in the request graph's terms.
void DescribeChunks(const Graph& graph, const ChunkRegionSearch& found,
                    ChunkedGraph chunked, RecomputePlan& plan) {
  auto shared = std::make_shared<const Graph>(std::move(chunked.graph));
  for (size_t r = 0; r < found.regions.size(); ++r) {
    const ChunkRegion& region = found.regions[r];
    const ChunkedStep& step = chunked.steps[r];
    ChunkedRegionReport report;
    report.forward_ops = region.forward_ops;
    report.backward_ops = region.backward_ops;
    report.forward_step = step.forward_op;
    report.backward_step = step.backward_op;
    report.chunks = step.chunks;
    report.rows = region.rows;
    report.chunk_rows = step.chunk_rows;
    report.inner_bytes = step.inner_bytes;
    report.chunk_workspace_bytes = step.chunk_workspace_bytes;
    report.extra_cost = step.extra_cost;
    report.sliced_inputs = region.sliced_inputs;
    report.zero_inputs = region.zero_inputs;
    report.block_rows = region.block_rows;
    for (const ChunkRegion::BlockOp& block : region.block_ops) {
      report.block_ops.push_back({block.op, block.first_row});
    }
    report.summed = region.summed;
    report.rows_last = region.rows_last;
    report.explanation = absl::StrFormat(
        "loss '%s' computed in %d chunk(s) of %d rows%s, gradients in the "
        "forward: %s -> %s at its step",
        OpDisplayName(graph.op(region.loss_op)), step.chunks, step.chunk_rows,
        region.block_rows > 0
            ? absl::StrFormat(" (whole steps of %d rows)", region.block_rows)
            : "",
        HumanBytes(step.inner_bytes), HumanBytes(step.chunk_workspace_bytes));
    plan.chunked_regions.push_back(std::move(report));
  }
  plan.chunked_graph = std::move(shared);
}

// Chunk counts in a row that may fail to improve before AUTO stops trying
// more.
constexpr int kChunkPatience = 2;

// Whether `plan` ends the search: it meets the memory limit within the
// overhead the caller accepts (accept_overhead_ratio).
bool Acceptable(const RecomputePlan& plan,
                const RecomputePlanOptions& options) {
  return options.memory_limit_bytes.has_value() &&
         options.accept_overhead_ratio.has_value() && plan.feasible &&
         WithinOverheadRatio(plan.recompute_overhead_ratio,
                             *options.accept_overhead_ratio);
}

}  // namespace

// Whether AUTO weighs chunked loss regions for these options.
bool ChunkingApplies(const RecomputePlanOptions& options) {
  return options.chunking.enabled && options.policy == RecomputePolicy::kAuto &&
         options.objective == RecomputeObjective::kPeakBytes;
}

// The lower bound over the graph and its chunked graphs (`found`).
absl::StatusOr<int64_t> ChunkedPeakLowerBound(
    const Graph& graph, const ChunkRegionSearch& found,
    const RecomputePlanOptions& options) {
  const int64_t bound = PeakLowerBound(graph, options.memory);
  if (found.regions.empty()) return bound;
  // The most chunks AUTO may try bound every count: the chunked graphs
  // differ only in the forward step's workspace, one chunk's tensors at
  // once, which shrink with its rows. Peaks do not depend on costs.
  const std::vector<double> no_costs(graph.num_ops(), 0.0);
  ASSIGN_OR_RETURN(
      const ChunkedGraph chunked,
      ChunkGraph(graph, no_costs, found.regions,
                 ChunkCounts(MaxRegionRows(found), options.chunking).back(),
                 options.memory, options.chunking.launch_cost));
  return std::min(bound, PeakLowerBound(chunked.graph, options.memory));
}

// More than chunking takes off any step or the stash: every region's inner
// tensors, its inputs (the unchunked backward may hold one the chunked
// graph frees after its forward step) and its largest op workspace. A plan
// of the chunked graph meeting a limit is, with the same choices outside
// the regions, a plan of the graph meeting the limit raised by this, at no
// more cost; its stash is at most this below the graph's.
int64_t MaxChunkRelief(const Graph& graph, const ChunkRegionSearch& found,
                       const MemoryModelOptions& memory) {
  int64_t relief = 0;
  for (const ChunkRegion& region : found.regions) {
    for (const std::vector<TensorIndex>* tensors :
         {&region.inner, &region.inputs}) {
      for (TensorIndex t : *tensors) {
        relief += AllocatedBytes(graph.tensor(t).size_bytes, memory);
      }
    }
    int64_t workspace = 0;
    for (OpIndex o : region.ops()) {
      workspace = std::max(workspace, graph.op(o).workspace_bytes);
    }
    relief += AllocatedBytes(workspace, memory);
  }
  return relief;
}

// AUTO with chunking: the unchunked plan, then plans of the graph with its
// regions chunked while the plan improves, or until a plan is acceptable.
// Under a memory limit the counts go up (1, 2, 4, ...): the cheapest plan
// that meets the limit has the fewest launches that reach it. Within an
// overhead budget they go down from the most: more chunks lower the loss's
// steps, and fewer win only where their launches leave more budget for
// recomputation elsewhere (on a 100k-op Transformer every count from 1 to
// 32 lowered the peak, by 0.8 GB to 0.04 GB: seven plans where three or four
// now find the same).
absl::StatusOr<RecomputePlan> PlanWithChunks(
    const Graph& graph, const std::vector<double>& op_costs,
    const RecomputePlanOptions& options, const RecomputePass& pass,
    const PlanBudget& budget, const ChunkRegionSearch& found) {
  ASSIGN_OR_RETURN(RecomputePlan best,
                   PlanOneGraph(graph, op_costs, options, pass, budget));
  if (options.memory_limit_bytes.has_value() &&
      options.accept_overhead_ratio.has_value() && !Acceptable(best, options)) {
    // Whether any chunk count can be acceptable: not when even the limit
    // raised by what chunks take off (MaxChunkRelief) leaves AUTO above the
    // ratio. One plan instead of one per count (CheckFit's "no" answers);
    // like every AUTO answer it trusts the search, here on the relaxed
    // problem (fit_check_test checks it against the full search).
    RecomputePlanOptions relaxed = options;
    *relaxed.memory_limit_bytes += MaxChunkRelief(graph, found, options.memory);
    ASSIGN_OR_RETURN(const RecomputePlan relaxed_plan,
                     PlanOneGraph(graph, op_costs, relaxed, pass, budget));
    if (!Acceptable(relaxed_plan, relaxed)) {
      if (!best.feasible) {
        ASSIGN_OR_RETURN(best.peak_lower_bound_bytes,
                         ChunkedPeakLowerBound(graph, found, options));
      }
      return best;
    }
  }
  const double cost_budget =
      options.max_overhead_ratio.value_or(kDefaultMaxOverheadRatio) *
      budget.baseline_cost * (1 + kBudgetSlack);
  int64_t lower_bound = best.peak_lower_bound_bytes;
  std::optional<RecomputePlan> previous;
  int misses = 0;
  // One rewrite, re-chunked for each count (Rechunk).
  std::optional<ChunkedGraph> chunked;
  int32_t chunked_at = 0;  // the count `chunked` is set to
  auto chunk = [&](int32_t chunks) -> absl::Status {
    if (chunked.has_value() && chunked_at == chunks) return absl::OkStatus();
    if (chunked.has_value()) {
      RETURN_IF_ERROR(Rechunk(graph, op_costs, found.regions, chunks,
                              options.memory, options.chunking.launch_cost,
                              *chunked));
    } else {
      ASSIGN_OR_RETURN(
          chunked, ChunkGraph(graph, op_costs, found.regions, chunks,
                              options.memory, options.chunking.launch_cost));
    }
    chunked_at = chunks;
    return absl::OkStatus();
  };
  bool planned_most = false;  // its plan's bound is in lower_bound
  std::vector<int32_t> counts =
      ChunkCounts(MaxRegionRows(found), options.chunking);
  const int32_t most_chunks = counts.back();
  if (!options.memory_limit_bytes.has_value()) {
    std::reverse(counts.begin(), counts.end());
  }
  int32_t best_chunks = 0;  // 0: unchunked
  for (int32_t chunks : counts) {
    if (Acceptable(best, options)) break;
    RETURN_IF_ERROR(chunk(chunks));
    planned_most |= chunks == most_chunks;
    PlanBudget chunked_budget = budget;
    chunked_budget.extra_cost = chunked->extra_cost;
    ASSIGN_OR_RETURN(RecomputePlan plan,
                     PlanOneGraph(chunked->graph, chunked->op_costs, options,
                                  pass, chunked_budget));
    lower_bound = std::min(lower_bound, plan.peak_lower_bound_bytes);
    const bool improved = !previous.has_value() ||
                          BetterPlan(plan, *previous, options, cost_budget);
    if (BetterPlan(plan, best, options, cost_budget)) {
      best = plan;
      best_chunks = chunks;
    }
    // Plans are not monotone in the chunks (AUTO's search is a heuristic):
    // stop after kChunkPatience counts in a row that do not improve, and
    // under a memory limit not before one meets it.
    misses = improved ? 0 : misses + 1;
    if (misses == kChunkPatience &&
        (!options.memory_limit_bytes.has_value() || best.feasible)) {
      break;
    }
    previous = std::move(plan);
  }
  if (chunked.has_value()) {
    // The most chunks bound every count (ChunkedPeakLowerBound), also those
    // the loop stopped before.
    if (!planned_most) {
      RETURN_IF_ERROR(chunk(most_chunks));
      lower_bound =
          std::min(lower_bound, PeakLowerBound(chunked->graph, options.memory));
    }
    if (best_chunks > 0) {
      RETURN_IF_ERROR(chunk(best_chunks));
      DescribeChunks(graph, found, *std::move(chunked), best);
    }
  }
  best.peak_lower_bound_bytes = lower_bound;
  best.chunking_notes = found.rejected;
  return best;
}

}  // namespace echo::planner
