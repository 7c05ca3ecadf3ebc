// The memory model of docs/design.md section 4: exact peaks, peak steps and
// breakdowns on small hand-built graphs, and the known plain peaks of the
// Checkmate graphs.
#include "planner/memory_simulator.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace echo::planner {
namespace {

using ::testing::HasSubstr;

// x(100, input) -> a(200) -> b(300) -> loss(10); backward reads a and b.
constexpr char kChain[] = R"(
  tensor x 100 input
  tensor w 1000 parameter
  op f1 fwd gemm x w -> a:200
  op f2 fwd elementwise a -> b:300
  op loss fwd reduction b -> l:10
  op b2 bwd elementwise l b -> gb:300
  op b1 bwd gemm gb a w -> ga:200
  output ga
)";

TEST(MemorySimulatorTest, ChainPeakStepsAndBreakdown) {
  Graph graph = testing::ParseOrFail(kChain);
  SimulationResult result = SimulatePlain(graph);
  // Live before each step, then + outputs:
  // f1: w1000 x100 + a200 = 1300 (x freed after f1)
  // f2: w a + b300 = 1500
  // loss: w a b + l10 = 1510
  // b2: w a b l + gb300 = 1810 (l, b freed after)
  // b1: w a gb + ga200 = 1700
  EXPECT_EQ(result.step_bytes,
            (std::vector<int64_t>{1300, 1500, 1510, 1810, 1700}));
  EXPECT_EQ(result.peak_bytes, 1810);
  EXPECT_EQ(result.peak_step, 3);
  EXPECT_EQ(result.persistent_bytes, 1000);
  EXPECT_EQ(result.breakdown.parameter_bytes, 1000);
  // a, b and l are forward outputs read by the backward: stashed.
  EXPECT_EQ(result.breakdown.stashed_activation_bytes, 510);
  EXPECT_EQ(result.breakdown.transient_bytes, 300);  // gb
  EXPECT_EQ(result.breakdown.Total(), result.peak_bytes);
  ASSERT_EQ(result.live_at_peak.size(), 5u);
  EXPECT_EQ(graph.tensor(result.live_at_peak[0].tensor).id, "w");
}

TEST(MemorySimulatorTest, WorkspaceCountsOnlyWhileRunning) {
  Graph graph = testing::ParseOrFail(R"(
    tensor x 100 input
    op a fwd conv x -> y:100 ws=1000
    op b fwd elementwise y -> z:100
    output z
  )");
  SimulationResult result = SimulatePlain(graph);
  EXPECT_EQ(result.step_bytes, (std::vector<int64_t>{1200, 200}));
  EXPECT_EQ(result.breakdown.workspace_bytes, 1000);
  EXPECT_EQ(result.breakdown.input_bytes, 100);
}

TEST(MemorySimulatorTest, UnreadOutputsAreFreedAndGraphOutputsKept) {
  Graph graph = testing::ParseOrFail(R"(
    tensor x 10 input
    op a fwd other x -> dead:1000 keep:50
    op b fwd other x -> y:5
    output keep
  )");
  SimulationResult result = SimulatePlain(graph);
  // a: x + dead + keep; dead freed after a. b: x keep + y.
  EXPECT_EQ(result.step_bytes, (std::vector<int64_t>{1060, 65}));
}

TEST(MemorySimulatorTest, UnreadInputsAreNeverAllocated) {
  Graph graph = testing::ParseOrFail(R"(
    tensor unused 1000000 input
    tensor x 10 input
    op a fwd other x -> y:5
  )");
  EXPECT_EQ(SimulatePlain(graph).peak_bytes, 15);
}

TEST(MemorySimulatorTest, AllocatorRounding) {
  Graph graph = testing::ParseOrFail(kChain);
  MemoryModelOptions options;
  options.rounding_bytes = 512;
  // Every tensor rounds to 512 except w (1000 -> 1024).
  SimulationResult result = SimulatePlain(graph, options);
  EXPECT_EQ(result.step_bytes[3], 1024 + 4 * 512);
  EXPECT_EQ(AllocatedBytes(0, options), 0);
  EXPECT_EQ(AllocatedBytes(513, options), 1024);
}

