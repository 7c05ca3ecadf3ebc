#include "planner/recompute/passes/checkmate_milp.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "planner/recompute/passes/milp_builder.h"
#include "planner/recompute/passes/milp_horizons.h"
#include "planner/status_macros.h"

namespace echo::planner {
namespace {

struct FreeColumn {
  int32_t stage;
  TensorIndex tensor;
  OpIndex op;
  int32_t column;
};

// R, S and FREE values of a schedule (as a MIP start); false when the
// schedule uses a variable the model does not have.
template <typename RFn, typename SFn>
bool WarmStartValues(const RecomputeProblem& problem, const Schedule& schedule,
                     const RFn& R, const SFn& S,
                     const std::vector<FreeColumn>& free_columns,
                     std::vector<double>& values) {
  const Graph& graph = problem.graph;
  const int32_t n = graph.num_ops();
  std::vector<std::vector<OpIndex>> ran(n);  // ops run in stage t, sorted
  // Stage of each step: the original op at or after it.
  std::vector<int32_t> stage(schedule.size());
  int32_t next = n - 1;
  for (int32_t step = static_cast<int32_t>(schedule.size()) - 1; step >= 0;
       --step) {
    if (!schedule[step].recompute) next = schedule[step].op;
    stage[step] = next;
  }
  struct Instance {
    int32_t created;  // stage; -1 for graph inputs
    int32_t last_read = -2;
  };
  std::vector<Instance> instances;
  std::vector<int32_t> current(graph.num_tensors(), -1);
  for (TensorIndex x = 0; x < graph.num_tensors(); ++x) {
    if (graph.tensor(x).producer == kNoOp) {
      current[x] = static_cast<int32_t>(instances.size());
      instances.push_back({-1});
    }
  }
  std::vector<std::vector<int32_t>> instances_of(graph.num_tensors());
  for (TensorIndex x = 0; x < graph.num_tensors(); ++x) {
    if (current[x] >= 0) instances_of[x].push_back(current[x]);
  }
  for (size_t step = 0; step < schedule.size(); ++step) {
    const Execution& e = schedule[step];
    const int32_t t = stage[step];
    if (e.op > t) return false;
    ran[t].push_back(e.op);
    if (e.recompute) {
      const int32_t column = R(t, e.op);
      if (column < 0) return false;
      values[column] = 1;
    }
    for (TensorIndex x : graph.op(e.op).inputs) {
      if (current[x] < 0) return false;
      instances[current[x]].last_read = t;
    }
    for (TensorIndex x : graph.op(e.op).outputs) {
      current[x] = static_cast<int32_t>(instances.size());
      instances_of[x].push_back(current[x]);
      instances.push_back({t});
    }
  }
  for (std::vector<OpIndex>& ops : ran) std::sort(ops.begin(), ops.end());
  auto did_run = [&](int32_t t, OpIndex op) {
    return std::binary_search(ran[t].begin(), ran[t].end(), op);
  };
  // S[t,x] = 1 while an instance made before stage t is read in t or later.
  auto held = [&](TensorIndex x, int32_t t) {
    for (int32_t id : instances_of[x]) {
      if (instances[id].created < t && t <= instances[id].last_read) {
        return true;
      }
    }
    return false;
  };
  for (TensorIndex x = 0; x < graph.num_tensors(); ++x) {
    for (int32_t id : instances_of[x]) {
      for (int32_t t = instances[id].created + 1; t <= instances[id].last_read;
           ++t) {
        const int32_t column = S(t, x);
        if (column == kFixedZero) return false;
        if (column >= 0) values[column] = 1;
      }
    }
  }
  // FREE by its definition.
  for (const FreeColumn& f : free_columns) {
    bool freed = did_run(f.stage, f.op) && !held(f.tensor, f.stage + 1);
    for (OpIndex j : graph.tensor(f.tensor).readers) {
      if (j > f.op && j <= f.stage && did_run(f.stage, j)) freed = false;
    }
    values[f.column] = freed ? 1 : 0;
  }
  return true;
}

// Checkmate's variables and constraints over one problem. Bytes are scaled
// by the memory limit and costs by the largest cost.
class CheckmateModel {
 public:
  CheckmateModel(const RecomputeProblem& problem, int64_t memory_limit_bytes)
      : problem_(problem),
        graph_(problem.graph),
        n_(graph_.num_ops()),
        byte_scale_(1.0 / std::max<double>(
                              1.0, static_cast<double>(memory_limit_bytes))) {
    double max_cost = 0;
    for (double cost : problem.op_costs) max_cost = std::max(max_cost, cost);
    cost_scale_ = max_cost > 0 ? 1.0 / max_cost : 1.0;
  }

