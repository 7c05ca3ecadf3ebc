#include "planner/text_format.h"

#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "planner/status_macros.h"

namespace echo::planner {

namespace {

template <typename Enum, size_t N>
absl::StatusOr<Enum> LookUp(
    absl::string_view what, absl::string_view name,
    const std::pair<absl::string_view, Enum> (&table)[N]) {
  for (const auto& [key, value] : table) {
    if (key == name) return value;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown ", what, " '", name, "'"));
}

}  // namespace

absl::StatusOr<OpClass> ParseOpClass(absl::string_view name) {
  static constexpr std::pair<absl::string_view, OpClass> kTable[] = {
      {"gemm", OpClass::kGemm},
      {"conv", OpClass::kConv},
      {"elementwise", OpClass::kElementwise},
      {"reduction", OpClass::kReduction},
      {"norm", OpClass::kNorm},
      {"softmax", OpClass::kSoftmax},
      {"data_movement", OpClass::kDataMovement},
      {"view", OpClass::kDataMovement},
      {"random", OpClass::kRandom},
      {"collective", OpClass::kCollective},
      {"other", OpClass::kOther},
      {"embedding", OpClass::kEmbedding},
  };
  return LookUp("op class", name, kTable);
}

absl::StatusOr<Phase> ParsePhase(absl::string_view name) {
  static constexpr std::pair<absl::string_view, Phase> kTable[] = {
      {"fwd", Phase::kForward},   {"forward", Phase::kForward},
      {"bwd", Phase::kBackward},  {"backward", Phase::kBackward},
      {"opt", Phase::kOptimizer}, {"optimizer", Phase::kOptimizer},
  };
  return LookUp("phase", name, kTable);
}

absl::StatusOr<TensorRole> ParseTensorRole(absl::string_view name) {
  static constexpr std::pair<absl::string_view, TensorRole> kTable[] = {
      {"activation", TensorRole::kActivation},
      {"parameter", TensorRole::kParameter},
      {"param", TensorRole::kParameter},
      {"optimizer_state", TensorRole::kOptimizerState},
      {"input", TensorRole::kInput},
      {"gradient", TensorRole::kGradient},
  };
  return LookUp("tensor role", name, kTable);
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  static constexpr std::pair<absl::string_view, DType> kTable[] = {
      {"f32", DType::kFloat32},       {"f16", DType::kFloat16},
      {"bf16", DType::kBFloat16},     {"f64", DType::kFloat64},
      {"i64", DType::kInt64},         {"i32", DType::kInt32},
      {"i16", DType::kInt16},         {"i8", DType::kInt8},
      {"u8", DType::kUInt8},          {"bool", DType::kBool},
      {"f8e4m3", DType::kFloat8E4M3}, {"f8e5m2", DType::kFloat8E5M2},
      {"c64", DType::kComplex64},
  };
  return LookUp("dtype", name, kTable);
}

namespace {

// "1024" or "f32[2,3]" into a spec's size or dtype+shape. A dimension "B"
// is the batch dimension at the graph's batch size, and "1024*B" a shapeless
// size of 1024 bytes per sample (both need an earlier "batch" line).
absl::Status ParseSize(absl::string_view text, int64_t batch_size,
                       TensorSpec& spec) {
  auto mark_batch = [&](int32_t dim) -> absl::Status {
    if (batch_size <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", spec.id, "' uses B before a 'batch <size>' line"));
    }
    spec.batch_dim = dim;
    return absl::OkStatus();
  };
  // "view(f32[4,16])": a view's shape, taking no bytes of its own.
  if (absl::ConsumePrefix(&text, "view(")) {
    if (!absl::ConsumeSuffix(&text, ")") || text.find('[') == text.npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad view size for tensor '", spec.id,
                       "': expected view(dtype[shape])"));
    }
    RETURN_IF_ERROR(ParseSize(text, batch_size, spec));
    spec.size_bytes = 0;
    return absl::OkStatus();
  }
  const size_t bracket = text.find('[');
  if (bracket == absl::string_view::npos) {
    const bool per_sample = absl::ConsumeSuffix(&text, "*B");
    if (!absl::SimpleAtoi(text, &spec.size_bytes) || spec.size_bytes < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad size '", text, "' for tensor '", spec.id, "'"));
    }
    if (per_sample) {
      RETURN_IF_ERROR(mark_batch(0));
      spec.size_bytes *= batch_size;
    }
    return absl::OkStatus();
  }
  if (text.back() != ']') {
    return absl::InvalidArgumentError(
        absl::StrCat("bad shape '", text, "' for tensor '", spec.id, "'"));
  }
  ASSIGN_OR_RETURN(spec.dtype, ParseDType(text.substr(0, bracket)));
  const absl::string_view dims =
      text.substr(bracket + 1, text.size() - bracket - 2);
  if (!dims.empty()) {
    for (absl::string_view dim : absl::StrSplit(dims, ',')) {
      int64_t value;
      // "B", or "<k>B": the batch folded with other axes (k * batch).
      if (absl::ConsumeSuffix(&dim, "B")) {
        // First: it refuses a B before a batch line (batch_size 0 would
        // divide by zero below).
        RETURN_IF_ERROR(mark_batch(static_cast<int32_t>(spec.shape.size())));
        int64_t multiple = 1;
        if (!dim.empty() &&
            (!absl::SimpleAtoi(dim, &multiple) || multiple < 1 ||
             multiple > std::numeric_limits<int64_t>::max() / batch_size)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "bad batch dimension '", dim, "B' for tensor '", spec.id, "'"));
        }
        value = multiple * batch_size;
      } else if (!absl::SimpleAtoi(dim, &value)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "bad dimension '", dim, "' for tensor '", spec.id, "'"));
      }
      spec.shape.push_back(value);
    }
  }
  return absl::OkStatus();
}

