// AUTO's pass (auto_pass.h).
#include "planner/recompute/passes/auto_pass.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "planner/recompute/passes/chen_sqrt_pass.h"
#include "planner/recompute/passes/echo_pass.h"
#include "planner/recompute/passes/passes.h"
#include "planner/recompute/plan_report.h"
#include "planner/recompute/recompute_problem.h"
#include "planner/recompute/search/auto_recompute.h"
#include "planner/recompute/search/copy_classes.h"
#include "planner/recompute/search/recompute_search.h"
#include "planner/recompute/search/stash_cut.h"
#include "planner/status_macros.h"

namespace echo::planner {
namespace {

// Whether `a` is a better answer than `b`: with a memory limit, the
// cheapest plan that meets it (else the lowest peak); with an overhead
// budget, the lowest peak within it (stash objective: the fewest stashed
// bytes within it and the plain peak).
bool Better(const Evaluated& a, const Evaluated& b,
            const std::optional<int64_t>& memory_limit, bool by_stash) {
  if (by_stash) {
    return std::make_tuple(a.stash_bytes, a.peak, a.cost) <
           std::make_tuple(b.stash_bytes, b.peak, b.cost);
  }
  if (memory_limit.has_value()) {
    const bool a_fits = a.peak <= *memory_limit;
    const bool b_fits = b.peak <= *memory_limit;
    if (a_fits != b_fits) return a_fits;
    if (a_fits) return a.cost < b.cost || (a.cost == b.cost && a.peak < b.peak);
  }
  return a.peak < b.peak || (a.peak == b.peak && a.cost < b.cost);
}

// Whether a candidate whose replayed peak is at least `lower` is never
// Better than `best`, whatever its cost. With a memory limit, only when
// `best` meets it: below it a candidate left out could have set
// `bound_hit`, which sends RunAuto deeper.
bool CannotBeat(int64_t lower, const Evaluated& best, int64_t plain_peak,
                const std::optional<int64_t>& memory_limit, bool by_stash) {
  if (by_stash) return lower > plain_peak;  // rejected above the plain peak
  if (memory_limit.has_value()) {
    return best.peak <= *memory_limit && lower > *memory_limit;
  }
  return lower > best.peak;
}

// Replays each distinct candidate within the depth bound and keeps the best
// under the budget (Better; among equals, the first); `bound_hit` is set
// when the bound left one out. A candidate whose peak the search proved
// (`search.replay_peaks()`, one per candidate, and the plain schedule's; -1
// where unknown) is ranked by it without a replay: at 100k ops each replay
// is ~30 ms. The candidates go lowest bound first (`replay_lower_bounds()`),
// and one that cannot beat the best so far (CannotBeat) is not even
// scheduled, nor is one the search's cost shows over the budget: the answer
// is the same as replaying all. The plain schedule is
// always a candidate, so the result is never worse than it.
Evaluated SelectBest(const RecomputeProblem& problem,
                     const std::vector<RecomputeChoice>& candidates,
                     const AutoRecompute& search, int32_t depth,
                     const std::optional<int64_t>& memory_limit,
                     double cost_budget, bool by_stash, bool& bound_hit) {
  std::optional<Evaluated> best;
  size_t best_position = 0;  // in the candidates' order, the plain first
  std::optional<int64_t> plain_peak;
  // Kept across candidates: one list per op, allocated once.
  std::vector<PointList> points;
  auto consider = [&](const RecomputeChoice& plan, int64_t replay_peak,
                      size_t position) {
    // One pass over the graph for both the depth and the schedule.
    ClonePointsInto(problem, plan.recompute, plan.splits, points);
    if (ChainDepthOfClonePoints(problem, points) > depth) {
      bound_hit = true;
      return;
    }
    Evaluated e;
    e.schedule = ScheduleFromClonePoints(problem, points);
    e.cost = RecomputeCost(problem.op_costs, e.schedule);
    // Over the budget needs no replay (the seeds often are).
    if (!memory_limit.has_value() && e.cost > cost_budget) return;
    if (replay_peak >= 0) {
      e.peak = replay_peak;
    } else {
      absl::StatusOr<SimulationResult> replay =
          ReplaySchedule(problem.graph, e.schedule, problem.memory);
      if (!replay.ok()) return;  // cannot happen for a recompute choice
      e.peak = replay->peak_bytes;
      e.replay = *std::move(replay);
    }
    if (!plain_peak.has_value()) plain_peak = e.peak;  // the first: plain
    if (by_stash) {
      if (e.peak > *plain_peak) return;
      e.stash_bytes = StashBytes(problem.graph, e.schedule, problem.memory);
    }
    if (!best.has_value() || Better(e, *best, memory_limit, by_stash) ||
        (position < best_position &&
         !Better(*best, e, memory_limit, by_stash))) {
      best = std::move(e);
      best_position = position;
    }
  };
  consider(RecomputeChoice{RecomputeSet(problem.num_ops(), 0), {}},
           search.plain_replay_peak(), 0);
  std::vector<size_t> order;
  for (size_t i = 0; i < candidates.size(); ++i) {
    // The search often returns a seed or an earlier start's plan again.
    const bool seen = std::any_of(candidates.begin(), candidates.begin() + i,
                                  [&](const RecomputeChoice& earlier) {
                                    return SameChoice(earlier, candidates[i]);
                                  });
    if (!seen) order.push_back(i);
  }
  const std::vector<int64_t>& lower = search.replay_lower_bounds();
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return lower[a] < lower[b]; });
  for (size_t i : order) {
    // Clearly over the budget (beyond the sums' rounding): a trimmed seed.
    if (!memory_limit.has_value() &&
        search.candidate_costs()[i] > cost_budget * (1 + 1e-6)) {
      continue;
    }
    if (CannotBeat(lower[i], *best, *plain_peak, memory_limit, by_stash)) {
      continue;
    }
    consider(candidates[i], search.replay_peaks()[i], i + 1);
  }
  return *std::move(best);
}

