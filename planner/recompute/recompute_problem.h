// The recompute problem as the heuristic policies (ECHO, CHEN_SQRT, AUTO) see
// it, and the plans they produce: a *recompute choice*, the ops whose outputs
// are not stashed but recomputed, and where they run again.
//
// Placement rule: a recomputed op runs once more, right before the first op
// that needs its outputs again in the backward pass: the first non-forward
// reader of an output, or an earlier clone that reads an output (so a chain
// of recomputed ops runs together, in graph order, before the first backward
// op that needs its end). Readers before the clone use the original
// instance, which then dies after its last forward reader; readers from the
// clone on use the clone. Splits (see RecomputeChoice) add later clones, each
// serving the uses up to the next one.
#ifndef ECHO_PLANNER_RECOMPUTE_RECOMPUTE_PROBLEM_H_
#define ECHO_PLANNER_RECOMPUTE_RECOMPUTE_PROBLEM_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "planner/graph.h"
#include "planner/memory_simulator.h"

namespace echo::planner {

// One flag per op.
using RecomputeSet = std::vector<uint8_t>;

// Ascending op indices: where one op's clones run, or where a tensor's
// readers' clones run. Mostly one or two, so held inline: one heap list per
// op of a seed plan was 300k allocations per AUTO plan at 100k ops, and with
// their frees a quarter of its time. Emptied with resize(0), which keeps a
// longer list's heap storage (InlinedVector::clear() frees it).
using PointList = absl::InlinedVector<OpIndex, 2>;

struct RecomputeProblem {
  RecomputeProblem(const Graph& graph, const std::vector<double>& op_costs,
                   const MemoryModelOptions& memory);

  const Graph& graph;
  const std::vector<double>& op_costs;
  MemoryModelOptions memory;
  // Allocated bytes per tensor (after allocator rounding).
  std::vector<int64_t> tensor_bytes;
  // Per op: may be cloned at all (recomputable, has outputs, none of them
  // persistent or a graph output: a clone of those would never be freed).
  std::vector<uint8_t> can_clone;
  // Per op: may be in a heuristic recompute set: can_clone, forward phase and
  // not hinted "stash".
  std::vector<uint8_t> eligible;
  // Per tensor: index into readers of the first non-forward reader (the first
  // reader served by a clone); readers.size() when there is none.
  std::vector<int32_t> split_reader;
  double baseline_cost = 0;

