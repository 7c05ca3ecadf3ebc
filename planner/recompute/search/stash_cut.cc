#include "planner/recompute/search/stash_cut.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "planner/recompute/search/union_find.h"

namespace echo::planner {
namespace {

constexpr int64_t kInfinite = int64_t{1} << 62;
// Capacities are bytes times a scale of up to 1024, so that rounding the
// recompute prices down loosens the bound by under a byte on graphs of up to
// ~1000 recomputed ops; the scale shrinks on graphs whose tensors add up to
// more than 2^50 bytes, so that no flow, which every path takes through a
// tensor's edge, reaches 2^60 (nor, with kInfinite, int64's range).
constexpr double kMaxCapacityScale = 1024;
constexpr double kCapacityLimit = static_cast<double>(int64_t{1} << 60);
// The bisection's range around lambda0 = plain stash / eligible cost, in
// natural-log units, and its steps.
constexpr double kLogLambdaRange = 24;
constexpr int kBisectionSteps = 18;  // lambda within 0.02% of the breakpoint

// Dinic's maximum flow with an iterative search (forward graphs of LSTMs
// unrolled over time make paths as long as the graph).
class MaxFlow {
 public:
  explicit MaxFlow(int32_t num_nodes) : edges_of_(num_nodes) {}

  void AddEdge(int32_t from, int32_t to, int64_t capacity) {
    edges_of_[from].push_back(static_cast<int32_t>(to_.size()));
    to_.push_back(to);
    capacity_.push_back(capacity);
    edges_of_[to].push_back(static_cast<int32_t>(to_.size()));
    to_.push_back(from);
    capacity_.push_back(0);
  }

  int64_t Run(int32_t source, int32_t sink) {
    int64_t flow = 0;
    const int32_t n = static_cast<int32_t>(edges_of_.size());
    std::vector<int32_t> next(n);
    std::vector<int32_t> path;
    while (Levels(source, sink)) {
      std::fill(next.begin(), next.end(), 0);
      path.clear();
      int32_t u = source;
      while (true) {
        if (u == sink) {
          int64_t pushed = kInfinite;
          for (int32_t e : path) pushed = std::min(pushed, capacity_[e]);
          size_t retreat = path.size();
          for (size_t i = 0; i < path.size(); ++i) {
            capacity_[path[i]] -= pushed;
            capacity_[path[i] ^ 1] += pushed;
            if (capacity_[path[i]] == 0 && retreat == path.size()) retreat = i;
          }
          flow += pushed;
          path.resize(retreat);
          u = path.empty() ? source : to_[path.back()];
          continue;
        }
        bool advanced = false;
        for (; next[u] < static_cast<int32_t>(edges_of_[u].size()); ++next[u]) {
          const int32_t e = edges_of_[u][next[u]];
          if (capacity_[e] > 0 && level_[to_[e]] == level_[u] + 1) {
            path.push_back(e);
            u = to_[e];
            advanced = true;
            break;
          }
        }
        if (advanced) continue;
        level_[u] = -1;  // a dead end in this phase
        if (path.empty()) break;
        path.pop_back();
        u = path.empty() ? source : to_[path.back()];
        ++next[u];
      }
    }
    return flow;
  }

  // After Run: the nodes that can still reach `sink` in the residual graph
  // (the smallest sink side of a minimum cut).
  std::vector<uint8_t> SinkSide(int32_t sink) const {
    std::vector<uint8_t> reached(edges_of_.size(), 0);
    std::deque<int32_t> queue = {sink};
    reached[sink] = 1;
    while (!queue.empty()) {
      const int32_t v = queue.front();
      queue.pop_front();
      // u reaches v when the residual u -> v (the twin of v -> u) is open.
      for (int32_t e : edges_of_[v]) {
        const int32_t u = to_[e];
        if (!reached[u] && capacity_[e ^ 1] > 0) {
          reached[u] = 1;
          queue.push_back(u);
        }
      }
    }
    return reached;
  }

 private:
  bool Levels(int32_t source, int32_t sink) {
    level_.assign(edges_of_.size(), -1);
    std::deque<int32_t> queue = {source};
    level_[source] = 0;
    while (!queue.empty()) {
      const int32_t u = queue.front();
      queue.pop_front();
      for (int32_t e : edges_of_[u]) {
        if (capacity_[e] > 0 && level_[to_[e]] < 0) {
          level_[to_[e]] = level_[u] + 1;
          queue.push_back(to_[e]);
        }
      }
    }
    return level_[sink] >= 0;
  }

