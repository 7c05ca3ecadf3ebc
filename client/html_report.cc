#include "client/html_report.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "google/protobuf/util/json_util.h"

namespace echo::client {
namespace {

// proto3 JSON with the proto's field names and every field (int64 as
// strings: the page reads them with Number(), exact below 2^53 bytes).
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string json;
  const auto status =
      google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("cannot write ",
                                            message.GetTypeName(),
                                            " as JSON: ", status.ToString()));
  }
  return json;
}

}  // namespace

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", static_cast<int>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string EscapeJsonForScript(const std::string& json) {
  return absl::StrReplaceAll(json, {{"</", "<\\/"}});
}

absl::StatusOr<std::string> RenderHtmlReport(const ReportInputs& inputs) {
  if (!inputs.estimate.has_timeline() ||
      inputs.estimate.timeline().points_size() == 0) {
    return absl::InvalidArgumentError(
        "the estimate has no memory timeline (EstimateMemory needs "
        "include_timeline)");
  }
  std::string plan_json = "null";
  if (inputs.plan) {
    if (!inputs.plan->has_timeline() ||
        inputs.plan->timeline().points_size() == 0) {
      return absl::InvalidArgumentError(
          "the plan has no memory timeline (GenerateRecomputePlan needs "
          "include_timeline)");
    }
    // The timeline says what the page needs of the schedule, which can be
    // millions of steps: leave it and the stash list out.
    v1::GenerateRecomputePlanResponse plan = *inputs.plan;
    plan.clear_schedule();
    plan.clear_stash_tensor_ids();
    absl::StatusOr<std::string> json = ToJson(plan);
    if (!json.ok()) return json.status();
    plan_json = *std::move(json);
  }
  std::string frontier_json = "null";
  if (inputs.frontier) {
    absl::StatusOr<std::string> json = ToJson(*inputs.frontier);
    if (!json.ok()) return json.status();
    frontier_json = *std::move(json);
  }
  absl::StatusOr<std::string> estimate_json = ToJson(inputs.estimate);
  if (!estimate_json.ok()) return estimate_json.status();

  const std::string data = EscapeJsonForScript(absl::StrCat(
      "{\"graph\":", JsonString(inputs.graph_label), ",\"device\":",
      JsonString(inputs.device), ",\"budget\":", JsonString(inputs.budget),
      ",\"estimate\":", *estimate_json, ",\"plan\":", plan_json,
      ",\"frontier\":", frontier_json, "}"));
  std::string page = kReportTemplate;
  const size_t at = page.find(kReportDataPlaceholder);
  if (at == std::string::npos) {
    return absl::InternalError("the report template has no data placeholder");
  }
  page.replace(at, std::string(kReportDataPlaceholder).size(), data);
  return page;
}

}  // namespace echo::client
