#include "planner/recompute/passes/checkmate_milp.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "CbcModel.hpp"
#include "CbcSolver.hpp"
#include "CoinPackedMatrix.hpp"
#include "OsiClpSolverInterface.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "planner/recompute/passes/milp_horizons.h"
#include "planner/status_macros.h"

namespace echo::planner {
namespace {

constexpr int32_t kFixedZero = -1;
constexpr int32_t kFixedOne = -2;

// A linear term list and its bounds.
struct Row {
  std::vector<int32_t> columns;
  std::vector<double> values;
  double lower = -COIN_DBL_MAX;
  double upper = COIN_DBL_MAX;
  // Constant part of the left-hand side (from fixed variables), moved into
  // the bounds when the row is added.
  double constant = 0;
  void Add(int32_t column, double value) {
    if (column == kFixedZero) return;
    if (column == kFixedOne) {
      constant += value;
      return;
    }
    columns.push_back(column);
    values.push_back(value);
  }
};

class MilpBuilder {
 public:
  int32_t AddColumn(double lower, double upper, double objective, bool integer,
                    std::string name) {
    lower_.push_back(lower);
    upper_.push_back(upper);
    objective_.push_back(objective);
    integer_.push_back(integer);
    names_.push_back(std::move(name));
    return static_cast<int32_t>(lower_.size()) - 1;
  }
  void AddRow(Row row) {
    // A row of constants only is checked by construction; skip it.
    if (row.columns.empty()) return;
    if (row.lower > -COIN_DBL_MAX) row.lower -= row.constant;
    if (row.upper < COIN_DBL_MAX) row.upper -= row.constant;
    nonzeros_ += static_cast<int64_t>(row.columns.size());
    rows_.push_back(std::move(row));
  }
  int32_t num_columns() const { return static_cast<int32_t>(lower_.size()); }
  int32_t num_rows() const { return static_cast<int32_t>(rows_.size()); }
  int64_t nonzeros() const { return nonzeros_; }

  void Load(OsiClpSolverInterface& solver) const {
    CoinPackedMatrix matrix(false, 0, 0);
    matrix.setDimensions(0, num_columns());
    std::vector<double> row_lower, row_upper;
    for (const Row& row : rows_) {
      matrix.appendRow(static_cast<int>(row.columns.size()), row.columns.data(),
                       row.values.data());
      row_lower.push_back(row.lower);
      row_upper.push_back(row.upper);
    }
    solver.loadProblem(matrix, lower_.data(), upper_.data(), objective_.data(),
                       row_lower.data(), row_upper.data());
    for (int32_t c = 0; c < num_columns(); ++c) {
      if (integer_[c]) solver.setInteger(c);
      solver.setColName(c, names_[c]);
    }
  }
  const std::vector<std::string>& names() const { return names_; }
  bool is_integer(int32_t column) const { return integer_[column] != 0; }

 private:
  std::vector<double> lower_, upper_, objective_;
  std::vector<uint8_t> integer_;
  std::vector<std::string> names_;
  std::vector<Row> rows_;
  int64_t nonzeros_ = 0;
};

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
  std::vector<std::vector<uint8_t>> ran(n);  // ran[t][i]
  for (int32_t t = 0; t < n; ++t) ran[t].assign(t + 1, 0);
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
    ran[t][e.op] = 1;
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
  // S[t,x] = 1 while an instance made before stage t is read in t or later.
  std::vector<std::vector<uint8_t>> held(graph.num_tensors());
  for (TensorIndex x = 0; x < graph.num_tensors(); ++x) {
    held[x].assign(n + 1, 0);
    for (int32_t id : instances_of[x]) {
      for (int32_t t = instances[id].created + 1; t <= instances[id].last_read;
           ++t) {
        held[x][t] = 1;
        const int32_t column = S(t, x);
        if (column == kFixedZero) return false;
        if (column >= 0) values[column] = 1;
      }
    }
  }
  // FREE by its definition.
  for (const FreeColumn& f : free_columns) {
    bool freed = ran[f.stage][f.op] && !held[f.tensor][f.stage + 1];
    for (OpIndex j : graph.tensor(f.tensor).readers) {
      if (j > f.op && j <= f.stage && ran[f.stage][j]) freed = false;
    }
    values[f.column] = freed ? 1 : 0;
  }
  return true;
}

}  // namespace

