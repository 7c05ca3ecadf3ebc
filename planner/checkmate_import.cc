#include "planner/checkmate_import.h"

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "planner/status_macros.h"

namespace echo::planner {

OpClass OpClassFromLayerName(absl::string_view name) {
  static constexpr std::pair<absl::string_view, OpClass> kKeywords[] = {
      {"conv", OpClass::kConv},
      {"dw", OpClass::kConv},
      {"pw", OpClass::kConv},
      {"conv2d", OpClass::kConv},
      {"transpose", OpClass::kConv},
      {"cropping2d", OpClass::kDataMovement},
      {"fc", OpClass::kGemm},
      {"dense", OpClass::kGemm},
      {"predictions", OpClass::kGemm},
      {"logits", OpClass::kGemm},
      {"bn", OpClass::kNorm},
      {"batchnorm", OpClass::kNorm},
      {"norm", OpClass::kNorm},
      {"pool", OpClass::kReduction},
      {"flatten", OpClass::kDataMovement},
      {"reshape", OpClass::kDataMovement},
      {"pad", OpClass::kDataMovement},
      {"concat", OpClass::kDataMovement},
      {"upsample", OpClass::kDataMovement},
      {"crop", OpClass::kDataMovement},
      {"relu", OpClass::kElementwise},
      {"add", OpClass::kElementwise},
      {"out", OpClass::kElementwise},
      {"act", OpClass::kElementwise},
      {"activation", OpClass::kElementwise},
      {"sigmoid", OpClass::kElementwise},
      {"tanh", OpClass::kElementwise},
      {"mul", OpClass::kElementwise},
      {"dropout", OpClass::kRandom},
      {"softmax", OpClass::kSoftmax},
      {"loss", OpClass::kSoftmax},
  };
  std::string lower = absl::AsciiStrToLower(name);
  if (absl::EndsWith(lower, "_backward")) {
    lower.resize(lower.size() - absl::string_view("_backward").size());
  }
  // The last recognised word decides: "conv2_block1_1_bn" is a norm.
  std::vector<absl::string_view> words = absl::StrSplit(lower, '_');
  for (auto it = words.rbegin(); it != words.rend(); ++it) {
    absl::string_view word = absl::StripTrailingAsciiWhitespace(*it);
    while (!word.empty() && absl::ascii_isdigit(word.back())) {
      word.remove_suffix(1);
    }
    for (const auto& [keyword, op_class] : kKeywords) {
      if (word == keyword) return op_class;
    }
  }
  return OpClass::kOther;
}

namespace {

absl::Status JsonError(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("checkmate graph: ", what));
}

absl::StatusOr<int64_t> IntField(const nlohmann::json& object,
                                 absl::string_view field,
                                 absl::string_view where) {
  auto it = object.find(std::string(field));
  if (it == object.end() || !it->is_number_integer()) {
    return JsonError(absl::StrCat(where, " has no integer '", field, "'"));
  }
  return it->get<int64_t>();
}

}  // namespace

int64_t CheckmateBatchFromName(absl::string_view name) {
  // "_b<digits>" (file names), else "_<digits>_" (Checkmate's graph names).
  for (const absl::string_view prefix : {"_b", "_"}) {
    for (size_t at = name.find(prefix); at != absl::string_view::npos;
         at = name.find(prefix, at + 1)) {
      size_t end = at + prefix.size();
      while (end < name.size() && absl::ascii_isdigit(name[end])) ++end;
      const absl::string_view digits =
          name.substr(at + prefix.size(), end - at - prefix.size());
      const bool closed = prefix == absl::string_view("_b") ||
                          (end < name.size() && name[end] == '_');
      int64_t batch = 0;
      if (!digits.empty() && closed && absl::SimpleAtoi(digits, &batch) &&
          batch > 0) {
        return batch;
      }
    }
  }
  return 0;
}

