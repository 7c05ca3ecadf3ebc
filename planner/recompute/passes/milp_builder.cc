#include "planner/recompute/passes/milp_builder.h"

#include "CbcModel.hpp"
#include "CbcSolver.hpp"
#include "CoinPackedMatrix.hpp"
#include "OsiClpSolverInterface.hpp"
#include "absl/strings/str_cat.h"

namespace echo::planner {

void MilpBuilder::Load(OsiClpSolverInterface& solver) const {
  // Row-ordered, built at once: appending rows one by one to a
  // CoinPackedMatrix without spare room reallocates it each time (fcn8's
  // 25,537 rows took 8.6 s to load; issue 23).
  std::vector<double> elements, row_lower, row_upper;
  std::vector<int> indices, lengths;
  std::vector<CoinBigIndex> starts;
  elements.reserve(nonzeros_);
  indices.reserve(nonzeros_);
  for (const Row& row : rows_) {
    starts.push_back(static_cast<CoinBigIndex>(elements.size()));
    lengths.push_back(static_cast<int>(row.columns.size()));
    indices.insert(indices.end(), row.columns.begin(), row.columns.end());
    elements.insert(elements.end(), row.values.begin(), row.values.end());
    row_lower.push_back(row.lower);
    row_upper.push_back(row.upper);
  }
  const CoinPackedMatrix matrix(
      /*colordered=*/false, num_columns(), num_rows(),
      static_cast<CoinBigIndex>(elements.size()), elements.data(),
      indices.data(), starts.data(), lengths.data());
  solver.loadProblem(matrix, lower_.data(), upper_.data(), objective_.data(),
                     row_lower.data(), row_upper.data());
  for (int32_t c = 0; c < num_columns(); ++c) {
    if (integer_[c]) solver.setInteger(c);
    solver.setColName(c, names_[c]);
  }
}

MilpSolution SolveWithCbc(const MilpBuilder& milp, double time_limit_seconds,
                          const MipStart& start) {
  OsiClpSolverInterface solver;
  solver.messageHandler()->setLogLevel(0);
  milp.Load(solver);
  CbcModel cbc(solver);
  cbc.setLogLevel(0);
  cbc.messageHandler()->setLogLevel(0);
  if (!start.empty()) cbc.setMIPStart(start);
  CbcSolverUsefulData solver_data;
  solver_data.noPrinting_ = true;
  CbcMain0(cbc, solver_data);
  const std::string seconds = absl::StrCat(time_limit_seconds);
  // Elapsed (not CPU) time; exact optimality (no relative gap); knapsack
  // cuts off (with them CLP 1.17 can abort on an assertion on these
  // models); preprocessing off: CBC 2.10's CglPreProcess::postProcess
  // crashes (SIGSEGV) when the time limit stops the search, e.g. on fcn8 at
  // 8.4e9 bytes and 1 s (issue 23), and on infeasible models.
  const std::vector<std::string> args = {
      "echo_milp", "-log",          "0",         "-timeMode",   "elapsed",
      "-seconds",  seconds,         "-ratioGap", "0",           "-allowableGap",
      "1e-9",      "-knapsackCuts", "off",       "-preprocess", "off",
      "-solve",    "-quit"};
  std::vector<const char*> argv;
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  CbcMain1(
      static_cast<int>(argv.size()), argv.data(), cbc,
      [](CbcModel*, int) { return 0; }, solver_data);

  MilpSolution result;
  const double* solution = cbc.bestSolution();
  const bool has_solution = solution != nullptr;
  if (cbc.isProvenInfeasible() && !has_solution) {
    result.status = "infeasible";
  } else if (cbc.isProvenOptimal() && has_solution) {
    result.status = "optimal";
  } else {
    result.status =
        has_solution ? "time_limit_feasible" : "time_limit_no_solution";
  }
  if (has_solution) {
    result.values.assign(solution, solution + milp.num_columns());
    result.objective = cbc.getObjValue();
  }
  result.bound = result.status == "optimal" ? result.objective
                 : result.status == "infeasible"
                     ? 0
                     : cbc.getBestPossibleObjValue();
  return result;
}

}  // namespace echo::planner
