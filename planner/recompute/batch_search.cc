#include "planner/recompute/batch_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "planner/batch.h"
#include "planner/byte_size.h"
#include "planner/memory_simulator.h"
#include "planner/recompute/plan_report.h"
#include "planner/recompute/recompute_planner.h"
#include "planner/status_macros.h"

namespace echo::planner {
namespace {

// As the planner's budget check: a plan spending exactly the budget fits.
constexpr double kBudgetSlack = 1e-9;

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

// One candidate batch, evaluated.
struct Probe {
  bool fits = false;
  int64_t peak_bytes = 0;
  double overhead_ratio = 0;
};

// Candidates are k * multiple_of for k in [lo, hi]. Given that `fits(lo)`
// holds, the largest k with fits(k) under monotonicity: gallop up from lo,
// then narrow the bracket (good, bad). Peaks grow about linearly with the
// batch, so a step interpolates where the peak crosses `usable` when the
// bracket's peaks straddle it, then checks the neighbour on the other side
// (k + 1 after a fit, k - 1 after a miss), then bisects once: at most three
// times bisection's probes, one or two when peaks are linear. The probes
// are memoized in `seen`.
class MonotoneSearch {
 public:
  using Eval = std::function<absl::StatusOr<Probe>(int64_t k)>;
  MonotoneSearch(Eval eval, int64_t usable, const Interrupt& interrupted)
      : eval_(std::move(eval)), usable_(usable), interrupted_(interrupted) {}

  absl::StatusOr<Probe> At(int64_t k) {
    if (auto it = seen_.find(k); it != seen_.end()) return it->second;
    if (interrupted_) RETURN_IF_ERROR(interrupted_());
    ASSIGN_OR_RETURN(Probe probe, eval_(k));
    seen_.emplace(k, probe);
    return probe;
  }

  // The largest k in [lo, hi] that fits, given that lo does. `gallop`:
  // probe lo + 1, 2, 4, ... first (when hi is a loose bound).
  absl::StatusOr<int64_t> Largest(int64_t lo, int64_t hi, bool gallop) {
    int64_t good = lo;
    int64_t bad = hi + 1;
    for (int64_t step = 1; gallop && good < hi;) {
      const int64_t k = std::min(hi, good + step);
      ASSIGN_OR_RETURN(const Probe probe, At(k));
      if (!probe.fits) {
        bad = k;
        break;
      }
      good = k;
      step = step > hi ? hi : step * 2;
    }
    // Steps cycle: interpolate, check the neighbour, bisect (which halves
    // the bracket), so that at most three probes go by per halving.
    enum class Step { kInterpolate, kNeighbour, kBisect };
    Step step = Step::kInterpolate;
    int64_t last = good;
    bool last_fit = true;
    while (bad - good > 1) {
      int64_t k = good + (bad - good) / 2;
      Step next = Step::kInterpolate;
      if (step == Step::kInterpolate) {
        if (std::optional<int64_t> estimate = Interpolate(good, bad)) {
          k = *estimate;
          next = Step::kNeighbour;
        }
      } else if (step == Step::kNeighbour) {
        k = last_fit ? last + 1 : last - 1;  // inside (good, bad)
        next = Step::kBisect;
      }
      ASSIGN_OR_RETURN(const Probe probe, At(k));
      (probe.fits ? good : bad) = k;
      last = k;
      last_fit = probe.fits;
      step = next;
    }
    return good;
  }

  const std::map<int64_t, Probe>& seen() const { return seen_; }

 private:
  // Where the line through the bracket's peaks crosses usable_, strictly
  // inside (good, bad); none when the peaks do not straddle it (e.g. a plan
  // that misses on its overhead, not its peak).
  std::optional<int64_t> Interpolate(int64_t good, int64_t bad) const {
    auto g = seen_.find(good);
    auto b = seen_.find(bad);
    if (g == seen_.end() || b == seen_.end()) return std::nullopt;
    const double low = static_cast<double>(g->second.peak_bytes);
    const double high = static_cast<double>(b->second.peak_bytes);
    const double target = static_cast<double>(usable_);
    if (!(low <= target && target < high)) return std::nullopt;
    const double k =
        static_cast<double>(good) +
        (target - low) / (high - low) * static_cast<double>(bad - good);
    return std::clamp<int64_t>(static_cast<int64_t>(std::floor(k)), good + 1,
                               bad - 1);
  }