absl::StatusOr<GraphBuilder> ImportCheckmateSpecs(
    absl::string_view json_text, const CheckmateImportOptions& options) {
  nlohmann::json doc = nlohmann::json::parse(json_text, nullptr,
                                             /*allow_exceptions=*/false);
  if (doc.is_discarded()) return JsonError("not valid JSON");
  if (!doc.is_object() || !doc.contains("nodes") || !doc["nodes"].is_array() ||
      !doc.contains("links") || !doc["links"].is_array()) {
    return JsonError("expected an object with 'nodes' and 'links' arrays");
  }
  const nlohmann::json& nodes = doc["nodes"];
  const int64_t n = static_cast<int64_t>(nodes.size());
  struct Node {
    bool seen = false;
    std::string name;
    bool backward = false;
    double cost = 0;
    int64_t bytes = 0;
    std::vector<int64_t> inputs;
  };
  std::vector<Node> by_id(n);
  for (const nlohmann::json& node : nodes) {
    if (!node.is_object()) return JsonError("a node is not an object");
    ASSIGN_OR_RETURN(int64_t id, IntField(node, "id", "a node"));
    const std::string where = absl::StrCat("node ", id);
    if (id < 0 || id >= n) {
      return JsonError(absl::StrCat(where, ": ids must be 0..", n - 1));
    }
    Node& entry = by_id[id];
    if (entry.seen) return JsonError(absl::StrCat(where, ": duplicate id"));
    entry.seen = true;
    ASSIGN_OR_RETURN(entry.bytes, IntField(node, "cost_ram", where));
    auto cost = node.find("cost_cpu");
    if (cost == node.end() || !cost->is_number()) {
      return JsonError(absl::StrCat(where, " has no numeric 'cost_cpu'"));
    }
    entry.cost = cost->get<double>();
    auto backward = node.find("backward");
    if (backward != node.end()) {
      if (!backward->is_boolean()) {
        return JsonError(absl::StrCat(where, ": 'backward' is not a bool"));
      }
      entry.backward = backward->get<bool>();
    }
    auto name = node.find("name");
    if (name != node.end() && name->is_string()) {
      entry.name = name->get<std::string>();
    }
  }
  for (const nlohmann::json& link : doc["links"]) {
    if (!link.is_object()) return JsonError("a link is not an object");
    ASSIGN_OR_RETURN(int64_t source, IntField(link, "source", "a link"));
    ASSIGN_OR_RETURN(int64_t target, IntField(link, "target", "a link"));
    if (source < 0 || source >= n || target < 0 || target >= n) {
      return JsonError(absl::StrCat("link ", source, " -> ", target,
                                    " names an unknown node"));
    }
    by_id[target].inputs.push_back(source);
  }

  GraphBuilder builder;
  if (doc.contains("graph") && doc["graph"].is_object() &&
      doc["graph"].contains("name") && doc["graph"]["name"].is_string()) {
    builder.SetName(doc["graph"]["name"].get<std::string>());
  }
  builder.SetMetadata("source_format", "checkmate");
  int64_t batch_size = options.batch_size;
  if (batch_size == kCheckmateBatchFromName) {
    batch_size = CheckmateBatchFromName(builder.name());
    if (batch_size == 0) {
      return JsonError(absl::StrCat("graph name '", builder.name(),
                                    "' carries no batch size (_b<N> or "
                                    "_<N>_); give the batch explicitly"));
    }
  } else if (batch_size < 0) {
    return JsonError(absl::StrCat("batch size must be >= 0, got ", batch_size));
  }
  builder.SetBatchSize(batch_size);
  for (int64_t id = 0; id < n; ++id) {
    Node& node = by_id[id];
    TensorSpec tensor;
    tensor.id = absl::StrCat(id);
    tensor.name = node.name;
    tensor.size_bytes = node.bytes;
    if (batch_size > 0) tensor.batch_dim = 0;
    builder.AddTensor(std::move(tensor));
    OpSpec op;
    op.id = absl::StrCat(id);
    op.name = node.name;
    op.op_class = OpClassFromLayerName(node.name);
    op.phase = node.backward ? Phase::kBackward : Phase::kForward;
    op.relative_cost = node.cost;
    // Checkmate may recompute any node.
    op.recomputable_set = true;
    op.recomputable = true;
    for (int64_t input : node.inputs)
      op.input_ids.push_back(absl::StrCat(input));
    op.output_ids.push_back(absl::StrCat(id));
    builder.AddOp(std::move(op));
  }
  return builder;
}

absl::StatusOr<Graph> ImportCheckmateJson(
    absl::string_view json_text, const CheckmateImportOptions& options) {
  ASSIGN_OR_RETURN(GraphBuilder builder,
                   ImportCheckmateSpecs(json_text, options));
  return std::move(builder).Build();
}

}  // namespace echo::planner