  // Every column and row; FAILED_PRECONDITION past `max_nonzeros`.
  absl::Status Build(int64_t max_nonzeros) {
    MarkSticky();
    const Horizons horizons = ComputeHorizons(problem_);
    horizon_ = horizons.tensor;
    RETURN_IF_ERROR(CheckModelSize(problem_, horizons, max_nonzeros));
    AddRecomputeColumns(horizons.op);
    AddHoldColumns();
    RETURN_IF_ERROR(AddPresenceRows(max_nonzeros));
    return AddMemoryRows(max_nonzeros);
  }

  // R[t,i]: op i runs in stage t; S[t,x]: x is held at the start of stage
  // t. A column id, or kFixedZero / kFixedOne.
  int32_t R(int32_t t, OpIndex i) const {
    if (i > t) return kFixedZero;
    if (i == t) return kFixedOne;
    const size_t offset = static_cast<size_t>(t - i - 1);
    return offset < r_column_[i].size() ? r_column_[i][offset] : kFixedZero;
  }
  // The ops that may run in stage t (R[t,i] not fixed at zero), ascending;
  // the last is t.
  const std::vector<OpIndex>& StageOps(int32_t t) const {
    return stage_ops_[t];
  }
  int32_t S(int32_t t, TensorIndex x) const {
    if (sticky_[x] || t < s_first_[x] || t > horizon_[x]) return kFixedZero;
    return s_column_[x][t - s_first_[x]];
  }

  const RecomputeProblem& problem() const { return problem_; }
  const MilpBuilder& milp() const { return milp_; }
  const std::vector<FreeColumn>& free_columns() const { return free_columns_; }
  double cost_scale() const { return cost_scale_; }

 private:
  double Mem(TensorIndex x) const {
    return static_cast<double>(problem_.tensor_bytes[x]) * byte_scale_;
  }

  // Sticky tensors (persistent, graph outputs) are constants: held from
  // the start, or from the op that makes them.
  void MarkSticky() {
    sticky_.assign(graph_.num_tensors(), 0);
    sticky_made_.assign(n_, 0);
    for (TensorIndex x = 0; x < graph_.num_tensors(); ++x) {
      const Tensor& tensor = graph_.tensor(x);
      if (!IsSticky(tensor)) continue;
      sticky_[x] = 1;
      if (tensor.producer == kNoOp) {
        always_ += Mem(x);
      } else {
        sticky_made_[tensor.producer] += Mem(x);
      }
    }
  }

  // R[t,i] for i < t while op i's outputs may still be read; R[t,t] = 1.
  // Stored per op over its stages, so memory follows the columns, not n^2.
  void AddRecomputeColumns(const std::vector<int32_t>& op_horizon) {
    r_column_.resize(n_);
    stage_ops_.resize(n_);
    for (OpIndex i = 0; i < n_; ++i) {
      if (!HasRecomputeColumns(problem_, i)) continue;
      r_column_[i].assign(std::max(0, op_horizon[i] - i), kFixedZero);
      for (int32_t t = i + 1; t <= op_horizon[i]; ++t) {
        stage_ops_[t].push_back(i);
      }
    }
    // Columns numbered stage by stage, as CBC's search has always seen
    // them (numbered op by op, fcn8 at 8.4e9 went from optimal in 11-22 s
    // to its 60 s limit).
    for (int32_t t = 0; t < n_; ++t) {
      for (OpIndex i : stage_ops_[t]) {
        r_column_[i][t - i - 1] =
            milp_.AddColumn(0, 1, problem_.op_costs[i] * cost_scale_, true,
                            absl::StrCat("R_", t, "_", i));
      }
      stage_ops_[t].push_back(t);
    }
  }

  // S[t,x] from the stage after x is made up to its horizon.
  void AddHoldColumns() {
    s_column_.resize(graph_.num_tensors());
    s_first_.assign(graph_.num_tensors(), n_ + 1);
    stage_held_.resize(n_);
    for (TensorIndex x = 0; x < graph_.num_tensors(); ++x) {
      const Tensor& tensor = graph_.tensor(x);
      if (sticky_[x] || horizon_[x] < 0) continue;
      const int32_t first = FirstHoldStage(tensor);
      s_first_[x] = first;
      for (int32_t t = first; t <= horizon_[x]; ++t) {
        if (tensor.producer == kNoOp && t == 0) {
          s_column_[x].push_back(kFixedOne);
        } else {
          s_column_[x].push_back(
              milp_.AddColumn(0, 1, 0, true, absl::StrCat("S_", t, "_", x)));
        }
        if (t < n_) stage_held_[t].push_back(x);
      }
    }
  }

