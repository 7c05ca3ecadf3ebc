// RecomputeState's chains of recomputed ops: the depth a move would give
// a chain (ChainDepthIfAdded), by walking the plan or from the counts it
// keeps per op once asked to (TrackChains), brought up to date lazily.
#include <algorithm>

#include "planner/recompute/search/recompute_state.h"

namespace echo::planner {

template <typename Visit>
void RecomputeState::ForEachChainNeighbor(OpIndex x, bool toward_producers,
                                          const Visit& visit) const {
  if (toward_producers) {
    for (TensorIndex t : graph_.op(x).inputs) {
      const OpIndex p = graph_.tensor(t).producer;
      if (p != kNoOp && graph_.RemadeOnRecompute(t)) visit(p);
    }
  } else {
    for (TensorIndex t : graph_.op(x).outputs) {
      if (!graph_.RemadeOnRecompute(t)) continue;
      for (OpIndex r : graph_.tensor(t).readers) visit(r);
    }
  }
}

int32_t RecomputeState::LongestChain(OpIndex q, int32_t cap,
                                     bool toward_producers) const {
  // Longest chain of set ops through q in one direction, counting q, capped
  // at cap + 1: explore at most `cap` levels, then a DP over the reached ops
  // from the far end.
  const auto for_each_neighbor = [&](OpIndex x, const auto& visit) {
    ForEachChainNeighbor(x, toward_producers, visit);
  };
  ++memo_generation_;
  std::vector<OpIndex>& frontier = walk_frontier_;
  std::vector<OpIndex>& next = walk_next_;
  std::vector<OpIndex>& reached = walk_reached_;
  frontier.assign(1, q);
  reached.assign(1, q);
  memo_stamp_[q] = memo_generation_;
  for (int32_t level = 0; level < cap && !frontier.empty(); ++level) {
    next.clear();
    for (OpIndex x : frontier) {
      for_each_neighbor(x, [&](OpIndex y) {
        if (!InPlan(y) || memo_stamp_[y] == memo_generation_) return;
        memo_stamp_[y] = memo_generation_;
        next.push_back(y);
        reached.push_back(y);
      });
    }
    std::swap(frontier, next);
  }
  // Neighbours before the ops that reach them: index order upward, reverse
  // index order downward.
  std::sort(reached.begin(), reached.end());
  if (!toward_producers) std::reverse(reached.begin(), reached.end());
  for (OpIndex x : reached) {
    int32_t best = 0;
    for_each_neighbor(x, [&](OpIndex y) {
      const bool before = toward_producers ? y < x : y > x;
      if (memo_stamp_[y] == memo_generation_ && before) {
        best = std::max(best, memo_[y]);
      }
    });
    memo_[x] = std::min(cap + 1, best + 1);
  }
  return memo_[q];
}

int32_t RecomputeState::ChainDepthIfAdded(OpIndex op, int32_t cap) const {
  if (cap <= chain_cap_) {
    // The tracked counts are exact up to chain_cap_ + 1 >= cap + 1.
    UpdateChains();
    int32_t up = 0;
    int32_t down = 0;
    ForEachChainNeighbor(op, true, [&](OpIndex y) {
      if (InPlan(y)) up = std::max(up, chain_up_[y]);
    });
    ForEachChainNeighbor(op, false, [&](OpIndex y) {
      if (InPlan(y)) down = std::max(down, chain_down_[y]);
    });
    return std::min(
        cap + 1, std::min(cap + 1, up + 1) + std::min(cap + 1, down + 1) - 1);
  }
  // Both walks count `op` itself, whether or not it is in the set.
  return std::min(cap + 1, LongestChain(op, cap, /*toward_producers=*/true) +
                               LongestChain(op, cap, false) - 1);
}

int32_t RecomputeState::TrackedChain(OpIndex x, bool toward_producers) const {
  if (!InPlan(x)) return 0;
  const std::vector<int32_t>& chain =
      toward_producers ? chain_up_ : chain_down_;
  int32_t best = 0;
  ForEachChainNeighbor(x, toward_producers, [&](OpIndex y) {
    if (InPlan(y)) best = std::max(best, chain[y]);
  });
  return std::min(chain_cap_ + 1, best + 1);
}

void RecomputeState::TrackChains(int32_t cap) {
  const int32_t n = graph_.num_ops();
  chain_cap_ = cap;
  chain_up_.assign(n, 0);
  chain_down_.assign(n, 0);
  chain_mark_.assign(n, 0);
  chain_recount_.assign(n, 0);
  chain_floor_.assign(n, 0);
  chain_dirty_.clear();
  // Producers come before readers.
  for (OpIndex x = 0; x < n; ++x) chain_up_[x] = TrackedChain(x, true);
  for (OpIndex x = n - 1; x >= 0; --x) chain_down_[x] = TrackedChain(x, false);
}

void RecomputeState::UpdateChains() const {
  // A count flows away from the changed ops: the up counts to readers
  // (higher indices, taken lowest first), the down counts to producers
  // (highest first), so that each op is taken once, after every neighbour
  // it reads changed. An op taken out and put back since the last query
  // recounts to what it was and moves nothing.
  if (chain_dirty_.empty()) return;
  const int32_t top = chain_cap_ + 1;
  for (const bool up : {true, false}) {
    std::vector<int32_t>& chain = up ? chain_up_ : chain_down_;
    std::vector<OpIndex>& heap = chain_heap_;
    // std::push_heap keeps the largest on top: order by -index upward.
    const auto key = [up](OpIndex o) { return up ? -o : o; };
    const auto before = [&](OpIndex a, OpIndex b) { return key(a) < key(b); };
    ++chain_stamp_;
    heap.clear();
    // Takes x once per pass; `recount`: from every neighbour, else raised
    // to at least `floor`.
    const auto take = [&](OpIndex x, bool recount, int32_t floor) {
      if (chain_mark_[x] != chain_stamp_) {
        chain_mark_[x] = chain_stamp_;
        chain_recount_[x] = 0;
        chain_floor_[x] = 0;
        heap.push_back(x);
        std::push_heap(heap.begin(), heap.end(), before);
      }
      chain_recount_[x] |= recount;
      chain_floor_[x] = std::max(chain_floor_[x], floor);
    };
    for (OpIndex op : chain_dirty_) take(op, true, 0);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), before);
      const OpIndex x = heap.back();
      heap.pop_back();
      const int32_t count = chain_recount_[x]
                                ? TrackedChain(x, up)
                                : std::max(chain[x], chain_floor_[x]);
      const int32_t old = chain[x];
      if (count == old) continue;
      chain[x] = count;
      // A neighbour's count is the max over its side's plus one: a rise
      // raises it; a fall changes it only where x's count made it.
      ForEachChainNeighbor(x, !up, [&](OpIndex y) {
        if (!InPlan(y)) return;
        if (count > old) {
          take(y, false, std::min(top, count + 1));
        } else if (chain[y] <= std::min(top, old + 1)) {
          take(y, true, 0);
        }
      });
    }
  }
  chain_dirty_.clear();
}

}  // namespace echo::planner
