#include "planner/recompute/recompute_planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "planner/byte_size.h"
#include "planner/chunk/chunk_rewrite.h"
#include "planner/chunk/chunk_search.h"
#include "planner/cost_model.h"
#include "planner/memory_simulator.h"
#include "planner/recompute/plan_report.h"
#include "planner/recompute/recompute_pass.h"
#include "planner/recompute/recompute_problem.h"
#include "planner/status_macros.h"

namespace echo::planner {
namespace {

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
  if (options.accept_overhead_ratio.has_value() &&
      !(*options.accept_overhead_ratio >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("accept_overhead_ratio must be >= 0, got ",
                     *options.accept_overhead_ratio));
  }
  if (options.max_overhead_ratio.has_value() &&
      (!std::isfinite(*options.max_overhead_ratio) ||
       *options.max_overhead_ratio < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_overhead_ratio must be finite and non-negative, got ",
                     *options.max_overhead_ratio));
  }
  if (options.objective == RecomputeObjective::kStashBytes &&
      ((options.policy != RecomputePolicy::kAuto &&
        options.policy != RecomputePolicy::kOptimal) ||
       options.memory_limit_bytes.has_value())) {
    return absl::InvalidArgumentError(
        "objective stash_bytes is AUTO's (or OPTIMAL's, exactly) with an "
        "overhead budget: use policy AUTO or OPTIMAL and max_overhead_ratio, "
        "not memory_limit_bytes");
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

PassInput MakePassInput(const RecomputeProblem& problem,
                        const RecomputePlanOptions& options) {
  PassInput input{problem, options};
  input.max_overhead_ratio =
      options.max_overhead_ratio.value_or(kDefaultMaxOverheadRatio);
  input.cost_budget =
      input.max_overhead_ratio * problem.baseline_cost * (1 + kBudgetSlack);
  return input;
}

// The plan in one line for people.
std::string PlanMessage(const Graph& graph, const RecomputePlan& plan_in,
                        const RecomputePlanOptions& options) {
  const RecomputePlan* plan = &plan_in;
  const double reduction =
      plan->planned_peak_bytes > 0
          ? static_cast<double>(plan->baseline_peak_bytes) /
                static_cast<double>(plan->planned_peak_bytes)
          : 1.0;
  std::string message = absl::StrFormat(
      "%s: peak %s -> %s (%.2fx smaller) for %.2f%% extra compute in %d "
      "recompute region(s)",
      RecomputePolicyName(options.policy),
      HumanBytes(plan->baseline_peak_bytes),
      HumanBytes(plan->planned_peak_bytes), reduction,
      100 * plan->recompute_overhead_ratio, plan->regions.size());
  if (options.memory_limit_bytes.has_value()) {
    absl::StrAppend(&message, plan->feasible ? "; meets" : "; CANNOT meet",
                    " the memory limit of ",
                    HumanBytes(*options.memory_limit_bytes));
  }
  if (!plan->feasible &&
      plan->peak_lower_bound_bytes > options.memory_limit_bytes.value_or(0)) {
    absl::StrAppend(&message, " (no schedule can go below ",
                    HumanBytes(plan->peak_lower_bound_bytes), ")");
  }
  if (options.objective == RecomputeObjective::kStashBytes) {
    absl::StrAppend(
        &message, "; stash ",
        HumanBytes(StashBytes(graph, PlainSchedule(graph), options.memory)),
        " -> ", HumanBytes(plan->stash_bytes),
        " (no plan within the budget "
        "below ",
        HumanBytes(plan->stash_lower_bound_bytes), ")");
  }
  if (options.policy == RecomputePolicy::kOptimal) {
    absl::StrAppend(&message, "; solver: ", plan->solver_status);
  }
  for (const ChunkedRegionReport& region : plan->chunked_regions) {
    absl::StrAppend(&message, "; ", region.explanation);
  }
  return message;
}

// One graph's plan. `budget` carries what chunking changes: the request's
// baseline (cost and peak) against which a chunked graph's plan is judged,
// and the chunks' own extra cost, which the recompute budget pays first.
struct PlanBudget {
  double baseline_cost = 0;
  int64_t baseline_peak = 0;
  double extra_cost = 0;
};

absl::StatusOr<RecomputePlan> PlanOneGraph(const Graph& graph,
                                           const std::vector<double>& op_costs,
                                           const RecomputePlanOptions& options,
                                           const RecomputePass& pass,
                                           const PlanBudget& budget) {
  const RecomputeProblem problem(graph, op_costs, options.memory);
  PassInput input = MakePassInput(problem, options);
  input.cost_budget =
      std::max(0.0, input.max_overhead_ratio * budget.baseline_cost *
                            (1 + kBudgetSlack) -
                        budget.extra_cost);
  // The passes read the budget as a ratio of this graph's cost too.
  if (problem.baseline_cost > 0) {
    input.max_overhead_ratio = std::max(
        0.0,
        (input.max_overhead_ratio * budget.baseline_cost - budget.extra_cost) /
            problem.baseline_cost);
  }
  RETURN_IF_ERROR(pass.Precheck(input));
  if (options.interrupted) RETURN_IF_ERROR(options.interrupted());
  ASSIGN_OR_RETURN(PassOutput output,
                   pass.isolated() && options.run_isolated_pass
                       ? options.run_isolated_pass(input)
                       : pass.Run(input));
  if (options.interrupted) RETURN_IF_ERROR(options.interrupted());

  absl::StatusOr<RecomputePlan> plan = BuildPlanFromSchedule(
      graph, op_costs, options.memory, budget.baseline_peak,
      std::move(output.schedule), std::move(output.replay));
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
  plan->stash_lower_bound_bytes =
      std::max(plan->stash_lower_bound_bytes, output.stash_bound_bytes);
  plan->solver_status = output.solver_status;
  plan->solver_bound_cost = output.solver_bound_cost;
  // Judged against the request's graph: the chunks' cost is extra compute.
  plan->baseline_compute_cost = budget.baseline_cost;
  plan->recompute_cost += budget.extra_cost;
  plan->recompute_overhead_ratio =
      budget.baseline_cost > 0 ? plan->recompute_cost / budget.baseline_cost
                               : 0;
  plan->feasible = output.limit_reachable &&
                   (!options.memory_limit_bytes.has_value() ||
                    plan->planned_peak_bytes <= *options.memory_limit_bytes);
  return plan;
}

// Whether plan `a` beats `b` for the request: with a memory limit, the
// cheapest that meets it (else the lowest peak); with an overhead budget,
// the lowest peak within it, then the cheapest.
bool BetterPlan(const RecomputePlan& a, const RecomputePlan& b,
                const RecomputePlanOptions& options, double cost_budget) {
  if (options.memory_limit_bytes.has_value()) {
    if (a.feasible != b.feasible) return a.feasible;
    if (a.feasible && a.recompute_cost != b.recompute_cost) {
      return a.recompute_cost < b.recompute_cost;
    }
    if (a.planned_peak_bytes != b.planned_peak_bytes) {
      return a.planned_peak_bytes < b.planned_peak_bytes;
    }
    return a.recompute_cost < b.recompute_cost;
  }
  const bool a_within = a.recompute_cost <= cost_budget;
  const bool b_within = b.recompute_cost <= cost_budget;
  if (a_within != b_within) return a_within;
  if (a.planned_peak_bytes != b.planned_peak_bytes) {
    return a.planned_peak_bytes < b.planned_peak_bytes;
  }
  return a.recompute_cost < b.recompute_cost;
}

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

// Whether AUTO weighs chunked loss regions for these options.
bool ChunkingApplies(const RecomputePlanOptions& options) {
  return options.chunking.enabled && options.policy == RecomputePolicy::kAuto &&
         options.objective == RecomputeObjective::kPeakBytes;
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
    report.block_ops = region.block_ops;
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

}  // namespace

absl::Status PrecheckRecomputePlan(const Graph& graph,
                                   const std::vector<double>& op_costs,
                                   const RecomputePlanOptions& options) {
  ASSIGN_OR_RETURN(const RecomputePass* pass,
                   CheckedPass(graph, op_costs, options));
  const RecomputeProblem problem(graph, op_costs, options.memory);
  return pass->Precheck(MakePassInput(problem, options));
}

absl::StatusOr<PassOutput> RunRecomputePass(const Graph& graph,
                                            const std::vector<double>& op_costs,
                                            const RecomputePlanOptions& options,
                                            double max_overhead_ratio,
                                            double cost_budget) {
  ASSIGN_OR_RETURN(const RecomputePass* pass,
                   CheckedPass(graph, op_costs, options));
  const RecomputeProblem problem(graph, op_costs, options.memory);
  PassInput input = MakePassInput(problem, options);
  input.max_overhead_ratio = max_overhead_ratio;
  input.cost_budget = cost_budget;
  RETURN_IF_ERROR(pass->Precheck(input));
  return pass->Run(input);
}

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
