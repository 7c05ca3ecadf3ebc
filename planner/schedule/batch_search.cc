#include "planner/schedule/batch_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "planner/batch.h"
#include "planner/byte_size.h"
#include "planner/compose/plan_composer.h"
#include "planner/memory_simulator.h"
#include "planner/recompute/plan_report.h"
#include "planner/schedule/batch_bracket.h"
#include "planner/schedule/fit_check.h"
#include "planner/status_macros.h"

namespace echo::planner {
namespace {

// AUTO ranges wider than this many candidates start from a guess (one
// plan and a few replays) rather than by bisection (one plan per halving).
constexpr int64_t kGuessMinRange = 8;

absl::Status ValidateMaxBatch(const MaxBatchOptions& options, double ratio) {
  if (options.min_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_batch must be >= 1, got ", options.min_batch));
  }
  if (options.max_batch < 0 ||
      (options.max_batch != 0 && options.max_batch < options.min_batch)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch (", options.max_batch, ") is below min_batch (",
                     options.min_batch, ")"));
  }
  if (options.multiple_of < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("multiple_of must be >= 1, got ", options.multiple_of));
  }
  if (!(ratio >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_overhead_ratio must be >= 0, got ", ratio));
  }
  if (options.reserved_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reserved_bytes must be >= 0, got ", options.reserved_bytes));
  }
  if (options.device_memory_bytes <= 0) {
    return absl::InvalidArgumentError("the device has no memory size");
  }
  return ValidateMemoryModelOptions(options.memory);
}

// AUTO's options for a search's plans (MaxBatchOptions, FrontierOptions);
// the caller sets the budget.
template <typename SearchOptions>
RecomputePlanOptions AutoOptions(const SearchOptions& options) {
  RecomputePlanOptions plan_options;
  plan_options.memory = options.memory;
  plan_options.chunking = options.chunking;
  plan_options.interrupted = options.interrupted;
  return plan_options;
}

// `scaler`'s graph at candidate k; null where a size overflows int64 (a
// batch that big fits nothing).
absl::StatusOr<const Graph*> ScaledOrNull(BatchScaler& scaler, int64_t k,
                                          int64_t multiple_of) {
  absl::StatusOr<const Graph*> at = scaler.At(k * multiple_of);
  if (absl::IsResourceExhausted(at.status())) return nullptr;
  return at;
}

BatchFit ToBatchFit(const BatchBracketSearch& search, std::optional<int64_t> k,
                    int64_t multiple_of) {
  BatchFit fit;
  if (!k.has_value()) return fit;
  const BatchProbes& seen = search.seen();
  const BatchProbe& probe = seen.at(*k);
  fit.found = true;
  fit.batch = *k * multiple_of;
  fit.peak_bytes = probe.peak_bytes;
  fit.recompute_overhead_ratio = probe.overhead_ratio;
  if (auto next = seen.find(*k + 1); next != seen.end()) {
    fit.next_batch_peak_bytes = next->second.peak_bytes;
    fit.next_batch_overhead_ratio = next->second.overhead_ratio;
  }
  return fit;
}

}  // namespace

