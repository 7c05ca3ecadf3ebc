// Incremental memory model of a recompute choice (recompute_problem.h), for
// search.
//
// Each op j has two slots: pre(j) = 2j, where the clones placed before j run,
// and main(j) = 2j + 1, where j itself runs. Each tensor instance is an
// interval of slots holding its bytes (created .. last reader), kept in a
// segment tree with range-add / range-max, so adding or removing an op from
// the set updates the profile in O(changed intervals * log n) and the peak is
// read in O(1). Main slots equal ReplaySchedule's step bytes exactly; a pre
// slot holds every clone placed there at once (plus the largest clone
// workspace), an upper bound of the replay's steps for those clones.
// The chain depths the search bounds are in recompute_chains.cc.
#ifndef ECHO_PLANNER_RECOMPUTE_SEARCH_RECOMPUTE_STATE_H_
#define ECHO_PLANNER_RECOMPUTE_SEARCH_RECOMPUTE_STATE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "planner/recompute/recompute_problem.h"
#include "planner/recompute/search/segment_tree.h"

namespace echo::planner {

class RecomputeState {
 public:
  struct Interval {
    int32_t lo = 0;
    int32_t hi = -1;  // empty when lo > hi
    bool empty() const { return lo > hi; }
    bool Covers(int32_t slot) const { return lo <= slot && slot <= hi; }
    bool operator==(const Interval& other) const {
      return lo == other.lo && hi == other.hi;
    }
  };

  explicit RecomputeState(const RecomputeProblem& problem);

  static int32_t PreSlot(OpIndex o) { return 2 * o; }
  static int32_t MainSlot(OpIndex o) { return 2 * o + 1; }
  static OpIndex OpOfSlot(int32_t slot) { return slot / 2; }

  const RecomputeProblem& problem() const { return problem_; }
  // Replaces the whole plan (rebuilds in O(n + edges)).
  void Assign(const RecomputeChoice& plan);
  RecomputeChoice plan() const { return RecomputeChoice{recompute_, splits_}; }
  // Adds or removes one op (ops that cannot be cloned are never added).
  void Set(OpIndex op, bool in_set);
  // Requests or withdraws a clone of `op` at need point `point` (also for ops
  // outside the set: their original then serves the uses before it).
  void AddSplit(OpIndex op, OpIndex point);
  void RemoveSplit(OpIndex op, OpIndex point);

  bool Contains(OpIndex op) const { return recompute_[op] != 0; }
  // In the set, or cloned at splits.
  bool InPlan(OpIndex op) const { return in_plan_[op] != 0; }
  const RecomputeSet& recompute() const { return recompute_; }
  const PointList& clone_points(OpIndex op) const { return clone_points_[op]; }
  const std::vector<OpIndex>& splits(OpIndex op) const { return splits_[op]; }
  // planner::NeedPointsInto of the current plan, from reader_points_, into
  // `needs` (the search's scratch: no allocation per question).
  void NeedPointsInto(OpIndex op, std::vector<OpIndex>& needs) const;

  int64_t Peak() const { return tree_.Max(); }
  int32_t PeakSlot() const { return tree_.ArgMax(); }
  // The replay's peak when a highest slot is a main slot (exact there, and
  // every slot bounds its steps from above); nullopt when only pre slots
  // are that high, whose clones the replay may run at lower bytes.
  std::optional<int64_t> ReplayPeak() const {
    const int32_t slot = PeakSlot();
    // A main slot as high as the pre slot proves it as well.
    if (slot != MainSlot(OpOfSlot(slot)) && MainSlotMax() < Peak()) {
      return std::nullopt;
    }
    return Peak();
  }
  // The highest main slot: a lower bound of the replay's peak (its steps
  // equal the main slots), equal to it where ReplayPeak() knows it.
  int64_t MainSlotMax() const { return tree_.OddMax(); }
  int64_t SlotValue(int32_t slot) const { return tree_.Value(slot); }
  int64_t RangeMax(int32_t lo, int32_t hi) const {
    return tree_.RangeMax(lo, hi);
  }
  int32_t num_slots() const { return tree_.size(); }
  // Sum of op costs over the clones.
  double cost() const { return cost_; }

  // The original instance of a tensor, and its clones in schedule order.
  const Interval& original(TensorIndex t) const { return original_[t]; }
  // Most tensors have at most one clone: held inline, like PointList.
  using IntervalList = absl::InlinedVector<Interval, 1>;
  const IntervalList& clones(TensorIndex t) const { return clones_[t]; }
  // Whether an instance of `t` (its original or a clone) holds its bytes at
  // `slot`. The search asks it of every tensor per scan: a clone list is
  // read only when the clones' span covers the slot.
  bool Covers(TensorIndex t, int32_t slot) const {
    if (original_[t].Covers(slot)) return true;
    if (!clone_span_[t].Covers(slot)) return false;
    for (const Interval& clone : clones_[t]) {
      if (clone.Covers(slot)) return true;
    }
    return false;
  }

  // The stash objective: from now on, StashBytes() sums the forward-made,
  // non-persistent tensors whose original instance is read at or after
  // `first_backward_op`'s pre slot, where the clones that run before it
  // read (what StashedTensors reports for the schedule).
  void TrackStash(OpIndex first_backward_op);
  bool tracks_stash() const { return stash_from_slot_ >= 0; }
  int64_t StashBytes() const { return stash_bytes_; }
  // The main slot of the last forward op: every stashed tensor is live there.
  int32_t stash_slot() const { return stash_from_slot_ - 1; }