// AUTO's search with chains of at most `depth` recomputed ops: the seeds
// (of chain depths `seed_depths`) and candidates deeper than that are left
// out. `bound_hit`: whether the bound left anything out or turned a move
// down.
absl::StatusOr<Evaluated> SearchAtDepth(
    const PassInput& input, const std::vector<RecomputeChoice>& seeds,
    const std::vector<int32_t>& seed_depths, int32_t depth, bool by_stash,
    const std::vector<int32_t>* copy_classes, bool& bound_hit) {
  const RecomputeProblem& problem = input.problem;
  const RecomputePlanOptions& options = input.options;
  AutoRecompute::Options auto_options;
  auto_options.memory_limit_bytes = options.memory_limit_bytes;
  auto_options.max_overhead_ratio = input.max_overhead_ratio;
  auto_options.max_depth = depth;
  auto_options.effort = options.auto_effort;
  auto_options.interrupted = options.interrupted;
  auto_options.copy_classes = copy_classes;
  if (by_stash) auto_options.first_backward_op = FirstBackwardOp(problem.graph);
  bound_hit = false;
  for (size_t i = 0; i < seeds.size(); ++i) {
    if (seed_depths[i] <= depth) {
      auto_options.seeds.push_back(seeds[i]);
    } else {
      bound_hit = true;
    }
  }
  AutoRecompute pass(std::move(auto_options));
  ASSIGN_OR_RETURN(std::vector<RecomputeChoice> candidates, pass.Run(problem));
  bound_hit |= pass.depth_bound_hit();
  return SelectBest(problem, candidates, pass, depth,
                    options.memory_limit_bytes, input.cost_budget, by_stash,
                    bound_hit);
}

}  // namespace

