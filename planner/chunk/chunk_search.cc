#include "planner/chunk/chunk_search.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "planner/chunk/region_builder.h"
#include "planner/chunk/row_rules.h"

namespace echo::planner {
namespace {

using Blocks = RegionBuilder::Blocks;

// The row-wise forward chain under `rules` that makes `rows`, top first,
// up to and including a matmul with a whole operand; `*top` is the row
// tensor the chain starts from.
std::vector<OpIndex> RowChainTo(const RowRules& rules, const Graph& graph,
                                TensorIndex rows, TensorIndex* top) {
  std::vector<OpIndex> chain;
  while (true) {
    const OpIndex p = graph.tensor(rows).producer;
    if (p == kNoOp) break;
    bool gemm = false;
    const TensorIndex up = rules.ForwardRowInput(p, &gemm);
    if (up < 0) break;
    chain.push_back(p);
    rows = up;
    if (gemm) break;
  }
  *top = rows;
  std::reverse(chain.begin(), chain.end());
  return chain;
}

// The forward region whose chain starts at `top` through a stack of steps'
// rows, each made by its own row-wise chain (their ops in `blocks`); empty
// when `top` is not such a stack.
std::vector<OpIndex> StackedSteps(const RowRules& rows, const Graph& graph,
                                  TensorIndex top, Blocks* blocks,
                                  int64_t* block_rows) {
  const OpIndex stack = graph.tensor(top).producer;
  if (stack == kNoOp) return {};
  *block_rows = rows.StackBlockRows(stack);
  if (*block_rows == 0) return {};
  const RowRules block(graph, *block_rows);
  std::vector<OpIndex> ops = {stack};
  const std::vector<TensorIndex> steps =
      rows.layout().TensorArgs(graph.op(stack));
  for (size_t k = 0; k < steps.size(); ++k) {
    TensorIndex unused = -1;
    for (OpIndex o : RowChainTo(block, graph, steps[k], &unused)) {
      if (blocks->count(o)) return {};  // one op for two steps
      (*blocks)[o] = static_cast<int64_t>(k) * *block_rows;
      ops.push_back(o);
    }
  }
  return blocks->empty() ? std::vector<OpIndex>{} : ops;
}

}  // namespace

ChunkRegionSearch FindChunkRegions(const Graph& graph) {
  ChunkRegionSearch search;
  std::set<OpIndex> taken;
  auto free = [&](const std::vector<OpIndex>& ops) {
    return std::none_of(ops.begin(), ops.end(),
                        [&](OpIndex c) { return taken.count(c) > 0; });
  };
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    const Op& op = graph.op(o);
    if (op.op_type != "aten::nll_loss_forward" || op.phase != Phase::kForward) {
      continue;
    }
    auto reject = [&](const std::string& why) {
      search.rejected.push_back(
          absl::StrCat("loss '", OpDisplayName(op), "' is not chunked: ", why));
    };
    const std::optional<int64_t> reduction = IntArg(op, 3);
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
    TensorIndex top = -1;
    std::vector<OpIndex> chain =
        RowChainTo(builder.rows(), graph, op.inputs[0], &top);
    chain.push_back(o);
    std::string why;
    std::optional<ChunkRegion> region;
    // First with the steps a stack joins, then without them, dropping ops
    // from the top until the region closes (an output projection whose
    // logits are also returned leaves the softmax and loss).
    Blocks blocks;
    int64_t block_rows = 0;
    // A chain that ends in the projection already starts at small rows.
    const bool projected =
        !chain.empty() &&
        IsType(graph.op(chain.front()), {"aten::mm", "aten::addmm"});
    std::vector<OpIndex> stacked =
        projected
            ? std::vector<OpIndex>{}
            : StackedSteps(builder.rows(), graph, top, &blocks, &block_rows);
    if (!stacked.empty()) {
      stacked.insert(stacked.end(), chain.begin(), chain.end());
      std::sort(stacked.begin(), stacked.end());
      if (free(stacked)) {
        region = builder.Close(stacked, blocks, block_rows, true, &why);
      }
    }
    while (!chain.empty() && !region.has_value()) {
      if (free(chain)) {
        for (bool blocks_allowed : {true, false}) {
          if (!region.has_value()) {
            region = builder.Close(chain, {}, 0, blocks_allowed, &why);
          }
        }
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