  Eval eval_;
  int64_t usable_;
  const Interrupt& interrupted_;
  std::map<int64_t, Probe> seen_;
};

BatchFit ToBatchFit(const MonotoneSearch& search, std::optional<int64_t> k,
                    int64_t multiple_of) {
  BatchFit fit;
  if (!k.has_value()) return fit;
  const std::map<int64_t, Probe>& seen = search.seen();
  const Probe& probe = seen.at(*k);
  fit.found = true;
  fit.batch = *k * multiple_of;
  fit.peak_bytes = probe.peak_bytes;
  fit.recompute_overhead_ratio = probe.overhead_ratio;
  if (auto next = seen.find(*k + 1); next != seen.end()) {
    fit.next_batch_peak_bytes = next->second.peak_bytes;
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

  // A batch whose sizes overflow int64 does not fit anything.
  auto scaled = [&](int64_t k) -> absl::StatusOr<const Graph*> {
    absl::StatusOr<const Graph*> at = scaler.At(k * m);
    if (absl::IsResourceExhausted(at.status())) return nullptr;
    return at;
  };
  MonotoneSearch plain(
      [&](int64_t k) -> absl::StatusOr<Probe> {
        ASSIGN_OR_RETURN(const Graph* g, scaled(k));
        Probe probe;
        if (g == nullptr) return probe;
        ++result.plans_evaluated;
        probe.peak_bytes = SimulatePlain(*g, options.memory).peak_bytes;
        probe.fits = probe.peak_bytes <= usable;
        return probe;
      },
      usable, options.interrupted);
  MonotoneSearch with_recompute(
      [&](int64_t k) -> absl::StatusOr<Probe> {
        ASSIGN_OR_RETURN(const Graph* g, scaled(k));
        Probe probe;
        if (g == nullptr) return probe;
        // No schedule goes below the bound: skip planning.
        const int64_t bound = PeakLowerBound(*g, options.memory);
        if (bound > usable) {
          probe.peak_bytes = bound;
          return probe;
        }
        ASSIGN_OR_RETURN(const std::vector<double> costs, op_costs(*g));
        RecomputePlanOptions plan_options;
        plan_options.memory = options.memory;
        plan_options.interrupted = options.interrupted;
        plan_options.memory_limit_bytes = std::max<int64_t>(usable, 1);
        ASSIGN_OR_RETURN(const RecomputePlan plan,
                         GenerateRecomputePlan(*g, costs, plan_options));
        ++result.plans_evaluated;
        probe.peak_bytes = plan.planned_peak_bytes;
        probe.overhead_ratio = plan.recompute_overhead_ratio;
        probe.fits =
            plan.feasible && plan.planned_peak_bytes <= usable &&
            plan.recompute_overhead_ratio <= ratio * (1 + kBudgetSlack);
        return probe;
      },
      usable, options.interrupted);

  // No schedule fits above the largest batch whose lower bound fits (cheap
  // and monotone): it bounds AUTO's bisection.
  MonotoneSearch bound(
      [&](int64_t k) -> absl::StatusOr<Probe> {
        ASSIGN_OR_RETURN(const Graph* g, scaled(k));
        Probe probe;
        if (g == nullptr) return probe;
        probe.peak_bytes = PeakLowerBound(*g, options.memory);
        probe.fits = probe.peak_bytes <= usable;
        return probe;
      },
      usable, options.interrupted);

  std::optional<int64_t> plain_k;
  ASSIGN_OR_RETURN(const Probe first, plain.At(lo));
  if (first.fits) {
    ASSIGN_OR_RETURN(plain_k, plain.Largest(lo, hi, /*gallop=*/true));
  }
  ASSIGN_OR_RETURN(const Probe bound_first, bound.At(lo));
  std::optional<int64_t> auto_k;
  if (bound_first.fits) {
    ASSIGN_OR_RETURN(const int64_t bound_k,
                     bound.Largest(lo, hi, /*gallop=*/true));
    // Where the plain schedule fits, so does AUTO at no extra compute:
    // search above the plain answer.
    const int64_t auto_lo = plain_k.value_or(lo);
    ASSIGN_OR_RETURN(const Probe auto_first, with_recompute.At(auto_lo));
    if (auto_first.fits) {
      ASSIGN_OR_RETURN(auto_k, with_recompute.Largest(auto_lo, bound_k,
                                                      /*gallop=*/false));
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
  frontier.peak_lower_bound_bytes = PeakLowerBound(graph, options.memory);

  std::vector<FrontierPoint> found;
  auto plan_at = [&](int64_t limit) -> absl::StatusOr<RecomputePlan> {
    RecomputePlanOptions plan_options;
    plan_options.memory = options.memory;
    plan_options.interrupted = options.interrupted;
    plan_options.max_recompute_depth = options.max_recompute_depth;
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
      point.plan_fingerprint = PlanFingerprint(graph, plan.schedule);
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
