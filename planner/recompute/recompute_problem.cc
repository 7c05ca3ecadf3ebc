#include "planner/recompute/recompute_problem.h"

#include <algorithm>

#include "planner/cost_model.h"
#include "planner/recompute/plan.h"

namespace echo::planner {

RecomputeProblem::RecomputeProblem(const Graph& graph,
                                   const std::vector<double>& op_costs,
                                   const MemoryModelOptions& memory)
    : graph(graph), op_costs(op_costs), memory(memory) {
  tensor_bytes.resize(graph.num_tensors());
  split_reader.resize(graph.num_tensors());
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    const Tensor& tensor = graph.tensor(t);
    tensor_bytes[t] = AllocatedBytes(tensor.size_bytes, memory);
    int32_t split = 0;
    while (split < static_cast<int32_t>(tensor.readers.size()) &&
           graph.op(tensor.readers[split]).phase == Phase::kForward) {
      ++split;
    }
    split_reader[t] = split;
  }
  baseline_cost = BaselineCost(graph, op_costs);
  can_clone.assign(graph.num_ops(), 0);
  eligible.assign(graph.num_ops(), 0);
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    const Op& op = graph.op(o);
    bool clonable = op.recomputable && !op.outputs.empty();
    for (TensorIndex t : op.outputs) {
      const Tensor& tensor = graph.tensor(t);
      // Outputs a clone does not make stay with the original run.
      if (graph.RemadeOnRecompute(t) &&
          (IsPersistentRole(tensor.role) || tensor.is_output)) {
        clonable = false;
      }
    }
    can_clone[o] = clonable;
    auto hint = op.attributes.find(kRecomputeHintAttribute);
    const bool hinted_stash =
        hint != op.attributes.end() && hint->second == "stash";
    eligible[o] = clonable && op.phase == Phase::kForward && !hinted_stash;
  }
}

OpIndex FirstBackwardOp(const Graph& graph) {
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    if (graph.op(o).phase != Phase::kForward) return o;
  }
  return kNoOp;
}

void NeedPointsInto(const RecomputeProblem& problem,
                    const std::vector<PointList>& points, OpIndex op,
                    std::vector<OpIndex>& needs) {
  NeedPointsWith(
      problem, op,
      [&](TensorIndex t, std::vector<OpIndex>& out) {
        for (OpIndex r : problem.graph.tensor(t).readers) {
          out.insert(out.end(), points[r].begin(), points[r].end());
        }
      },
      needs);
}

void ClonePointsFromNeedsInto(const std::vector<OpIndex>& needs,
                              const std::vector<OpIndex>* splits, bool in_set,
                              PointList& points) {
  points.resize(0);
  if (needs.empty()) return;
  if (in_set) points.push_back(needs.front());
  if (splits == nullptr) return;
  for (OpIndex b : *splits) {
    if ((!in_set || b > needs.front()) &&
        std::binary_search(needs.begin(), needs.end(), b)) {
      points.push_back(b);
    }
  }
}

void ClonePointsInto(const RecomputeProblem& problem,
                     const RecomputeSet& recompute,
                     const std::vector<std::vector<OpIndex>>& splits,
                     std::vector<PointList>& points) {
  const Graph& graph = problem.graph;
  points.resize(graph.num_ops());
  std::vector<OpIndex> needs;
  // Readers come after producers: decide readers first.
  for (OpIndex q = graph.num_ops() - 1; q >= 0; --q) {
    points[q].resize(0);
    const std::vector<OpIndex>* op_splits =
        splits.empty() || splits[q].empty() ? nullptr : &splits[q];
    if (!problem.can_clone[q] || (!recompute[q] && op_splits == nullptr)) {
      continue;
    }
    if (op_splits == nullptr) {
      // In the set with no splits: one clone, at the first need point.
      const OpIndex first = FirstNeedPointWith(problem, q, [&](TensorIndex t) {
        OpIndex reader_first = kNoOp;
        for (OpIndex r : graph.tensor(t).readers) {
          if (!points[r].empty() &&
              (reader_first == kNoOp || points[r].front() < reader_first)) {
            reader_first = points[r].front();
          }
        }
        return reader_first;
      });
      if (first != kNoOp) points[q].push_back(first);
      continue;
    }
    NeedPointsInto(problem, points, q, needs);
    ClonePointsFromNeedsInto(needs, op_splits, recompute[q] != 0, points[q]);
  }
}

