#include "planner/recompute/search/recompute_repair.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "planner/recompute/search/recompute_search.h"

namespace echo::planner {
namespace {

bool CoversSlot(const RecomputeState& state, TensorIndex t, int32_t slot) {
  if (state.original(t).Covers(slot)) return true;
  for (const RecomputeState::Interval& clone : state.clones(t)) {
    if (clone.Covers(slot)) return true;
  }
  return false;
}

// The plan items that may lower `slot`: those of ops reading or making a
// tensor live there (a clone, or an input kept alive for one).
std::vector<SearchStep> ItemsNear(const RecomputeState& state, int32_t slot) {
  const Graph& graph = state.problem().graph;
  std::vector<SearchStep> items;
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    if (!state.InPlan(o)) continue;
    const Op& op = graph.op(o);
    auto live = [&](TensorIndex t) { return CoversSlot(state, t, slot); };
    if (std::none_of(op.inputs.begin(), op.inputs.end(), live) &&
        std::none_of(op.outputs.begin(), op.outputs.end(), live)) {
      continue;
    }
    if (state.Contains(o)) items.push_back(SearchStep{o, kNoOp});
    for (OpIndex point : state.splits(o)) {
      items.push_back(SearchStep{o, point});
    }
  }
  return items;
}

}  // namespace

bool RepairPeak(int64_t limit, RecomputeState& state) {
  while (state.Peak() > limit) {
    const int64_t peak = state.Peak();
    const int32_t slot = state.PeakSlot();
    const int64_t stash = state.StashBytes();
    std::optional<SearchStep> best;
    double best_score = 0;
    for (const SearchStep& item : ItemsNear(state, slot)) {
      if (!RemoveStep(item, state)) continue;
      const int64_t reduction = peak - state.SlotValue(slot);
      if (reduction > 0 && state.Peak() <= peak) {
        // Past the limit a reduction is worth nothing.
        const double score =
            static_cast<double>(state.StashBytes() - stash) /
            static_cast<double>(std::min(reduction, peak - limit));
        if (!best.has_value() || score < best_score) {
          best = item;
          best_score = score;
        }
      }
      RestoreStep(item, state);
    }
    if (!best.has_value()) return false;
    RemoveStep(*best, state);
  }
  return true;
}

}  // namespace echo::planner