absl::Status OptimalRecompute::CheckModelSize(
    const RecomputeProblem& problem) const {
  return CheckRColumns(problem, ComputeHorizons(problem).op,
                       options_.max_nonzeros);
}

absl::StatusOr<OptimalRecompute::Result> OptimalRecompute::Run(
    const RecomputeProblem& problem) {
  const Graph& graph = problem.graph;
  const int32_t n = graph.num_ops();
  Result result;
  if (n == 0) {
    result.status = "optimal";
    return result;
  }
  // Scale bytes by the limit and costs by the largest cost.
  const double byte_scale =
      1.0 /
      std::max<double>(1.0, static_cast<double>(options_.memory_limit_bytes));
  double max_cost = 0;
  for (double cost : problem.op_costs) max_cost = std::max(max_cost, cost);
  const double cost_scale = max_cost > 0 ? 1.0 / max_cost : 1.0;
  auto mem = [&](TensorIndex x) {
    return static_cast<double>(problem.tensor_bytes[x]) * byte_scale;
  };

  // Tensors: sticky ones (persistent, graph outputs) are constants; the
  // others get S variables up to their horizon.
  std::vector<uint8_t> sticky(graph.num_tensors(), 0);
  double always = 0;                      // from the start
  std::vector<double> sticky_made(n, 0);  // sticky outputs made by op t
  for (TensorIndex x = 0; x < graph.num_tensors(); ++x) {
    const Tensor& tensor = graph.tensor(x);
    if (!IsSticky(tensor)) continue;
    sticky[x] = 1;
    if (tensor.producer == kNoOp) {
      always += mem(x);
    } else {
      sticky_made[tensor.producer] += mem(x);
    }
  }
  const Horizons horizons = ComputeHorizons(problem);
  const std::vector<int32_t>& horizon = horizons.tensor;
  const std::vector<int32_t>& op_horizon = horizons.op;
  RETURN_IF_ERROR(CheckRColumns(problem, op_horizon, options_.max_nonzeros));

  // R[t,i]: op i runs again in stage t (i < t) while its outputs may still
  // be read; R[t,t] = 1.
  std::vector<std::vector<int32_t>> r_column(n);
  MilpBuilder milp;
  for (int32_t t = 0; t < n; ++t) {
    std::vector<int32_t>& columns = r_column[t];
    columns.assign(t + 1, kFixedZero);
    columns[t] = kFixedOne;
    for (OpIndex i = 0; i < t; ++i) {
      // Checkmate's model re-makes every output: ops whose re-execution
      // makes fewer (Op::recompute_outputs) are not re-run.
      const Op& op = problem.graph.op(i);
      if (problem.can_clone[i] && op_horizon[i] >= t &&
          op.recompute_outputs == static_cast<int32_t>(op.outputs.size())) {
        columns[i] = milp.AddColumn(0, 1, problem.op_costs[i] * cost_scale,
                                    true, absl::StrCat("R_", t, "_", i));
      }
    }
  }
  auto R = [&](int32_t t, OpIndex i) {
    return i > t ? kFixedZero : r_column[t][i];
  };
  // S[t][x]: x is held at the start of stage t.
  std::vector<std::vector<int32_t>> s_column(graph.num_tensors());
  std::vector<int32_t> s_first(graph.num_tensors(), n + 1);
  for (TensorIndex x = 0; x < graph.num_tensors(); ++x) {
    const Tensor& tensor = graph.tensor(x);
    if (sticky[x] || horizon[x] < 0) continue;
    const int32_t first = tensor.producer == kNoOp ? 0 : tensor.producer + 1;
    s_first[x] = first;
    for (int32_t t = first; t <= horizon[x]; ++t) {
      if (tensor.producer == kNoOp && t == 0) {
        s_column[x].push_back(kFixedOne);
      } else {
        s_column[x].push_back(
            milp.AddColumn(0, 1, 0, true, absl::StrCat("S_", t, "_", x)));
      }
    }
  }
  auto S = [&](int32_t t, TensorIndex x) {
    if (sticky[x] || t < s_first[x] || t > horizon[x]) return kFixedZero;
    return s_column[x][t - s_first[x]];
  };

  // (a) inputs present; (b) held only if held or computed before.
  for (int32_t t = 0; t < n; ++t) {
    for (OpIndex i = 0; i <= t; ++i) {
      if (R(t, i) == kFixedZero) continue;
      for (TensorIndex x : graph.DistinctInputs(i)) {
        if (sticky[x]) continue;
        Row row;  // R[t,i] - R[t,p] - S[t,x] <= 0
        row.Add(R(t, i), 1);
        const OpIndex p = graph.tensor(x).producer;
        if (p != kNoOp) row.Add(R(t, p), -1);
        row.Add(S(t, x), -1);
        row.upper = 0;
        if (row.columns.empty() && row.constant > 0) {
          return absl::InternalError(
              absl::StrCat("checkmate milp: op '", graph.op(i).id,
                           "' cannot find input '", graph.tensor(x).id, "'"));
        }
        milp.AddRow(std::move(row));
      }
    }
  }
  for (TensorIndex x = 0; x < graph.num_tensors(); ++x) {
    if (s_column[x].empty()) continue;
    const OpIndex p = graph.tensor(x).producer;
    for (int32_t t = s_first[x]; t < horizon[x]; ++t) {
      Row row;  // S[t+1,x] - S[t,x] - R[t,p] <= 0
      row.Add(S(t + 1, x), 1);
      row.Add(S(t, x), -1);
      if (p != kNoOp) row.Add(R(t, p), -1);
      row.upper = 0;
      milp.AddRow(std::move(row));
    }
  }

  // (c) frees and (d) memory, stage by stage.
  std::vector<FreeColumn> free_columns;
  double sticky_before = always;
  for (int32_t t = 0; t < n; ++t) {
    std::vector<OpIndex> ops;
    for (OpIndex k = 0; k <= t; ++k) {
      if (R(t, k) != kFixedZero) ops.push_back(k);
    }
    int32_t previous_u = kFixedZero;
    std::vector<std::pair<TensorIndex, int32_t>> previous_frees;
    for (size_t position = 0; position < ops.size(); ++position) {
      const OpIndex k = ops[position];
      const int32_t u = milp.AddColumn(-COIN_DBL_MAX, COIN_DBL_MAX, 0, false,
                                       absl::StrCat("U_", t, "_", k));
      // U[t,k] = U[t,prev] - frees after prev + R[t,k] * outputs(k), where
      // the first U also holds everything kept from earlier stages.
      Row row;
      row.Add(u, 1);
      if (position == 0) {
        for (TensorIndex x = 0; x < graph.num_tensors(); ++x) {
          const int32_t s = S(t, x);
          if (s != kFixedZero) row.Add(s, -mem(x));
        }
      } else {
        row.Add(previous_u, -1);
        for (const auto& [x, free] : previous_frees) row.Add(free, mem(x));
      }
      double made = 0;
      for (TensorIndex x : graph.op(k).outputs) {
        if (!sticky[x]) made += mem(x);
      }
      row.Add(R(t, k), -made);
      row.lower = row.upper = 0;
      milp.AddRow(std::move(row));
      // Peak: U + constants + workspace <= 1 (the limit).
      Row bound;
      bound.Add(u, 1);
      bound.Add(R(t, k),
                static_cast<double>(graph.op(k).workspace_bytes) * byte_scale);
      bound.constant += sticky_before + (k == t ? sticky_made[t] : 0);
      bound.upper = 1;
      milp.AddRow(std::move(bound));

      // FREE[t,x,k] for x in inputs(k) + outputs(k): x dies after k in stage
      // t when k runs, x is not held into stage t+1 and no later op of the
      // stage reads it.
      previous_frees.clear();
      std::vector<TensorIndex> touched = graph.DistinctInputs(k);
      for (TensorIndex x : graph.op(k).outputs) touched.push_back(x);
      for (TensorIndex x : touched) {
        if (sticky[x]) continue;
        Row hazards;  // (1 - R[t,k]) + S[t+1,x] + sum R[t,j], j > k reads x
        double count = 2;
        hazards.constant += 1;
        hazards.Add(R(t, k), -1);
        hazards.Add(t + 1 < n ? S(t + 1, x) : kFixedZero, 1);
        for (OpIndex j : graph.tensor(x).readers) {
          if (j > k && j <= t && R(t, j) != kFixedZero) {
            hazards.Add(R(t, j), 1);
            count += 1;
          }
        }
        const int32_t free = milp.AddColumn(
            0, 1, 0, true, absl::StrCat("F_", t, "_", x, "_", k));
        free_columns.push_back({t, x, k, free});
        // FREE + hazards >= 1 and count * FREE + hazards <= count.
        Row at_least = hazards;
        at_least.Add(free, 1);
        at_least.lower = 1;
        milp.AddRow(std::move(at_least));
        Row at_most = hazards;
        at_most.Add(free, count);
        at_most.upper = count;
        milp.AddRow(std::move(at_most));
        previous_frees.push_back({x, free});
      }
      previous_u = u;
      if (milp.nonzeros() > options_.max_nonzeros) {
        return MilpTooBigError(n, options_.max_nonzeros);
      }
    }
    sticky_before += sticky_made[t];
  }

  OsiClpSolverInterface solver;
  solver.messageHandler()->setLogLevel(0);
  milp.Load(solver);
  CbcModel model(solver);
  model.setLogLevel(0);
  model.messageHandler()->setLogLevel(0);
  if (!options_.warm_start.empty()) {
    std::vector<double> values(milp.num_columns(), 0);
    if (WarmStartValues(problem, options_.warm_start, R, S, free_columns,
                        values)) {
      std::vector<std::pair<std::string, double>> start;
      for (int32_t c = 0; c < milp.num_columns(); ++c) {
        if (milp.is_integer(c)) start.push_back({milp.names()[c], values[c]});
      }
      model.setMIPStart(start);
    }
  }
  CbcSolverUsefulData solver_data;
  solver_data.noPrinting_ = true;
  CbcMain0(model, solver_data);
  const std::string seconds = absl::StrCat(options_.time_limit_seconds);
  // Elapsed (not CPU) time; exact optimality (no relative gap); knapsack
  // cuts off (with them CLP 1.17 can abort on an assertion on these
  // models). CBC 2.10's preprocessing can crash on infeasible models, so it
  // only runs when a warm start proves the model feasible.
  const bool has_start = !model.getMIPStart().empty();
  const std::vector<std::string> args = {
      "echo_milp",     "-log",        "0",
      "-timeMode",     "elapsed",     "-seconds",
      seconds,         "-ratioGap",   "0",
      "-allowableGap", "1e-9",        "-knapsackCuts",
      "off",           "-preprocess", has_start ? "sos" : "off",
      "-solve",        "-quit"};
  std::vector<const char*> argv;
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  CbcMain1(
      static_cast<int>(argv.size()), argv.data(), model,
      [](CbcModel*, int) { return 0; }, solver_data);

  const double* solution = model.bestSolution();
  const bool has_solution = solution != nullptr;
  if (model.isProvenInfeasible() && !has_solution) {
    result.status = "infeasible";
  } else if (model.isProvenOptimal() && has_solution) {
    result.status = "optimal";
  } else {
    result.status =
        has_solution ? "time_limit_feasible" : "time_limit_no_solution";
  }
  double objective_cost = 0;
  if (has_solution) {
    objective_cost = model.getObjValue() / cost_scale;
    for (int32_t t = 0; t < n; ++t) {
      for (OpIndex i = 0; i < t; ++i) {
        const int32_t column = R(t, i);
        if (column >= 0 && solution[column] > 0.5) {
          result.schedule.push_back({i, true});
        }
      }
      result.schedule.push_back({t, false});
    }
  }
  result.bound_cost =
      result.status == "optimal"
          ? objective_cost
          : std::max(0.0, model.getBestPossibleObjValue() / cost_scale);
  if (result.status == "infeasible") result.bound_cost = 0;
  return result;
}

}  // namespace echo::planner