std::vector<PointList> ClonePoints(const RecomputeProblem& problem,
                                   const RecomputeChoice& plan) {
  std::vector<PointList> points;
  ClonePointsInto(problem, plan.recompute, plan.splits, points);
  return points;
}

bool SameChoice(const RecomputeChoice& a, const RecomputeChoice& b) {
  if (a.recompute != b.recompute) return false;
  if (a.splits.size() == b.splits.size()) return a.splits == b.splits;
  const auto none = [](const std::vector<std::vector<OpIndex>>& splits) {
    return std::all_of(splits.begin(), splits.end(),
                       [](const std::vector<OpIndex>& s) { return s.empty(); });
  };
  return none(a.splits) && none(b.splits);
}

Schedule ScheduleFromRecomputeChoice(const RecomputeProblem& problem,
                                     const RecomputeChoice& plan) {
  return ScheduleFromClonePoints(problem, ClonePoints(problem, plan));
}

Schedule ScheduleFromClonePoints(const RecomputeProblem& problem,
                                 const std::vector<PointList>& points) {
  const Graph& graph = problem.graph;
  // Clones grouped by the op they precede; q ascending keeps graph order.
  std::vector<int32_t> count(graph.num_ops() + 1, 0);
  for (OpIndex q = 0; q < graph.num_ops(); ++q) {
    for (OpIndex b : points[q]) ++count[b + 1];
  }
  for (OpIndex o = 0; o < graph.num_ops(); ++o) count[o + 1] += count[o];
  std::vector<OpIndex> clones(count[graph.num_ops()]);
  std::vector<int32_t> fill(count.begin(), count.end() - 1);
  for (OpIndex q = 0; q < graph.num_ops(); ++q) {
    for (OpIndex b : points[q]) clones[fill[b]++] = q;
  }
  Schedule schedule;
  schedule.reserve(graph.num_ops() + clones.size());
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    for (int32_t i = count[o]; i < count[o + 1]; ++i) {
      schedule.push_back({clones[i], true});
    }
    schedule.push_back({o, false});
  }
  return schedule;
}

int32_t RecomputeChainDepth(const RecomputeProblem& problem,
                            const RecomputeChoice& plan,
                            std::vector<PointList>& points) {
  ClonePointsInto(problem, plan.recompute, plan.splits, points);
  return ChainDepthOfClonePoints(problem, points);
}

int32_t ChainDepthOfClonePoints(const RecomputeProblem& problem,
                                const std::vector<PointList>& points) {
  const Graph& graph = problem.graph;
  std::vector<int32_t> depth(graph.num_ops(), 0);
  int32_t deepest = 0;
  for (OpIndex q = 0; q < graph.num_ops(); ++q) {
    if (points[q].empty()) continue;
    int32_t d = 0;
    for (TensorIndex t : graph.op(q).inputs) {
      const OpIndex p = graph.tensor(t).producer;
      // Outputs a clone does not make are read from the original run.
      if (p != kNoOp && graph.RemadeOnRecompute(t)) d = std::max(d, depth[p]);
    }
    depth[q] = d + 1;
    deepest = std::max(deepest, depth[q]);
  }
  return deepest;
}

double RecomputeCost(const RecomputeProblem& problem,
                     const RecomputeChoice& plan) {
  const std::vector<PointList> points = ClonePoints(problem, plan);
  double cost = 0;
  for (OpIndex q = 0; q < problem.num_ops(); ++q) {
    cost += problem.op_costs[q] * static_cast<double>(points[q].size());
  }
  return cost;
}

double RecomputeCost(const std::vector<double>& op_costs,
                     const Schedule& schedule) {
  double cost = 0;
  for (const Execution& e : schedule) {
    if (e.recompute) cost += op_costs[e.op];
  }
  return cost;
}

RecomputeSet RecomputeSetOfSchedule(const Graph& graph,
                                    const Schedule& schedule) {
  RecomputeSet recompute(graph.num_ops(), 0);
  for (const Execution& e : schedule) {
    if (e.recompute) recompute[e.op] = 1;
  }
  return recompute;
}

}  // namespace echo::planner
