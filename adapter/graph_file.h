// Reads a training graph file as an `echo.v1.Graph`, for clients: Checkmate
// node-link JSON, proto3 JSON, binary or text protos, or the planner's
// readable text format. Only syntax is checked here: the proto formats are
// parsed as they are, the other two by the planner's importers into
// declarations (GraphBuilder) that become the proto without a Graph being
// built. The server validates the graph, once.
#ifndef ECHO_ADAPTER_GRAPH_FILE_H_
#define ECHO_ADAPTER_GRAPH_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "echo/v1/graph.pb.h"

namespace echo::adapter {

enum class GraphFormat {
  kAuto,       // from the extension, then the content
  kCheckmate,  // .json with "nodes" and "links"
  kProtoJson,  // .json: proto3 JSON of echo.v1.Graph
  kBinary,     // .pb / .binpb
  kTextProto,  // .pbtxt / .textproto / .txtpb
  kEchoText,   // .graph: planner/text_format.h
};

absl::StatusOr<GraphFormat> ParseGraphFormat(absl::string_view name);

// Checkmate files: 0 no batch dimension; > 0 the graph's batch size;
// planner::kCheckmateBatchFromName (-1) from the file name ("_b256"), else
// from the graph's name (planner/checkmate_import.h). Other formats carry
// their own batch dimension: a nonzero value is INVALID_ARGUMENT for them.
absl::StatusOr<v1::Graph> LoadGraphFile(const std::string& path,
                                        GraphFormat format = GraphFormat::kAuto,
                                        int64_t checkmate_batch_size = 0);

// The same, from bytes already read.
absl::StatusOr<v1::Graph> ParseGraph(const std::string& content,
                                     GraphFormat format,
                                     absl::string_view name_for_errors,
                                     int64_t checkmate_batch_size = 0);

}  // namespace echo::adapter

#endif  // ECHO_ADAPTER_GRAPH_FILE_H_