absl::Status ParseDouble(absl::string_view key, absl::string_view text,
                         double& out) {
  if (!absl::SimpleAtod(text, &out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad number '", text, "' for ", key));
  }
  return absl::OkStatus();
}

absl::Status ParseTensorLine(const std::vector<absl::string_view>& words,
                             GraphBuilder& builder) {
  if (words.size() < 3) {
    return absl::InvalidArgumentError(
        "expected 'tensor <id> <size> [role] [output] [gradient_of=<id>]'");
  }
  TensorSpec spec;
  spec.id = std::string(words[1]);
  RETURN_IF_ERROR(ParseSize(words[2], builder.batch_size(), spec));
  for (size_t i = 3; i < words.size(); ++i) {
    if (words[i] == "output") {
      spec.is_output = true;
      continue;
    }
    if (absl::StartsWith(words[i], "gradient_of=")) {
      spec.gradient_of = std::string(words[i].substr(12));
      continue;
    }
    ASSIGN_OR_RETURN(spec.role, ParseTensorRole(words[i]));
    spec.role_set = true;
  }
  builder.AddTensor(std::move(spec));
  return absl::OkStatus();
}

absl::Status ParseOpOption(absl::string_view word, OpSpec& spec) {
  if (word == "norecompute" || word == "recompute") {
    spec.recomputable_set = true;
    spec.recomputable = word == "recompute";
    return absl::OkStatus();
  }
  const size_t eq = word.find('=');
  const absl::string_view key = word.substr(0, eq);
  const absl::string_view value = word.substr(eq + 1);
  if (key == "cost") return ParseDouble(key, value, spec.relative_cost);
  if (key == "time") return ParseDouble(key, value, spec.measured_time_seconds);
  if (key == "on") {
    spec.measured_on = std::string(value);
    return absl::OkStatus();
  }
  if (key == "flops") return ParseDouble(key, value, spec.flops);
  if (key == "ws") {
    if (!absl::SimpleAtoi(value, &spec.workspace_bytes)) {
      return absl::InvalidArgumentError(absl::StrCat("bad ws '", value, "'"));
    }
    return absl::OkStatus();
  }
  if (key == "type") {
    spec.op_type = std::string(value);
    return absl::OkStatus();
  }
  if (key == "name") {
    spec.name = std::string(value);
    return absl::OkStatus();
  }
  if (key == "args") {
    // "%,1,False" -> "(('%', 1, False), {})", as the PyTorch hook records
    // an op's arguments ("%" a tensor).
    std::vector<std::string> items;
    for (absl::string_view item : absl::StrSplit(value, ',')) {
      items.push_back(item == "%" ? "'%'" : std::string(item));
    }
    spec.attributes["args"] =
        absl::StrCat("((", absl::StrJoin(items, ", "), "), {})");
    return absl::OkStatus();
  }
  if (key == kRecomputeOutputsAttribute || key == kFirstRunAliasAttribute) {
    // recompute_outputs is validated by Build.
    spec.attributes[std::string(key)] = std::string(value);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown op option '", word, "'"));
}

absl::Status ParseOpLine(const std::vector<absl::string_view>& words,
                         GraphBuilder& builder) {
  if (words.size() < 5) {
    return absl::InvalidArgumentError(
        "expected 'op <id> <phase> <class> <inputs> -> <outputs> [options]'");
  }
  OpSpec spec;
  spec.id = std::string(words[1]);
  ASSIGN_OR_RETURN(spec.phase, ParsePhase(words[2]));
  ASSIGN_OR_RETURN(spec.op_class, ParseOpClass(words[3]));
  size_t i = 4;
  for (; i < words.size() && words[i] != "->"; ++i) {
    spec.input_ids.emplace_back(words[i]);
  }
  if (i == words.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("op '", spec.id, "' has no '->'"));
  }
  for (++i; i < words.size(); ++i) {
    const absl::string_view word = words[i];
    if (word.find('=') != absl::string_view::npos || word == "norecompute" ||
        word == "recompute") {
      RETURN_IF_ERROR(ParseOpOption(word, spec));
      continue;
    }
    const size_t colon = word.find(':');
    if (colon == absl::string_view::npos) {
      spec.output_ids.emplace_back(word);
      continue;
    }
    TensorSpec tensor;
    tensor.id = std::string(word.substr(0, colon));
    RETURN_IF_ERROR(
        ParseSize(word.substr(colon + 1), builder.batch_size(), tensor));
    spec.output_ids.push_back(tensor.id);
    builder.AddTensor(std::move(tensor));
  }
  builder.AddOp(std::move(spec));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GraphBuilder> ParseTextGraphSpecs(absl::string_view text) {
  GraphBuilder builder;
  std::vector<std::string> output_ids;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (const size_t hash = line.find('#'); hash != absl::string_view::npos) {
      line = line.substr(0, hash);
    }
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (words.empty()) continue;
    absl::Status status;
    if (words[0] == "graph" && words.size() == 2) {
      builder.SetName(std::string(words[1]));
    } else if (words[0] == "batch" && words.size() == 2) {
      int64_t batch_size = 0;
      if (!absl::SimpleAtoi(words[1], &batch_size) || batch_size <= 0) {
        status = absl::InvalidArgumentError(
            absl::StrCat("bad batch size '", words[1], "'"));
      }
      builder.SetBatchSize(batch_size);
    } else if (words[0] == "tensor") {
      status = ParseTensorLine(words, builder);
    } else if (words[0] == "op") {
      status = ParseOpLine(words, builder);
    } else if (words[0] == "output") {
      for (size_t i = 1; i < words.size(); ++i) {
        output_ids.emplace_back(words[i]);
      }
    } else {
      status = absl::InvalidArgumentError(
          absl::StrCat("unknown statement '", words[0], "'"));
    }
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_number, ": ", status.message()));
    }
  }
  builder.MarkOutputs(std::move(output_ids));
  return builder;
}

absl::StatusOr<Graph> ParseTextGraph(absl::string_view text) {
  ASSIGN_OR_RETURN(GraphBuilder builder, ParseTextGraphSpecs(text));
  return std::move(builder).Build();
}

}  // namespace echo::planner