  std::vector<std::vector<int32_t>> edges_of_;
  std::vector<int32_t> to_;
  std::vector<int64_t> capacity_;
  std::vector<int32_t> level_;
};

struct Cut {
  RecomputeSet recompute;
  double cost = 0;
  int64_t stash_bytes = 0;
  // The minimum cut in bytes: the stash plus the recompute priced at
  // lambda * cost, rounded down.
  double value = 0;
};

}  // namespace

StashModel::StashModel(const RecomputeProblem& problem,
                       const std::vector<uint8_t>& may_recompute,
                       OpIndex first_backward_op)
    : problem_(problem), graph_(problem.graph) {
  const int32_t num_ops = graph_.num_ops();
  op_node_.assign(num_ops, -1);
  tensor_node_.assign(graph_.num_tensors(), -1);
  int32_t next = 2;
  for (OpIndex o = 0; o < std::min(first_backward_op, num_ops); ++o) {
    const Op& op = graph_.op(o);
    if (op.phase != Phase::kForward) continue;
    if (may_recompute[o]) {
      op_node_[o] = next++;
      eligible_cost_ += problem.op_costs[o];
    }
    for (TensorIndex t : op.outputs) {
      if (!IsPersistentRole(graph_.tensor(t).role)) tensor_node_[t] = next++;
    }
  }
  num_nodes_ = next;
  needed_.assign(graph_.num_tensors(), 0);
  double total_bytes = 0;
  for (TensorIndex t = 0; t < graph_.num_tensors(); ++t) {
    if (tensor_node_[t] < 0) continue;
    // Read from the first backward op on. (A forward op placed there
    // may read the original or a clone, depending on the plan: the model
    // assumes a clone, which can only understate the stash and keeps the
    // bound valid.)
    const std::vector<OpIndex>& readers = graph_.tensor(t).readers;
    needed_[t] = !readers.empty() && readers.back() >= first_backward_op;
    if (needed_[t]) plain_stash_bytes_ += problem.tensor_bytes[t];
    total_bytes += static_cast<double>(problem.tensor_bytes[t]);
  }
  scale_ = std::min(kMaxCapacityScale, kCapacityLimit / (total_bytes + 1));
}

OpIndex StashModel::remaking_op(TensorIndex t) const {
  const OpIndex producer = graph_.tensor(t).producer;
  return producer != kNoOp && op_node_[producer] >= 0 &&
                 graph_.RemadeOnRecompute(t)
             ? producer
             : kNoOp;
}

std::vector<uint8_t> StashModel::Stashed(const RecomputeSet& recompute) const {
  std::vector<uint8_t> needed = needed_;
  for (OpIndex o = 0; o < graph_.num_ops(); ++o) {
    if (op_node_[o] < 0 || !recompute[o]) continue;
    for (TensorIndex t : graph_.op(o).inputs) needed[t] = 1;
  }
  std::vector<uint8_t> stashed(graph_.num_tensors(), 0);
  for (TensorIndex t = 0; t < graph_.num_tensors(); ++t) {
    stashed[t] = tensor_node_[t] >= 0 && needed[t] && !ReMadeBy(recompute, t);
  }
  return stashed;
}

int64_t StashModel::StashBytesOf(const RecomputeSet& recompute) const {
  const std::vector<uint8_t> stashed = Stashed(recompute);
  int64_t bytes = 0;
  for (TensorIndex t = 0; t < graph_.num_tensors(); ++t) {
    if (stashed[t]) bytes += problem_.tensor_bytes[t];
  }
  return bytes;
}

bool StashModel::ReMadeBy(const RecomputeSet& recompute, TensorIndex t) const {
  const OpIndex op = remaking_op(t);
  return op != kNoOp && recompute[op];
}

namespace {

// Rounded down: the cut never overstates a plan's stash or price, and the
// bound stays valid.
int64_t Capacity(const StashModel& model, double bytes) {
  return static_cast<int64_t>(
      std::min(std::floor(bytes * model.scale()), kCapacityLimit));
}

// The network, built once per lambda: source 0, sink 1, a node per modelled
// op ("recomputed" on the sink side) and per modelled tensor ("needed by the
// backward" on the sink side).
Cut SolveCut(const StashModel& model, double lambda) {
  const RecomputeProblem& problem = model.problem();
  const Graph& graph = problem.graph;
  constexpr int32_t kSource = 0, kSink = 1;
  MaxFlow flow(model.num_nodes());
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    const int32_t node = model.tensor_node(t);
    if (node < 0) continue;
    if (model.needed(t)) flow.AddEdge(node, kSink, kInfinite);
    // Stashing t pays its bytes unless its producer re-runs and re-makes it.
    const OpIndex remaking = model.remaking_op(t);
    flow.AddEdge(remaking != kNoOp ? model.op_node(remaking) : kSource, node,
                 Capacity(model, static_cast<double>(problem.tensor_bytes[t])));
  }
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    const int32_t node = model.op_node(o);
    if (node < 0) continue;
    flow.AddEdge(kSource, node, Capacity(model, lambda * problem.op_costs[o]));
    // A recomputed op needs its inputs in the backward.
    for (TensorIndex t : graph.op(o).inputs) {
      if (model.tensor_node(t) >= 0) {
        flow.AddEdge(model.tensor_node(t), node, kInfinite);
      }
    }
  }
  Cut cut;
  cut.value = static_cast<double>(flow.Run(kSource, kSink)) / model.scale();
  const std::vector<uint8_t> sink_side = flow.SinkSide(kSink);
  cut.recompute.assign(graph.num_ops(), 0);
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    if (model.op_node(o) >= 0 && sink_side[model.op_node(o)]) {
      cut.recompute[o] = 1;
      cut.cost += problem.op_costs[o];
    }
  }
  // The sink side's tensors are the ones the backward needs under the
  // cut's set (Stashed's `needed`).
  cut.stash_bytes = model.StashBytesOf(cut.recompute);
  return cut;
}