  // Longest chain of set ops through `op` if it were added (1 when alone),
  // counted up to `cap` + 1.
  int32_t ChainDepthIfAdded(OpIndex op, int32_t cap) const;
  // From now on, keeps each plan op's longest chain toward its producers and
  // toward its readers, counted up to `cap` + 1, so that ChainDepthIfAdded
  // with a cap up to `cap` reads its neighbours' instead of walking the
  // chains (the search asks it for every move it weighs; a plan change
  // updates only the ops whose counts change).
  void TrackChains(int32_t cap);

 private:
  void ComputeIntervals(TensorIndex t, Interval& original,
                        IntervalList& clones) const;
  void Refresh(TensorIndex t);
  void AddInterval(const Interval& interval, int64_t bytes);
  void SetClonePoints(OpIndex q, const PointList& points);
  void ComputeClonePoints(OpIndex x, PointList& points) const;
  // Adds `bytes` over `to` and removes them over `from`, touching only the
  // difference when just the end moves.
  void MoveInterval(const Interval& from, const Interval& to, int64_t bytes);
  void UpdateWorkspace(OpIndex at, int64_t workspace, bool insert);
  // Recomputes clone points from `op` up through producers, then the
  // intervals of every tensor they touch.
  void Update(OpIndex op);
  // Ops on the longest chain of set ops through q toward its producers
  // (or its readers), q included, capped at cap + 1.
  int32_t LongestChain(OpIndex q, int32_t cap, bool toward_producers) const;
  // Calls visit(y) for the ops a chain links to x: the producers of its
  // inputs (toward_producers) or the readers of its outputs, through the
  // tensors a clone remakes (the others are read from the original run).
  template <typename Visit>
  void ForEachChainNeighbor(OpIndex x, bool toward_producers,
                            const Visit& visit) const;
  // TrackChains: x's count in one direction from its neighbours' (0 outside
  // the plan), and the update of the counts after InPlan changed on the ops
  // in chain_dirty_ (made when a depth is asked, so that the search's many
  // changes between two questions are counted once).
  int32_t TrackedChain(OpIndex x, bool toward_producers) const;
  void UpdateChains() const;

  const RecomputeProblem& problem_;
  const Graph& graph_;
  int32_t end_slot_;
  RecomputeSet recompute_;
  std::vector<std::vector<OpIndex>> splits_;
  // InPlan per op, packed: the chain counts read it for every neighbour.
  std::vector<uint8_t> in_plan_;
  void SyncInPlan(OpIndex op) {
    in_plan_[op] = recompute_[op] != 0 || !splits_[op].empty();
  }
  std::vector<PointList> clone_points_;
  // Per tensor, its readers' clone points, ascending (each reader's once;
  // readers may share a point): what ComputeIntervals and NeedPointsInto
  // read instead of every reader's list. A tensor read by thousands of ops
  // (an attention memory, by each decoder step) made each refresh a cache
  // miss per reader, and AUTO superlinear in the sequence length.
  std::vector<PointList> reader_points_;
  // Moves q's clone points from `from` to `to` in its inputs' lists.
  void MoveReaderPoints(OpIndex q, const PointList& from, const PointList& to);
  // Rebuilds reader_points_ from clone_points_ (Assign).
  void BuildReaderPoints();
  // q's inputs, each once (an op may read a tensor twice).
  template <typename Visit>
  void ForEachDistinctInput(OpIndex q, const Visit& visit) const;
  mutable std::vector<uint32_t> input_mark_;
  mutable uint32_t input_stamp_ = 0;
  std::vector<Interval> original_;
  std::vector<IntervalList> clones_;
  // Per tensor, from its first clone's start to its last clone's end.
  std::vector<Interval> clone_span_;
  void SetClones(TensorIndex t, const IntervalList& clones);
  int64_t StashContribution(TensorIndex t, const Interval& original) const;

  // Stash tracking (TrackStash): -1 when off.
  int32_t stash_from_slot_ = -1;
  int64_t stash_bytes_ = 0;
  // Tensors whose interval never changes (persistent, graph outputs).
  std::vector<uint8_t> fixed_;
  MaxSegmentTree tree_;
  double cost_ = 0;
  // Clone workspaces per pre slot (op index), only the nonzero ones,
  // ascending (mostly one: held inline).
  absl::flat_hash_map<OpIndex, absl::InlinedVector<int64_t, 2>>
      clone_workspace_;
  // Scratch.
  std::vector<uint32_t> mark_;
  uint32_t stamp_ = 0;
  mutable std::vector<int32_t> memo_;
  mutable std::vector<uint32_t> memo_stamp_;
  mutable uint32_t memo_generation_ = 0;
  // LongestChain's walk, kept between calls so that it allocates once.
  mutable std::vector<OpIndex> walk_frontier_, walk_next_, walk_reached_;
  mutable std::vector<int32_t> uses_;
  // TrackChains (0: off): per op, the longest chain of plan ops ending at it
  // from its producers' side, and from its readers' side.
  int32_t chain_cap_ = 0;
  mutable std::vector<int32_t> chain_up_, chain_down_;
  mutable std::vector<uint32_t> chain_mark_;
  mutable uint32_t chain_stamp_ = 0;
  // UpdateChains, per op it takes: whether its count must be recounted from
  // every neighbour, else the count a neighbour's rise gives it (an op read
  // by every decoder step has thousands of neighbours).
  mutable std::vector<uint8_t> chain_recount_;
  mutable std::vector<int32_t> chain_floor_;
  mutable std::vector<OpIndex> chain_heap_, chain_dirty_;
  IntervalList clones_scratch_;
  mutable std::vector<OpIndex> needs_scratch_;  // ComputeClonePoints'
  std::vector<OpIndex> pending_scratch_, changed_scratch_;
  PointList points_scratch_;
  std::vector<int64_t> slot_scratch_;  // Assign's per-slot sums
};

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_SEARCH_RECOMPUTE_STATE_H_
