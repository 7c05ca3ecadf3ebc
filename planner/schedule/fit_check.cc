#include "planner/schedule/fit_check.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "planner/compose/plan_composer.h"
#include "planner/cost_model.h"
#include "planner/device_catalog.h"
#include "planner/recompute/plan.h"
#include "planner/recompute/plan_report.h"
#include "planner/status_macros.h"

namespace echo::planner {

absl::StatusOr<RecomputeFit> FitWithRecompute(
    const Graph& graph, const std::vector<double>& op_costs,
    const RecomputePlanOptions& options, int64_t usable_bytes, double ratio) {
  RecomputeFit fit;
  // The least stash within the ratio (PlanStashLowerBound); computed first
  // because it checks the costs and options as the planner does, so that
  // a bad request is an error, not an answer.
  std::optional<int64_t> stash_bound;
  if (std::isfinite(ratio)) {
    ASSIGN_OR_RETURN(stash_bound,
                     PlanStashLowerBound(graph, op_costs, options,
                                         ratio * BaselineCost(graph, op_costs) *
                                             (1 + kBudgetSlack)));
  } else {
    RETURN_IF_ERROR(PrecheckRecomputePlan(graph, op_costs, options));
  }
  // No schedule goes below the bound: skip planning. The chunked bound
  // costs a rewrite of the graph, so only where the plain bound is over.
  fit.peak_lower_bound_bytes = PeakLowerBound(graph, options.memory);
  if (fit.peak_lower_bound_bytes > usable_bytes) {
    ASSIGN_OR_RETURN(fit.peak_lower_bound_bytes,
                     PlanPeakLowerBound(graph, options));
    if (fit.peak_lower_bound_bytes > usable_bytes) {
      fit.peak_bytes = fit.peak_lower_bound_bytes;
      return fit;
    }
  }
  // Nor within the ratio when every plan within it stashes more.
  if (stash_bound.has_value() && *stash_bound > usable_bytes) {
    fit.stash_lower_bound_bytes = *stash_bound;
    fit.peak_bytes = *stash_bound;
    return fit;
  }
  RecomputePlanOptions plan_options = options;
  plan_options.memory_limit_bytes = std::max<int64_t>(usable_bytes, 1);
  plan_options.accept_overhead_ratio = ratio;
  ASSIGN_OR_RETURN(const RecomputePlan plan,
                   GenerateRecomputePlan(graph, op_costs, plan_options));
  fit.planned = true;
  fit.meets_memory = plan.feasible && plan.planned_peak_bytes <= usable_bytes;
  fit.fits = fit.meets_memory &&
             WithinOverheadRatio(plan.recompute_overhead_ratio, ratio);
  fit.peak_bytes = plan.planned_peak_bytes;
  fit.peak_lower_bound_bytes = plan.peak_lower_bound_bytes;
  fit.recompute_overhead_ratio = plan.recompute_overhead_ratio;
  return fit;
}

absl::StatusOr<FitResult> CheckFit(const Graph& graph,
                                   const std::vector<double>& op_costs,
                                   const FitOptions& options) {
  const double ratio =
      options.max_overhead_ratio.value_or(kDefaultMaxOverheadRatio);
  // +inf is a valid budget ("any overhead"); NaN and negatives are not.
  if (!(ratio >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_overhead_ratio must be >= 0, got ", ratio));
  }
  if (options.reserved_bytes.value_or(0) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reserved_bytes must be >= 0, got ", *options.reserved_bytes));
  }
  FitResult result;
  result.reserved_bytes = options.reserved_bytes.value_or(
      DefaultReservedBytes(options.device_memory_bytes));
  const int64_t capacity = options.device_memory_bytes - result.reserved_bytes;
  result.baseline_peak_bytes = SimulatePlain(graph, options.memory).peak_bytes;
  result.planned_peak_bytes = result.baseline_peak_bytes;
  if (result.baseline_peak_bytes <= capacity) {
    result.fits = true;
    result.fits_without_recompute = true;
    result.message = absl::StrFormat(
        "fits without recomputation: peak %d of %d usable bytes",
        result.baseline_peak_bytes, capacity);
    return result;
  }
  RecomputePlanOptions plan_options;
  plan_options.memory = options.memory;
  plan_options.chunking = options.chunking;
  plan_options.interrupted = options.interrupted;
  ASSIGN_OR_RETURN(
      const RecomputeFit fit,
      FitWithRecompute(graph, op_costs, plan_options, capacity, ratio));
  result.fits = fit.fits;
  result.planned_peak_bytes = fit.peak_bytes;
  result.recompute_overhead_ratio = fit.recompute_overhead_ratio;
  if (!fit.planned && fit.stash_lower_bound_bytes > 0) {
    result.message = absl::StrFormat(
        "does not fit within %.2f%% extra compute: every plan within it "
        "stashes at least %d bytes for the backward, above %d usable bytes",
        100 * ratio, fit.stash_lower_bound_bytes, capacity);
  } else if (!fit.planned) {
    result.message = absl::StrFormat(
        "does not fit even with maximal recomputation: lower bound %d above "
        "%d usable bytes",
        fit.peak_lower_bound_bytes, capacity);
  } else if (result.fits) {
    result.message = absl::StrFormat(
        "fits with recomputation: peak %d -> %d of %d usable bytes at %.2f%% "
        "extra compute",
        result.baseline_peak_bytes, fit.peak_bytes, capacity,
        100 * fit.recompute_overhead_ratio);
  } else if (fit.meets_memory) {
    result.message = absl::StrFormat(
        "fits only at %.2f%% extra compute, above the %.2f%% budget (peak %d "
        "-> %d of %d bytes)",
        100 * fit.recompute_overhead_ratio, 100 * ratio,
        result.baseline_peak_bytes, fit.peak_bytes, capacity);
  } else {
    result.message = absl::StrFormat(
        "does not fit even with maximal recomputation: best peak %d, lower "
        "bound %d, usable %d bytes",
        fit.peak_bytes, fit.peak_lower_bound_bytes, capacity);
  }
  return result;
}

}  // namespace echo::planner
