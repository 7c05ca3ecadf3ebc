// The moves of AUTO's search over recompute choices and how they are found:
// the candidates at a slot, each weighed exactly with its chain of inputs,
// and in batch mode grouped by copy class (copy_classes.h), one evaluated
// per group and mapped onto the others.
#ifndef ECHO_PLANNER_RECOMPUTE_SEARCH_SEARCH_MOVES_H_
#define ECHO_PLANNER_RECOMPUTE_SEARCH_SEARCH_MOVES_H_

#include <cstdint>
#include <vector>

#include "planner/recompute/recompute_problem.h"
#include "planner/recompute/search/recompute_state.h"

namespace echo::planner {

// What the greedy aims at: a memory limit, or the lowest peak within a cost
// budget (total clone cost).
struct SearchGoal {
  bool limit_mode = true;
  int64_t limit = 0;
  double budget = 0;
  // Overhead mode, with the state tracking the stash (TrackStash): lowers
  // the stash instead of the peak, never raising the global peak.
  bool minimize_stash = false;
};

// Whether the search applies several moves per scan on `problem` (graphs
// over 600 ops), and so uses copy classes.
bool SearchesInBatches(const RecomputeProblem& problem);

// One change to a plan: add `op` to the set (point == kNoOp), or request a
// clone of `op` at need point `point`.
struct SearchStep {
  OpIndex op = kNoOp;
  OpIndex point = kNoOp;
};

// Puts a step into `state`; false when it is there already.
bool ApplyStep(const SearchStep& step, RecomputeState& state);
// Takes a plan item out of `state` (false when it is not in); RestoreStep
// puts it back.
bool RemoveStep(const SearchStep& step, RecomputeState& state);
void RestoreStep(const SearchStep& step, RecomputeState& state);

// Where a move's step came from: the first step (parent -1), or the
// producer of input `input` of the op of step `parent` (an index into the
// move's origins).
struct StepOrigin {
  OpIndex op = kNoOp;
  int32_t parent = -1;
  int32_t input = -1;
};

struct SearchMove {
  std::vector<SearchStep> steps;
  double cost = 0;  // added clone cost
  double score = -1;
  // Every op the evaluation reached, from the first (origins[0]), and per
  // step its index there: enough to find the same move on a copy.
  std::vector<StepOrigin> origins;
  std::vector<int32_t> step_origins;
  // Ops of the first step's copy class to try the move on (batch mode).
  std::vector<OpIndex> copies;
};

// Finds the moves that lower a slot of `state`, which it reads and changes
// only to weigh a move, restoring it after.
class MoveFinder {
 public:
  // Chains of recomputed ops stay within `max_depth`. In batch mode, given
  // `copy_classes` (CopyClasses of `problem`, outliving the finder), moves
  // are weighed once per class and carry the class's other ops as copies.
  MoveFinder(const RecomputeProblem& problem, RecomputeState& state,
             int32_t max_depth, const std::vector<int32_t>* copy_classes);

  bool batch() const { return batch_; }
  // Costs below this are taken as this (no division by zero).
  double cost_floor() const { return cost_floor_; }
  // A banned op is never added nor split (the local search's re-insertion).
  void SetBanned(OpIndex op, bool banned) { banned_[op] = banned; }

  // The moves that lower `slot` (the stash when minimizing it), best first,
  // never raising the global peak and, in overhead mode, within the budget.
  std::vector<SearchMove> RankedMoves(const SearchGoal& goal, int32_t slot);
  // The steps of `move` on `copy`, an op of its first step's copy class.
  // False when the copy differs or its first step no longer applies; later
  // steps that do not apply are left out.
  bool MapMove(const SearchMove& move, OpIndex copy, int32_t slot,
               std::vector<SearchStep>& steps);

  // What a move lowers: the bytes at `slot`, or the stash.
  int64_t Measure(const SearchGoal& goal, int32_t slot) const;
  bool MinimizesStash(const SearchGoal& goal) const;
  // Whether adding `op` keeps its recompute chain within the depth bound;
  // a refusal is remembered (depth_bound_hit).
  bool DepthAllows(OpIndex op);
  // Whether the depth bound turned a move down: a deeper bound could then
  // find another plan.
  bool depth_bound_hit() const { return depth_bound_hit_; }

 private:
  struct Candidate {
    OpIndex op;
    bool split;  // its split point is found only if it is evaluated
    double static_score;
  };
  struct Group {
    double score;   // the highest static score of its members
    int32_t begin;  // into group_members_
    int32_t size;
  };

  bool Addable(OpIndex p) const;
  OpIndex SplitPointAfter(OpIndex op, int32_t slot) const;
  // Whether `op` may be split at `point`: eligible, not banned, and
  // `point` one of its need points.
  bool SplittableAt(OpIndex op, OpIndex point) const;
  double Score(const SearchGoal& goal, int64_t slot_value, int64_t reduction,
               double cost) const;
  void EvaluateChain(const SearchGoal& goal, int32_t slot,
                     const SearchStep& first, SearchMove& best);
  bool Evaluate(const SearchGoal& goal, int32_t slot,
                const Candidate& candidate, SearchMove& move);
  void EvaluateGroups(const SearchGoal& goal, int32_t slot,
                      std::vector<SearchMove>& moves);

  const RecomputeProblem& problem_;
  RecomputeState& state_;
  const int32_t max_depth_;
  bool batch_ = false;
  // Candidates weighed exactly per scan.
  size_t exact_moves_ = 256;
  double cost_floor_ = 1e-12;
  bool depth_bound_hit_ = false;
  std::vector<uint8_t> banned_;
  std::vector<uint32_t> seen_;
  uint32_t stamp_ = 0;
  // Tensors with bytes whose producer is eligible, in index order, with
  // their producers and bytes per unit of the producer's cost.
  std::vector<TensorIndex> movable_;
  std::vector<OpIndex> movable_producer_;
  std::vector<double> movable_per_cost_;
  std::vector<Candidate> candidates_;  // RankedMoves' scratch
  // Batch mode: per op its copy class; EvaluateGroups' and MapMove's
  // scratch (group_stamp_of_ and group_of_ per class and kind).
  const std::vector<int32_t>* copy_classes_ = nullptr;
  std::vector<uint32_t> group_stamp_of_;
  std::vector<int32_t> group_of_;
  uint32_t group_stamp_ = 0;
  std::vector<Group> groups_;
  std::vector<int32_t> candidate_group_;
  std::vector<int32_t> group_members_;
  std::vector<int32_t> group_order_;
  std::vector<OpIndex> mapped_scratch_;
  std::vector<double> score_scratch_;
  // NeedPointsInto's, read at once (SplitPointAfter is const).
  mutable std::vector<OpIndex> needs_scratch_;
};

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_SEARCH_SEARCH_MOVES_H_