// Parametric cuts are nested: the next dearer cut adds to the best one
// within the budget groups of ops that share no modelled tensor, so each
// changes the stash on its own (all at about the same bytes per cost, the
// breakpoint's lambda). A greedy knapsack over the groups spends the budget
// the breakpoint left, and a prefix or suffix of one more group what is
// still left; returns `within` plus those.
RecomputeSet FillTowards(const RecomputeProblem& problem,
                         const StashModel& network, const RecomputeSet& within,
                         const RecomputeSet& over, double budget) {
  const Graph& graph = problem.graph;
  UnionFind groups_of(graph.num_ops());
  auto added = [&](OpIndex o) {
    return o != kNoOp && network.modelled_op(o) && over[o] && !within[o];
  };
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    if (!network.modelled(t)) continue;
    const OpIndex producer = graph.tensor(t).producer;
    OpIndex first = added(producer) ? producer : kNoOp;
    for (OpIndex r : graph.tensor(t).readers) {
      if (!added(r)) continue;
      if (first == kNoOp) {
        first = r;
      } else {
        groups_of.Union(r, first);
      }
    }
  }
  struct Group {
    std::vector<OpIndex> ops;
    double cost = 0;
    int64_t delta_bytes = 0;  // stash change when added alone
  };
  absl::flat_hash_map<OpIndex, Group> groups;
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    if (!added(o)) continue;
    Group& group = groups[groups_of.Find(o)];
    group.ops.push_back(o);
    group.cost += problem.op_costs[o];
  }
  const std::vector<uint8_t> stashed = network.Stashed(within);
  RecomputeSet with_group = within;
  std::vector<uint8_t> counted(graph.num_tensors(), 0);
  std::vector<Group> ranked;
  for (auto& [root, group] : groups) {
    for (OpIndex o : group.ops) with_group[o] = 1;
    for (OpIndex o : group.ops) {
      for (TensorIndex t : graph.op(o).outputs) {
        if (stashed[t] && network.ReMadeBy(with_group, t)) {
          group.delta_bytes -= problem.tensor_bytes[t];
        }
      }
      // Inputs the backward now needs and nothing re-makes.
      for (TensorIndex t : graph.op(o).inputs) {
        if (!network.modelled(t) || stashed[t] || counted[t]) continue;
        counted[t] = 1;
        if (!network.ReMadeBy(with_group, t)) {
          group.delta_bytes += problem.tensor_bytes[t];
        }
      }
    }
    for (OpIndex o : group.ops) {
      with_group[o] = within[o];
      for (TensorIndex t : graph.op(o).inputs) counted[t] = 0;
    }
    if (group.delta_bytes < 0) ranked.push_back(std::move(group));
  }
  // Most bytes per cost first, then the cheapest.
  std::sort(ranked.begin(), ranked.end(), [](const Group& a, const Group& b) {
    const double ra = static_cast<double>(-a.delta_bytes) * b.cost;
    const double rb = static_cast<double>(-b.delta_bytes) * a.cost;
    return ra != rb ? ra > rb : a.cost < b.cost;
  });
  RecomputeSet filled = within;
  double cost = 0;
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    if (within[o] && network.modelled_op(o)) cost += problem.op_costs[o];
  }
  std::vector<const Group*> left_out;
  for (const Group& group : ranked) {
    if (cost + group.cost > budget) {
      left_out.push_back(&group);
      continue;
    }
    cost += group.cost;
    for (OpIndex o : group.ops) filled[o] = 1;
  }
  // A group too dear as a whole (e.g. an LSTM layer's steps, linked by
  // their states) may pay in part: its longest prefix or suffix in schedule
  // order that fits, whose boundary tensors the backward then needs. The
  // best of those, by the model's stash, for the best few groups.
  constexpr size_t kPartialGroups = 4;
  int64_t best_stash = network.StashBytesOf(filled);
  RecomputeSet best = filled;
  for (size_t g = 0; g < left_out.size() && g < kPartialGroups; ++g) {
    const std::vector<OpIndex>& ops = left_out[g]->ops;  // ascending
    for (bool from_front : {true, false}) {
      RecomputeSet trial = filled;
      double trial_cost = cost;
      for (size_t i = 0; i < ops.size(); ++i) {
        const OpIndex o = from_front ? ops[i] : ops[ops.size() - 1 - i];
        if (trial_cost + problem.op_costs[o] > budget) break;
        trial_cost += problem.op_costs[o];
        trial[o] = 1;
      }
      const int64_t stash = network.StashBytesOf(trial);
      if (stash < best_stash) {
        best_stash = stash;
        best = std::move(trial);
      }
    }
  }
  return best;
}

}  // namespace