TEST(MemorySimulatorTest, RecomputeScheduleFreesStashedTensor) {
  Graph graph = testing::ParseOrFail(kChain);
  // Drop b after loss, recompute it from a right before b2.
  Schedule schedule = {{0, false}, {1, false}, {2, false},
                       {1, true},  {3, false}, {4, false}};
  absl::StatusOr<SimulationResult> result = ReplaySchedule(graph, schedule);
  ASSERT_TRUE(result.ok()) << result.status();
  // The first b's last reader is loss, so it dies after step 2. The clone
  // then runs with w a l live (1210) + b 300.
  EXPECT_EQ(result->step_bytes,
            (std::vector<int64_t>{1300, 1500, 1510, 1510, 1810, 1700}));
  EXPECT_EQ(result->recompute_count, 1);
}

TEST(MemorySimulatorTest, RecomputeLowersPeakWhenSourceIsStashedAnyway) {
  Graph graph = testing::ParseOrFail(R"(
    tensor x 10 input
    op f1 fwd gemm x -> a:100
    op f2 fwd elementwise a -> b:1000
    op f3 fwd gemm b -> c:100
    op f4 fwd elementwise c -> d:1000
    op loss fwd reduction d -> l:1
    op b4 bwd elementwise l d -> gd:100
    op b3 bwd gemm gd b -> gc:100
    op b2 bwd elementwise gc a -> gb:100
    op b1 bwd gemm gb -> ga:10
  )");
  const int64_t plain = SimulatePlain(graph).peak_bytes;
  // Plain: peak at b4 with a b d l + gd = 2201. Recomputing b from a just
  // before b3 frees b after f3: the peak becomes the clone or b3 (1300).
  Schedule schedule = PlainSchedule(graph);
  schedule.insert(schedule.begin() + 6, Execution{1, true});
  absl::StatusOr<SimulationResult> replay = ReplaySchedule(graph, schedule);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_EQ(plain, 2201);
  EXPECT_EQ(replay->peak_bytes, 1300);
  EXPECT_EQ(replay->step_bytes,
            (std::vector<int64_t>{110, 1100, 1200, 1200, 1101, 1201, 1200, 1300,
                                  300, 110}));
}

TEST(MemorySimulatorTest, ReplayRejectsInvalidSchedules) {
  Graph graph = testing::ParseOrFail(kChain);
  struct Case {
    Schedule schedule;
    const char* fragment;
  };
  const Case cases[] = {
      {{{0, false}, {2, false}}, "expected op 'f2'"},
      {{{0, false}, {1, false}, {2, false}, {3, false}},
       "schedule ends before op 'b1' runs"},
      {{{0, false}, {1, true}}, "recomputes an op before its original"},
      {{{7, false}}, "outside the graph"},
      {{{0, false}, {0, false}}, "expected op 'f2'"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<SimulationResult> result = ReplaySchedule(graph, c.schedule);
    ASSERT_FALSE(result.ok());
    EXPECT_THAT(std::string(result.status().message()), HasSubstr(c.fragment));
  }
}

TEST(MemorySimulatorTest, ReplayRejectsRecomputingForbiddenOp) {
  Graph graph = testing::ParseOrFail(R"(
    tensor x 10 input
    op drop fwd random x -> a:10
    op use fwd other a -> b:10
    op bw bwd other a b -> c:10
  )");
  absl::StatusOr<SimulationResult> result =
      ReplaySchedule(graph, {{0, false}, {1, false}, {0, true}, {2, false}});
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("op 'drop', recompute): op may not be recomputed"));
}

struct CheckmateCase {
  const char* name;
  int ops;
  int64_t plain_peak_bytes;
};

class CheckmatePeakTest : public ::testing::TestWithParam<CheckmateCase> {};

TEST_P(CheckmatePeakTest, MatchesPublishedPlainPeak) {
  Graph graph = testing::LoadCheckmate(GetParam().name);
  EXPECT_EQ(graph.num_ops(), GetParam().ops);
  SimulationResult result = SimulatePlain(graph);
  EXPECT_EQ(result.peak_bytes, GetParam().plain_peak_bytes);
  EXPECT_EQ(result.breakdown.Total(), result.peak_bytes);
}

INSTANTIATE_TEST_SUITE_P(
    Checkmate, CheckmatePeakTest,
    ::testing::Values(CheckmateCase{"vgg16_b256_train", 45, 15825108992},
                      CheckmateCase{"vgg19_b256_train", 51, 17058234368},
                      CheckmateCase{"mobilenet_b512_train", 185, 34701056000},
                      CheckmateCase{"resnet50_b256_train", 353, 38059356160},
                      CheckmateCase{"fcn8_vgg_b32_train", 73, 13484795520}),
    [](const ::testing::TestParamInfo<CheckmateCase>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace echo::planner
