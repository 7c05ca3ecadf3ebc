#include "planner/chunk/chunk_region.h"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "planner/chunk/row_layout.h"

namespace echo::planner {
namespace {

bool IsType(const Op& op, std::initializer_list<absl::string_view> types) {
  return std::find(types.begin(), types.end(), op.op_type) != types.end();
}

// Ops that pass their first argument's rows through unchanged in order.
bool IsRowView(const Op& op) {
  return IsType(
      op, {"aten::view", "aten::_unsafe_view", "aten::reshape",
           "aten::_reshape_alias", "aten::alias", "aten::detach", "aten::clone",
           "aten::contiguous", "aten::_to_copy", "aten::lift_fresh_copy"});
}

std::optional<int64_t> IntArg(const std::vector<std::string>& args, size_t i) {
  int64_t value = 0;
  if (i >= args.size() || !absl::SimpleAtoi(args[i], &value)) {
    return std::nullopt;
  }
  return value;
}

// The region's ops and what they read and make, as it grows.
class RegionBuilder {
 public:
  RegionBuilder(const Graph& graph, int64_t rows)
      : graph_(graph), layout_(graph, rows) {}

  // The row input of a forward op that makes rows `out` row-wise, or -1.
  // A matmul with a whole operand is row-wise too; `*gemm` says it ended
  // the chain (its row input is the region's input).
  TensorIndex ForwardRowInput(OpIndex o, bool* gemm) const {
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

  // Grows the region from the forward `chain` (graph order, ending in the
  // loss op) into the backward. Nullopt (with `why`) when it cannot be
  // proven row-independent.
  std::optional<ChunkRegion> Close(const std::vector<OpIndex>& chain,
                                   std::string* why) {
    region_ops_.clear();
    for (OpIndex o : chain) region_ops_.insert(o);
    ChunkRegion region;
    region.forward_ops = chain;
    region.loss_op = chain.back();
    region.rows = layout_.rows();
    // Breadth over the region's tensors: readers outside become backward
    // ops, gradients, or a reason to refuse.
    std::vector<TensorIndex> frontier;
    for (OpIndex o : chain) {
      for (TensorIndex t : graph_.op(o).outputs) frontier.push_back(t);
    }
    std::set<TensorIndex> gradients;
    std::vector<std::pair<TensorIndex, OpIndex>> as_base;
    for (size_t i = 0; i < frontier.size(); ++i) {
      const TensorIndex t = frontier[i];
      const OpIndex producer = graph_.tensor(t).producer;
      const bool forward_tensor = graph_.op(producer).phase == Phase::kForward;
      const bool loss_output = producer == region.loss_op;
      if (graph_.tensor(t).is_output && !loss_output) {
        if (forward_tensor) return Refuse(why, t, "is a graph output");
        gradients.insert(t);
        continue;
      }
      for (OpIndex reader : graph_.tensor(t).readers) {
        if (region_ops_.count(reader)) continue;
        const Op& r = graph_.op(reader);
        // Read only as a view's base: the reader joins (or not) through
        // the view; settled once the region is closed.
        if (!ReadsAsArgument(r, t)) {
          as_base.emplace_back(t, reader);
          continue;
        }
        if (r.phase == Phase::kForward) {
          if (loss_output) continue;  // the loss goes on outside
          bool gemm = false;
          if (ForwardRowInput(reader, &gemm) < 0 || gemm) {
            return Refuse(why, t,
                          absl::StrCat("is read by forward op '", r.id,
                                       "', which is not row-wise"));
          }
          region_ops_.insert(reader);
          region.forward_ops.push_back(reader);
          for (TensorIndex out : r.outputs) frontier.push_back(out);
          continue;
        }
        const Reader kind = ClassifyBackwardReader(reader, t);
        if (kind == Reader::kOutside) {
          if (forward_tensor || layout_.RowsLast(t)) {
            return Refuse(why, t,
                          absl::StrCat("is read by backward op '", r.id,
                                       "', which is not row-wise"));
          }
          gradients.insert(t);
          continue;
        }
        region_ops_.insert(reader);
        region.backward_ops.push_back(reader);
        for (TensorIndex out : r.outputs) {
          if (kind == Reader::kTerminal) {
            gradients.insert(out);
          } else {
            frontier.push_back(out);
          }
        }
      }
    }
    // A view made outside the region of a tensor inside it: a forward
    // tensor may not be seen whole, a backward one is handed on.
    for (const auto& [t, reader] : as_base) {
      if (region_ops_.count(reader)) continue;
      if (graph_.op(graph_.tensor(t).producer).phase == Phase::kForward) {
        return Refuse(why, t,
                      absl::StrCat("is viewed by op '", graph_.op(reader).id,
                                   "' outside the region"));
      }
      gradients.insert(t);
    }
    HandOnStorage(region, gradients);
    std::sort(region.forward_ops.begin(), region.forward_ops.end());
    std::sort(region.backward_ops.begin(), region.backward_ops.end());
    region.gradients.assign(gradients.begin(), gradients.end());
    if (!PullBackwardViews(region, why)) return std::nullopt;
    if (!CollectTensors(region, why)) return std::nullopt;
    return region;
  }

 private:
  enum class Reader { kRowWise, kTerminal, kOutside };

  std::optional<ChunkRegion> Refuse(std::string* why, TensorIndex t,
                                    const std::string& what) const {
    *why = absl::StrCat("tensor '", graph_.tensor(t).id, "' ", what);
    return std::nullopt;
  }

  bool ReadsAsArgument(const Op& op, TensorIndex t) const {
    const std::vector<TensorIndex> args = layout_.TensorArgs(op);
    return std::find(args.begin(), args.end(), t) != args.end();
  }

  // A gradient that is a view of the region's (zero bytes of its own)
  // would hand on no storage: its view op leaves the region and the viewed
  // tensor is handed on instead, until each gradient owns its bytes.
  void HandOnStorage(ChunkRegion& region, std::set<TensorIndex>& gradients) {
    bool changed = true;
    while (changed) {
      changed = false;
      for (TensorIndex g : gradients) {
        const OpIndex p = graph_.tensor(g).producer;
        const std::vector<TensorIndex> args = layout_.TensorArgs(graph_.op(p));
        if (graph_.tensor(g).size_bytes != 0 || args.empty() ||
            graph_.op(p).phase == Phase::kForward) {
          continue;
        }
        region_ops_.erase(p);
        region.backward_ops.erase(std::remove(region.backward_ops.begin(),
                                              region.backward_ops.end(), p),
                                  region.backward_ops.end());
        for (TensorIndex out : graph_.op(p).outputs) gradients.erase(out);
        gradients.insert(args[0]);
        changed = true;
        break;
      }
    }
  }

  // The axis argument args[i] of a (log-)softmax or its backward is not one
  // of the row axes of `out`.
  bool NonRowAxis(const Op& op, size_t i, TensorIndex out) const {
    const std::optional<int64_t> dim = IntArg(PositionalArgs(op), i);
    if (!dim.has_value()) return false;
    const int64_t rank = static_cast<int64_t>(graph_.tensor(out).shape.size());
    const int64_t axis = *dim < 0 ? *dim + rank : *dim;
    return axis >= layout_.Prefix(out) && axis < rank;
  }

  // `in` if it holds the same rows (and elements per row) as `out`.
  TensorIndex SameRows(TensorIndex in, TensorIndex out) const {
    return layout_.Prefix(in) > 0 &&
                   layout_.ElementsPerRow(in) == layout_.ElementsPerRow(out)
               ? in
               : -1;
  }

  // An elementwise op is row-wise when each operand has the output's shape
  // (row-aligned) or broadcasts over its rows; its row input is the first
  // row-aligned operand.
  TensorIndex ElementwiseRowInput(const Op& op) const {
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

  // How backward op `o` reads region tensor `t`.
  Reader ClassifyBackwardReader(OpIndex o, TensorIndex t) const {
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
    if (IsType(op, {"aten::t"}) && layout_.RowsFirst2D(t)) {
      return Reader::kRowWise;  // rows last: only a matmul may read it
    }
    if (IsType(op, {"aten::mm"}) && args.size() == 2) {
      if (args[0] == t && layout_.RowsFirst2D(t) && layout_.IsWhole(args[1])) {
        return Reader::kTerminal;  // rows out, slice by slice
      }
      if (args[0] == t && layout_.RowsLast(t) && layout_.RowsFirst2D(args[1])) {
        return Reader::kTerminal;  // summed over the rows
      }
      return Reader::kOutside;
    }
    if (IsType(op, {"aten::sum"}) && SumsOverRows(op, t)) {
      return Reader::kTerminal;
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

  // aten::sum(t, [axes...]) over exactly the row axes of t.
  bool SumsOverRows(const Op& op, TensorIndex t) const {
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

  // Backward ops may read, besides the region's tensors, the loss's scalar
  // gradient and tensors alive at the loss (its forward step runs them); a
  // zero-byte view made in the backward of such a tensor joins the region.
  bool PullBackwardViews(ChunkRegion& region, std::string* why) {
    for (size_t i = 0; i < region.backward_ops.size(); ++i) {
      const Op& op = graph_.op(region.backward_ops[i]);
      for (TensorIndex t : op.inputs) {
        const OpIndex p = graph_.tensor(t).producer;
        if (region_ops_.count(p) || AliveAtLoss(t, region.forward_ops.back()))
          continue;
        if (IsType(op, {"aten::nll_loss_backward"}) &&
            t == layout_.TensorArgs(op).front()) {
          if (region.loss_gradient >= 0 && region.loss_gradient != t) {
            *why = "the loss's backward reads two scalar gradients";
            return false;
          }
          region.loss_gradient = t;
          continue;
        }
        if (IsNeverSent(t)) {
          if (std::find(region.zero_inputs.begin(), region.zero_inputs.end(),
                        t) == region.zero_inputs.end()) {
            region.zero_inputs.push_back(t);
          }
          continue;
        }
        const bool pullable =
            p != kNoOp && IsZeroByteView(p, region.forward_ops.back()) &&
            std::all_of(graph_.tensor(t).readers.begin(),
                        graph_.tensor(t).readers.end(),
                        [&](OpIndex r) { return region_ops_.count(r) > 0; });
        if (!pullable) {
          *why = absl::StrCat("backward op '", op.id, "' reads '",
                              graph_.tensor(t).id,
                              "', which the loss's forward step cannot see");
          return false;
        }
        region_ops_.insert(p);
        region.backward_ops.push_back(p);
      }
    }
    std::sort(region.backward_ops.begin(), region.backward_ops.end());
    if (!region.backward_ops.empty() && region.loss_gradient < 0) {
      *why = "the backward does not start from the loss's scalar gradient";
      return false;
    }
    if (region.loss_gradient >= 0) {
      const OpIndex p = graph_.tensor(region.loss_gradient).producer;
      if (p != kNoOp && p >= region.backward_ops.front()) {
        *why = "the loss's gradient is made inside the region's backward";
        return false;
      }
    }
    return true;
  }

  // A zero-byte graph input the client says is never sent.
  bool IsNeverSent(TensorIndex t) const {
    const Tensor& tensor = graph_.tensor(t);
    if (tensor.producer != kNoOp || tensor.size_bytes != 0) return false;
    auto it = graph_.metadata().find(kUnusedOutputGradientsKey);
    if (it == graph_.metadata().end()) return false;
    for (absl::string_view id : absl::StrSplit(it->second, ',')) {
      if (id == tensor.id) return true;
    }
    return false;
  }

  bool IsZeroByteView(OpIndex o, OpIndex step) const {
    const Op& op = graph_.op(o);
    return op.phase != Phase::kForward && !op.outputs.empty() &&
           std::all_of(op.outputs.begin(), op.outputs.end(),
                       [&](TensorIndex t) {
                         return graph_.tensor(t).size_bytes == 0;
                       }) &&
           std::all_of(op.inputs.begin(), op.inputs.end(),
                       [&](TensorIndex t) { return AliveAtLoss(t, step); });
  }

  // Made before the region's forward step `step`, or a graph input the
  // forward reads (inputs
  // only the backward reads are gradients of outputs: not there yet when
  // the forward runs).
  bool AliveAtLoss(TensorIndex t, OpIndex step) const {
    const Tensor& tensor = graph_.tensor(t);
    if (tensor.producer != kNoOp) return tensor.producer < step;
    if (IsPersistentRole(tensor.role)) return true;
    return std::any_of(
        tensor.readers.begin(), tensor.readers.end(),
        [&](OpIndex r) { return graph_.op(r).phase == Phase::kForward; });
  }

  bool CollectTensors(ChunkRegion& region, std::string* why) const {
    std::set<TensorIndex> inputs;
    const std::set<TensorIndex> gradients(region.gradients.begin(),
                                          region.gradients.end());
    auto visit = [&](const std::vector<OpIndex>& ops) -> bool {
      for (OpIndex o : ops) {
        for (TensorIndex t : graph_.op(o).inputs) {
          if (!region_ops_.count(graph_.tensor(t).producer) &&
              t != region.loss_gradient &&
              std::find(region.zero_inputs.begin(), region.zero_inputs.end(),
                        t) == region.zero_inputs.end()) {
            inputs.insert(t);
          }
        }
        for (TensorIndex t : graph_.op(o).outputs) {
          if (gradients.count(t)) continue;
          if (o == region.loss_op && ReadOutside(t)) {
            // The region's forward step makes it: nobody may read it first.
            for (OpIndex r : graph_.tensor(t).readers) {
              if (!region_ops_.count(r) && r < region.forward_ops.back()) {
                *why = absl::StrCat("op '", graph_.op(r).id,
                                    "' reads the loss inside the region");
                return false;
              }
            }
            region.loss_outputs.push_back(t);
            continue;
          }
          region.inner.push_back(t);
          region.inner_bytes += graph_.tensor(t).size_bytes;
        }
      }
      return true;
    };
    if (!visit(region.ops())) {
      return false;
    }
    region.inputs.assign(inputs.begin(), inputs.end());
    for (TensorIndex t : region.inputs) {
      if (layout_.Prefix(t) > 0 && !layout_.IsWhole(t)) {
        region.sliced_inputs.push_back(t);
      }
    }
    std::sort(region.inner.begin(), region.inner.end());
    if (region.inner_bytes == 0) {
      *why = "nothing inside the region takes memory";
      return false;
    }
    return true;
  }

  bool ReadOutside(TensorIndex t) const {
    const Tensor& tensor = graph_.tensor(t);
    return tensor.is_output ||
           std::any_of(tensor.readers.begin(), tensor.readers.end(),
                       [&](OpIndex r) { return !region_ops_.count(r); });
  }

 private:
  const Graph& graph_;
  RowLayout layout_;
  std::set<OpIndex> region_ops_;
};

// The forward chain that ends in loss op `loss`, longest first: the loss
// and the row-wise ops above it, up to and including the output
// projection.
std::vector<OpIndex> ForwardChain(const RegionBuilder& builder,
                                  const Graph& graph, OpIndex loss,
                                  TensorIndex log_probs) {
  std::vector<OpIndex> chain = {loss};
  TensorIndex rows = log_probs;
  while (true) {
    const OpIndex p = graph.tensor(rows).producer;
    if (p == kNoOp) break;
    bool gemm = false;
    const TensorIndex up = builder.ForwardRowInput(p, &gemm);
    if (up < 0) break;
    chain.push_back(p);
    if (gemm) break;
    rows = up;
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

}  // namespace

std::vector<std::string> PositionalArgs(const Op& op) {
  std::vector<std::string> items;
  auto it = op.attributes.find("args");
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

ChunkRegionSearch FindChunkRegions(const Graph& graph) {
  ChunkRegionSearch search;
  std::set<OpIndex> taken;
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    const Op& op = graph.op(o);
    if (op.op_type != "aten::nll_loss_forward" || op.phase != Phase::kForward) {
      continue;
    }
    auto reject = [&](const std::string& why) {
      search.rejected.push_back(
          absl::StrCat("loss '", OpDisplayName(op), "' is not chunked: ", why));
    };
    const std::vector<std::string> args = PositionalArgs(op);
    const std::optional<int64_t> reduction = IntArg(args, 3);
    if (!reduction.has_value() || (*reduction != 1 && *reduction != 2)) {
      reject("its reduction is not mean or sum");
      continue;
    }
    if (op.inputs.size() < 2 || graph.tensor(op.inputs[0]).shape.size() != 2) {
      reject("its input is not [rows, classes]");
      continue;
    }
    const int64_t rows = graph.tensor(op.inputs[0]).shape[0];
    if (rows < 2 ||
        graph.tensor(op.inputs[1]).shape != std::vector<int64_t>{rows}) {
      reject("its targets are not one per row");
      continue;
    }
    RegionBuilder builder(graph, rows);
    std::vector<OpIndex> chain = ForwardChain(builder, graph, o, op.inputs[0]);
    // Drop ops from the top until the region closes (an output projection
    // whose logits are also returned leaves the softmax and loss).
    std::string why;
    std::optional<ChunkRegion> region;
    while (!chain.empty() && !region.has_value()) {
      if (std::none_of(chain.begin(), chain.end(),
                       [&](OpIndex c) { return taken.count(c) > 0; })) {
        region = builder.Close(chain, &why);
      }
      chain.erase(chain.begin());
    }
    if (!region.has_value()) {
      reject(why.empty() ? "its ops belong to another region" : why);
      continue;
    }
    for (OpIndex r : region->ops()) taken.insert(r);
    search.regions.push_back(*std::move(region));
  }
  return search;
}

}  // namespace echo::planner