absl::StatusOr<StashCutPlans> StashCutsWithinBudget(
    const RecomputeProblem& problem, const std::vector<uint8_t>& may_recompute,
    OpIndex first_backward_op, double budget, const Interrupt& interrupted) {
  StashCutPlans result;
  if (first_backward_op == kNoOp || first_backward_op <= 0) return result;
  const StashModel network(problem, may_recompute, first_backward_op);
  result.plain_stash_bytes = network.plain_stash_bytes();
  result.lower_bound_bytes = 0;
  if (result.plain_stash_bytes == 0) return result;
  // Free recomputation (every eligible op costs 0): any lambda gives the
  // same, exact cut.
  const double lambda0 = network.eligible_cost() > 0
                             ? static_cast<double>(result.plain_stash_bytes) /
                                   network.eligible_cost()
                             : 1.0;
  std::optional<Cut> within, over;
  auto solve = [&](double log_lambda) -> absl::StatusOr<Cut> {
    if (interrupted) {
      absl::Status status = interrupted();
      if (!status.ok()) return status;
    }
    const double lambda = lambda0 * std::exp(log_lambda);
    Cut cut = SolveCut(network, lambda);
    // Every plan within the budget pays at least its stash plus nothing more
    // than lambda * budget for its recomputation.
    const double bound = cut.value - lambda * std::max(budget, 0.0);
    if (bound > static_cast<double>(result.lower_bound_bytes)) {
      // Stashes are whole bytes.
      result.lower_bound_bytes = static_cast<int64_t>(
          std::ceil(bound - 1e-9 * std::max(1.0, std::abs(cut.value))));
    }
    if (cut.cost <= budget) {
      if (!within || cut.stash_bytes < within->stash_bytes) within = cut;
    } else if (!over || cut.cost < over->cost) {
      over = cut;
    }
    return cut;
  };
  double lo = -kLogLambdaRange, hi = kLogLambdaRange;
  absl::StatusOr<Cut> cheapest = solve(hi);
  if (!cheapest.ok()) return cheapest.status();
  absl::StatusOr<Cut> dearest = solve(lo);
  if (!dearest.ok()) return dearest.status();
  if (dearest->cost > budget) {
    for (int step = 0; step < kBisectionSteps; ++step) {
      const double mid = 0.5 * (lo + hi);
      absl::StatusOr<Cut> cut = solve(mid);
      if (!cut.ok()) return cut.status();
      (cut->cost <= budget ? hi : lo) = mid;
    }
  }
  result.lower_bound_bytes =
      std::min(result.lower_bound_bytes, result.plain_stash_bytes);
  std::vector<RecomputeSet> plans;
  if (within.has_value()) plans.push_back(within->recompute);
  if (within.has_value() && over.has_value()) {
    plans.push_back(FillTowards(problem, network, within->recompute,
                                over->recompute, budget));
  }
  if (over.has_value()) plans.push_back(over->recompute);
  for (RecomputeSet& recompute : plans) {
    if (std::find(recompute.begin(), recompute.end(), 1) != recompute.end() &&
        std::find(result.plans.begin(), result.plans.end(), recompute) ==
            result.plans.end()) {
      result.plans.push_back(std::move(recompute));
    }
  }
  return result;
}

}  // namespace echo::planner
