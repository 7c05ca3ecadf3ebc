#include "planner/recompute/passes/milp_builder.h"

#include "CoinPackedMatrix.hpp"
#include "OsiClpSolverInterface.hpp"

namespace echo::planner {

void MilpBuilder::Load(OsiClpSolverInterface& solver) const {
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

}  // namespace echo::planner
