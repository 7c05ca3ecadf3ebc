// `echoctl report`'s page: one self-contained HTML file (inline CSS, script
// and SVG; a Content-Security-Policy that forbids any network fetch) that
// plots memory over the schedule stacked by role, before and after a plan,
// marks each peak with what is live there, lists the plan's recompute
// regions and plots the memory/compute frontier. The responses are embedded
// as JSON; the page's script draws them and writes a self-check (the peak it
// plotted, the checks it ran, any script error) into <pre id="selfcheck">.
// Pure: no server, no I/O.
#ifndef ECHO_CLIENT_HTML_REPORT_H_
#define ECHO_CLIENT_HTML_REPORT_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "echo/v1/planner.pb.h"

namespace echo::client {

struct ReportInputs {
  // Shown in the title: the graph file and what was asked.
  std::string graph_label;
  std::string device;  // empty: none (costs in relative units)
  std::string budget;  // e.g. "max_overhead_ratio 0.05"
  // EstimateMemory with include_timeline (required).
  v1::EstimateMemoryResponse estimate;
  // GenerateRecomputePlan with include_timeline; absent: no plan section.
  std::optional<v1::GenerateRecomputePlanResponse> plan;
  // GetMemoryFrontier; absent: no frontier section.
  std::optional<v1::GetMemoryFrontierResponse> frontier;
};

// INVALID_ARGUMENT when the estimate or the plan carries no timeline.
absl::StatusOr<std::string> RenderHtmlReport(const ReportInputs& inputs);

// `json` made safe to embed in a <script> element: every "</" becomes
// "<\/" (the same JSON value).
std::string EscapeJsonForScript(const std::string& json);

// `text` as a JSON string literal (quotes, backslashes and control
// characters escaped).
std::string JsonString(const std::string& text);

// The page template (client/report_template.html); its one placeholder,
// kReportDataPlaceholder, is replaced by the report's JSON.
extern const char kReportTemplate[];
inline constexpr char kReportDataPlaceholder[] = "/*ECHO_REPORT_DATA*/null";

}  // namespace echo::client

#endif  // ECHO_CLIENT_HTML_REPORT_H_
