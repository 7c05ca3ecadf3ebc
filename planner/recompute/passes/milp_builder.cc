#include "planner/recompute/passes/milp_builder.h"

#include "CoinPackedMatrix.hpp"
#include "OsiClpSolverInterface.hpp"

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

}  // namespace echo::planner
