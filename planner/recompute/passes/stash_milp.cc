#include "planner/recompute/passes/stash_milp.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "planner/recompute/passes/milp_builder.h"
#include "planner/recompute/passes/milp_horizons.h"
#include "planner/recompute/search/stash_cut.h"
#include "planner/status_macros.h"

namespace echo::planner {
namespace {

// The objective's unit: a byte on small graphs, plain stash / 1e6 above
// that, so that the objective stays within 1e6 and one byte, or one
// millionth of the stash, stays far above CBC's tolerances (in MiB, a few
// bytes fell under them on 3-KB graphs and CBC stopped 3-10 bytes short).
// Costs enter the budget row as fractions of the budget.
constexpr double kObjectiveRange = 1e6;

int64_t CountNonzeros(const StashModel& model) {
  const Graph& graph = model.problem().graph;
  int64_t nonzeros = 0;
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    if (!model.modelled_op(o)) continue;
    ++nonzeros;  // the budget row
    for (TensorIndex t : graph.op(o).inputs) {
      if (model.modelled(t)) nonzeros += 2;
    }
  }
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    if (model.modelled(t)) nonzeros += model.remaking_op(t) != kNoOp ? 3 : 2;
  }
  return nonzeros;
}

}  // namespace

absl::Status ExactStash::CheckModelSize(
    const RecomputeProblem& problem,
    const std::vector<uint8_t>& may_recompute) const {
  const StashModel model(problem, may_recompute,
                         FirstBackwardOp(problem.graph));
  if (CountNonzeros(model) > options_.max_nonzeros) {
    return MilpTooBigError(problem.num_ops(), options_.max_nonzeros);
  }
  return absl::OkStatus();
}

absl::StatusOr<ExactStash::Result> ExactStash::Run(
    const RecomputeProblem& problem,
    const std::vector<uint8_t>& may_recompute) const {
  const Graph& graph = problem.graph;
  const OpIndex first_backward = FirstBackwardOp(graph);
  Result result;
  result.recompute.assign(graph.num_ops(), 0);
  result.status = "optimal";
  if (first_backward == kNoOp || first_backward <= 0) return result;
  const StashModel model(problem, may_recompute, first_backward);
  if (CountNonzeros(model) > options_.max_nonzeros) {
    return MilpTooBigError(problem.num_ops(), options_.max_nonzeros);
  }
  result.stash_bytes = model.plain_stash_bytes();
  result.bound_bytes = model.plain_stash_bytes();
  if (model.plain_stash_bytes() == 0) return result;

  // Columns: per modelled op, r (re-run, binary; fixed at 0 when the op
  // alone costs more than the budget); per modelled tensor, n (needed by the
  // backward) and s (stashed), both in [0, 1], integral at the optimum once
  // r is.
  const double bytes_per_unit = std::max(
      1.0, static_cast<double>(model.plain_stash_bytes()) / kObjectiveRange);
  MilpBuilder milp;
  const double budget = std::max(0.0, options_.cost_budget);
  std::vector<int32_t> r(graph.num_ops(), kFixedZero);
  Row budget_row;
  budget_row.upper = 1;
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    if (!model.modelled_op(o)) continue;
    const double cost = problem.op_costs[o];
    if (cost > budget) continue;  // can never fit: stays fixed at 0
    r[o] = milp.AddColumn(0, 1, 0, true, absl::StrCat("r", o));
    if (cost > 0) budget_row.Add(r[o], cost / budget);
  }
  std::vector<int32_t> n(graph.num_tensors(), kFixedZero);
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    if (!model.modelled(t)) continue;
    n[t] = model.needed(t)
               ? kFixedOne
               : milp.AddColumn(0, 1, 0, false, absl::StrCat("n", t));
  }
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    if (!model.modelled(t)) continue;
    const double bytes =
        static_cast<double>(problem.tensor_bytes[t]) / bytes_per_unit;
    const int32_t s = milp.AddColumn(0, 1, bytes, false, absl::StrCat("s", t));
    // Stashed when needed, unless its producer re-runs and re-makes it.
    Row stashed;
    stashed.lower = 0;
    stashed.Add(s, 1);
    stashed.Add(n[t], -1);
    const OpIndex remaking = model.remaking_op(t);
    if (remaking != kNoOp) stashed.Add(r[remaking], 1);
    milp.AddRow(std::move(stashed));
  }
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    if (r[o] < 0) continue;
    // A re-run op needs its inputs in the backward.
    for (TensorIndex t : graph.op(o).inputs) {
      if (!model.modelled(t) || n[t] == kFixedOne) continue;
      Row needs;
      needs.lower = 0;
      needs.Add(n[t], 1);
      needs.Add(r[o], -1);
      milp.AddRow(std::move(needs));
    }
  }
  milp.AddRow(std::move(budget_row));
  if (milp.num_columns() == 0) return result;

  // No start: the plain plan as one turned NMT's 0.4 s solve into a 60 s
  // time limit (2026-12-03). Without a solution the answer is the plain
  // plan (result's defaults), with status time_limit_no_solution.
  const MilpSolution solved =
      SolveWithCbc(milp, options_.time_limit_seconds, MipStart());
  result.status = solved.status;
  if (!solved.values.empty()) {
    for (OpIndex o = 0; o < graph.num_ops(); ++o) {
      if (r[o] >= 0 && solved.values[r[o]] > 0.5) result.recompute[o] = 1;
    }
    result.stash_bytes = model.StashBytesOf(result.recompute);
  }
  // Stashes are whole bytes; CBC's tolerance is well under one. A search
  // stopped before its root LP has no bound (CBC answers about -1e308).
  const double bound = solved.bound * bytes_per_unit;
  if (result.status == "optimal") {
    result.bound_bytes = result.stash_bytes;
  } else if (std::isfinite(bound) && bound > 0) {
    result.bound_bytes = static_cast<int64_t>(
        std::min(std::ceil(bound - 1e-6 * std::max(1.0, bound)),
                 static_cast<double>(result.stash_bytes)));
  } else {
    result.bound_bytes = 0;
  }
  return result;
}

}  // namespace echo::planner
