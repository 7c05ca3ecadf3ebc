// Reads a training graph from a file for the client: Checkmate node-link
// JSON, proto3 JSON, binary or text `echo.v1.Graph` protos, or the planner's
// readable text format.
#ifndef ECHO_CLIENT_GRAPH_LOADER_H_
#define ECHO_CLIENT_GRAPH_LOADER_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "echo/v1/graph.pb.h"

namespace echo::client {

enum class GraphFormat {
  kAuto,       // from the extension, then the content
  kCheckmate,  // .json with "nodes" and "links"
  kProtoJson,  // .json: proto3 JSON of echo.v1.Graph
  kBinary,     // .pb / .binpb
  kTextProto,  // .pbtxt / .textproto / .txtpb
  kEchoText,   // .graph: planner/text_format.h
};

absl::StatusOr<GraphFormat> ParseGraphFormat(absl::string_view name);

absl::StatusOr<v1::Graph> LoadGraphFile(const std::string& path,
                                        GraphFormat format = GraphFormat::kAuto);

// The same, from bytes already read.
absl::StatusOr<v1::Graph> ParseGraph(const std::string& content,
                                     GraphFormat format,
                                     absl::string_view name_for_errors);

}  // namespace echo::client

#endif  // ECHO_CLIENT_GRAPH_LOADER_H_
