// EstimateMemory and GenerateRecomputePlan with include_timeline, through
// an in-process echod: the timeline's peak is the response's peak, the
// point at the peak step is the peak breakdown, downsampling bounds the
// points, and a bad timeline_max_points is INVALID_ARGUMENT.
#include <algorithm>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "adapter/graph_file.h"
#include "client/planner_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loopback_server.h"
#include "server/echo_server.h"
#include "tests/unit/test_util.h"

namespace echo {
namespace {

using ::testing::HasSubstr;

int64_t Total(const v1::MemoryBreakdown& b) {
  return b.parameter_bytes() + b.optimizer_state_bytes() + b.gradient_bytes() +
         b.input_bytes() + b.stashed_activation_bytes() + b.transient_bytes() +
         b.workspace_bytes();
}

int64_t LargestPoint(const v1::MemoryTimeline& timeline) {
  int64_t most = 0;
  for (const v1::TimelinePoint& point : timeline.points()) {
    most = std::max(most, Total(point.bytes()));
  }
  return most;
}

class TimelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ =
        testing::ValueOrFail(server::EchoServer::Start(testing::Loopback()));
    client_ = testing::ClientOf(*server_, 60 * testing::kTimeScale);
    graph_ = testing::ValueOrFail(adapter::LoadGraphFile(
        std::string(ECHO_TEST_DATA_DIR) + "/checkmate/vgg16_b256_train.json"));
  }

  std::unique_ptr<server::EchoServer> server_;
  std::unique_ptr<client::PlannerClient> client_;
  v1::Graph graph_;
};

TEST_F(TimelineTest, EstimateTimelinePeakIsThePeakAndItsBreakdown) {
  v1::EstimateMemoryRequest request;
  *request.mutable_graph() = graph_;
  v1::EstimateMemoryResponse plain =
      testing::ValueOrFail(client_->EstimateMemory(request));
  EXPECT_FALSE(plain.has_timeline());  // only when asked

  request.set_include_timeline(true);
  v1::EstimateMemoryResponse response =
      testing::ValueOrFail(client_->EstimateMemory(request));
  const v1::MemoryTimeline& timeline = response.timeline();
  EXPECT_EQ(response.peak_bytes(), 15825108992);
  EXPECT_EQ(timeline.peak_bytes(), response.peak_bytes());
  EXPECT_EQ(timeline.peak_step(), response.peak_step());
  EXPECT_EQ(timeline.num_steps(), response.op_count());
  EXPECT_EQ(timeline.points_size(), response.op_count());  // < 2000 steps
  EXPECT_FALSE(timeline.downsampled());
  EXPECT_EQ(LargestPoint(timeline), response.peak_bytes());
  const v1::TimelinePoint& at_peak = timeline.points(response.peak_step());
  EXPECT_EQ(at_peak.op_id(), response.peak_op_id());
  EXPECT_EQ(at_peak.bytes().SerializeAsString(),
            response.breakdown().SerializeAsString());
}

TEST_F(TimelineTest, DownsampledTimelineKeepsThePeak) {
  v1::EstimateMemoryRequest request;
  *request.mutable_graph() = graph_;
  request.set_include_timeline(true);
  request.set_timeline_max_points(10);
  v1::EstimateMemoryResponse response =
      testing::ValueOrFail(client_->EstimateMemory(request));
  EXPECT_EQ(response.timeline().points_size(), 10);
  EXPECT_TRUE(response.timeline().downsampled());
  EXPECT_EQ(LargestPoint(response.timeline()), response.peak_bytes());
}

TEST_F(TimelineTest, PlanTimelineIsThePlansSchedule) {
  v1::GenerateRecomputePlanRequest request;
  *request.mutable_graph() = graph_;
  request.set_policy(v1::RECOMPUTE_POLICY_AUTO);
  request.set_max_overhead_ratio(0.2);
  request.set_include_timeline(true);
  request.set_max_live_tensors(2);
  v1::GenerateRecomputePlanResponse plan =
      testing::ValueOrFail(client_->GenerateRecomputePlan(request));
  ASSERT_LT(plan.planned_peak_bytes(), plan.baseline_peak_bytes());
  const v1::MemoryTimeline& timeline = plan.timeline();
  EXPECT_EQ(timeline.num_steps(), plan.schedule_size());
  EXPECT_EQ(timeline.peak_bytes(), plan.planned_peak_bytes());
  EXPECT_EQ(LargestPoint(timeline), plan.planned_peak_bytes());
  int recomputes = 0;
  for (const v1::TimelinePoint& point : timeline.points()) {
    recomputes += point.recompute();
    EXPECT_EQ(point.op_id(), plan.schedule(point.step()).op_id());
  }
  EXPECT_GT(recomputes, 0);
  EXPECT_EQ(plan.live_at_peak_size(), 2);
}

TEST_F(TimelineTest, BadTimelineFieldsAreInvalidArgument) {
  v1::EstimateMemoryRequest estimate;
  *estimate.mutable_graph() = graph_;
  estimate.set_include_timeline(true);
  estimate.set_timeline_max_points(-3);
  auto response = client_->EstimateMemory(estimate);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(response.status().message(), HasSubstr("timeline_max_points"));

  v1::GenerateRecomputePlanRequest plan;
  *plan.mutable_graph() = graph_;
  plan.set_timeline_max_points(1 << 30);
  auto planned = client_->GenerateRecomputePlan(plan);
  EXPECT_EQ(planned.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(planned.status().message(), HasSubstr("timeline_max_points"));
  plan.set_timeline_max_points(0);
  plan.set_max_live_tensors(-2);
  planned = client_->GenerateRecomputePlan(plan);
  EXPECT_EQ(planned.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(planned.status().message(), HasSubstr("max_live_tensors"));
  // The server keeps serving.
  estimate.set_timeline_max_points(0);
  EXPECT_TRUE(client_->EstimateMemory(estimate).ok());
}

}  // namespace
}  // namespace echo
