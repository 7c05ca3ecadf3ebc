// Row-independent regions a plan may run in chunks (docs/design.md, "Plan
// actions"): a loss over rows and its backward, where row i of every tensor
// inside depends only on row i of the region's inputs, so the region can run
// on row slices one after another and only a slice of each inner tensor is
// alive at a time.
//
// What is proven, from op semantics and shapes (never from names;
// row_rules.h):
//  - the region ends in aten::nll_loss_forward over [N, C] log-probabilities
//    with reduction mean or sum (a scalar loss; per-row losses are left
//    alone);
//  - above it, a chain of row-wise forward ops: views that keep the rows
//    leading, elementwise ops whose other operands are row-aligned or
//    broadcast over the rows, (log-)softmax over a non-row axis, and at most
//    one matmul of the rows with a whole operand (the output projection);
//    or a stack (axis 0) of steps' rows, each made by such a chain of its
//    own (a decoder projecting every step: blocks, below);
//  - its backward: the ops that read those tensors, closed over row-wise
//    readers, ending where gradients leave: a matmul with a whole operand
//    (rows out), a matmul of the transposed rows with row-aligned rows or a
//    sum over the rows (whole out, summed over chunks, through the views and
//    adds that join such sums), a select of one step's block, or any other
//    reader (rows out, written slice by slice);
//  - no tensor inside is read outside the region or is a graph output, and
//    the backward needs nothing from the backward pass but the loss's scalar
//    gradient and views of tensors alive at the loss.
// Because the loss is a scalar, every gradient of the region is its
// gradient at 1 times the loss's gradient: the region's forward step can
// compute them (each chunk adds its share), and its backward step scales
// them (the Liger Kernel's fused linear cross-entropy, found on any graph).
#ifndef ECHO_PLANNER_CHUNK_CHUNK_REGION_H_
#define ECHO_PLANNER_CHUNK_CHUNK_REGION_H_

#include <cstdint>
#include <vector>

#include "planner/graph.h"

namespace echo::planner {

struct ChunkRegion {
  // The region's ops in graph order, forward and backward.
  std::vector<OpIndex> forward_ops;
  std::vector<OpIndex> backward_ops;
  // Both, in the order a chunk runs them: forward, then backward.
  std::vector<OpIndex> ops() const {
    std::vector<OpIndex> all = forward_ops;
    all.insert(all.end(), backward_ops.begin(), backward_ops.end());
    return all;
  }
  // The nll_loss_forward op.
  OpIndex loss_op = kNoOp;
  // Rows (N): the leading extent every inner tensor is split along.
  int64_t rows = 0;
  // Tensors produced and read only inside the region: never whole when it
  // runs in chunks.
  std::vector<TensorIndex> inner;
  // Read by the region, produced outside it (the loss's gradient excluded),
  // and those of them split by rows (the others are read whole).
  std::vector<TensorIndex> inputs;
  std::vector<TensorIndex> sliced_inputs;
  // The loss's gradient: the backward step's scale.
  TensorIndex loss_gradient = -1;
  // Gradients of other outputs the backward adds that the client says are
  // never sent (kUnusedOutputGradientsKey): zero, so the adds are the
  // identity.
  std::vector<TensorIndex> zero_inputs;
  // The loss op's outputs that are read outside the region or are outputs.
  std::vector<TensorIndex> loss_outputs;
  // Backward tensors read outside the region: what the region hands on.
  std::vector<TensorIndex> gradients;
  // Allocated bytes of `inner`, summed: what the unchunked region makes
  // (summed tensors excluded: never more than two of them at once).
  int64_t inner_bytes = 0;
  // Blocks: when a stack joins the rows from steps of `block_rows` rows
  // each, the ops of one step (its projection, the select of its gradient
  // and what reads it) run on that block whole, once, in the chunk that
  // holds it. Blocks start at multiples of block_rows, and chunks hold
  // whole blocks. Sorted by op.
  struct BlockOp {
    OpIndex op = kNoOp;
    int64_t first_row = 0;
  };
  int64_t block_rows = 0;  // 0: no blocks
  std::vector<BlockOp> block_ops;
  // The first row of the block `o` runs on, or -1 when it runs on chunks.
  int64_t BlockOf(OpIndex o) const;
  // Backward tensors summed over the rows (a matmul of the transposed
  // rows, a sum over them) and the views and adds of them they pass
  // through on their way out: each chunk adds its share straight into the
  // gradient they end in, so those inside are never made.
  std::vector<TensorIndex> summed;
  // Tensors of the region that are transposes of its rows (rows last)
  // although their shape is [rows, rows]: a shape alone reads them as rows
  // first (row_layout.h). Sorted.
  std::vector<TensorIndex> rows_last;
};

// Graph metadata: comma-separated ids of graph inputs (gradients of outputs
// beside the loss) that the client plans as never sent (the PyTorch hook's
// Hugging Face logits).
inline constexpr char kUnusedOutputGradientsKey[] = "unused_output_gradients";

}  // namespace echo::planner

#endif  // ECHO_PLANNER_CHUNK_CHUNK_REGION_H_