absl::StatusOr<MaxBatchResult> FindMaxBatchSize(
    const Graph& graph, const OpCostFn& op_costs,
    const MaxBatchOptions& options) {
  const double ratio =
      options.max_overhead_ratio.value_or(kDefaultMaxOverheadRatio);
  RETURN_IF_ERROR(ValidateMaxBatch(options, ratio));
  const int64_t m = options.multiple_of;
  const int64_t lo = (options.min_batch + m - 1) / m;
  const int64_t hi =
      (options.max_batch == 0 ? kMaxBatchSearchLimit : options.max_batch) / m;
  if (lo > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("no multiple of multiple_of (", m,
                     ") lies in [min_batch, max_batch] = [", options.min_batch,
                     ", ", options.max_batch, "]"));
  }
  ASSIGN_OR_RETURN(BatchScaler scaler, BatchScaler::Create(graph));
  MaxBatchResult result;
  result.graph_batch = scaler.base_batch();
  result.usable_bytes = options.device_memory_bytes - options.reserved_bytes;
  const int64_t usable = result.usable_bytes;

  auto scaled = [&](int64_t k) { return ScaledOrNull(scaler, k, m); };
  // Chunking (options.chunking) lowers the bound and the plans' peaks.
  const RecomputePlanOptions auto_options = AutoOptions(options);
  BatchBracketSearch plain(
      [&](int64_t k) -> absl::StatusOr<BatchProbe> {
        ASSIGN_OR_RETURN(const Graph* g, scaled(k));
        BatchProbe probe;
        if (g == nullptr) return probe;
        ++result.plans_evaluated;
        probe.peak_bytes = SimulatePlain(*g, options.memory).peak_bytes;
        probe.fits = probe.peak_bytes <= usable;
        return probe;
      },
      PeakCrossing(usable), options.interrupted);
  // No schedule fits above the largest batch whose lower bound fits (cheap
  // and monotone): it bounds AUTO's search.
  BatchBracketSearch bound(
      [&](int64_t k) -> absl::StatusOr<BatchProbe> {
        ASSIGN_OR_RETURN(const Graph* g, scaled(k));
        BatchProbe probe;
        if (g == nullptr) return probe;
        ASSIGN_OR_RETURN(probe.peak_bytes,
                         PlanPeakLowerBound(*g, auto_options));
        probe.fits = probe.peak_bytes <= usable;
        return probe;
      },
      PeakCrossing(usable), options.interrupted);

  std::optional<int64_t> plain_k;
  ASSIGN_OR_RETURN(const BatchProbe first, plain.At(lo));
  if (first.fits) {
    ASSIGN_OR_RETURN(plain_k, plain.Largest(lo, hi, /*gallop=*/true));
  }
  // Where the plain peak crosses the usable memory (fractional, in
  // candidates): AUTO's extra compute starts there.
  double zero_batch = static_cast<double>(lo);
  if (plain_k.has_value()) {
    zero_batch = static_cast<double>(*plain_k);
    const BatchProbes& seen = plain.seen();
    if (auto above = seen.find(*plain_k + 1); above != seen.end()) {
      const double low = static_cast<double>(seen.at(*plain_k).peak_bytes);
      const double high = static_cast<double>(above->second.peak_bytes);
      if (high > low)
        zero_batch += (static_cast<double>(usable) - low) / (high - low);
    }
  }

  // "Fits with recomputation" at a candidate, as CheckFit answers it: the
  // plain schedule where it fits (no plan), else an AUTO plan under the
  // usable memory within the budget.
  BatchBracketSearch with_recompute(
      [&](int64_t k) -> absl::StatusOr<BatchProbe> {
        if (plain_k.has_value() && k <= *plain_k) return plain.At(k);
        ASSIGN_OR_RETURN(const Graph* g, scaled(k));
        BatchProbe probe;
        if (g == nullptr) return probe;
        ASSIGN_OR_RETURN(const std::vector<double> costs, op_costs(*g));
        ASSIGN_OR_RETURN(
            const RecomputeFit fit,
            FitWithRecompute(*g, costs, auto_options, usable, ratio));
        if (fit.planned) ++result.plans_evaluated;
        probe.peak_bytes = fit.peak_bytes;
        probe.overhead_ratio = fit.recompute_overhead_ratio;
        probe.fits = fit.fits;
        return probe;
      },
      OverheadCrossing(usable, ratio, zero_batch), options.interrupted);

  // A first guess for AUTO's answer: the largest candidate at which AUTO's
  // lowest-peak plan within the overhead budget fits. That plan hardly
  // changes with the batch (its ops scale together: on ResNet50 the plans
  // at batches 256, 300 and 368 all fit up to 350), so it is planned once,
  // just above the plain answer, and replayed at other batches (~100x
  // cheaper than planning). AUTO under the memory limit fits there or a
  // little above (ResNet50 368, MobileNet 853 over 828).
  auto guess = [&](int64_t auto_lo,
                   int64_t bound_k) -> absl::StatusOr<std::optional<int64_t>> {
    if (bound_k - auto_lo <= kGuessMinRange || !std::isfinite(ratio)) {
      return std::nullopt;
    }
    ASSIGN_OR_RETURN(const Graph* g, scaled(auto_lo + 1));
    if (g == nullptr) return std::nullopt;
    ASSIGN_OR_RETURN(const std::vector<double> costs, op_costs(*g));
    RecomputePlanOptions plan_options = auto_options;
    plan_options.max_overhead_ratio = ratio;
    ASSIGN_OR_RETURN(const RecomputePlan plan,
                     GenerateRecomputePlan(*g, costs, plan_options));
    ++result.plans_evaluated;
    // A chunked plan's schedule runs on its chunked graph: that graph is
    // rescaled (its chunks' workspace with the batch, as if the chunk count
    // stayed).
    std::optional<BatchScaler> chunked;
    if (plan.chunked_graph != nullptr) {
      ASSIGN_OR_RETURN(chunked, BatchScaler::Create(*plan.chunked_graph));
    }
    BatchScaler& replay_scaler = chunked.has_value() ? *chunked : scaler;
    BatchBracketSearch replays(
        [&](int64_t k) -> absl::StatusOr<BatchProbe> {
          ASSIGN_OR_RETURN(const Graph* at, ScaledOrNull(replay_scaler, k, m));
          BatchProbe probe;
          if (at == nullptr) return probe;
          ASSIGN_OR_RETURN(const SimulationResult replay,
                           ReplaySchedule(*at, plan.schedule, options.memory));
          probe.peak_bytes = replay.peak_bytes;
          probe.fits = probe.peak_bytes <= usable;
          return probe;
        },
        PeakCrossing(usable), options.interrupted);
    ASSIGN_OR_RETURN(const BatchProbe first, replays.At(auto_lo));
    if (!first.fits) return std::nullopt;
    ASSIGN_OR_RETURN(const int64_t largest,
                     replays.Largest(auto_lo, bound_k, /*gallop=*/false));
    return largest;
  };

  ASSIGN_OR_RETURN(const BatchProbe bound_first, bound.At(lo));
  std::optional<int64_t> auto_k;
  if (bound_first.fits) {
    ASSIGN_OR_RETURN(const int64_t bound_k,
                     bound.Largest(lo, hi, /*gallop=*/true));
    // Where the plain schedule fits, so does AUTO at no extra compute:
    // search above the plain answer.
    const int64_t auto_lo = plain_k.value_or(lo);
    ASSIGN_OR_RETURN(const BatchProbe auto_first, with_recompute.At(auto_lo));
    if (auto_first.fits) {
      ASSIGN_OR_RETURN(const std::optional<int64_t> first,
                       guess(auto_lo, bound_k));
      ASSIGN_OR_RETURN(auto_k, with_recompute.Largest(auto_lo, bound_k,
                                                      /*gallop=*/false, first));
    }
  }
  result.without_recompute = ToBatchFit(plain, plain_k, m);
  result.with_recompute = ToBatchFit(with_recompute, auto_k, m);

  const auto describe = [&](const BatchFit& fit, const char* how) {
    if (!fit.found) {
      return absl::StrFormat("no batch >= %d fits %s", lo * m, how);
    }
    return absl::StrFormat("batch %d fits %s (peak %s, %.2f%% extra compute)",
                           fit.batch, how, HumanBytes(fit.peak_bytes),
                           100 * fit.recompute_overhead_ratio);
  };
  result.message = absl::StrCat(
      describe(result.without_recompute, "without recomputation"), "; ",
      describe(result.with_recompute,
               absl::StrFormat("with recomputation within %.2f%%", 100 * ratio)
                   .c_str()),
      "; ", HumanBytes(usable), " usable");
  return result;
}