  // (a) inputs present; (b) held only if held or computed before.
  absl::Status AddPresenceRows(int64_t max_nonzeros) {
    for (int32_t t = 0; t < n_; ++t) {
      if (milp_.nonzeros() > max_nonzeros) {
        return MilpTooBigError(n_, max_nonzeros);
      }
      for (OpIndex i : stage_ops_[t]) {
        for (TensorIndex x : graph_.DistinctInputs(i)) {
          if (sticky_[x]) continue;
          Row row;  // R[t,i] - R[t,p] - S[t,x] <= 0
          row.Add(R(t, i), 1);
          const OpIndex p = graph_.tensor(x).producer;
          if (p != kNoOp) row.Add(R(t, p), -1);
          row.Add(S(t, x), -1);
          row.upper = 0;
          if (row.columns.empty() && row.constant > 0) {
            return absl::InternalError(absl::StrCat(
                "checkmate milp: op '", graph_.op(i).id,
                "' cannot find input '", graph_.tensor(x).id, "'"));
          }
          milp_.AddRow(std::move(row));
        }
      }
    }
    for (TensorIndex x = 0; x < graph_.num_tensors(); ++x) {
      if (s_column_[x].empty()) continue;
      const OpIndex p = graph_.tensor(x).producer;
      for (int32_t t = s_first_[x]; t < horizon_[x]; ++t) {
        Row row;  // S[t+1,x] - S[t,x] - R[t,p] <= 0
        row.Add(S(t + 1, x), 1);
        row.Add(S(t, x), -1);
        if (p != kNoOp) row.Add(R(t, p), -1);
        row.upper = 0;
        milp_.AddRow(std::move(row));
      }
    }
    return absl::OkStatus();
  }

  // (c) frees and (d) memory, stage by stage.
  absl::Status AddMemoryRows(int64_t max_nonzeros) {
    double sticky_before = always_;
    for (int32_t t = 0; t < n_; ++t) {
      const std::vector<OpIndex>& ops = stage_ops_[t];
      int32_t previous_u = kFixedZero;
      std::vector<std::pair<TensorIndex, int32_t>> previous_frees;
      for (size_t position = 0; position < ops.size(); ++position) {
        const OpIndex k = ops[position];
        const int32_t u = AddUsage(t, k, position == 0, previous_u,
                                   previous_frees, sticky_before);
        previous_frees = AddFrees(t, k);
        previous_u = u;
        if (milp_.nonzeros() > max_nonzeros) {
          return MilpTooBigError(n_, max_nonzeros);
        }
      }
      sticky_before += sticky_made_[t];
    }
    return absl::OkStatus();
  }

  // U[t,k] = U[t,prev] - frees after prev + R[t,k] * outputs(k), where the
  // first U of a stage holds everything kept from earlier stages; and the
  // peak row U + constants + workspace <= 1 (the limit).
  int32_t AddUsage(
      int32_t t, OpIndex k, bool first, int32_t previous_u,
      const std::vector<std::pair<TensorIndex, int32_t>>& previous_frees,
      double sticky_before) {
    const int32_t u = milp_.AddColumn(-kInfinity, kInfinity, 0, false,
                                      absl::StrCat("U_", t, "_", k));
    Row row;
    row.Add(u, 1);
    if (first) {
      for (TensorIndex x : stage_held_[t]) row.Add(S(t, x), -Mem(x));
    } else {
      row.Add(previous_u, -1);
      for (const auto& [x, free] : previous_frees) row.Add(free, Mem(x));
    }
    double made = 0;
    for (TensorIndex x : graph_.op(k).outputs) {
      if (!sticky_[x]) made += Mem(x);
    }
    row.Add(R(t, k), -made);
    row.lower = row.upper = 0;
    milp_.AddRow(std::move(row));
    Row bound;
    bound.Add(u, 1);
    bound.Add(R(t, k),
              static_cast<double>(graph_.op(k).workspace_bytes) * byte_scale_);
    bound.constant += sticky_before + (k == t ? sticky_made_[t] : 0);
    bound.upper = 1;
    milp_.AddRow(std::move(bound));
    return u;
  }

