#include "planner/recompute/search/recompute_state.h"

#include <algorithm>

namespace echo::planner {

RecomputeState::RecomputeState(const RecomputeProblem& problem)
    : problem_(problem),
      graph_(problem.graph),
      end_slot_(2 * problem.graph.num_ops() - 1) {
  fixed_.assign(graph_.num_tensors(), 0);
  for (TensorIndex t = 0; t < graph_.num_tensors(); ++t) {
    const Tensor& tensor = graph_.tensor(t);
    fixed_[t] = IsPersistentRole(tensor.role) || tensor.is_output;
  }
  mark_.assign(std::max(graph_.num_ops(), graph_.num_tensors()), 0);
  memo_.assign(graph_.num_ops(), 0);
  memo_stamp_.assign(graph_.num_ops(), 0);
  Assign(RecomputeChoice{RecomputeSet(graph_.num_ops(), 0), {}});
}

void RecomputeState::Assign(const RecomputeChoice& plan) {
  const int32_t n = graph_.num_ops();
  recompute_.assign(n, 0);
  for (OpIndex o = 0; o < n; ++o) {
    recompute_[o] = plan.recompute[o] && problem_.can_clone[o];
  }
  if (plan.splits.empty()) {
    for (std::vector<OpIndex>& splits : splits_) splits.clear();
  } else {
    splits_ = plan.splits;
  }
  splits_.resize(n);
  in_plan_.resize(n);
  for (OpIndex o = 0; o < n; ++o) SyncInPlan(o);
  ClonePointsInto(problem_, recompute_, splits_, clone_points_);
  BuildReaderPoints();
  cost_ = 0;
  clone_workspace_.clear();
  // Per slot, the change in live bytes; then their running sums.
  std::vector<int64_t>& delta = slot_scratch_;
  delta.assign(end_slot_ + 2, 0);
  for (OpIndex o = 0; o < n; ++o) {
    const int64_t workspace = graph_.op(o).workspace_bytes;
    delta[MainSlot(o)] += workspace;
    delta[MainSlot(o) + 1] -= workspace;
    for (OpIndex at : clone_points_[o]) {
      cost_ += problem_.op_costs[o];
      if (workspace > 0) clone_workspace_[at].push_back(workspace);
    }
  }
  for (auto& [at, workspaces] : clone_workspace_) {
    std::sort(workspaces.begin(), workspaces.end());
    delta[PreSlot(at)] += workspaces.back();
    delta[PreSlot(at) + 1] -= workspaces.back();
  }
  original_.assign(graph_.num_tensors(), Interval{});
  clones_.resize(graph_.num_tensors());
  clone_span_.resize(graph_.num_tensors());
  for (TensorIndex t = 0; t < graph_.num_tensors(); ++t) {
    ComputeIntervals(t, original_[t], clones_scratch_);
    SetClones(t, clones_scratch_);
    const int64_t bytes = problem_.tensor_bytes[t];
    auto add = [&](const Interval& interval) {
      if (interval.empty()) return;
      delta[interval.lo] += bytes;
      delta[interval.hi + 1] -= bytes;
    };
    add(original_[t]);
    for (const Interval& clone : clones_[t]) add(clone);
  }
  int64_t running = 0;
  for (int32_t slot = 0; slot <= end_slot_; ++slot) {
    running += delta[slot];
    delta[slot] = running;
  }
  delta.pop_back();
  tree_.Assign(delta);
  if (tracks_stash()) TrackStash(OpOfSlot(stash_from_slot_));
  if (chain_cap_ > 0) TrackChains(chain_cap_);
}

void RecomputeState::ComputeIntervals(TensorIndex t, Interval& original,
                                      IntervalList& clones) const {
  const Tensor& tensor = graph_.tensor(t);
  const OpIndex p = tensor.producer;
  const int32_t created = p == kNoOp ? 0 : MainSlot(p);
  clones.resize(0);  // keeps the scratch's storage
  if (fixed_[t]) {
    original = Interval{created, end_slot_};
    return;
  }
  const std::vector<OpIndex>& readers = tensor.readers;
  const PointList* points =
      p != kNoOp && !clone_points_[p].empty() && graph_.RemadeOnRecompute(t)
          ? &clone_points_[p]
          : nullptr;
  // Latest pre slot of a clone that reads t.
  const PointList& reader_points = reader_points_[t];
  const int32_t clone_use =
      reader_points.empty() ? -1 : PreSlot(reader_points.back());
  const int32_t last_read = readers.empty() ? -1 : MainSlot(readers.back());
  if (p == kNoOp) {
    // Graph inputs nobody reads are never allocated.
    original = readers.empty() ? Interval{}
                               : Interval{0, std::max(last_read, clone_use)};
    return;
  }
  if (points == nullptr) {
    original = Interval{created, std::max({created, last_read, clone_use})};
    return;
  }
  // Readers (and readers' clones) before the first clone use the original.
  const OpIndex first = points->front();
  const auto split = std::lower_bound(readers.begin(), readers.end(), first);
  int32_t original_end =
      split == readers.begin() ? created : MainSlot(*(split - 1));
  const auto first_late =
      std::lower_bound(reader_points.begin(), reader_points.end(), first);
  if (first_late != reader_points.begin()) {
    original_end = std::max(original_end, PreSlot(*(first_late - 1)));
  }
  original = Interval{created, original_end};
  if (points->size() == 1) {
    const int32_t clone_created = PreSlot(first);
    clones.push_back(Interval{
        clone_created,
        std::max({clone_created, split == readers.end() ? -1 : last_read,
                  clone_use})});
    return;
  }
  // Several clones: each serves the uses up to the next one.
  std::vector<int32_t>& uses = uses_;
  uses.clear();
  for (auto it = split; it != readers.end(); ++it)
    uses.push_back(MainSlot(*it));
  const size_t main_uses = uses.size();
  for (OpIndex c : reader_points) uses.push_back(PreSlot(c));
  // Two ascending runs.
  std::inplace_merge(uses.begin(), uses.begin() + main_uses, uses.end());
  auto use = uses.begin();
  for (size_t k = 0; k < points->size(); ++k) {
    const int32_t lo = PreSlot((*points)[k]);
    const int32_t next =
        k + 1 < points->size() ? PreSlot((*points)[k + 1]) : end_slot_ + 1;
    int32_t hi = lo;
    while (use != uses.end() && *use < next) hi = std::max(hi, *use++);
    clones.push_back(Interval{lo, hi});
  }
}

void RecomputeState::AddInterval(const Interval& interval, int64_t bytes) {
  if (!interval.empty()) tree_.Add(interval.lo, interval.hi, bytes);
}

void RecomputeState::MoveInterval(const Interval& from, const Interval& to,
                                  int64_t bytes) {
  if (from == to) return;
  if (!from.empty() && !to.empty() && from.lo == to.lo) {
    // Only the end moves: update the difference.
    if (to.hi > from.hi) {
      tree_.Add(from.hi + 1, to.hi, bytes);
    } else {
      tree_.Add(to.hi + 1, from.hi, -bytes);
    }
    return;
  }
  AddInterval(from, -bytes);
  AddInterval(to, bytes);
}

void RecomputeState::Refresh(TensorIndex t) {
  if (fixed_[t]) return;
  Interval original;
  IntervalList& clones = clones_scratch_;
  ComputeIntervals(t, original, clones);
  if (original == original_[t] && clones == clones_[t]) return;
  const int64_t bytes = problem_.tensor_bytes[t];
  if (bytes != 0) {
    MoveInterval(original_[t], original, bytes);
    const IntervalList& old = clones_[t];
    const size_t common = std::min(old.size(), clones.size());
    for (size_t k = 0; k < common; ++k) MoveInterval(old[k], clones[k], bytes);
    for (size_t k = common; k < old.size(); ++k) AddInterval(old[k], -bytes);
    for (size_t k = common; k < clones.size(); ++k)
      AddInterval(clones[k], bytes);
  }
  if (tracks_stash()) {
    stash_bytes_ +=
        StashContribution(t, original) - StashContribution(t, original_[t]);
  }
  original_[t] = original;
  SetClones(t, clones);
}

void RecomputeState::SetClones(TensorIndex t, const IntervalList& clones) {
  clones_[t].assign(clones.begin(), clones.end());
  Interval span;
  for (const Interval& clone : clones) {
    if (clone.empty()) continue;
    span.lo = span.empty() ? clone.lo : std::min(span.lo, clone.lo);
    span.hi = std::max(span.hi, clone.hi);
  }
  clone_span_[t] = span;
}

int64_t RecomputeState::StashContribution(TensorIndex t,
                                          const Interval& original) const {
  const Tensor& tensor = graph_.tensor(t);
  if (tensor.producer == kNoOp || IsPersistentRole(tensor.role) ||
      graph_.op(tensor.producer).phase != Phase::kForward || original.empty() ||
      original.hi < stash_from_slot_) {
    return 0;
  }
  return problem_.tensor_bytes[t];
}

void RecomputeState::TrackStash(OpIndex first_backward_op) {
  stash_from_slot_ = PreSlot(first_backward_op);
  stash_bytes_ = 0;
  for (TensorIndex t = 0; t < graph_.num_tensors(); ++t) {
    stash_bytes_ += StashContribution(t, original_[t]);
  }
}

void RecomputeState::UpdateWorkspace(OpIndex at, int64_t workspace,
                                     bool insert) {
  absl::InlinedVector<int64_t, 2>& workspaces = clone_workspace_[at];
  const int64_t old_max = workspaces.empty() ? 0 : workspaces.back();
  if (insert) {
    workspaces.insert(
        std::upper_bound(workspaces.begin(), workspaces.end(), workspace),
        workspace);
  } else {
    workspaces.erase(
        std::lower_bound(workspaces.begin(), workspaces.end(), workspace));
  }
  const int64_t new_max = workspaces.empty() ? 0 : workspaces.back();
  tree_.Add(PreSlot(at), PreSlot(at), new_max - old_max);
  if (workspaces.empty()) clone_workspace_.erase(at);
}

void RecomputeState::SetClonePoints(OpIndex q, const PointList& points) {
  const int64_t workspace = graph_.op(q).workspace_bytes;
  for (OpIndex at : clone_points_[q]) {
    cost_ -= problem_.op_costs[q];
    if (workspace > 0) UpdateWorkspace(at, workspace, false);
  }
  for (OpIndex at : points) {
    cost_ += problem_.op_costs[q];
    if (workspace > 0) UpdateWorkspace(at, workspace, true);
  }
  MoveReaderPoints(q, clone_points_[q], points);
  clone_points_[q].assign(points.begin(), points.end());
}

template <typename Visit>
void RecomputeState::ForEachDistinctInput(OpIndex q, const Visit& visit) const {
  if (++input_stamp_ == 0) {  // wrapped: no stale mark may match
    std::fill(input_mark_.begin(), input_mark_.end(), 0);
    input_stamp_ = 1;
  }
  for (TensorIndex t : graph_.op(q).inputs) {
    if (input_mark_[t] == input_stamp_) continue;
    input_mark_[t] = input_stamp_;
    visit(t);
  }
}

void RecomputeState::MoveReaderPoints(OpIndex q, const PointList& from,
                                      const PointList& to) {
  if (from == to) return;
  ForEachDistinctInput(q, [&](TensorIndex t) {
    PointList& list = reader_points_[t];
    for (OpIndex point : from) {
      list.erase(std::lower_bound(list.begin(), list.end(), point));
    }
    for (OpIndex point : to) {
      list.insert(std::upper_bound(list.begin(), list.end(), point), point);
    }
  });
}

void RecomputeState::BuildReaderPoints() {
  reader_points_.resize(graph_.num_tensors());
  input_mark_.resize(graph_.num_tensors(), 0);
  for (PointList& list : reader_points_) list.resize(0);
  for (OpIndex q = 0; q < graph_.num_ops(); ++q) {
    const PointList& points = clone_points_[q];
    if (points.empty()) continue;
    ForEachDistinctInput(q, [&](TensorIndex t) {
      PointList& list = reader_points_[t];
      list.insert(list.end(), points.begin(), points.end());
    });
  }
  // Sorted once at the end: std::inplace_merge per reader allocated a
  // buffer each time.
  for (PointList& list : reader_points_) std::sort(list.begin(), list.end());
}

void RecomputeState::NeedPointsInto(OpIndex op,
                                    std::vector<OpIndex>& needs) const {
  NeedPointsWith(
      problem_, op,
      [&](TensorIndex t, std::vector<OpIndex>& out) {
        out.insert(out.end(), reader_points_[t].begin(),
                   reader_points_[t].end());
      },
      needs);
}

void RecomputeState::Set(OpIndex op, bool in_set) {
  if ((recompute_[op] != 0) == in_set) return;
  if (in_set && !problem_.can_clone[op]) return;
  const bool was_in_plan = InPlan(op);
  recompute_[op] = in_set;
  SyncInPlan(op);
  Update(op);
  if (chain_cap_ > 0 && InPlan(op) != was_in_plan) chain_dirty_.push_back(op);
}

void RecomputeState::AddSplit(OpIndex op, OpIndex point) {
  if (!problem_.can_clone[op]) return;
  std::vector<OpIndex>& splits = splits_[op];
  auto it = std::lower_bound(splits.begin(), splits.end(), point);
  if (it != splits.end() && *it == point) return;
  const bool was_in_plan = InPlan(op);
  splits.insert(it, point);
  SyncInPlan(op);
  Update(op);
  if (chain_cap_ > 0 && !was_in_plan) chain_dirty_.push_back(op);
}

void RecomputeState::RemoveSplit(OpIndex op, OpIndex point) {
  std::vector<OpIndex>& splits = splits_[op];
  auto it = std::lower_bound(splits.begin(), splits.end(), point);
  if (it == splits.end() || *it != point) return;
  splits.erase(it);
  SyncInPlan(op);
  Update(op);
  if (chain_cap_ > 0 && !InPlan(op)) chain_dirty_.push_back(op);
}

void RecomputeState::ComputeClonePoints(OpIndex x, PointList& points) const {
  points.resize(0);
  if (!splits_[x].empty()) {
    NeedPointsInto(x, needs_scratch_);
    ClonePointsFromNeedsInto(needs_scratch_, &splits_[x], recompute_[x] != 0,
                             points);
    return;
  }
  if (!recompute_[x]) return;
  // One clone, at the first need point.
  const OpIndex first = FirstNeedPointWith(problem_, x, [&](TensorIndex t) {
    return reader_points_[t].empty() ? kNoOp : reader_points_[t].front();
  });
  if (first != kNoOp) points.push_back(first);
}

void RecomputeState::Update(OpIndex op) {
  // Clone points change upward only: from an op to the producers of its
  // inputs. Decide readers (higher indices) first: a max-heap of ops.
  ++stamp_;
  std::vector<OpIndex>& pending = pending_scratch_;
  std::vector<OpIndex>& changed = changed_scratch_;
  PointList& points = points_scratch_;
  pending.assign(1, op);
  changed.clear();
  mark_[op] = stamp_;
  while (!pending.empty()) {
    std::pop_heap(pending.begin(), pending.end());
    const OpIndex x = pending.back();
    pending.pop_back();
    ComputeClonePoints(x, points);
    if (points == clone_points_[x] && x != op) continue;
    SetClonePoints(x, points);
    changed.push_back(x);
    for (TensorIndex t : graph_.op(x).inputs) {
      const OpIndex p = graph_.tensor(t).producer;
      if (p != kNoOp && InPlan(p) && mark_[p] != stamp_) {
        mark_[p] = stamp_;
        pending.push_back(p);
        std::push_heap(pending.begin(), pending.end());
      }
    }
  }
  // Tensors whose intervals may move: outputs and inputs of changed ops.
  ++stamp_;
  for (OpIndex x : changed) {
    for (const std::vector<TensorIndex>* list :
         {&graph_.op(x).outputs, &graph_.op(x).inputs}) {
      for (TensorIndex t : *list) {
        if (mark_[t] == stamp_) continue;
        mark_[t] = stamp_;
        Refresh(t);
      }
    }
  }
}

}  // namespace echo::planner
