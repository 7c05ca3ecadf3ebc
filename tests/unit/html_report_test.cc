// echoctl report's page without a server: the responses are embedded as
// JSON that cannot end the <script> early, the page fetches nothing, and
// responses without timelines are refused.
#include "client/html_report.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace echo::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::MemoryTimeline Timeline(std::initializer_list<int64_t> transient) {
  v1::MemoryTimeline timeline;
  int32_t step = 0;
  for (int64_t bytes : transient) {
    v1::TimelinePoint* point = timeline.add_points();
    point->set_step(step++);
    point->set_op_id("op" + std::to_string(step));
    point->mutable_bytes()->set_parameter_bytes(1000);
    point->mutable_bytes()->set_transient_bytes(bytes);
    if (1000 + bytes > timeline.peak_bytes()) {
      timeline.set_peak_bytes(1000 + bytes);
      timeline.set_peak_step(point->step());
    }
  }
  timeline.set_num_steps(step);
  return timeline;
}

ReportInputs Inputs() {
  ReportInputs inputs;
  inputs.graph_label = "tiny.graph";
  inputs.device = "a100-80gb";
  inputs.budget = "max_overhead_ratio 0.05 (default)";
  inputs.estimate.set_peak_bytes(1500);
  *inputs.estimate.mutable_timeline() = Timeline({100, 500, 200});
  v1::GenerateRecomputePlanResponse plan;
  plan.set_planned_peak_bytes(1300);
  *plan.mutable_timeline() = Timeline({100, 300, 200, 250});
  plan.add_schedule()->set_op_id("scheduled_op_not_embedded");
  plan.add_stash_tensor_ids("stashed_id_not_embedded");
  inputs.plan = plan;
  v1::GetMemoryFrontierResponse frontier;
  frontier.add_points()->set_peak_bytes(1500);
  inputs.frontier = frontier;
  return inputs;
}

std::string EmbeddedData(const std::string& page) {
  const std::string open =
      "<script type=\"application/json\" id=\"report-data\">";
  const size_t begin = page.find(open);
  if (begin == std::string::npos) return "";
  const size_t end = page.find("</script>", begin);
  return page.substr(begin + open.size(), end - begin - open.size());
}

TEST(HtmlReportTest, EmbedsTheResponsesAsJson) {
  const std::string page = RenderHtmlReport(Inputs()).value();
  const std::string data = EmbeddedData(page);
  EXPECT_THAT(data, HasSubstr("\"graph\":\"tiny.graph\""));
  EXPECT_THAT(data, HasSubstr("\"device\":\"a100-80gb\""));
  EXPECT_THAT(data, HasSubstr("\"peak_bytes\":\"1500\""));
  EXPECT_THAT(data, HasSubstr("\"planned_peak_bytes\":\"1300\""));
  EXPECT_THAT(data, HasSubstr("\"transient_bytes\":\"500\""));
  EXPECT_THAT(page, Not(HasSubstr(kReportDataPlaceholder)));
  // The schedule and the stash list are left out: the timeline has them.
  EXPECT_THAT(page, Not(HasSubstr("scheduled_op_not_embedded")));
  EXPECT_THAT(page, Not(HasSubstr("stashed_id_not_embedded")));
}

TEST(HtmlReportTest, FetchesNothing) {
  const std::string page = RenderHtmlReport(Inputs()).value();
  EXPECT_THAT(page, HasSubstr("Content-Security-Policy"));
  EXPECT_THAT(page, HasSubstr("default-src 'none'"));
  for (const char* fetch : {" src=", " href=", "url(", "@import", "fetch(",
                            "XMLHttpRequest", "https://"}) {
    EXPECT_THAT(page, Not(HasSubstr(fetch))) << fetch;
  }
}

TEST(HtmlReportTest, NamesCannotCloseTheScript) {
  ReportInputs inputs = Inputs();
  inputs.graph_label = "evil</script><script>alert(1)</script>\n\x01\"";
  const std::string page = RenderHtmlReport(inputs).value();
  size_t closes = 0;
  for (size_t at = page.find("</script>"); at != std::string::npos;
       at = page.find("</script>", at + 1)) {
    ++closes;
  }
  EXPECT_EQ(closes, 2u);  // the data's and the page script's
  EXPECT_THAT(EmbeddedData(page),
              HasSubstr("evil<\\/script><script>alert(1)<\\/script>"
                        "\\n\\u0001\\\""));
}

TEST(HtmlReportTest, RefusesResponsesWithoutTimelines) {
  ReportInputs inputs = Inputs();
  inputs.estimate.clear_timeline();
  absl::StatusOr<std::string> page = RenderHtmlReport(inputs);
  EXPECT_EQ(page.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(page.status().message(), HasSubstr("include_timeline"));

  inputs = Inputs();
  inputs.plan->clear_timeline();
  page = RenderHtmlReport(inputs);
  EXPECT_EQ(page.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(page.status().message(), HasSubstr("plan has no memory"));
}

TEST(HtmlReportTest, PlanAndFrontierAreOptional) {
  ReportInputs inputs = Inputs();
  inputs.plan.reset();
  inputs.frontier.reset();
  const std::string data = EmbeddedData(RenderHtmlReport(inputs).value());
  EXPECT_THAT(data, HasSubstr("\"plan\":null,\"frontier\":null"));
}

TEST(HtmlReportTest, JsonStringEscapes) {
  EXPECT_EQ(JsonString("a\"b\\c\n\x1f"), "\"a\\\"b\\\\c\\n\\u001f\"");
}

}  // namespace
}  // namespace echo::client
