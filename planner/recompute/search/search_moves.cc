#include "planner/recompute/search/search_moves.h"

#include <algorithm>
#include <functional>
#include <utility>

namespace echo::planner {

bool SearchesInBatches(const RecomputeProblem& problem) {
  // Graphs up to this many ops get one move per scan.
  constexpr int32_t kExactGraphOps = 600;
  return problem.num_ops() > kExactGraphOps;
}

bool ApplyStep(const SearchStep& step, RecomputeState& state) {
  if (step.point == kNoOp) {
    if (state.Contains(step.op)) return false;
    state.Set(step.op, true);
    return true;
  }
  const std::vector<OpIndex>& splits = state.splits(step.op);
  if (std::binary_search(splits.begin(), splits.end(), step.point)) {
    return false;
  }
  state.AddSplit(step.op, step.point);
  return true;
}

bool RemoveStep(const SearchStep& step, RecomputeState& state) {
  if (step.point == kNoOp) {
    if (!state.Contains(step.op)) return false;
    state.Set(step.op, false);
    return true;
  }
  const std::vector<OpIndex>& splits = state.splits(step.op);
  if (!std::binary_search(splits.begin(), splits.end(), step.point)) {
    return false;
  }
  state.RemoveSplit(step.op, step.point);
  return true;
}

void RestoreStep(const SearchStep& step, RecomputeState& state) {
  if (step.point == kNoOp) {
    state.Set(step.op, true);
  } else {
    state.AddSplit(step.op, step.point);
  }
}

MoveFinder::MoveFinder(const RecomputeProblem& problem, RecomputeState& state,
                       int32_t max_depth,
                       const std::vector<int32_t>* copy_classes)
    : problem_(problem),
      state_(state),
      max_depth_(max_depth),
      batch_(SearchesInBatches(problem)),
      banned_(problem.num_ops(), 0),
      seen_(problem.num_ops(), 0) {
  const double mean_cost =
      problem.num_ops() > 0 ? problem.baseline_cost / problem.num_ops() : 0;
  cost_floor_ = std::max(1e-12, 1e-9 * mean_cost);
  // Large graphs: evaluate more candidates per scan, so that scans (each
  // O(tensors)) stay few as the number of moves grows with the graph.
  exact_moves_ =
      batch_ ? std::clamp<size_t>(problem.num_ops() / 1000, 48, 1024) : 256;
  // Only an eligible producer's output can make a move (RankedMoves).
  // Kept in arrays of their own, with their static scores: every scan
  // reads them all, and a Tensor spans several cache lines.
  for (TensorIndex t = 0; t < problem.graph.num_tensors(); ++t) {
    const OpIndex p = problem.graph.tensor(t).producer;
    if (p != kNoOp && problem.tensor_bytes[t] > 0 && problem.eligible[p]) {
      movable_.push_back(t);
      movable_producer_.push_back(p);
      movable_per_cost_.push_back(static_cast<double>(problem.tensor_bytes[t]) /
                                  std::max(problem.op_costs[p], cost_floor_));
    }
  }
  if (batch_ && copy_classes != nullptr) {
    copy_classes_ = copy_classes;
    const int32_t num_classes =
        copy_classes_->empty() ? 0
                               : 1 + *std::max_element(copy_classes_->begin(),
                                                       copy_classes_->end());
    group_stamp_of_.assign(2 * static_cast<size_t>(num_classes), 0);
    group_of_.assign(2 * static_cast<size_t>(num_classes), 0);
  }
}

bool MoveFinder::MinimizesStash(const SearchGoal& goal) const {
  return goal.minimize_stash && !goal.limit_mode && state_.tracks_stash();
}

int64_t MoveFinder::Measure(const SearchGoal& goal, int32_t slot) const {
  return MinimizesStash(goal) ? state_.StashBytes() : state_.SlotValue(slot);
}

bool MoveFinder::DepthAllows(OpIndex op) {
  const bool allows = state_.ChainDepthIfAdded(op, max_depth_) <= max_depth_;
  depth_bound_hit_ |= !allows;
  return allows;
}

bool MoveFinder::Addable(OpIndex p) const {
  return p != kNoOp && problem_.eligible[p] && !state_.Contains(p) &&
         !banned_[p];
}

bool MoveFinder::SplittableAt(OpIndex op, OpIndex point) const {
  if (!problem_.eligible[op] || banned_[op]) return false;
  std::vector<OpIndex>& needs = needs_scratch_;
  state_.NeedPointsInto(op, needs);
  return std::binary_search(needs.begin(), needs.end(), point);
}

// The first need point of `op` whose clone would start after `slot` and is
// not a clone point yet; kNoOp when none.
OpIndex MoveFinder::SplitPointAfter(OpIndex op, int32_t slot) const {
  std::vector<OpIndex>& needs = needs_scratch_;
  state_.NeedPointsInto(op, needs);
  auto it = std::upper_bound(
      needs.begin(), needs.end(), slot,
      [](int32_t s, OpIndex b) { return s < RecomputeState::PreSlot(b); });
  if (it == needs.end()) return kNoOp;
  const PointList& points = state_.clone_points(op);
  if (std::binary_search(points.begin(), points.end(), *it)) return kNoOp;
  return *it;
}

double MoveFinder::Score(const SearchGoal& goal, int64_t slot_value,
                         int64_t reduction, double cost) const {
  const double effective_cost = std::max(cost, cost_floor_);
  if (goal.limit_mode) {
    const int64_t excess = slot_value - goal.limit;
    return static_cast<double>(std::min(reduction, excess)) / effective_cost;
  }
  return static_cast<double>(reduction) / effective_cost;
}

// Evaluates `first` and its extensions level by level: the producers (to
// add) or the clones (to split at the same point) of the inputs that the
// move newly stretches over the slot. Keeps the best prefix in `best`.
void MoveFinder::EvaluateChain(const SearchGoal& goal, int32_t slot,
                               const SearchStep& first, SearchMove& best) {
  const Graph& graph = problem_.graph;
  const int64_t peak = state_.Peak();
  const int64_t slot_value = Measure(goal, slot);
  const double base_cost = state_.cost();
  std::vector<SearchStep> applied;
  std::vector<int32_t> applied_origins;
  std::vector<StepOrigin> origins = {StepOrigin{first.op, -1, -1}};
  std::vector<SearchStep> level = {first};
  std::vector<int32_t> level_origins = {0};
  const int32_t max_levels = std::min(max_depth_, 8);
  auto covers = [&](TensorIndex t) { return state_.Covers(t, slot); };
  struct Watched {
    TensorIndex tensor;
    int32_t parent;  // into origins
    int32_t input;
  };
  for (int32_t depth = 0; depth < max_levels && !level.empty(); ++depth) {
    std::vector<Watched> watched;
    for (size_t i = 0; i < level.size(); ++i) {
      const std::vector<TensorIndex>& inputs = graph.op(level[i].op).inputs;
      for (size_t k = 0; k < inputs.size(); ++k) {
        const TensorIndex t = inputs[k];
        if (problem_.tensor_bytes[t] > 0 && !covers(t)) {
          watched.push_back({t, level_origins[i], static_cast<int32_t>(k)});
        }
      }
    }
    bool any = false;
    for (size_t i = 0; i < level.size(); ++i) {
      const SearchStep& step = level[i];
      if (!state_.InPlan(step.op) && !DepthAllows(step.op)) continue;
      if (!ApplyStep(step, state_)) continue;
      applied.push_back(step);
      applied_origins.push_back(level_origins[i]);
      any = true;
    }
    if (!any) break;
    const double cost = state_.cost() - base_cost;
    const int64_t reduction = slot_value - Measure(goal, slot);
    const bool fits = goal.limit_mode || state_.cost() <= goal.budget;
    if (fits && reduction > 0 && state_.Peak() <= peak) {
      const double score = Score(goal, slot_value, reduction, cost);
      if (score > best.score) {
        best.steps = applied;
        best.step_origins = applied_origins;
        best.origins = origins;
        best.cost = cost;
        best.score = score;
      }
    }
    if (!fits) break;
    std::vector<SearchStep> next;
    std::vector<int32_t> next_origins;
    for (const Watched& w : watched) {
      const TensorIndex t = w.tensor;
      if (!covers(t)) continue;
      const OpIndex p = graph.tensor(t).producer;
      if (p == kNoOp) continue;
      SearchStep step;
      if (first.point == kNoOp) {
        if (!Addable(p)) continue;
        step = SearchStep{p, kNoOp};
      } else {
        if (!SplittableAt(p, first.point)) continue;
        step = SearchStep{p, first.point};
      }
      const bool duplicate =
          std::any_of(next.begin(), next.end(), [&](const SearchStep& s) {
            return s.op == step.op && s.point == step.point;
          });
      if (duplicate) continue;
      next.push_back(step);
      next_origins.push_back(static_cast<int32_t>(origins.size()));
      origins.push_back(StepOrigin{p, w.parent, w.input});
    }
    level = std::move(next);
    level_origins = std::move(next_origins);
  }
  for (auto it = applied.rbegin(); it != applied.rend(); ++it) {
    RemoveStep(*it, state_);
  }
}

// The moves that lower the peak slot, best first: candidates whose
// stashed output or idle clone covers the slot, ranked by bytes per cost,
// the top exact_moves_ of them evaluated exactly (with their chains).
std::vector<SearchMove> MoveFinder::RankedMoves(const SearchGoal& goal,
                                                int32_t slot) {
  ++stamp_;
  std::vector<Candidate>& candidates = candidates_;
  candidates.clear();
  for (size_t i = 0; i < movable_.size(); ++i) {
    const TensorIndex t = movable_[i];
    const OpIndex p = movable_producer_[i];
    if (seen_[p] == stamp_) continue;
    // A stashed original can go with its op; any instance can be split.
    const bool addable = state_.original(t).Covers(slot) && Addable(p);
    if (!addable && !state_.Covers(t, slot)) continue;
    seen_[p] = stamp_;
    const double per_cost = movable_per_cost_[i];
    if (addable) candidates.push_back({p, false, per_cost});
    // Or keep the instance that covers the slot only up to its last use
    // before it, and clone again at the next use after it.
    if (problem_.eligible[p] && !banned_[p]) {
      candidates.push_back({p, true, per_cost});
    }
  }
  std::vector<SearchMove> moves;
  if (copy_classes_ != nullptr && !copy_classes_->empty()) {
    EvaluateGroups(goal, slot, moves);
  } else {
    if (candidates.size() > exact_moves_) {
      std::nth_element(candidates.begin(), candidates.begin() + exact_moves_,
                       candidates.end(),
                       [](const Candidate& a, const Candidate& b) {
                         return a.static_score > b.static_score;
                       });
      candidates.resize(exact_moves_);
    }
    for (const Candidate& candidate : candidates) {
      SearchMove move;
      if (Evaluate(goal, slot, candidate, move)) {
        moves.push_back(std::move(move));
      }
    }
  }
  std::stable_sort(moves.begin(), moves.end(),
                   [](const SearchMove& a, const SearchMove& b) {
                     return a.score > b.score;
                   });
  return moves;
}

// The best move starting from `candidate`; false when there is none.
bool MoveFinder::Evaluate(const SearchGoal& goal, int32_t slot,
                          const Candidate& candidate, SearchMove& move) {
  SearchStep first{candidate.op, kNoOp};
  if (candidate.split) {
    first.point = SplitPointAfter(candidate.op, slot);
    if (first.point == kNoOp) return false;
  }
  EvaluateChain(goal, slot, first, move);
  return move.score >= 0 && !move.steps.empty();
}

// Batch mode: the candidates grouped by copy class and kind. The top
// exact_moves_ groups by static score have one member evaluated (the
// middle one: a run of layers differs most at its ends), whose move
// carries the others as copies (the greedy checks each on the whole
// graph).
void MoveFinder::EvaluateGroups(const SearchGoal& goal, int32_t slot,
                                std::vector<SearchMove>& moves) {
  const std::vector<Candidate>& candidates = candidates_;
  ++group_stamp_;
  groups_.clear();
  candidate_group_.resize(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& candidate = candidates[i];
    const size_t key = 2 * static_cast<size_t>((*copy_classes_)[candidate.op]) +
                       candidate.split;
    if (group_stamp_of_[key] != group_stamp_) {
      group_stamp_of_[key] = group_stamp_;
      group_of_[key] = static_cast<int32_t>(groups_.size());
      groups_.push_back(Group{candidate.static_score, 0, 0});
    }
    Group& group = groups_[group_of_[key]];
    group.score = std::max(group.score, candidate.static_score);
    ++group.size;
    candidate_group_[i] = group_of_[key];
  }
  // Members by group, in candidate order.
  int32_t offset = 0;
  for (Group& group : groups_) {
    group.begin = offset;
    offset += group.size;
    group.size = 0;
  }
  group_members_.resize(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    Group& group = groups_[candidate_group_[i]];
    group_members_[group.begin + group.size++] = static_cast<int32_t>(i);
  }
  group_order_.resize(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    group_order_[g] = static_cast<int32_t>(g);
  }
  auto by_score = [&](int32_t a, int32_t b) {
    return std::make_pair(-groups_[a].score, a) <
           std::make_pair(-groups_[b].score, b);
  };
  // The groups of the top exact_moves_ candidates (those the exact path
  // would weigh), one evaluation each.
  if (candidates.size() > exact_moves_) {
    std::vector<double>& scores = score_scratch_;
    scores.clear();
    for (const Candidate& candidate : candidates) {
      scores.push_back(candidate.static_score);
    }
    std::nth_element(scores.begin(), scores.begin() + (exact_moves_ - 1),
                     scores.end(), std::greater<double>());
    const double threshold = scores[exact_moves_ - 1];
    group_order_.erase(
        std::remove_if(group_order_.begin(), group_order_.end(),
                       [&](int32_t g) { return groups_[g].score < threshold; }),
        group_order_.end());
  }
  std::sort(group_order_.begin(), group_order_.end(), by_score);
  if (group_order_.size() > exact_moves_) group_order_.resize(exact_moves_);
  for (int32_t g : group_order_) {
    const Group& group = groups_[g];
    const int32_t chosen = group.begin + group.size / 2;
    SearchMove move;
    if (!Evaluate(goal, slot, candidates[group_members_[chosen]], move)) {
      continue;
    }
    for (int32_t m = group.begin; m < group.begin + group.size; ++m) {
      if (m != chosen) move.copies.push_back(candidates[group_members_[m]].op);
    }
    moves.push_back(std::move(move));
  }
}

// The steps of `move` on `copy`, an op of its first step's copy class:
// each op the move reached, found on the copy along the same inputs and
// of the same class. False when the copy differs or its first step no
// longer applies; later steps that do not apply are left out.
bool MoveFinder::MapMove(const SearchMove& move, OpIndex copy, int32_t slot,
                         std::vector<SearchStep>& steps) {
  const Graph& graph = problem_.graph;
  std::vector<OpIndex>& mapped = mapped_scratch_;
  mapped.resize(move.origins.size());
  mapped[0] = copy;
  for (size_t i = 1; i < move.origins.size(); ++i) {
    const StepOrigin& origin = move.origins[i];
    const std::vector<TensorIndex>& inputs =
        graph.op(mapped[origin.parent]).inputs;
    if (static_cast<size_t>(origin.input) >= inputs.size()) return false;
    const OpIndex p = graph.tensor(inputs[origin.input]).producer;
    if (p == kNoOp || (*copy_classes_)[p] != (*copy_classes_)[origin.op]) {
      return false;
    }
    mapped[i] = p;
  }
  const bool split = move.steps.front().point != kNoOp;
  OpIndex point = kNoOp;
  if (split) {
    if (!problem_.eligible[copy] || banned_[copy]) return false;
    point = SplitPointAfter(copy, slot);
    if (point == kNoOp) return false;
  } else if (!Addable(copy)) {
    return false;
  }
  steps.clear();
  steps.push_back(SearchStep{copy, point});
  for (size_t j = 1; j < move.step_origins.size(); ++j) {
    const OpIndex op = mapped[move.step_origins[j]];
    if (split) {
      if (!SplittableAt(op, point)) continue;
    } else if (!Addable(op)) {
      continue;
    }
    steps.push_back(SearchStep{op, point});
  }
  return true;
}

}  // namespace echo::planner
