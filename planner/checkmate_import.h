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

// Parses the JSON text (the caller reads the file).
absl::StatusOr<Graph> ImportCheckmateJson(absl::string_view json_text);
// The declarations only: JSON errors, no graph validation (Build does it).
absl::StatusOr<GraphBuilder> ImportCheckmateSpecs(absl::string_view json_text);

// Op class from a Keras layer name ("block1_conv2", "fc1_backward", ...),
// so that rule-based policies see convolutions and dense layers.
OpClass OpClassFromLayerName(absl::string_view name);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_CHECKMATE_IMPORT_H_
