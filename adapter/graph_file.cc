#include "adapter/graph_file.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "adapter/graph_convert.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "planner/checkmate_import.h"
#include "planner/status_macros.h"
#include "planner/text_format.h"

namespace echo::adapter {

absl::StatusOr<GraphFormat> ParseGraphFormat(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "auto") return GraphFormat::kAuto;
  if (lower == "checkmate") return GraphFormat::kCheckmate;
  if (lower == "json") return GraphFormat::kProtoJson;
  if (lower == "binary" || lower == "pb") return GraphFormat::kBinary;
  if (lower == "textproto" || lower == "pbtxt") return GraphFormat::kTextProto;
  if (lower == "text" || lower == "graph") return GraphFormat::kEchoText;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown graph format '", name,
                   "' (auto, checkmate, json, binary, textproto, text)"));
}

namespace {

GraphFormat DetectFormat(const std::string& path, const std::string& content) {
  const auto ends = [&](absl::string_view suffix) {
    return absl::EndsWith(path, suffix);
  };
  if (ends(".pb") || ends(".binpb")) return GraphFormat::kBinary;
  if (ends(".pbtxt") || ends(".textproto") || ends(".txtpb")) {
    return GraphFormat::kTextProto;
  }
  if (ends(".graph")) return GraphFormat::kEchoText;
  if (ends(".json")) {
    return absl::StrContains(content, "\"links\"") ? GraphFormat::kCheckmate
                                                   : GraphFormat::kProtoJson;
  }
  return GraphFormat::kBinary;
}

// The importers' declarations straight to the proto: no Graph is built
// here, the server validates the graph once.
absl::StatusOr<v1::Graph> FromSpecs(
    absl::StatusOr<planner::GraphBuilder> specs) {
  ASSIGN_OR_RETURN(const planner::GraphBuilder declared, std::move(specs));
  return GraphSpecsToProto(declared);
}

}  // namespace

absl::StatusOr<v1::Graph> ParseGraph(const std::string& content,
                                     GraphFormat format,
                                     absl::string_view name_for_errors,
                                     int64_t checkmate_batch_size) {
  const auto fail = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_for_errors, ": ", what));
  };
  if (format == GraphFormat::kAuto) {
    format = DetectFormat(std::string(name_for_errors), content);
  }
  // Silently ignoring it would answer for another batch than asked.
  if (checkmate_batch_size != 0 && format != GraphFormat::kCheckmate) {
    return fail(
        "a Checkmate batch size (echoctl --batch_dim) applies to Checkmate "
        "JSON files only; this graph carries its own batch dimension "
        "(Graph.batch_size, Tensor.batch_dim: the PyTorch hook fills them)");
  }
  v1::Graph graph;
  switch (format) {
    case GraphFormat::kCheckmate: {
      planner::CheckmateImportOptions options;
      options.batch_size = checkmate_batch_size;
      if (checkmate_batch_size == planner::kCheckmateBatchFromName) {
        const absl::string_view file =
            name_for_errors.substr(name_for_errors.find_last_of('/') + 1);
        if (const int64_t batch = planner::CheckmateBatchFromName(file)) {
          options.batch_size = batch;
        }
      }
      absl::StatusOr<v1::Graph> result =
          FromSpecs(planner::ImportCheckmateSpecs(content, options));
      if (!result.ok()) return fail(result.status().message());
      return result;
    }
    case GraphFormat::kEchoText: {
      absl::StatusOr<v1::Graph> result =
          FromSpecs(planner::ParseTextGraphSpecs(content));
      if (!result.ok()) return fail(result.status().message());
      return result;
    }
    case GraphFormat::kProtoJson: {
      google::protobuf::util::JsonParseOptions options;
      const auto status =
          google::protobuf::util::JsonStringToMessage(content, &graph, options);
      if (!status.ok()) {
        return fail(absl::StrCat("not an echo.v1.Graph in proto3 JSON: ",
                                 status.message().as_string()));
      }
      return graph;
    }
    case GraphFormat::kTextProto:
      if (!google::protobuf::TextFormat::ParseFromString(content, &graph)) {
        return fail("not an echo.v1.Graph in text format");
      }
      return graph;
    case GraphFormat::kBinary:
    case GraphFormat::kAuto:
      if (!graph.ParseFromString(content)) {
        return fail("not a binary echo.v1.Graph");
      }
      return graph;
  }
  return fail("unknown format");
}

absl::StatusOr<v1::Graph> LoadGraphFile(const std::string& path,
                                        GraphFormat format,
                                        int64_t checkmate_batch_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is a directory, not a graph file"));
  }
  // A regular file's size first, read in one go: through a stringstream, a
  // 22 MB graph was copied twice (~45 ms in echoctl). The size is only a
  // hint (a file replaced or grown since, /proc's zeros, a pipe): the rest
  // is read to the end. istream::read, not istreambuf_iterator, so that a
  // failed read sets badbit rather than throwing out of here.
  std::string content;
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  if (!error && size > 0) {
    content.resize(size);
    in.read(content.data(), static_cast<std::streamsize>(size));
    content.resize(static_cast<size_t>(in.gcount()));
  }
  char chunk[1 << 16];
  while (in) {
    in.read(chunk, sizeof(chunk));
    content.append(chunk, static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  return ParseGraph(content, format, path, checkmate_batch_size);
}

}  // namespace echo::adapter
