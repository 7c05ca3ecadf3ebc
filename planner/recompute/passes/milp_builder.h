// A MILP built column by column and row by row, then loaded into CBC's
// solver interface: what the Checkmate model (checkmate_milp.cc) is written
// in.
#ifndef ECHO_PLANNER_RECOMPUTE_PASSES_MILP_BUILDER_H_
#define ECHO_PLANNER_RECOMPUTE_PASSES_MILP_BUILDER_H_

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

class OsiClpSolverInterface;

namespace echo::planner {

// An infinite bound: CBC's COIN_DBL_MAX is the largest double.
inline constexpr double kInfinity = std::numeric_limits<double>::max();

// Column ids of variables fixed at 0 and at 1: a row adds them as constants.
inline constexpr int32_t kFixedZero = -1;
inline constexpr int32_t kFixedOne = -2;

// A linear term list and its bounds.
struct Row {
  std::vector<int32_t> columns;
  std::vector<double> values;
  double lower = -kInfinity;
  double upper = kInfinity;
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
    if (row.lower > -kInfinity) row.lower -= row.constant;
    if (row.upper < kInfinity) row.upper -= row.constant;
    nonzeros_ += static_cast<int64_t>(row.columns.size());
    rows_.push_back(std::move(row));
  }
  int32_t num_columns() const { return static_cast<int32_t>(lower_.size()); }
  int32_t num_rows() const { return static_cast<int32_t>(rows_.size()); }
  int64_t nonzeros() const { return nonzeros_; }

  // Columns, rows and integrality into `solver`.
  void Load(OsiClpSolverInterface& solver) const;
  const std::vector<std::string>& names() const { return names_; }
  bool is_integer(int32_t column) const { return integer_[column] != 0; }

 private:
  std::vector<double> lower_, upper_, objective_;
  std::vector<uint8_t> integer_;
  std::vector<std::string> names_;
  std::vector<Row> rows_;
  int64_t nonzeros_ = 0;
};

// Integer columns' values by name, for CBC to start from.
using MipStart = std::vector<std::pair<std::string, double>>;

struct MilpSolution {
  // "optimal" | "time_limit_feasible" | "time_limit_no_solution" |
  // "infeasible".
  std::string status;
  // The best solution's column values; empty without one.
  std::vector<double> values;
  double objective = 0;
  // No solution is better: the objective when optimal, CBC's best possible
  // value at a time limit, 0 when infeasible.
  double bound = 0;
};

// CBC on `milp` (minimizing), within time_limit_seconds of elapsed time, to
// exact optimality, from `start` when it is not empty.
MilpSolution SolveWithCbc(const MilpBuilder& milp, double time_limit_seconds,
                          const MipStart& start);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_PASSES_MILP_BUILDER_H_
