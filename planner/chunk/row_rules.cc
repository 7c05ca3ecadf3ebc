#include "planner/chunk/row_rules.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace echo::planner {

bool IsType(const Op& op, std::initializer_list<absl::string_view> types) {
  return std::find(types.begin(), types.end(), op.op_type) != types.end();
}

bool IsRowView(const Op& op) {
  return IsType(
      op, {"aten::view", "aten::_unsafe_view", "aten::reshape",
           "aten::_reshape_alias", "aten::alias", "aten::detach", "aten::clone",
           "aten::contiguous", "aten::_to_copy", "aten::lift_fresh_copy"});
}

bool IsTranspose(const Op& op) {
  if (IsType(op, {"aten::t"})) return true;
  // Inductor's decompositions write t() as permute(x, [1, 0]).
  const std::vector<std::string> args = PositionalArgs(op);
  return IsType(op, {"aten::permute"}) && args.size() == 2 &&
         args[1] == "[1, 0]";
}

bool IsWholeView(const Op& op) {
  return IsTranspose(op) ||
         IsType(op, {"aten::view", "aten::_unsafe_view", "aten::reshape",
                     "aten::_reshape_alias", "aten::alias", "aten::detach"});
}

std::vector<std::string> PositionalArgs(const Op& op) {
  std::vector<std::string> items;
  auto it = op.attributes.find(kArgsAttribute);
  if (it == op.attributes.end()) return items;
  const std::string& text = it->second;
  // "((a, b, [c, d]), {...})": the inner tuple's top-level items.
  size_t start = text.find('(', text.find('(') + 1);
  if (text.empty() || text[0] != '(' || start == std::string::npos) {
    return items;
  }
  int depth = 0;
  std::string item;
  for (size_t i = start + 1; i < text.size(); ++i) {
    const char c = text[i];
    if (depth == 0 && (c == ',' || c == ')')) {
      std::string trimmed(absl::StripAsciiWhitespace(item));
      if (!trimmed.empty()) {
        if (trimmed.size() >= 2 && trimmed.front() == '\'' &&
            trimmed.back() == '\'') {
          trimmed = trimmed.substr(1, trimmed.size() - 2);
        }
        items.push_back(trimmed);
      }
      item.clear();
      if (c == ')') break;
      continue;
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    item.push_back(c);
  }
  return items;
}

std::optional<int64_t> IntArg(const Op& op, size_t i) {
  const std::vector<std::string> args = PositionalArgs(op);
  int64_t value = 0;
  if (i >= args.size() || !absl::SimpleAtoi(args[i], &value)) {
    return std::nullopt;
  }
  return value;
}

TensorIndex RowRules::ForwardRowInput(OpIndex o, bool* gemm) const {
  const Op& op = graph_.op(o);
  *gemm = false;
  if (op.phase != Phase::kForward || op.outputs.size() != 1) return -1;
  const TensorIndex out = op.outputs[0];
  if (layout_.Prefix(out) == 0) return -1;
  const std::vector<TensorIndex> args = layout_.TensorArgs(op);
  if (args.empty()) return -1;
  if (IsType(op, {"aten::mm"}) || IsType(op, {"aten::addmm"})) {
    const bool add = IsType(op, {"aten::addmm"});
    if (args.size() != (add ? 3u : 2u)) return -1;
    const TensorIndex x = args[add ? 1 : 0];
    const TensorIndex w = args[add ? 2 : 1];
    if (!layout_.RowsFirst2D(x) || !layout_.IsWhole(w)) return -1;
    if (add && !(layout_.IsWhole(args[0]) &&
                 layout_.BroadcastsOverRows(args[0], out))) {
      return -1;
    }
    *gemm = true;
    return x;
  }
  if (IsType(op, {"aten::_log_softmax", "aten::_softmax"})) {
    return NonRowAxis(op, 1, out) ? SameRows(args[0], out) : -1;
  }
  if (IsRowView(op)) return SameRows(args[0], out);
  if (op.op_class == OpClass::kElementwise) return ElementwiseRowInput(op);
  return -1;
}

RowRules::Reader RowRules::ClassifyBackwardReader(OpIndex o,
                                                  TensorIndex t) const {
  const Op& op = graph_.op(o);
  if (op.phase != Phase::kBackward || op.outputs.size() != 1) {
    return Reader::kOutside;
  }
  const TensorIndex out = op.outputs[0];
  const std::vector<TensorIndex> args = layout_.TensorArgs(op);
  if (args.empty()) return Reader::kOutside;
  if (IsType(op, {"aten::nll_loss_backward"})) {
    // (grad_output, self, target, weight, reduction, ignore_index,
    // total_weight): rows out when the loss's gradient is a scalar.
    return layout_.Prefix(out) > 0 && graph_.tensor(args[0]).shape.empty() &&
                   args[0] != t
               ? Reader::kRowWise
               : Reader::kOutside;
  }
  if (IsType(op, {"aten::_log_softmax_backward_data",
                  "aten::_softmax_backward_data"})) {
    return layout_.Prefix(out) > 0 && NonRowAxis(op, 2, out) &&
                   SameRows(args[0], out) >= 0
               ? Reader::kRowWise
               : Reader::kOutside;
  }
  if (IsTranspose(op) && layout_.RowsFirst2D(t)) {
    return Reader::kRowWise;  // rows last: only a matmul may read it
  }
  if (IsType(op, {"aten::mm"}) && args.size() == 2) {
    if (args[0] == t && layout_.RowsFirst2D(t) && layout_.IsWhole(args[1])) {
      return Reader::kRowsOut;
    }
    if (args[0] == t && layout_.RowsLast(t) && layout_.RowsFirst2D(args[1])) {
      return Reader::kSummed;
    }
    return Reader::kOutside;
  }
  if (IsType(op, {"aten::sum"}) && SumsOverRows(op, t)) {
    return Reader::kSummed;
  }
  if (IsType(op, {"aten::select"}) && args.size() == 1 && args[0] == t &&
      IntArg(op, 1) == 0 && IntArg(op, 2).has_value() &&
      RowsPerLeadingIndex(t) > 0) {
    return Reader::kBlock;
  }
  if (layout_.Prefix(out) == 0) return Reader::kOutside;
  if (IsRowView(op)) {
    return args[0] == t && SameRows(t, out) >= 0 ? Reader::kRowWise
                                                 : Reader::kOutside;
  }
  if (op.op_class == OpClass::kElementwise && ElementwiseRowInput(op) >= 0) {
    return Reader::kRowWise;
  }
  return Reader::kOutside;
}

int64_t RowRules::RowsPerLeadingIndex(TensorIndex t) const {
  const std::vector<int64_t>& shape = graph_.tensor(t).shape;
  const int32_t prefix = layout_.Prefix(t);
  if (prefix < 2) return 0;
  int64_t rows = 1;
  for (int32_t i = 1; i < prefix; ++i) rows *= shape[i];
  return rows;
}

int64_t RowRules::StackBlockRows(OpIndex stack) const {
  const Op& op = graph_.op(stack);
  if (!IsType(op, {"aten::stack"}) || op.phase != Phase::kForward ||
      op.outputs.size() != 1) {
    return 0;
  }
  // stack(tensors, dim=0): the tensors' list is the first argument.
  const std::vector<std::string> args = PositionalArgs(op);
  if (args.empty() || (args.size() > 1 && args[1] != "0")) return 0;
  const TensorIndex out = op.outputs[0];
  const std::vector<int64_t>& shape = graph_.tensor(out).shape;
  const int64_t block_rows = RowsPerLeadingIndex(out);
  const std::vector<TensorIndex> inputs = layout_.TensorArgs(op);
  if (block_rows == 0 || shape.empty() ||
      static_cast<int64_t>(inputs.size()) != shape[0]) {
    return 0;
  }
  const std::vector<int64_t> block(shape.begin() + 1, shape.end());
  for (TensorIndex t : inputs) {
    if (graph_.tensor(t).shape != block) return 0;
  }
  return block_rows;
}

int64_t RowRules::SelectFirstRow(OpIndex o, TensorIndex t,
                                 int64_t* block_rows) const {
  *block_rows = RowsPerLeadingIndex(t);
  const int64_t index = *IntArg(graph_.op(o), 2);
  const int64_t extent = graph_.tensor(t).shape[0];
  return (index < 0 ? index + extent : index) * *block_rows;
}

bool RowRules::ReadsAsArgument(const Op& op, TensorIndex t) const {
  const std::vector<TensorIndex> args = layout_.TensorArgs(op);
  return std::find(args.begin(), args.end(), t) != args.end();
}

// The axis argument args[i] of a (log-)softmax or its backward is not one
// of the row axes of `out`.
bool RowRules::NonRowAxis(const Op& op, size_t i, TensorIndex out) const {
  const std::optional<int64_t> dim = IntArg(op, i);
  if (!dim.has_value()) return false;
  const int64_t rank = static_cast<int64_t>(graph_.tensor(out).shape.size());
  const int64_t axis = *dim < 0 ? *dim + rank : *dim;
  return axis >= layout_.Prefix(out) && axis < rank;
}

// `in` if it holds the same rows (and elements per row) as `out`.
TensorIndex RowRules::SameRows(TensorIndex in, TensorIndex out) const {
  return layout_.Prefix(in) > 0 &&
                 layout_.ElementsPerRow(in) == layout_.ElementsPerRow(out)
             ? in
             : -1;
}

// An elementwise op is row-wise when each operand has the output's shape
// (row-aligned) or broadcasts over its rows; its row input is the first
// row-aligned operand.
TensorIndex RowRules::ElementwiseRowInput(const Op& op) const {
  if (op.op_class != OpClass::kElementwise || op.outputs.size() != 1) {
    return -1;
  }
  const TensorIndex out = op.outputs[0];
  TensorIndex row_input = -1;
  for (TensorIndex t : layout_.TensorArgs(op)) {
    if (graph_.tensor(t).shape == graph_.tensor(out).shape) {
      if (row_input < 0) row_input = t;
    } else if (!layout_.BroadcastsOverRows(t, out)) {
      return -1;
    }
  }
  return row_input;
}

// aten::sum(t, [axes...]) over exactly the row axes of t.
bool RowRules::SumsOverRows(const Op& op, TensorIndex t) const {
  const std::vector<std::string> args = PositionalArgs(op);
  if (args.size() < 2 || layout_.TensorArgs(op).front() != t) return false;
  std::string list = args[1];
  list.erase(std::remove_if(list.begin(), list.end(),
                            [](char c) { return c == '[' || c == ']'; }),
             list.end());
  std::set<int64_t> axes;
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    int64_t axis = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(item), &axis)) {
      return false;
    }
    axes.insert(axis);
  }
  std::set<int64_t> rows;
  for (int64_t a = 0; a < layout_.Prefix(t); ++a) rows.insert(a);
  return axes == rows;
}

}  // namespace echo::planner
