// echoctl report: EstimateMemory and GenerateRecomputePlan with their
// memory timelines, and GetMemoryFrontier, drawn as one HTML page. The graph
// is registered once and the three are asked by its fingerprint.
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/echoctl_commands.h"
#include "client/html_report.h"
#include "client/registered_graph.h"
#include "planner/byte_size.h"

namespace echo::client {
namespace {

std::string DescribeBudget(const EchoctlFlags& flags) {
  if (flags.memory_limit_bytes) {
    return absl::StrCat("memory_limit_bytes ", *flags.memory_limit_bytes, " (",
                        planner::HumanBytes(*flags.memory_limit_bytes), ")");
  }
  if (flags.max_overhead_ratio) {
    return absl::StrCat("max_overhead_ratio ", *flags.max_overhead_ratio);
  }
  return "max_overhead_ratio 0.05 (default)";
}

// The page to `path`; false (with the reason printed) when it cannot be
// written.
bool WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out) out << contents;
  if (out) out.close();
  if (!out) {
    std::cerr << "echoctl: cannot write --html '" << path
              << "': " << std::strerror(errno) << "\n";
    return false;
  }
  return true;
}

}  // namespace

int RunReport(PlannerClient& client, const EchoctlFlags& flags) {
  // Three questions about one graph: registered once, then asked by
  // fingerprint.
  std::optional<RegisteredGraph> registered;
  if (!flags.fingerprint.empty()) {
    registered = RegisteredGraph::Known(client, flags.fingerprint);
  } else {
    v1::Graph graph;
    if (!LoadGraph(flags, &graph)) return 1;
    absl::StatusOr<RegisteredGraph> registration =
        RegisteredGraph::Register(client, std::move(graph));
    if (!registration.ok()) return RpcError(registration.status());
    registered = *std::move(registration);
  }

  v1::EstimateMemoryRequest estimate_request;
  FillEstimateRequest(flags, &estimate_request);
  estimate_request.set_include_timeline(true);
  estimate_request.set_timeline_max_points(flags.timeline_points);
  absl::StatusOr<v1::EstimateMemoryResponse> estimate = registered->Ask(
      &PlannerClient::EstimateMemory, std::move(estimate_request));
  if (!estimate.ok()) return RpcError(estimate.status());

  v1::GenerateRecomputePlanRequest plan_request;
  FillPlanRequest(flags, &plan_request);
  plan_request.set_include_timeline(true);
  plan_request.set_timeline_max_points(flags.timeline_points);
  plan_request.set_max_live_tensors(flags.live_tensors);
  absl::StatusOr<v1::GenerateRecomputePlanResponse> plan = registered->Ask(
      &PlannerClient::GenerateRecomputePlan, std::move(plan_request));
  if (!plan.ok()) return RpcError(plan.status());

  v1::GetMemoryFrontierRequest frontier_request;
  FillFrontierRequest(flags, &frontier_request);
  absl::StatusOr<v1::GetMemoryFrontierResponse> frontier = registered->Ask(
      &PlannerClient::GetMemoryFrontier, std::move(frontier_request));
  if (!frontier.ok()) return RpcError(frontier.status());

  ReportInputs inputs;
  inputs.graph_label = flags.fingerprint.empty()
                           ? flags.graph
                           : "fingerprint " + flags.fingerprint;
  inputs.device = flags.device;
  inputs.budget = DescribeBudget(flags);
  inputs.estimate = *std::move(estimate);
  inputs.plan = *std::move(plan);
  inputs.frontier = *std::move(frontier);
  absl::StatusOr<std::string> page = RenderHtmlReport(inputs);
  if (!page.ok()) {
    std::cerr << "echoctl: " << page.status().message() << "\n";
    return 1;
  }
  if (!WriteFile(flags.html_path, *page)) return 1;
  const std::string summary = absl::StrFormat(
      "%d bytes of HTML; plain peak %d bytes (%s), planned peak %d bytes (%s) "
      "at %.2f%% extra compute; %d frontier points",
      page->size(), inputs.estimate.peak_bytes(),
      planner::HumanBytes(inputs.estimate.peak_bytes()),
      inputs.plan->planned_peak_bytes(),
      planner::HumanBytes(inputs.plan->planned_peak_bytes()),
      100 * inputs.plan->recompute_overhead_ratio(),
      inputs.frontier->points_size());
  if (flags.json_output) {
    std::cout << absl::StrFormat(
        "{\"html\": %s, \"peak_bytes\": \"%d\", "
        "\"planned_peak_bytes\": \"%d\", \"frontier_points\": %d}\n",
        JsonString(flags.html_path), inputs.estimate.peak_bytes(),
        inputs.plan->planned_peak_bytes(), inputs.frontier->points_size());
  } else {
    std::cout << "wrote " << flags.html_path << ": " << summary << "\n";
  }
  return 0;
}

}  // namespace echo::client
