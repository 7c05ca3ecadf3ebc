#include "planner/chunk/row_layout.h"

#include <algorithm>

namespace echo::planner {

int32_t RowLayout::Prefix(TensorIndex t) const {
  if (MarkedRowsLast(t)) return 0;
  const std::vector<int64_t>& shape = graph_.tensor(t).shape;
  int64_t product = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    product *= shape[i];
    if (product == rows_) return static_cast<int32_t>(i + 1);
    if (product <= 0 || product > rows_) return 0;
  }
  return 0;
}

int64_t RowLayout::ElementsPerRow(TensorIndex t) const {
  int64_t product = 1;
  for (int64_t d : graph_.tensor(t).shape) product *= d;
  return product / rows_;
}

bool RowLayout::RowsFirst2D(TensorIndex t) const {
  const std::vector<int64_t>& shape = graph_.tensor(t).shape;
  return shape.size() == 2 && shape[0] == rows_ && !MarkedRowsLast(t);
}

bool RowLayout::RowsLast(TensorIndex t) const {
  const std::vector<int64_t>& shape = graph_.tensor(t).shape;
  return shape.size() == 2 && shape[1] == rows_ &&
         (shape[0] != rows_ || MarkedRowsLast(t));
}

bool RowLayout::IsWhole(TensorIndex t) const { return IsWholeWithin(t, 8); }

// A function of parameters alone: autocast's cast of a weight, a view of it.
bool RowLayout::IsWholeWithin(TensorIndex t, int depth) const {
  const Tensor& tensor = graph_.tensor(t);
  if (IsPersistentRole(tensor.role)) return true;
  if (tensor.producer == kNoOp || depth == 0) return false;
  const Op& op = graph_.op(tensor.producer);
  if (op.op_class == OpClass::kRandom) return false;
  const std::vector<TensorIndex> args = TensorArgs(op);
  return !args.empty() &&
         std::all_of(args.begin(), args.end(), [&](TensorIndex a) {
           return IsWholeWithin(a, depth - 1);
         });
}

bool RowLayout::BroadcastsOverRows(TensorIndex in, TensorIndex out) const {
  const std::vector<int64_t>& a = graph_.tensor(in).shape;
  const std::vector<int64_t>& b = graph_.tensor(out).shape;
  if (a.size() > b.size()) return false;
  const size_t offset = b.size() - a.size();
  const size_t prefix = static_cast<size_t>(Prefix(out));
  for (size_t i = 0; i < a.size(); ++i) {
    if (offset + i < prefix && a[i] != 1) return false;
  }
  return true;
}

std::vector<TensorIndex> RowLayout::TensorArgs(const Op& op) const {
  auto it = op.attributes.find(kArgsAttribute);
  if (it == op.attributes.end()) return {};
  const size_t count = static_cast<size_t>(
      std::count(it->second.begin(), it->second.end(), '%'));
  if (count == 0 || count > op.inputs.size()) return {};
  return std::vector<TensorIndex>(op.inputs.begin(), op.inputs.begin() + count);
}

}  // namespace echo::planner
