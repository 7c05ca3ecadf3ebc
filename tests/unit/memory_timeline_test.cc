// SimulateTimeline: memory at every schedule step by role, for the plain
// schedule and a plan's, equal to ReplaySchedule's step bytes and, at the
// peak, to its breakdown; downsampling keeps each bucket's largest step.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/memory_simulator.h"
#include "test_util.h"

namespace echo::planner {
namespace {

using ::echo::testing::ValueOrFail;
using ::testing::HasSubstr;

// Every role: parameters, optimizer state, a gradient, the input, stashed
// activations (a, b, l), transients (gb, ga, upd) and two workspaces.
constexpr char kTraining[] = R"(
  tensor x 100 input
  tensor w 1000 parameter
  tensor m 400 optimizer_state
  tensor gw 1000 gradient
  op f1 fwd gemm x w -> a:200 ws=50
  op f2 fwd elementwise a -> b:300
  op loss fwd reduction b -> l:10
  op b2 bwd elementwise l b -> gb:300
  op b1 bwd gemm gb a w -> ga:200 gw ws=70
  op sgd opt other w gw m -> upd:1
  output ga upd
)";

MemoryBreakdown Bytes(int64_t parameter, int64_t optimizer, int64_t gradient,
                      int64_t input, int64_t stashed, int64_t transient,
                      int64_t workspace) {
  return {parameter, optimizer, gradient, input, stashed, transient, workspace};
}

void ExpectSameBreakdown(const MemoryBreakdown& actual,
                         const MemoryBreakdown& expected) {
  EXPECT_EQ(actual.parameter_bytes, expected.parameter_bytes);
  EXPECT_EQ(actual.optimizer_state_bytes, expected.optimizer_state_bytes);
  EXPECT_EQ(actual.gradient_bytes, expected.gradient_bytes);
  EXPECT_EQ(actual.input_bytes, expected.input_bytes);
  EXPECT_EQ(actual.stashed_activation_bytes, expected.stashed_activation_bytes);
  EXPECT_EQ(actual.transient_bytes, expected.transient_bytes);
  EXPECT_EQ(actual.workspace_bytes, expected.workspace_bytes);
}

// The timeline agrees with ReplaySchedule on every step and at the peak.
void ExpectMatchesReplay(const Graph& graph, const Schedule& schedule) {
  SimulationResult replay = ValueOrFail(ReplaySchedule(graph, schedule));
  MemoryTimeline timeline = ValueOrFail(SimulateTimeline(graph, schedule, {}));
  ASSERT_EQ(timeline.points.size(), replay.step_bytes.size());
  for (const TimelinePoint& point : timeline.points) {
    EXPECT_EQ(point.bytes.Total(), replay.step_bytes[point.step])
        << "step " << point.step;
  }
  EXPECT_EQ(timeline.peak_bytes, replay.peak_bytes);
  EXPECT_EQ(timeline.peak_step, replay.peak_step);
  ExpectSameBreakdown(timeline.points[replay.peak_step].bytes,
                      replay.breakdown);
}

TEST(MemoryTimelineTest, PlainScheduleExactBytesByRole) {
  Graph graph = testing::ParseOrFail(kTraining);
  MemoryTimeline timeline =
      ValueOrFail(SimulateTimeline(graph, PlainSchedule(graph), {}));
  EXPECT_EQ(timeline.num_steps, 6);
  EXPECT_FALSE(timeline.downsampled);
  ASSERT_EQ(timeline.points.size(), 6u);
  // f1: w m x, a (stashed: b1 reads it), f1's workspace.
  ExpectSameBreakdown(timeline.points[0].bytes,
                      Bytes(1000, 400, 0, 100, 200, 0, 50));
  // f2, loss: x is freed after f1; a b l stashed.
  ExpectSameBreakdown(timeline.points[1].bytes,
                      Bytes(1000, 400, 0, 0, 500, 0, 0));
  ExpectSameBreakdown(timeline.points[2].bytes,
                      Bytes(1000, 400, 0, 0, 510, 0, 0));
  // b2: + gb. l and b are freed after it.
  ExpectSameBreakdown(timeline.points[3].bytes,
                      Bytes(1000, 400, 0, 0, 510, 300, 0));
  // b1, the peak: a, gb, + ga, gw and b1's workspace.
  ExpectSameBreakdown(timeline.points[4].bytes,
                      Bytes(1000, 400, 1000, 0, 200, 500, 70));
  // sgd: ga (a graph output) stays; + upd.
  ExpectSameBreakdown(timeline.points[5].bytes,
                      Bytes(1000, 400, 1000, 0, 0, 201, 0));
  EXPECT_EQ(timeline.peak_bytes, 3170);
  EXPECT_EQ(timeline.peak_step, 4);
  for (int32_t step = 0; step < 6; ++step) {
    EXPECT_EQ(timeline.points[step].step, step);
  }
  ExpectMatchesReplay(graph, PlainSchedule(graph));
}

TEST(MemoryTimelineTest, PeakBreakdownEqualsTheTimelineAtThePeak) {
  Graph graph = testing::ParseOrFail(kTraining);
  SimulationResult plain = SimulatePlain(graph);
  MemoryTimeline timeline =
      ValueOrFail(SimulateTimeline(graph, PlainSchedule(graph), {}));
  EXPECT_EQ(plain.peak_bytes, 3170);
  EXPECT_EQ(plain.peak_step, 4);
  ExpectSameBreakdown(timeline.points[4].bytes, plain.breakdown);
}

TEST(MemoryTimelineTest, PlanScheduleCountsRecomputedOutputsAsTransient) {
  Graph graph = testing::ParseOrFail(kTraining);
  // f1 re-runs before b1: a is made again from x, which now lives until
  // then.
  const Schedule plan = {{0, false}, {1, false}, {2, false}, {3, false},
                         {0, true},  {4, false}, {5, false}};
  MemoryTimeline timeline = ValueOrFail(SimulateTimeline(graph, plan, {}));
  ASSERT_EQ(timeline.points.size(), 7u);
  // The recompute step: w m x, gb and the new a (transient: recomputed),
  // with f1's workspace. The original a was freed after f2, its last reader
  // now that b1 reads the new one; l and b after b2.
  ExpectSameBreakdown(timeline.points[4].bytes,
                      Bytes(1000, 400, 0, 100, 0, 500, 50));
  ExpectMatchesReplay(graph, plan);
}

TEST(MemoryTimelineTest, AllocatorRoundingAppliesPerInstance) {
  Graph graph = testing::ParseOrFail(kTraining);
  MemoryModelOptions rounded;
  rounded.rounding_bytes = 512;
  MemoryTimeline timeline =
      ValueOrFail(SimulateTimeline(graph, PlainSchedule(graph), rounded));
  SimulationResult replay = SimulatePlain(graph, rounded);
  EXPECT_EQ(timeline.peak_bytes, replay.peak_bytes);
  // f1: w 1024, m 512, x 512, a 512, workspace 50 (not rounded).
  EXPECT_EQ(timeline.points[0].bytes.Total(), 1024 + 512 + 512 + 512 + 50);
}

// A chain of `n` forward ops whose outputs the backward reads, sizes varying.
std::string LongChain(int n) {
  std::string text = "tensor t0 64 input\n";
  for (int i = 0; i < n; ++i) {
    absl::StrAppend(&text, "op f", i, " fwd elementwise t", i, " -> t", i + 1,
                    ":", 100 + (i * 37) % 101, "\n");
  }
  absl::StrAppend(&text, "op bw bwd elementwise");
  for (int i = 1; i <= n; i += 3) absl::StrAppend(&text, " t", i);
  absl::StrAppend(&text, " -> g:10\noutput g\n");
  return text;
}

TEST(MemoryTimelineTest, DownsamplingKeepsEachBucketsLargestStep) {
  Graph graph = testing::ParseOrFail(LongChain(1000));
  const Schedule schedule = PlainSchedule(graph);
  SimulationResult replay = SimulatePlain(graph);
  MemoryTimeline timeline =
      ValueOrFail(SimulateTimeline(graph, schedule, {}, 7));
  EXPECT_TRUE(timeline.downsampled);
  EXPECT_EQ(timeline.num_steps, 1001);
  ASSERT_EQ(timeline.points.size(), 7u);
  bool has_peak = false;
  for (size_t b = 0; b < timeline.points.size(); ++b) {
    const int32_t begin = static_cast<int32_t>((b * 1001 + 6) / 7);
    const int32_t end = static_cast<int32_t>(((b + 1) * 1001 + 6) / 7);
    int64_t most = 0;
    for (int32_t s = begin; s < end; ++s) {
      most = std::max(most, replay.step_bytes[s]);
    }
    const TimelinePoint& point = timeline.points[b];
    EXPECT_GE(point.step, begin);
    EXPECT_LT(point.step, end);
    EXPECT_EQ(point.bytes.Total(), most) << "bucket " << b;
    has_peak |= point.step == replay.peak_step;
  }
  EXPECT_TRUE(has_peak);
  EXPECT_EQ(timeline.peak_bytes, replay.peak_bytes);
  // Default: at most kDefaultTimelinePoints.
  MemoryTimeline full = ValueOrFail(SimulateTimeline(graph, schedule, {}));
  EXPECT_FALSE(full.downsampled);
  EXPECT_EQ(full.points.size(), 1001u);
}

TEST(MemoryTimelineTest, BadPointCountsAndSchedulesAreErrors) {
  Graph graph = testing::ParseOrFail(kTraining);
  for (int32_t bad : {-1, kMaxTimelinePoints + 1}) {
    absl::StatusOr<MemoryTimeline> timeline =
        SimulateTimeline(graph, PlainSchedule(graph), {}, bad);
    EXPECT_EQ(timeline.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(timeline.status().message(), HasSubstr("timeline_max_points"));
  }
  const Schedule out_of_order = {{1, false}};
  absl::StatusOr<MemoryTimeline> timeline =
      SimulateTimeline(graph, out_of_order, {});
  EXPECT_EQ(timeline.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(timeline.status().message(), HasSubstr("graph order"));
}

}  // namespace
}  // namespace echo::planner
