// Which ops are row-wise (chunk_region.h), under one row layout
// (row_layout.h): the region's rows, or one block of them (a step's rows
// that a stack joins). The rules read op semantics and shapes, never names.
#ifndef ECHO_PLANNER_CHUNK_ROW_RULES_H_
#define ECHO_PLANNER_CHUNK_ROW_RULES_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "planner/chunk/row_layout.h"
#include "planner/graph.h"

namespace echo::planner {

bool IsType(const Op& op, std::initializer_list<absl::string_view> types);

// Ops that pass their first argument's rows through unchanged in order.
bool IsRowView(const Op& op);

// A transpose of a matrix: aten::t, or permute(x, [1, 0]).
bool IsTranspose(const Op& op);

// Ops that make a view of a whole tensor (what a summed gradient passes
// through on its way out): reshapes and transposes.
bool IsWholeView(const Op& op);

// The op's arguments as the PyTorch hook records them (attribute "args",
// e.g. "(('%', 1, False), {})"): the top-level items of the positional
// tuple, "%" for a tensor. Empty when the op has no such attribute.
std::vector<std::string> PositionalArgs(const Op& op);

// Positional argument i as an integer, if it is one.
std::optional<int64_t> IntArg(const Op& op, size_t i);

class RowRules {
 public:
  RowRules(const Graph& graph, int64_t rows)
      : graph_(graph), layout_(graph, rows) {}

  const RowLayout& layout() const { return layout_; }
  RowLayout& mutable_layout() { return layout_; }

  // The row input of a forward op that makes rows row-wise, or -1. A
  // matmul with a whole operand is row-wise too; `*gemm` says it ended the
  // chain (its row input is the region's input).
  TensorIndex ForwardRowInput(OpIndex o, bool* gemm) const;

  // How a backward op reads a tensor of the rows.
  enum class Reader {
    kRowWise,  // rows in, rows out
    kRowsOut,  // a matmul with a whole operand: rows out, leaving
    kSummed,   // summed over the rows (a matmul of the transposed rows, a
               // sum): whole out, each chunk adding its share
    kBlock,    // a select of one block of the rows (stack's backward)
    kOutside,  // anything else
  };
  Reader ClassifyBackwardReader(OpIndex o, TensorIndex t) const;

  // The rows of each block `stack` (forward, along axis 0) joins, when its
  // inputs are blocks of these rows; 0 otherwise.
  int64_t StackBlockRows(OpIndex stack) const;
  // The first row, and the rows, of the block that select op `o` (a
  // kBlock reader of `t`) takes.
  int64_t SelectFirstRow(OpIndex o, TensorIndex t, int64_t* block_rows) const;

  bool ReadsAsArgument(const Op& op, TensorIndex t) const;

 private:
  bool NonRowAxis(const Op& op, size_t i, TensorIndex out) const;
  TensorIndex SameRows(TensorIndex in, TensorIndex out) const;
  TensorIndex ElementwiseRowInput(const Op& op) const;
  bool SumsOverRows(const Op& op, TensorIndex t) const;
  // Rows per index of axis 0 of rows-first `t` (its other row axes).
  int64_t RowsPerLeadingIndex(TensorIndex t) const;

  const Graph& graph_;
  RowLayout layout_;
};

}  // namespace echo::planner

#endif  // ECHO_PLANNER_CHUNK_ROW_RULES_H_
