// A small human-readable graph format, for tests and examples:
//
//   graph mlp
//   batch 32                          # optional: the graph's batch size
//   tensor x f32[B,128] input         # id, size (bytes or dtype[shape]), role
//   tensor w 65536 parameter
//   tensor gw 65536 gradient gradient_of=w   # the parameter it updates
//   op fc fwd gemm x w -> h:f32[32,128] cost=2 flops=1e6
//   op relu fwd elementwise h -> a:16384
//   op relu_bw bwd elementwise a g -> gh:16384 norecompute
//   output gh
//
// op fields: id, phase (fwd|bwd|opt), class (gemm, conv, elementwise,
// reduction, norm, softmax, data_movement, random, collective, other,
// embedding), inputs, "->", outputs (an existing id, or id:size to declare
// an activation), then key=value options: cost (relative), time (seconds),
// on (where time was measured, e.g. on=h100-80gb), flops, ws (workspace
// bytes), type (framework op type), name, recompute_outputs (graph.h), args
// (the op's arguments as the PyTorch hook records them: "args=%,1,False",
// "%" for each tensor input in order); and
// the flags
// norecompute / recompute. Roles: input, parameter, optimizer_state,
// gradient, activation; "output" after the role marks a graph output.
// After a "batch <size>" line, a dimension "B" is the batch dimension (at
// that size), "<k>B" one that folds the batch with other axes (k * size), and a
// size "<bytes>*B" is a shapeless size of <bytes> per sample, proportional to
// the batch (graph.h: Tensor::batch_dim). A size "view(f32[4,16])" is a
// view: that shape, no bytes of its own.
#ifndef ECHO_PLANNER_TEXT_FORMAT_H_
#define ECHO_PLANNER_TEXT_FORMAT_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/graph.h"

namespace echo::planner {

absl::StatusOr<Graph> ParseTextGraph(absl::string_view text);
// The declarations only: syntax errors, no graph validation (Build does it).
absl::StatusOr<GraphBuilder> ParseTextGraphSpecs(absl::string_view text);

absl::StatusOr<OpClass> ParseOpClass(absl::string_view name);
absl::StatusOr<Phase> ParsePhase(absl::string_view name);
absl::StatusOr<TensorRole> ParseTensorRole(absl::string_view name);
absl::StatusOr<DType> ParseDType(absl::string_view name);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_TEXT_FORMAT_H_
