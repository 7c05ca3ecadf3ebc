// How a tensor lays out the rows of a chunkable region (chunk_region.h):
// rows first (its leading axes multiply to the row count, so a row slice is
// a contiguous leading slice), rows last (a transposed [X, rows] matrix), or
// whole (no axis follows the rows: parameters and views of them).
//
// Shapes alone cannot tell a square [rows, rows] matrix's layout (the rows
// of a loss equal to its vocabulary: batch x length = classes), so the
// transposes the region builder takes in mark their outputs rows last, and
// a marked tensor is never rows first, whatever its shape.
#ifndef ECHO_PLANNER_CHUNK_ROW_LAYOUT_H_
#define ECHO_PLANNER_CHUNK_ROW_LAYOUT_H_

#include <cstdint>
#include <set>
#include <vector>

#include "planner/graph.h"

namespace echo::planner {

// Op attribute: the op's arguments as the PyTorch hook records them, e.g.
// "(('%', 1, False), {})" with "%" for a tensor (row_rules.h reads it).
inline constexpr char kArgsAttribute[] = "args";

class RowLayout {
 public:
  RowLayout(const Graph& graph, int64_t rows,
            std::vector<TensorIndex> rows_last = {})
      : graph_(graph),
        rows_(rows),
        marked_rows_last_(rows_last.begin(), rows_last.end()) {}

  int64_t rows() const { return rows_; }
  // The number of leading axes that multiply to the rows; 0 when none do.
  int32_t Prefix(TensorIndex t) const;
  // Elements per row of a rows-first tensor.
  int64_t ElementsPerRow(TensorIndex t) const;
  bool RowsFirst2D(TensorIndex t) const;
  // [X, rows] and marked, or [X, rows] with X != rows.
  bool RowsLast(TensorIndex t) const;
  // `t` is a transpose of rows-first rows: rows last whatever its shape.
  void MarkRowsLast(TensorIndex t) { marked_rows_last_.insert(t); }
  bool MarkedRowsLast(TensorIndex t) const {
    return marked_rows_last_.count(t) > 0;
  }
  const std::set<TensorIndex>& marked_rows_last() const {
    return marked_rows_last_;
  }
  void ClearMarks() { marked_rows_last_.clear(); }
  // Depends on no row: a parameter, or made from whole tensors alone (a
  // view of a weight, autocast's cast of it), a few ops deep.
  bool IsWhole(TensorIndex t) const;
  // `in` broadcasts over the row axes of rows-first `out` (right-aligned,
  // each of its axes that falls on a row axis is 1).
  bool BroadcastsOverRows(TensorIndex in, TensorIndex out) const;
  // The op's tensor arguments in order (the first inputs, one per "%" in
  // its "args" attribute; the inputs after them are view bases). Empty
  // when the op has no such attribute: its semantics are then unknown.
  std::vector<TensorIndex> TensorArgs(const Op& op) const;

 private:
  bool IsWholeWithin(TensorIndex t, int depth) const;

  const Graph& graph_;
  int64_t rows_;
  std::set<TensorIndex> marked_rows_last_;
};

}  // namespace echo::planner

#endif  // ECHO_PLANNER_CHUNK_ROW_LAYOUT_H_
