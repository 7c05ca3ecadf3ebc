// Importer for the Checkmate training graphs (networkx node-link JSON, as
// published with the Moccasin paper). Each node becomes an op whose id is the
// node id in decimal, with one output tensor of the same id and `cost_ram`
// bytes; `cost_cpu` is its relative cost; `backward` gives the phase. Ops run
// in node-id order; an op's inputs are its in-links in file order.
#ifndef ECHO_PLANNER_CHECKMATE_IMPORT_H_
#define ECHO_PLANNER_CHECKMATE_IMPORT_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/graph.h"

namespace echo::planner {

// Checkmate's nodes are activations and their gradients (parameters are not
// nodes), so with a batch size every node's output is marked proportional
// to the batch (Tensor::batch_dim 0 on a shapeless size).
inline constexpr int64_t kCheckmateBatchFromName = -1;
struct CheckmateImportOptions {
  // 0: no batch dimension; > 0: the graph is at this batch;
  // kCheckmateBatchFromName: from the graph's name (CheckmateBatchFromName),
  // INVALID_ARGUMENT when it has none.
  int64_t batch_size = 0;
};

// The batch in a Checkmate file name ("vgg16_b256_train.json": 256) or
// graph name ("VGG16 (MLSys)_256_(224, 224, 3)_train": 256); 0 when absent.
int64_t CheckmateBatchFromName(absl::string_view name);

// Parses the JSON text (the caller reads the file).
absl::StatusOr<Graph> ImportCheckmateJson(
    absl::string_view json_text, const CheckmateImportOptions& options = {});
// The declarations only: JSON errors, no graph validation (Build does it).
absl::StatusOr<GraphBuilder> ImportCheckmateSpecs(
    absl::string_view json_text, const CheckmateImportOptions& options = {});

// Op class from a Keras layer name ("block1_conv2", "fc1_backward", ...),
// so that rule-based policies see convolutions and dense layers.
OpClass OpClassFromLayerName(absl::string_view name);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_CHECKMATE_IMPORT_H_