  int32_t num_ops() const { return graph.num_ops(); }
};

// The first op that is not in the forward pass (kNoOp when none): where the
// backward, and the stash, begin.
OpIndex FirstBackwardOp(const Graph& graph);

// A recompute set plus, per op, extra clone points ("splits"): op indices where
// the op runs again instead of keeping its previous instance alive. A split
// only counts where the op's outputs are needed (see ClonePoints); on an op
// outside the set, the original instance serves every use before the first
// split (it stays stashed that long) and clones serve the rest.
struct RecomputeChoice {
  RecomputeSet recompute;
  // Empty, or one sorted list per op.
  std::vector<std::vector<OpIndex>> splits;
};

// Whether two choices are the same plan: the same set and the same splits,
// no splits written either way (empty, or an empty list per op).
bool SameChoice(const RecomputeChoice& a, const RecomputeChoice& b);

// Per op, into `needs` (cleared first, so that a caller over many ops reuses
// one buffer): the points (op indices) that may need its outputs from a
// clone: its outputs' non-forward readers and every clone point (`points`,
// per op) of the ops that read them. Sorted, distinct.
void NeedPointsInto(const RecomputeProblem& problem,
                    const std::vector<PointList>& points, OpIndex op,
                    std::vector<OpIndex>& needs);
// The rule both forms share: `append_reader_points(t, needs)` appends the
// clone points of t's readers, so that a caller holding them per tensor
// (RecomputeState) reads one list instead of one per reader.
template <typename AppendReaderPoints>
void NeedPointsWith(const RecomputeProblem& problem, OpIndex op,
                    AppendReaderPoints&& append_reader_points,
                    std::vector<OpIndex>& needs) {
  const Graph& graph = problem.graph;
  needs.clear();
  for (TensorIndex t : graph.op(op).outputs) {
    if (!graph.RemadeOnRecompute(t)) continue;  // the original serves them
    const std::vector<OpIndex>& readers = graph.tensor(t).readers;
    needs.insert(needs.end(), readers.begin() + problem.split_reader[t],
                 readers.end());
    append_reader_points(t, needs);
  }
  std::sort(needs.begin(), needs.end());
  needs.erase(std::unique(needs.begin(), needs.end()), needs.end());
}

// The first of op's need points (NeedPointsWith's rule), kNoOp if none: the
// one clone point of an op in the set without splits, found without
// gathering and sorting them all. `first_reader_point(t)`: the first clone
// point of t's readers, kNoOp if none.
template <typename FirstReaderPoint>
OpIndex FirstNeedPointWith(const RecomputeProblem& problem, OpIndex op,
                           FirstReaderPoint&& first_reader_point) {
  const Graph& graph = problem.graph;
  OpIndex first = kNoOp;
  auto take = [&first](OpIndex point) {
    if (point != kNoOp && (first == kNoOp || point < first)) first = point;
  };
  for (TensorIndex t : graph.op(op).outputs) {
    if (!graph.RemadeOnRecompute(t)) continue;  // the original serves them
    const std::vector<OpIndex>& readers = graph.tensor(t).readers;  // sorted
    if (problem.split_reader[t] < static_cast<int32_t>(readers.size())) {
      take(readers[problem.split_reader[t]]);
    }
    take(first_reader_point(t));
  }
  return first;
}

// In the set: the first need point plus every split that is a later need
// point. Outside: the splits that are need points.
void ClonePointsFromNeedsInto(const std::vector<OpIndex>& needs,
                              const std::vector<OpIndex>* splits, bool in_set,
                              PointList& points);

// Per op: the sorted original ops before which a clone of it runs
// (ClonePointsFromNeedsInto). Empty when nothing needs it again.
std::vector<PointList> ClonePoints(const RecomputeProblem& problem,
                                   const RecomputeChoice& plan);
// The same into `points`, reusing its lists' storage (splits: empty, or one
// list per op).
void ClonePointsInto(const RecomputeProblem& problem,
                     const RecomputeSet& recompute,
                     const std::vector<std::vector<OpIndex>>& splits,
                     std::vector<PointList>& points);

// The schedule of a plan: before each original op, the clones placed there in
// graph order.
Schedule ScheduleFromRecomputeChoice(const RecomputeProblem& problem,
                                     const RecomputeChoice& plan);
// The same from the plan's ClonePoints.
Schedule ScheduleFromClonePoints(const RecomputeProblem& problem,
                                 const std::vector<PointList>& points);
inline Schedule ScheduleFromRecomputeSet(const RecomputeProblem& problem,
                                         const RecomputeSet& recompute) {
  return ScheduleFromRecomputeChoice(problem, RecomputeChoice{recompute, {}});
}

// Longest chain of recomputed ops (an op reading a recomputed op's output);
// `points`: ClonePointsInto's scratch, so that several plans allocate once.
int32_t RecomputeChainDepth(const RecomputeProblem& problem,
                            const RecomputeChoice& plan,
                            std::vector<PointList>& points);
// The same from the plan's ClonePoints.
int32_t ChainDepthOfClonePoints(const RecomputeProblem& problem,
                                const std::vector<PointList>& points);

// Sum of op costs over the clones of the plan.
double RecomputeCost(const RecomputeProblem& problem,
                     const RecomputeChoice& plan);

// Sum of op costs over a schedule's recomputations.
double RecomputeCost(const std::vector<double>& op_costs,
                     const Schedule& schedule);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_RECOMPUTE_PROBLEM_H_
