#include "planner/recompute/search/auto_recompute.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "planner/recompute/search/recompute_repair.h"
#include "planner/recompute/search/recompute_search.h"
#include "planner/recompute/search/recompute_state.h"
#include "planner/status_macros.h"

namespace echo::planner {
namespace {

// Effort 2: the greedy also aims at these fractions of the limit.
constexpr double kTighterTargets[] = {0.97, 0.94};

// Assigns `plan` without its most expensive ops, so that its cost fits
// `budget`: keeps the cheapest ops whose clone costs add up to the budget,
// then drops more one by one if chains made it dearer. The plan's clones
// and cost come from its clone points alone (`points`: scratch), so that the
// state is rebuilt once, for what is kept. Returns the cost of the whole
// plan, summed as RecomputeState::Assign sums it.
double AssignWithinBudget(const RecomputeProblem& problem,
                          const RecomputeChoice& plan, double budget,
                          RecomputeState& state,
                          std::vector<PointList>& points) {
  ClonePointsInto(problem, plan.recompute, plan.splits, points);
  // Summed as RecomputeState::Assign sums it.
  double cost = 0;
  for (OpIndex o = 0; o < problem.num_ops(); ++o) {
    for (size_t k = 0; k < points[o].size(); ++k) cost += problem.op_costs[o];
  }
  if (cost <= budget) {
    state.Assign(plan);
    return cost;
  }
  std::vector<OpIndex> ops;
  for (OpIndex o = 0; o < problem.num_ops(); ++o) {
    if (plan.recompute[o] && problem.can_clone[o] && !points[o].empty()) {
      ops.push_back(o);
    }
  }
  std::stable_sort(ops.begin(), ops.end(), [&](OpIndex a, OpIndex b) {
    return problem.op_costs[a] * points[a].size() <
           problem.op_costs[b] * points[b].size();
  });
  RecomputeChoice kept{RecomputeSet(problem.num_ops(), 0), plan.splits};
  double kept_cost = 0;
  for (OpIndex op : ops) {
    const double op_cost = problem.op_costs[op] * points[op].size();
    if (kept_cost + op_cost > budget) break;
    kept_cost += op_cost;
    kept.recompute[op] = 1;
  }
  state.Assign(kept);
  for (auto it = ops.rbegin(); it != ops.rend() && state.cost() > budget;
       ++it) {
    state.Set(*it, false);
  }
  return cost;
}

}  // namespace

absl::StatusOr<std::vector<RecomputeChoice>> AutoRecompute::Run(
    const RecomputeProblem& problem) {
  RecomputeSearch search(problem, options_.max_depth, options_.copy_classes);
  // Checked once per search step: the first non-OK status stops the search.
  absl::Status interrupt_status;
  if (options_.interrupted) {
    search.SetStop([&] {
      if (interrupt_status.ok()) interrupt_status = options_.interrupted();
      return !interrupt_status.ok();
    });
  }
  RecomputeState& state = search.state();
  if (options_.first_backward_op > 0 && !options_.memory_limit_bytes) {
    state.TrackStash(options_.first_backward_op);
  }
  std::vector<RecomputeChoice> candidates;
  replay_peaks_.clear();
  replay_lower_bounds_.clear();
  candidate_costs_.clear();
  plain_replay_peak_ = state.ReplayPeak().value_or(-1);  // nothing planned yet
  // The plan the state holds, with its replayed peak when the state knows it.
  auto keep_state_plan = [&] {
    candidates.push_back(state.plan());
    replay_peaks_.push_back(state.ReplayPeak().value_or(-1));
    replay_lower_bounds_.push_back(state.MainSlotMax());
    candidate_costs_.push_back(state.cost());
  };
  std::vector<PointList> points;  // AssignWithinBudget's scratch
  // The state still holds the empty plan it was built with, the first start:
  // at 100k ops a rebuild is ~13 ms.
  bool fresh = true;
  std::vector<RecomputeChoice> starts = {
      RecomputeChoice{RecomputeSet(problem.num_ops(), 0), {}}};
  // starts[k], k >= 1, is seed k - 1, candidate k - 1. Once the state holds
  // a seed as given, the seed's peak is proven like any other candidate's.
  auto prove_seed = [&](size_t k) {
    if (k == 0 || replay_peaks_[k - 1] >= 0) return;
    if (SameChoice(state.plan(), starts[k])) {
      replay_peaks_[k - 1] = state.ReplayPeak().value_or(-1);
      replay_lower_bounds_[k - 1] = state.MainSlotMax();
    }
  };
  for (RecomputeChoice seed : options_.seeds) {
    // Without the ops no clone can run (the state drops them too), so that
    // the state can hold the seed as given.
    for (OpIndex o = 0; o < problem.num_ops(); ++o) {
      seed.recompute[o] = seed.recompute[o] && problem.can_clone[o];
    }
    candidates.push_back(seed);  // as they are: the caller replays them
    replay_peaks_.push_back(-1);
    replay_lower_bounds_.push_back(0);
    candidate_costs_.push_back(0);  // set when the search assigns it
    starts.push_back(std::move(seed));
  }
  // Re-insertion trials: a bounded number on graphs small enough for the
  // exact greedy; with effort 2, on every graph and every op.
  int32_t local_trials = 0;
  if (options_.effort >= 2) {
    local_trials = 1 << 30;
  } else if (options_.effort == 1 && !search.batch()) {
    local_trials = 64;
  }

  if (options_.memory_limit_bytes.has_value()) {
    const int64_t limit = *options_.memory_limit_bytes;
    // With effort 2 the greedy also aims below the limit, then cleans up back
    // to it: a tighter target sometimes leads to a cheaper plan (on the
    // Checkmate graphs, <= 0.3% of the baseline, for 3x the time).
    std::vector<int64_t> targets = {limit};
    if (options_.effort >= 2) {
      for (double factor : kTighterTargets) {
        targets.push_back(
            static_cast<int64_t>(factor * static_cast<double>(limit)));
      }
    }
    for (size_t k = 0; k < starts.size(); ++k) {
      const RecomputeChoice& start = starts[k];
      for (int64_t target : targets) {
        SearchGoal goal;
        goal.limit = target;
        if (k > 0 || !fresh) state.Assign(start);
        fresh = false;
        if (k > 0) candidate_costs_[k - 1] = state.cost();
        prove_seed(k);
        if (search.Greedy(goal)) {
          search.Cleanup(limit);
          search.LocalSearch(limit, local_trials);
        }
        keep_state_plan();
        RETURN_IF_ERROR(interrupt_status);
      }
    }
  } else {
    SearchGoal goal;
    goal.limit_mode = false;
    goal.budget = options_.max_overhead_ratio * problem.baseline_cost;
    int64_t plain_peak = 0;
    for (size_t k = 0; k < starts.size(); ++k) {
      const RecomputeChoice& start = starts[k];
      if (k > 0 || !fresh) {
        const double start_cost =
            AssignWithinBudget(problem, start, goal.budget, state, points);
        if (k > 0) candidate_costs_[k - 1] = start_cost;
      }
      fresh = false;
      prove_seed(k);
      if (k == 0) plain_peak = state.Peak();  // empty plan
      // Descent: greedy within the budget back to its lowest peak, clean up
      // at that peak to free budget, and go again while the peak improves.
      int64_t peak = state.Peak();
      for (int round = 0; round < 8; ++round) {
        search.Greedy(goal);
        // Unchanged since the last round's cleanup at this peak: another
        // would try the same removals (at 100k ops, 2,048 failing ones).
        if (!search.RewindToBest() && round > 0) break;
        search.Cleanup(search.best_peak());
        if (round > 0 && search.best_peak() >= peak) break;
        peak = search.best_peak();
      }
      keep_state_plan();
      RETURN_IF_ERROR(interrupt_status);
      if (!state.tracks_stash()) continue;
      SearchGoal stash_goal = goal;
      stash_goal.minimize_stash = true;
      // The budget the peak descent left, then the whole budget.
      search.Greedy(stash_goal);
      search.RewindToBest();
      keep_state_plan();
      AssignWithinBudget(problem, start, goal.budget, state, points);
      const bool above_plain = state.Peak() > plain_peak;
      search.Greedy(stash_goal);
      search.RewindToBest();
      keep_state_plan();
      RETURN_IF_ERROR(interrupt_status);
      // The selection rejects it above the plain peak, and the greedy never
      // lowers the stash by raising the peak: repair the start first, then
      // spend the budget the repair freed.
      if (!above_plain) continue;
      AssignWithinBudget(problem, start, goal.budget, state, points);
      if (!RepairPeak(plain_peak, state)) continue;
      search.Greedy(stash_goal);
      search.RewindToBest();
      keep_state_plan();
      RETURN_IF_ERROR(interrupt_status);
    }
  }
  depth_bound_hit_ = search.depth_bound_hit();
  return candidates;
}

}  // namespace echo::planner