// AUTO: its search, seeded with the ECHO and CHEN_SQRT plans (and for the
// stash objective, the minimum cuts within the budget), then the best
// candidate by replay. The default depth bound is kDefaultMaxRecomputeDepth,
// raised to the chain depth of the seeds so that AUTO can always fall back on
// them; an explicit bound applies to every candidate. With a memory limit
// and the default bound, the bound must not hide the plans that meet the
// limit: while the best plan misses it and the bound turned a move down,
// the search runs again at twice the depth, as long as that lowers the peak
// (HF GPT-2 with its dropout masks held, at 131 MiB, needs 32).
absl::StatusOr<Evaluated> RunAuto(const PassInput& input) {
  const RecomputeProblem& problem = input.problem;
  const RecomputePlanOptions& options = input.options;
  ASSIGN_OR_RETURN(RecomputeSet echo_seed, EchoRecompute().Run(problem));
  ASSIGN_OR_RETURN(RecomputeSet chen_seed, ChenSqrtRecompute().Run(problem));
  std::vector<RecomputeChoice> seeds = {
      RecomputeChoice{std::move(echo_seed), {}},
      RecomputeChoice{std::move(chen_seed), {}}};
  const std::optional<int64_t>& limit = options.memory_limit_bytes;
  const bool by_stash =
      options.objective == RecomputeObjective::kStashBytes && !limit;
  if (by_stash) {
    // The exact cut within the budget (each op re-run once, peaks aside):
    // the search starts from it too and spends what budget it leaves.
    ASSIGN_OR_RETURN(
        StashCutPlans cuts,
        StashCutsWithinBudget(problem, problem.eligible,
                              FirstBackwardOp(problem.graph), input.cost_budget,
                              options.interrupted));
    for (RecomputeSet& recompute : cuts.plans) {
      seeds.push_back(RecomputeChoice{std::move(recompute), {}});
    }
  }
  std::vector<int32_t> seed_depths;
  std::vector<PointList> points;  // allocated once
  for (const RecomputeChoice& seed : seeds) {
    seed_depths.push_back(RecomputeChainDepth(problem, seed, points));
  }
  int32_t depth = options.max_recompute_depth;
  if (depth == 0) {
    depth = kDefaultMaxRecomputeDepth;
    for (int32_t seed_depth : seed_depths) depth = std::max(depth, seed_depth);
  }
  // Copy classes (15-25 ms at 100k ops), one set for every depth's search,
  // within an overhead budget only: under a memory limit the greedy stops at
  // the limit, and on a captured 82k-op Transformer CheckFit took 10-37%
  // longer with them (more state updates than the scans they save).
  std::vector<int32_t> copy_classes;
  if (SearchesInBatches(problem) && !limit.has_value()) {
    copy_classes = CopyClasses(problem);
  }
  const std::vector<int32_t>* copy_classes_ptr =
      copy_classes.empty() ? nullptr : &copy_classes;
  bool bound_hit = false;
  ASSIGN_OR_RETURN(Evaluated best,
                   SearchAtDepth(input, seeds, seed_depths, depth, by_stash,
                                 copy_classes_ptr, bound_hit));
  if (!limit.has_value() || options.max_recompute_depth != 0) return best;
  // No chain is longer than the graph.
  const int32_t deepest =
      std::min<int64_t>(kMaxRecomputeDepth, problem.num_ops());
  while (best.peak > *limit && bound_hit && depth < deepest) {
    depth =
        static_cast<int32_t>(std::min<int64_t>(2 * int64_t{depth}, deepest));
    ASSIGN_OR_RETURN(Evaluated deeper,
                     SearchAtDepth(input, seeds, seed_depths, depth, by_stash,
                                   copy_classes_ptr, bound_hit));
    const bool lower = deeper.peak < best.peak;
    if (Better(deeper, best, limit, by_stash)) best = std::move(deeper);
    if (!lower) break;
  }
  return best;
}

namespace {

class AutoPass final : public RecomputePass {
 public:
  RecomputePolicy policy() const override { return RecomputePolicy::kAuto; }
  absl::StatusOr<PassOutput> Run(const PassInput& input) const override {
    ASSIGN_OR_RETURN(Evaluated best, RunAuto(input));
    PassOutput output;
    output.schedule = std::move(best.schedule);
    output.replay = std::move(best.replay);
    return output;
  }
};

}  // namespace

std::unique_ptr<RecomputePass> MakeAutoPass() {
  return std::make_unique<AutoPass>();
}

}  // namespace echo::planner
