// The batch dimension (graph.proto: Graph.batch_size, Tensor.batch_dim):
// a graph exported at one batch size, rescaled to another.
//
// At batch B, for a graph given at batch B0 = Graph::batch_size():
//  - a tensor that marks batch_dim gets shape[batch_dim] = k * B (k = its
//    base shape[batch_dim] / B0: 1, or the axes folded with the batch) and size
//    size_bytes * B / B0, rounded up (exact for sizes derived from shapes,
//    whose bytes carry the factor B0; a shapeless size marked 0 is taken as
//    proportional to the batch);
//  - an op that reads or writes a marked tensor has its flops, workspace,
//    measured time and relative cost scaled by B / B0 (workspace rounded
//    up); other ops keep theirs (optimizer steps touch only parameters);
//  - parameters, optimizer state and unmarked tensors keep their sizes.
#ifndef ECHO_PLANNER_BATCH_H_
#define ECHO_PLANNER_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/graph.h"

namespace echo::planner {

// True when the graph has a batch size and some tensor marks batch_dim.
bool HasBatchDimension(const Graph& graph);

// Rescales copies of a graph to any batch. The copy is made once; each At
// rewrites its sizes in place (linear, no allocation), so a search over
// batch sizes costs one graph copy.
class BatchScaler {
 public:
  // FAILED_PRECONDITION naming the graph when it has no batch dimension.
  static absl::StatusOr<BatchScaler> Create(const Graph& graph);

  // The graph at `batch` (>= 1). The reference stays valid until the next
  // At. INVALID_ARGUMENT for a batch < 1; RESOURCE_EXHAUSTED naming the
  // tensor when a size overflows the planner's int64 bounds.
  absl::StatusOr<const Graph*> At(int64_t batch);

  int64_t base_batch() const { return base_batch_; }

 private:
  explicit BatchScaler(const Graph& graph);

  Graph graph_;
  int64_t base_batch_ = 0;
  int64_t unscaled_bytes_ = 0;  // sizes of the tensors that do not scale
  // The base values, for the marked tensors and scaled ops only.
  std::vector<TensorIndex> scaled_tensors_;
  std::vector<int64_t> base_tensor_bytes_;
  std::vector<int64_t> batch_multiples_;  // k above, 0 when shapeless
  // An op's numbers that scale with the batch, at the base batch.
  struct OpNumbers {
    double flops;
    double measured_time_seconds;
    double relative_cost;
    int64_t workspace_bytes;
  };
  std::vector<OpIndex> scaled_ops_;
  std::vector<OpNumbers> base_ops_;
};

// One-off: the graph rescaled to `batch`.
absl::StatusOr<Graph> WithBatchSize(const Graph& graph, int64_t batch);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_BATCH_H_