absl::StatusOr<MemoryFrontier> ComputeMemoryFrontier(
    const Graph& graph, const std::vector<double>& op_costs,
    const FrontierOptions& options) {
  if (options.max_points < 2 || options.max_points > kMaxFrontierPoints) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_points must be in [2, ", kMaxFrontierPoints,
                     "], got ", options.max_points));
  }
  if (!(options.time_budget_seconds >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "time_budget_seconds must be >= 0, got ", options.time_budget_seconds));
  }
  if (graph.num_ops() > options.max_ops) {
    return absl::ResourceExhaustedError(
        absl::StrCat("graph '", graph.name(), "' has ", graph.num_ops(),
                     " ops; GetMemoryFrontier plans at most ", options.max_ops,
                     " (ask GenerateRecomputePlan for single budgets)"));
  }
  MemoryFrontier frontier;
  frontier.baseline_peak_bytes =
      SimulatePlain(graph, options.memory).peak_bytes;
  RecomputePlanOptions auto_options = AutoOptions(options);
  auto_options.max_recompute_depth = options.max_recompute_depth;
  // With chunking, below the plain graph's bound: chunks never hold the
  // loss's tensors whole.
  ASSIGN_OR_RETURN(frontier.peak_lower_bound_bytes,
                   PlanPeakLowerBound(graph, auto_options));

  std::vector<FrontierPoint> found;
  auto plan_at = [&](int64_t limit) -> absl::StatusOr<RecomputePlan> {
    RecomputePlanOptions plan_options = auto_options;
    plan_options.memory_limit_bytes = limit;
    ASSIGN_OR_RETURN(RecomputePlan plan,
                     GenerateRecomputePlan(graph, op_costs, plan_options));
    ++frontier.plans_evaluated;
    frontier.baseline_compute_cost = plan.baseline_compute_cost;
    if (plan.feasible) {
      FrontierPoint point;
      point.peak_bytes = plan.planned_peak_bytes;
      point.recompute_cost = plan.recompute_cost;
      point.recompute_overhead_ratio = plan.recompute_overhead_ratio;
      point.memory_limit_bytes = limit;
      // As GenerateRecomputePlan's response: over the graph the schedule
      // indexes (the chunked one for a chunked plan).
      point.plan_fingerprint =
          PlanFingerprint(PlanGraph(graph, plan), plan.schedule);
      for (const Execution& e : plan.schedule)
        point.recompute_count += e.recompute;
      found.push_back(std::move(point));
    }
    return plan;
  };

  // The plain schedule (AUTO's answer at the plain peak: nothing to do);
  // the lowest peak AUTO reaches (asked for the lower bound), then that
  // peak as a limit (the cheapest plan there); then limits between, in
  // bisection order (1/2, 1/4, 3/4, ...) so that a sweep cut short by the
  // time budget still covers the range evenly.
  const auto start = std::chrono::steady_clock::now();
  const int64_t top = frontier.baseline_peak_bytes;
  {
    FrontierPoint plain;
    plain.peak_bytes = top;
    plain.memory_limit_bytes = top;
    plain.plan_fingerprint = PlanFingerprint(graph, PlainSchedule(graph));
    found.push_back(std::move(plain));
  }
  ASSIGN_OR_RETURN(const RecomputePlan lowest,
                   plan_at(frontier.peak_lower_bound_bytes));
  const int64_t min_peak = lowest.planned_peak_bytes;
  if (!lowest.feasible) RETURN_IF_ERROR(plan_at(min_peak).status());
  const int32_t steps = options.max_points - 1;
  std::deque<std::pair<int32_t, int32_t>> intervals = {{0, steps}};
  while (!intervals.empty() && min_peak < top) {
    const auto [lo, hi] = intervals.front();
    intervals.pop_front();
    const int32_t mid = lo + (hi - lo) / 2;
    if (mid == lo) continue;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count() > options.time_budget_seconds) {
      frontier.truncated = true;
      break;
    }
    const int64_t limit =
        min_peak +
        static_cast<int64_t>(static_cast<double>(top - min_peak) * mid / steps);
    RETURN_IF_ERROR(plan_at(limit).status());
    intervals.push_back({lo, mid});
    intervals.push_back({mid, hi});
  }

  // Pareto: by peak ascending (cost ascending on ties), keep a point when it
  // is cheaper than every point with a smaller or equal peak.
  std::sort(found.begin(), found.end(),
            [](const FrontierPoint& a, const FrontierPoint& b) {
              if (a.peak_bytes != b.peak_bytes)
                return a.peak_bytes < b.peak_bytes;
              if (a.recompute_cost != b.recompute_cost)
                return a.recompute_cost < b.recompute_cost;
              return a.memory_limit_bytes < b.memory_limit_bytes;
            });
  double cheapest = INFINITY;
  for (FrontierPoint& point : found) {
    if (point.recompute_cost < cheapest) {
      cheapest = point.recompute_cost;
      frontier.points.push_back(std::move(point));
    }
  }
  std::reverse(frontier.points.begin(), frontier.points.end());
  return frontier;
}

}  // namespace echo::planner