  // FREE[t,x,k] for x in inputs(k) + outputs(k): x dies after k in stage t
  // when k runs, x is not held into stage t+1 and no later op of the stage
  // reads it. Returns (x, FREE column) per tensor.
  std::vector<std::pair<TensorIndex, int32_t>> AddFrees(int32_t t, OpIndex k) {
    std::vector<std::pair<TensorIndex, int32_t>> frees;
    std::vector<TensorIndex> touched = graph_.DistinctInputs(k);
    for (TensorIndex x : graph_.op(k).outputs) touched.push_back(x);
    for (TensorIndex x : touched) {
      if (sticky_[x]) continue;
      Row hazards;  // (1 - R[t,k]) + S[t+1,x] + sum R[t,j], j > k reads x
      double count = 2;
      hazards.constant += 1;
      hazards.Add(R(t, k), -1);
      hazards.Add(t + 1 < n_ ? S(t + 1, x) : kFixedZero, 1);
      for (OpIndex j : graph_.tensor(x).readers) {
        if (j > k && j <= t && R(t, j) != kFixedZero) {
          hazards.Add(R(t, j), 1);
          count += 1;
        }
      }
      const int32_t free =
          milp_.AddColumn(0, 1, 0, true, absl::StrCat("F_", t, "_", x, "_", k));
      free_columns_.push_back({t, x, k, free});
      // FREE + hazards >= 1 and count * FREE + hazards <= count.
      Row at_least = hazards;
      at_least.Add(free, 1);
      at_least.lower = 1;
      milp_.AddRow(std::move(at_least));
      Row at_most = hazards;
      at_most.Add(free, count);
      at_most.upper = count;
      milp_.AddRow(std::move(at_most));
      frees.push_back({x, free});
    }
    return frees;
  }

  const RecomputeProblem& problem_;
  const Graph& graph_;
  const int32_t n_;
  const double byte_scale_;
  double cost_scale_ = 1;
  std::vector<uint8_t> sticky_;
  double always_ = 0;                // sticky bytes from the start
  std::vector<double> sticky_made_;  // sticky outputs made by op t
  std::vector<int32_t> horizon_;
  std::vector<std::vector<int32_t>> r_column_;  // [i][t - i - 1]
  std::vector<std::vector<OpIndex>> stage_ops_;
  std::vector<std::vector<int32_t>> s_column_;  // [x][t - s_first_[x]]
  std::vector<std::vector<TensorIndex>> stage_held_;
  std::vector<int32_t> s_first_;
  std::vector<FreeColumn> free_columns_;
  MilpBuilder milp_;
};

// CBC on the model, warm-started from options.warm_start when it is a
// solution; the schedule of the best solution found.
OptimalRecompute::Result Solve(const CheckmateModel& model,
                               const OptimalRecompute::Options& options) {
  const MilpBuilder& milp = model.milp();
  const RecomputeProblem& problem = model.problem();
  MipStart start;
  if (!options.warm_start.empty()) {
    std::vector<double> values(milp.num_columns(), 0);
    auto R = [&](int32_t t, OpIndex i) { return model.R(t, i); };
    auto S = [&](int32_t t, TensorIndex x) { return model.S(t, x); };
    if (WarmStartValues(problem, options.warm_start, R, S, model.free_columns(),
                        values)) {
      for (int32_t c = 0; c < milp.num_columns(); ++c) {
        if (milp.is_integer(c)) start.push_back({milp.names()[c], values[c]});
      }
    }
  }
  const MilpSolution solved =
      SolveWithCbc(milp, options.time_limit_seconds, start);
  OptimalRecompute::Result result;
  result.status = solved.status;
  const int32_t n = problem.graph.num_ops();
  if (!solved.values.empty()) {
    for (int32_t t = 0; t < n; ++t) {
      for (OpIndex i : model.StageOps(t)) {
        if (i == t) continue;
        const int32_t column = model.R(t, i);
        if (column >= 0 && solved.values[column] > 0.5) {
          result.schedule.push_back({i, true});
        }
      }
      result.schedule.push_back({t, false});
    }
  }
  result.bound_cost = std::max(0.0, solved.bound / model.cost_scale());
  return result;
}

}  // namespace

absl::Status OptimalRecompute::CheckModelSize(
    const RecomputeProblem& problem) const {
  return planner::CheckModelSize(problem, ComputeHorizons(problem),
                                 options_.max_nonzeros);
}

absl::StatusOr<OptimalRecompute::Result> OptimalRecompute::Run(
    const RecomputeProblem& problem) {
  if (problem.graph.num_ops() == 0) {
    Result result;
    result.status = "optimal";
    return result;
  }
  CheckmateModel model(problem, options_.memory_limit_bytes);
  RETURN_IF_ERROR(model.Build(options_.max_nonzeros));
  return Solve(model, options_);
}

}  // namespace echo::planner
