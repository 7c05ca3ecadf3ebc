// Readable plans: PruneIdleRegions, which drops the recompute regions that
// save nothing at the peak, and SortRegionsBySaving (plan_report.h).
#include <algorithm>
#include <iterator>

#include "absl/types/span.h"
#include "planner/recompute/plan_report.h"

namespace echo::planner {
namespace {

// The schedule without the steps of `drop` (sorted positions).
Schedule WithoutSteps(const Schedule& schedule,
                      absl::Span<const int32_t> drop) {
  Schedule kept;
  kept.reserve(schedule.size() - drop.size());
  size_t next = 0;
  for (int32_t step = 0; step < static_cast<int32_t>(schedule.size()); ++step) {
    if (next < drop.size() && drop[next] == step) {
      ++next;
      continue;
    }
    kept.push_back(schedule[step]);
  }
  return kept;
}

// `a` and `b` merged, both sorted.
std::vector<int32_t> Merged(absl::Span<const int32_t> a,
                            absl::Span<const int32_t> b) {
  std::vector<int32_t> out;
  out.reserve(a.size() + b.size());
  std::merge(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

}  // namespace

RecomputePlan PruneIdleRegions(const Graph& graph,
                               const std::vector<double>& op_costs,
                               const RecomputePlanOptions& options,
                               RecomputePlan plan) {
  std::vector<const RecomputeRegionReport*> idle;
  for (const RecomputeRegionReport& region : plan.regions) {
    if (region.bytes_saved_at_peak == 0) idle.push_back(&region);
  }
  // The costliest first: they are the ones worth dropping.
  std::stable_sort(idle.begin(), idle.end(), [](const auto* a, const auto* b) {
    return a->recompute_cost > b->recompute_cost;
  });
  const int64_t steps = std::max<int64_t>(1, plan.schedule.size());
  const int64_t max_tries = options.prune.max_replayed_steps / steps;
  // A set of steps may go when the schedule without them replays with no
  // higher peak. All idle regions at once first, else one at a time.
  auto droppable = [&](const std::vector<int32_t>& drop) {
    absl::StatusOr<SimulationResult> replay = ReplaySchedule(
        graph, WithoutSteps(plan.schedule, drop), options.memory);
    return replay.ok() && replay->peak_bytes <= plan.planned_peak_bytes;
  };
  std::vector<int32_t> all;
  for (const RecomputeRegionReport* region : idle) {
    all = Merged(all, region->steps);
  }
  std::vector<int32_t> dropped;
  if (!idle.empty() && max_tries > 0 && droppable(all)) {
    dropped = std::move(all);
  } else {
    // Passes over the regions still kept, while a pass drops one (a drop
    // can make another droppable), within the budget of tries.
    std::vector<const RecomputeRegionReport*> kept = idle;
    int64_t tries = 0;
    for (bool progress = true; progress && tries < max_tries;) {
      progress = false;
      std::vector<const RecomputeRegionReport*> still;
      for (const RecomputeRegionReport* region : kept) {
        if (tries++ >= max_tries ||
            (options.interrupted && !options.interrupted().ok())) {
          still.push_back(region);
          continue;
        }
        std::vector<int32_t> candidate = Merged(dropped, region->steps);
        if (droppable(candidate)) {
          dropped = std::move(candidate);
          progress = true;
        } else {
          still.push_back(region);
        }
      }
      kept = std::move(still);
    }
  }
  if (!dropped.empty()) {
    absl::StatusOr<RecomputePlan> pruned = BuildPlanFromSchedule(
        graph, op_costs, options.memory, plan.baseline_peak_bytes,
        WithoutSteps(plan.schedule, dropped));
    if (pruned.ok()) plan = *std::move(pruned);
  }
  // What a region left that saves nothing at the peak step is worth: how
  // much the peak would rise without it.
  int64_t budget = options.prune.max_replayed_steps /
                   std::max<int64_t>(1, plan.schedule.size());
  for (RecomputeRegionReport& region : plan.regions) {
    if (region.bytes_saved_at_peak != 0) continue;
    if (budget-- <= 0) break;
    absl::StatusOr<SimulationResult> replay = ReplaySchedule(
        graph, WithoutSteps(plan.schedule, region.steps), options.memory);
    if (replay.ok()) {
      region.peak_rise_if_dropped_bytes =
          std::max<int64_t>(0, replay->peak_bytes - plan.planned_peak_bytes);
    }
  }
  return plan;
}

void SortRegionsBySaving(RecomputePlan& plan) {
  std::stable_sort(
      plan.regions.begin(), plan.regions.end(),
      [](const RecomputeRegionReport& a, const RecomputeRegionReport& b) {
        if (a.bytes_saved_at_peak != b.bytes_saved_at_peak) {
          return a.bytes_saved_at_peak > b.bytes_saved_at_peak;
        }
        return a.peak_rise_if_dropped_bytes > b.peak_rise_if_dropped_bytes;
      });
}

}  // namespace echo::planner
