#include "planner/chunk/region_builder.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace echo::planner {
namespace {

using Reader = RowRules::Reader;

// An op with no keyword arguments (an add without alpha).
bool HasNoKeywords(const Op& op) {
  auto it = op.attributes.find(kArgsAttribute);
  return it != op.attributes.end() && absl::EndsWith(it->second, "{})");
}

}  // namespace

// Grows the region from the forward `chain` (graph order, ending in the
// loss op; `blocks` its ops on steps of `block_rows` rows) into the
// backward. Nullopt (with `why`) when it cannot be proven
// row-independent.
// With `blocks_allowed` false, selects of the rows stay outside (the
// rows' gradient leaves whole).
std::optional<ChunkRegion> RegionBuilder::Close(
    const std::vector<OpIndex>& chain, const Blocks& blocks, int64_t block_rows,
    bool blocks_allowed, std::string* why) {
  blocks_allowed_ = blocks_allowed;
  rows_.mutable_layout().ClearMarks();
  region_ops_.clear();
  summed_.clear();
  block_of_ = blocks;
  block_rules_.reset();
  if (block_rows > 0) block_rules_.emplace(graph_, block_rows);
  for (OpIndex o : chain) region_ops_.insert(o);
  ChunkRegion region;
  region.forward_ops = chain;
  region.loss_op = chain.back();
  region.rows = rows_.layout().rows();
  region.block_rows = block_rows;
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
    const RowRules& rules = RulesOf(t);
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
      if (!rules.ReadsAsArgument(r, t)) {
        as_base.emplace_back(t, reader);
        continue;
      }
      if (r.phase == Phase::kForward) {
        if (loss_output) continue;  // the loss goes on outside
        bool gemm = false;
        if (rules.ForwardRowInput(reader, &gemm) < 0 || gemm) {
          return Refuse(why, t,
                        absl::StrCat("is read by forward op '", r.id,
                                     "', which is not row-wise"));
        }
        Join(reader, BlockOfTensor(t), region.forward_ops);
        for (TensorIndex out : r.outputs) frontier.push_back(out);
        continue;
      }
      const Reader kind = rules.ClassifyBackwardReader(reader, t);
      if (kind == Reader::kOutside ||
          (kind == Reader::kBlock && !JoinsBlock(reader, t, region))) {
        if (forward_tensor || rules.layout().RowsLast(t)) {
          return Refuse(why, t,
                        absl::StrCat("is read by backward op '", r.id,
                                     "', which is not row-wise"));
        }
        gradients.insert(t);
        continue;
      }
      if (kind != Reader::kBlock) {
        Join(reader, BlockOfTensor(t), region.backward_ops);
      }
      // A transpose of the rows makes rows last, also when its shape is
      // [rows, rows] and reads as rows first.
      const bool transposes = kind == Reader::kRowWise && IsTranspose(r);
      for (TensorIndex out : r.outputs) {
        if (transposes) MutableRulesOf(out).mutable_layout().MarkRowsLast(out);
        if (kind == Reader::kRowsOut || kind == Reader::kSummed) {
          gradients.insert(out);
          if (kind == Reader::kSummed) summed_.insert(out);
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
  JoinSums(region, gradients);
  if (!HandOnStorage(region, gradients, why)) return std::nullopt;
  std::sort(region.forward_ops.begin(), region.forward_ops.end());
  std::sort(region.backward_ops.begin(), region.backward_ops.end());
  region.gradients.assign(gradients.begin(), gradients.end());
  if (!PullBackwardViews(region, why)) return std::nullopt;
  if (!CheckBlocks(region, why)) return std::nullopt;
  if (!CollectTensors(region, why)) return std::nullopt;
  return region;
}

std::optional<ChunkRegion> RegionBuilder::Refuse(
    std::string* why, TensorIndex t, const std::string& what) const {
  *why = absl::StrCat("tensor '", graph_.tensor(t).id, "' ", what);
  return std::nullopt;
}

void RegionBuilder::Join(OpIndex o, int64_t block, std::vector<OpIndex>& ops) {
  region_ops_.insert(o);
  ops.push_back(o);
  if (block >= 0) block_of_[o] = block;
}

// The first row of the block `t` holds, or -1 (the region's rows).
int64_t RegionBuilder::BlockOfTensor(TensorIndex t) const {
  auto it = block_of_.find(graph_.tensor(t).producer);
  return it == block_of_.end() ? -1 : it->second;
}

const RowRules& RegionBuilder::RulesOf(TensorIndex t) const {
  return BlockOfTensor(t) >= 0 ? *block_rules_ : rows_;
}

RowRules& RegionBuilder::MutableRulesOf(TensorIndex t) {
  return BlockOfTensor(t) >= 0 ? *block_rules_ : rows_;
}

// A select of one block of the rows joins when its blocks are the
// region's (or the region has none yet) and start at a multiple of them.
bool RegionBuilder::JoinsBlock(OpIndex select, TensorIndex t,
                               ChunkRegion& region) {
  if (!blocks_allowed_ || BlockOfTensor(t) >= 0) return false;
  int64_t block_rows = 0;
  const int64_t first = rows_.SelectFirstRow(select, t, &block_rows);
  if (region.block_rows == 0) {
    region.block_rows = block_rows;
    block_rules_.emplace(graph_, block_rows);
  }
  if (block_rows != region.block_rows || first % block_rows != 0 || first < 0 ||
      first >= region.rows) {
    return false;
  }
  Join(select, first, region.backward_ops);
  return true;
}

// Summed gradients pass through views and adds of one another on their
// way out (a step's projection's gradient, added over the steps): those
// join, so each chunk adds its share straight into the gradient they
// end in.
void RegionBuilder::JoinSums(ChunkRegion& region,
                             std::set<TensorIndex>& gradients) {
  // The one op that computes with `g` (others read it as a view's base:
  // views of it on the same way out).
  auto single_reader = [&](TensorIndex g) -> OpIndex {
    const Tensor& tensor = graph_.tensor(g);
    if (!summed_.count(g) || !gradients.count(g) || tensor.is_output) {
      return kNoOp;
    }
    OpIndex reader = kNoOp;
    for (OpIndex r : tensor.readers) {
      if (!rows_.ReadsAsArgument(graph_.op(r), g)) continue;
      if (reader != kNoOp) return kNoOp;
      reader = r;
    }
    return reader;
  };
  bool changed = true;
  while (changed) {
    changed = false;
    for (TensorIndex g : gradients) {
      const OpIndex r = single_reader(g);
      if (r == kNoOp || region_ops_.count(r)) continue;
      const Op& op = graph_.op(r);
      const std::vector<TensorIndex> args = rows_.layout().TensorArgs(op);
      if (op.phase != Phase::kBackward || op.outputs.size() != 1 ||
          args.empty()) {
        continue;
      }
      const bool view = IsWholeView(op) && args.size() == 1;
      const bool add =
          IsType(op, {"aten::add"}) && args.size() == 2 && HasNoKeywords(op) &&
          args[0] != args[1] &&
          std::all_of(args.begin(), args.end(),
                      [&](TensorIndex a) { return single_reader(a) == r; });
      if (!view && !add) continue;
      Join(r, -1, region.backward_ops);
      for (TensorIndex a : args) gradients.erase(a);
      gradients.insert(op.outputs[0]);
      summed_.insert(op.outputs[0]);
      changed = true;
      break;
    }
  }
}

// A gradient that is a view of the region's (zero bytes of its own)
// would hand on no storage: its view op leaves the region and the viewed
// tensor is handed on instead, until each gradient owns its bytes. A view
// of what the region did not make (a graph input) cannot be handed on:
// the region is refused.
bool RegionBuilder::HandOnStorage(ChunkRegion& region,
                                  std::set<TensorIndex>& gradients,
                                  std::string* why) {
  bool changed = true;
  while (changed) {
    changed = false;
    for (TensorIndex g : gradients) {
      const OpIndex p = graph_.tensor(g).producer;
      if (graph_.tensor(g).size_bytes != 0 || p == kNoOp ||
          graph_.op(p).phase == Phase::kForward) {
        continue;
      }
      const std::vector<TensorIndex> args =
          rows_.layout().TensorArgs(graph_.op(p));
      if (args.empty()) continue;
      const OpIndex base = graph_.tensor(args[0]).producer;
      if (base == kNoOp || base == p || !region_ops_.count(base)) {
        *why = absl::StrCat("gradient '", graph_.tensor(g).id,
                            "' is a view of '", graph_.tensor(args[0]).id,
                            "', which the region does not make");
        return false;
      }
      region_ops_.erase(p);
      block_of_.erase(p);
      region.backward_ops.erase(std::remove(region.backward_ops.begin(),
                                            region.backward_ops.end(), p),
                                region.backward_ops.end());
      for (TensorIndex out : graph_.op(p).outputs) {
        gradients.erase(out);
        summed_.erase(out);
      }
      gradients.insert(args[0]);
      changed = true;
      break;
    }
  }
  return true;
}

// Backward ops may read, besides the region's tensors, the loss's scalar
// gradient and tensors alive at the loss (its forward step runs them); a
// zero-byte view made in the backward of such a tensor joins the region.
bool RegionBuilder::PullBackwardViews(ChunkRegion& region, std::string* why) {
  for (size_t i = 0; i < region.backward_ops.size(); ++i) {
    const Op& op = graph_.op(region.backward_ops[i]);
    for (TensorIndex t : op.inputs) {
      const OpIndex p = graph_.tensor(t).producer;
      if (region_ops_.count(p) || AliveAtLoss(t, region.forward_ops.back()))
        continue;
      if (IsType(op, {"aten::nll_loss_backward"}) &&
          t == rows_.layout().TensorArgs(op).front()) {
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

// A block's ops run only in its chunk, on it whole: they may read their
// own block's tensors and whole ones, and only the stack and the sums
// read blocks from outside them.
bool RegionBuilder::CheckBlocks(ChunkRegion& region, std::string* why) const {
  for (OpIndex o : region.ops()) {
    const int64_t block = block_of_.count(o) ? block_of_.at(o) : -1;
    const Op& op = graph_.op(o);
    const bool joins_blocks =
        IsType(op, {"aten::stack"}) ||
        (!op.outputs.empty() && summed_.count(op.outputs[0]) > 0);
    // What the op computes with (a view's base only keeps storage).
    const std::vector<TensorIndex> args = rows_.layout().TensorArgs(op);
    for (TensorIndex t : args.empty() ? op.inputs : args) {
      const OpIndex p = graph_.tensor(t).producer;
      if (p == kNoOp || !region_ops_.count(p)) continue;
      const int64_t from = BlockOfTensor(t);
      const bool ok =
          block >= 0
              ? from == block || (from < 0 && (IsType(op, {"aten::select"}) ||
                                               (rows_.layout().Prefix(t) == 0 &&
                                                !rows_.layout().RowsLast(t))))
              : from < 0 || joins_blocks;
      if (!ok) {
        *why = absl::StrCat("op '", op.id, "' reads '", graph_.tensor(t).id,
                            "' across the blocks of its steps");
        return false;
      }
    }
  }
  for (const auto& [op, first_row] : block_of_) {
    if (region_ops_.count(op)) region.block_ops.push_back({op, first_row});
  }
  if (region.block_ops.empty()) region.block_rows = 0;
  return true;
}

// A zero-byte graph input the client says is never sent.
bool RegionBuilder::IsNeverSent(TensorIndex t) const {
  const Tensor& tensor = graph_.tensor(t);
  if (tensor.producer != kNoOp || tensor.size_bytes != 0) return false;
  auto it = graph_.metadata().find(kUnusedOutputGradientsKey);
  if (it == graph_.metadata().end()) return false;
  for (absl::string_view id : absl::StrSplit(it->second, ',')) {
    if (id == tensor.id) return true;
  }
  return false;
}

bool RegionBuilder::IsZeroByteView(OpIndex o, OpIndex step) const {
  const Op& op = graph_.op(o);
  return op.phase != Phase::kForward && !op.outputs.empty() &&
         std::all_of(
             op.outputs.begin(), op.outputs.end(),
             [&](TensorIndex t) { return graph_.tensor(t).size_bytes == 0; }) &&
         std::all_of(op.inputs.begin(), op.inputs.end(),
                     [&](TensorIndex t) { return AliveAtLoss(t, step); });
}

// Made before the region's forward step `step`, or a graph input the
// forward reads (inputs only the backward reads are gradients of
// outputs: not there yet when the forward runs).
bool RegionBuilder::AliveAtLoss(TensorIndex t, OpIndex step) const {
  const Tensor& tensor = graph_.tensor(t);
  if (tensor.producer != kNoOp) return tensor.producer < step;
  if (IsPersistentRole(tensor.role)) return true;
  return std::any_of(
      tensor.readers.begin(), tensor.readers.end(),
      [&](OpIndex r) { return graph_.op(r).phase == Phase::kForward; });
}

bool RegionBuilder::CollectTensors(ChunkRegion& region,
                                   std::string* why) const {
  std::set<TensorIndex> inputs, read_by_chunks;
  const std::set<TensorIndex> gradients(region.gradients.begin(),
                                        region.gradients.end());
  for (OpIndex o : region.ops()) {
    for (TensorIndex t : graph_.op(o).inputs) {
      if (!region_ops_.count(graph_.tensor(t).producer) &&
          t != region.loss_gradient &&
          std::find(region.zero_inputs.begin(), region.zero_inputs.end(), t) ==
              region.zero_inputs.end()) {
        inputs.insert(t);
        if (!block_of_.count(o)) read_by_chunks.insert(t);
      }
    }
    for (TensorIndex t : graph_.op(o).outputs) {
      if (summed_.count(t)) region.summed.push_back(t);
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
      if (!summed_.count(t)) region.inner_bytes += graph_.tensor(t).size_bytes;
    }
  }
  region.inputs.assign(inputs.begin(), inputs.end());
  // A block's inputs are read whole by its ops.
  for (TensorIndex t : region.inputs) {
    if (read_by_chunks.count(t) && rows_.layout().Prefix(t) > 0 &&
        !rows_.layout().IsWhole(t)) {
      region.sliced_inputs.push_back(t);
    }
  }
  std::sort(region.inner.begin(), region.inner.end());
  std::sort(region.summed.begin(), region.summed.end());
  std::set<TensorIndex> rows_last = rows_.layout().marked_rows_last();
  if (block_rules_.has_value()) {
    const std::set<TensorIndex>& marked =
        block_rules_->layout().marked_rows_last();
    rows_last.insert(marked.begin(), marked.end());
  }
  for (TensorIndex t : rows_last) {
    if (region_ops_.count(graph_.tensor(t).producer)) {
      region.rows_last.push_back(t);
    }
  }
  if (region.inner_bytes == 0) {
    *why = "nothing inside the region takes memory";
    return false;
  }
  return true;
}

bool RegionBuilder::ReadOutside(TensorIndex t) const {
  const Tensor& tensor = graph_.tensor(t);
  return tensor.is_output ||
         std::any_of(tensor.readers.begin(), tensor.readers.end(),
                     [&](OpIndex r) { return !region_ops_.count(r); });
}

}  // namespace echo::planner
