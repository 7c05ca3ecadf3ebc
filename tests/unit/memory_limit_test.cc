// AUTO in memory-limit mode on Hugging Face's GPT-2 (tests/data/graphs/
// hf_gpt2.pb: 4 layers of width 256, vocabulary 8192, batch 4 x 256, the loss
// the only output), priced on an H100 as echod prices a graph without costs:
// the default depth bound hides no plan that meets the limit, an infeasible
// answer is the lowest peak found and never above a plan found for a looser
// limit, and the frontier runs down to it. Most cases hold the dropout
// draws (their masks), as graphs without random-state replay do; the hook's
// eager capture replays them, which reaches lower.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "adapter/graph_convert.h"
#include "adapter/graph_file.h"
#include "gtest/gtest.h"
#include "planner/compose/plan_composer.h"
#include "planner/cost_model.h"
#include "planner/memory_simulator.h"
#include "planner/schedule/batch_search.h"
#include "test_util.h"

namespace echo::planner {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

class HfGpt2LimitTest : public ::testing::Test {
 protected:
  void SetUp() override { Load(/*hold_draws=*/true); }

  void Load(bool hold_draws) {
    v1::Graph proto = testing::ValueOrFail(adapter::LoadGraphFile(
        std::string(ECHO_TEST_DATA_DIR) + "/graphs/hf_gpt2.pb"));
    int draws = 0;
    for (v1::Op& op : *proto.mutable_ops()) {
      if (op.op_type() != "echo::dropout_draw") continue;
      ++draws;
      if (hold_draws) op.set_recomputable(false);
    }
    ASSERT_EQ(draws, 13);  // embeddings, and attention and MLP per layer
    graph_ = testing::ValueOrFail(adapter::GraphFromProto(proto));
    const DeviceSpec device = testing::CatalogDevice("h100-80gb");
    costs_ =
        testing::ValueOrFail(EstimateOpCosts(graph_, &device, nullptr)).Costs();
  }

  RecomputePlan At(int64_t limit, int depth = 0) const {
    RecomputePlanOptions options;
    options.memory_limit_bytes = limit;
    options.max_recompute_depth = depth;
    return testing::ValueOrFail(GenerateRecomputePlan(graph_, costs_, options));
  }

  Graph graph_;
  std::vector<double> costs_;
};

// 131 MiB is about where checkpointing every block peaks. A search bounded
// at depth 16 misses it (132.56 MiB); the default bound goes deeper.
TEST_F(HfGpt2LimitTest, DefaultDepthMeetsTheLimitDepth16Misses) {
  const RecomputePlan bounded = At(131 * kMiB, /*depth=*/16);
  EXPECT_FALSE(bounded.feasible) << bounded.planned_peak_bytes;
  const RecomputePlan plan = At(131 * kMiB);
  EXPECT_TRUE(plan.feasible) << plan.planned_peak_bytes;
  EXPECT_LE(plan.planned_peak_bytes, 131 * kMiB);
  EXPECT_EQ(
      plan.planned_peak_bytes,
      testing::ValueOrFail(ReplaySchedule(graph_, plan.schedule)).peak_bytes);
}

// Replaying the draws (the hook's eager capture) lets the plan drop the
// masks: 128 MiB, which no plan that holds them meets, is met.
TEST_F(HfGpt2LimitTest, ReplayedDropoutReachesLower) {
  EXPECT_FALSE(At(128 * kMiB).feasible);
  const int64_t held_lowest = At(1).planned_peak_bytes;
  Load(/*hold_draws=*/false);
  const RecomputePlan plan = At(128 * kMiB);
  EXPECT_TRUE(plan.feasible) << plan.planned_peak_bytes;
  EXPECT_LT(At(1).planned_peak_bytes, held_lowest);
}

// Limits from the lower bound to the plain peak: each infeasible answer is
// at or below every answer for a looser limit, and the frontier's lowest
// point is the lowest peak of them all.
TEST_F(HfGpt2LimitTest, InfeasibleAnswersAreNeverAboveALooserAnswer) {
  const int64_t plain = SimulatePlain(graph_).peak_bytes;
  const RecomputePlan first = At(1);
  const int64_t bound = first.peak_lower_bound_bytes;
  ASSERT_LT(bound, plain);
  std::vector<RecomputePlan> plans;
  constexpr int kSteps = 16;
  for (int i = 0; i <= kSteps; ++i) {
    plans.push_back(At(bound + (plain - bound) * i / kSteps));
  }
  int64_t lowest = first.planned_peak_bytes;
  for (size_t i = 0; i < plans.size(); ++i) {
    lowest = std::min(lowest, plans[i].planned_peak_bytes);
    if (plans[i].feasible) continue;
    for (size_t j = i + 1; j < plans.size(); ++j) {
      EXPECT_LE(plans[i].planned_peak_bytes, plans[j].planned_peak_bytes)
          << "limit step " << i << " against " << j;
    }
  }
  EXPECT_FALSE(first.feasible);
  EXPECT_EQ(first.planned_peak_bytes, lowest);
  EXPECT_LE(lowest, 131 * kMiB);

  FrontierOptions options;
  options.time_budget_seconds = 60;
  const MemoryFrontier frontier =
      testing::ValueOrFail(ComputeMemoryFrontier(graph_, costs_, options));
  ASSERT_FALSE(frontier.points.empty());
  EXPECT_EQ(frontier.points.back().peak_bytes, lowest);
}

}  // namespace
}  // namespace echo::planner
