// The engine (planner/engine/engine.h): each use case on small graphs, as
// echod's handlers call them.
#include "planner/engine/engine.h"

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/device_catalog.h"
#include "test_util.h"

namespace echo::engine {
namespace {

using ::testing::HasSubstr;

// Two layers and their backward, with no costs of its own.
constexpr char kTwoLayers[] = R"(
graph two
tensor x f32[256,256] input
tensor w f32[256,256] parameter
op a fwd gemm x w -> h:f32[256,256]
op b fwd elementwise h -> y:f32[256,256]
op bb bwd elementwise y h -> gh:f32[256,256]
op ab bwd gemm gh w -> gx:f32[256,256]
output gx
)";

std::shared_ptr<const planner::Graph> Graph(const char* text) {
  return std::make_shared<const planner::Graph>(testing::ParseOrFail(text));
}

TEST(EngineTest, AGraphWithoutCostsOrDeviceIsPricedOnTheDefaultDevice) {
  ASSERT_OK_AND_ASSIGN(const PricedGraph priced,
                       PriceGraph(Graph(kTwoLayers), std::nullopt, nullptr));
  EXPECT_EQ(priced.costs.unit, planner::kSecondsUnit);
  EXPECT_THAT(priced.pricing_note, HasSubstr("priced on"));
  EXPECT_FALSE(priced.device.has_value());
  // Named: priced on it, no note; the chunks' launch in its seconds.
  ASSERT_OK_AND_ASSIGN(const planner::DeviceSpec h100,
                       planner::FindCatalogDevice("h100-80gb"));
  ASSERT_OK_AND_ASSIGN(const PricedGraph named,
                       PriceGraph(Graph(kTwoLayers), h100, nullptr));
  EXPECT_EQ(named.pricing_note, "");
  EXPECT_DOUBLE_EQ(ChunkLaunchCost(named.costs),
                   planner::CostModelOptions().launch_overhead_seconds);
}

TEST(EngineTest, EstimateAndPlanAnswerWithTheirTimelinesOnRequest) {
  ASSERT_OK_AND_ASSIGN(const PricedGraph priced,
                       PriceGraph(Graph(kTwoLayers), std::nullopt, nullptr));
  EstimateCall estimate;
  ASSERT_OK_AND_ASSIGN(EstimateAnswer plain, Estimate(priced, estimate));
  // w, h, y and gh (256 KiB each) at the first backward op; x is gone
  // after its one reader.
  EXPECT_EQ(plain.result.peak_bytes, 4 * 262144);
  EXPECT_FALSE(plain.timeline.has_value());
  estimate.timeline.include = true;
  ASSERT_OK_AND_ASSIGN(plain, Estimate(priced, estimate));
  ASSERT_TRUE(plain.timeline.has_value());

  PlanCall call;
  call.options.policy = planner::RecomputePolicy::kNone;
  ASSERT_OK_AND_ASSIGN(PlanAnswer plan, Plan(priced, call));
  EXPECT_EQ(plan.plan.planned_peak_bytes, plain.result.peak_bytes);
  EXPECT_FALSE(plan.replay.has_value());
  call.timeline.include = true;
  ASSERT_OK_AND_ASSIGN(plan, Plan(priced, call));
  ASSERT_TRUE(plan.replay.has_value());
  EXPECT_EQ(plan.replay->peak_bytes, plan.plan.planned_peak_bytes);
  ASSERT_TRUE(plan.timeline.has_value());
}

TEST(EngineTest, SchedulerQuestionsNeedADevice) {
  ASSERT_OK_AND_ASSIGN(const PricedGraph priced,
                       PriceGraph(Graph(kTwoLayers), std::nullopt, nullptr));
  EXPECT_EQ(Fit(priced, {}, false, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MaxBatch(priced, {}, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(const planner::DeviceSpec h100,
                       planner::FindCatalogDevice("h100-80gb"));
  ASSERT_OK_AND_ASSIGN(const PricedGraph named,
                       PriceGraph(Graph(kTwoLayers), h100, nullptr));
  ASSERT_OK_AND_ASSIGN(const FitAnswer fit, Fit(named, {}, true, nullptr));
  EXPECT_TRUE(fit.fit.fits);
  // No batch dimension: no batch search.
  EXPECT_FALSE(fit.max_batch.has_value());
}

// The host CPU's first touch (issue 48): the peak a plan saves is time the
// step saves, and the plan's step ratio says so.
TEST(EngineTest, StepOverheadCountsTheFirstTouchOfThePeak) {
  planner::RecomputePlan plan;
  plan.baseline_compute_cost = 1.0;
  plan.recompute_cost = 0.05;
  plan.recompute_overhead_ratio = 0.05;
  plan.baseline_peak_bytes = 1000;
  plan.planned_peak_bytes = 600;
  PricedGraph priced;
  priced.costs.unit = std::string(planner::kSecondsUnit);
  // No device, or one that keeps its memory: the extra compute.
  EXPECT_DOUBLE_EQ(StepOverheadRatio(plan, priced), 0.05);
  planner::DeviceSpec cpu;
  cpu.name = "cpu:x86_64";
  priced.device = cpu;
  EXPECT_DOUBLE_EQ(StepOverheadRatio(plan, priced), 0.05);
  // 1e-4 s per byte: the plain step is 1 + 0.1 s, the plan saves 0.04 s.
  priced.device->first_touch_seconds_per_byte = 1e-4;
  EXPECT_DOUBLE_EQ(StepOverheadRatio(plan, priced), (0.05 - 0.04) / 1.1);
  // Relative costs cannot be added to seconds.
  priced.costs.unit = std::string(planner::kRelativeUnit);
  EXPECT_DOUBLE_EQ(StepOverheadRatio(plan, priced), 0.05);
}

// Three element-wise layers: recomputing h1 from x before its backward
// reader lowers the peak (h1 is not held through cb).
constexpr char kChain[] = R"(
graph chain
tensor x f32[1024,1024] input
op a fwd elementwise x -> h1:f32[1024,1024]
op b fwd elementwise h1 -> h2:f32[1024,1024]
op c fwd elementwise h2 -> y:f32[1024,1024]
op cb bwd elementwise y h2 -> g2:f32[1024,1024]
op bb bwd elementwise g2 h1 -> g1:f32[1024,1024]
op ab bwd elementwise g1 x -> gx:f32[1024,1024]
output gx
)";

TEST(EngineTest, PlansOnADeviceThatCountsFirstTouchesSayTheirStepTime) {
  ASSERT_OK_AND_ASSIGN(planner::DeviceSpec cpu,
                       planner::FindCatalogDevice("h100-80gb"));
  cpu.name = "cpu:x86_64";
  cpu.first_touch_seconds_per_byte = 1e-9;
  ASSERT_OK_AND_ASSIGN(const PricedGraph priced,
                       PriceGraph(Graph(kChain), cpu, nullptr));
  PlanCall call;
  call.options.policy = planner::RecomputePolicy::kAuto;
  call.options.max_overhead_ratio = 1.0;
  ASSERT_OK_AND_ASSIGN(const PlanAnswer planned, Plan(priced, call));
  const planner::RecomputePlan& p = planned.plan;
  ASSERT_GT(p.recompute_cost, 0);
  ASSERT_LT(p.planned_peak_bytes, p.baseline_peak_bytes);
  const double saved =
      1e-9 * static_cast<double>(p.baseline_peak_bytes - p.planned_peak_bytes);
  EXPECT_DOUBLE_EQ(p.step_overhead_ratio,
                   (p.recompute_cost - saved) /
                       (p.baseline_compute_cost +
                        1e-9 * static_cast<double>(p.baseline_peak_bytes)));
  // The saved peak pays for part of the recomputation.
  EXPECT_LT(p.step_overhead_ratio, p.recompute_overhead_ratio);
  // The same plan on a device that keeps its memory: the extra compute.
  cpu.first_touch_seconds_per_byte = 0;
  ASSERT_OK_AND_ASSIGN(const PricedGraph kept,
                       PriceGraph(Graph(kChain), cpu, nullptr));
  ASSERT_OK_AND_ASSIGN(const PlanAnswer same, Plan(kept, call));
  EXPECT_EQ(same.plan.recompute_cost, p.recompute_cost);
  EXPECT_DOUBLE_EQ(same.plan.step_overhead_ratio,
                   same.plan.recompute_overhead_ratio);
}

}  // namespace
}  // namespace echo::engine
