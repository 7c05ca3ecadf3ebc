// Plans people can read: regions that save nothing at the peak are dropped
// unless the peak needs them, regions come largest saving first, and the
// pruned schedule still replays to the numbers the plan claims.
#include <algorithm>
#include <vector>

#include "gtest/gtest.h"
#include "planner/compose/plan_composer.h"
#include "planner/memory_simulator.h"
#include "tests/unit/random_graphs.h"
#include "tests/unit/test_util.h"

namespace echo::planner {
namespace {

// The schedule without the steps of one region.
Schedule Without(const Schedule& schedule, const RecomputeRegionReport& r) {
  Schedule kept;
  for (int32_t step = 0; step < static_cast<int32_t>(schedule.size()); ++step) {
    if (!std::binary_search(r.steps.begin(), r.steps.end(), step)) {
      kept.push_back(schedule[step]);
    }
  }
  return kept;
}

void ExpectReadable(const Graph& graph, const std::vector<double>& costs,
                    RecomputePlanOptions options, const char* label) {
  SCOPED_TRACE(label);
  const RecomputePlan plan =
      testing::ValueOrFail(GenerateRecomputePlan(graph, costs, options));
  options.prune.enabled = false;
  const RecomputePlan unpruned =
      testing::ValueOrFail(GenerateRecomputePlan(graph, costs, options));
  // Pruning never raises the peak nor the cost.
  EXPECT_LE(plan.planned_peak_bytes, unpruned.planned_peak_bytes);
  EXPECT_LE(plan.recompute_cost, unpruned.recompute_cost * (1 + 1e-12));
  EXPECT_LE(plan.regions.size(), unpruned.regions.size());
  // The schedule replays to the claimed peak and cost.
  const SimulationResult replay = testing::ValueOrFail(
      ReplaySchedule(graph, plan.schedule, options.memory));
  EXPECT_EQ(replay.peak_bytes, plan.planned_peak_bytes);
  double cost = 0;
  for (const Execution& e : plan.schedule) {
    if (e.recompute) cost += costs[e.op];
  }
  EXPECT_NEAR(cost, plan.recompute_cost, 1e-9 * (1 + cost));
  // Largest saving first.
  for (size_t i = 1; i < plan.regions.size(); ++i) {
    const RecomputeRegionReport& a = plan.regions[i - 1];
    const RecomputeRegionReport& b = plan.regions[i];
    EXPECT_GE(a.bytes_saved_at_peak, b.bytes_saved_at_peak);
    if (a.bytes_saved_at_peak == b.bytes_saved_at_peak) {
      EXPECT_GE(a.peak_rise_if_dropped_bytes, b.peak_rise_if_dropped_bytes);
    }
  }
  // A region left that saves nothing at the peak step is needed: without
  // it the peak rises.
  for (const RecomputeRegionReport& region : plan.regions) {
    if (region.bytes_saved_at_peak > 0) continue;
    absl::StatusOr<SimulationResult> without =
        ReplaySchedule(graph, Without(plan.schedule, region), options.memory);
    if (without.ok()) {
      EXPECT_GT(without->peak_bytes, plan.planned_peak_bytes);
      EXPECT_EQ(region.peak_rise_if_dropped_bytes,
                without->peak_bytes - plan.planned_peak_bytes);
    }
  }
}

// Pruning is AUTO's: ECHO keeps the published algorithm's plan.
TEST(PlanReadabilityTest, EchoKeepsItsPublishedPlan) {
  const testing::RandomGraph random = testing::MakeRandomTrainingGraph(7);
  RecomputePlanOptions options;
  options.policy = RecomputePolicy::kEcho;
  const RecomputePlan pruned = testing::ValueOrFail(
      GenerateRecomputePlan(random.graph, random.op_costs, options));
  options.prune.enabled = false;
  const RecomputePlan published = testing::ValueOrFail(
      GenerateRecomputePlan(random.graph, random.op_costs, options));
  EXPECT_EQ(pruned.schedule.size(), published.schedule.size());
  EXPECT_EQ(pruned.recompute_cost, published.recompute_cost);
}

TEST(PlanReadabilityTest, RandomGraphsUnderTightLimits) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    testing::RandomGraphOptions graph_options;
    graph_options.forward_ops = 12 + static_cast<int>(seed % 20);
    const testing::RandomGraph random =
        testing::MakeRandomTrainingGraph(seed, graph_options);
    RecomputePlanOptions options;
    const int64_t plain =
        SimulatePlain(random.graph, options.memory).peak_bytes;
    for (double fraction : {0.9, 0.6, 0.3}) {
      options.memory_limit_bytes = static_cast<int64_t>(fraction * plain);
      ExpectReadable(random.graph, random.op_costs, options, "auto");
    }
  }
}

TEST(PlanReadabilityTest, CheckmateGraphs) {
  for (const char* name : {"vgg16_b256_train", "resnet50_b256_train"}) {
    const Graph graph = testing::LoadCheckmate(name);
    const std::vector<double> costs = testing::RelativeCosts(graph);
    RecomputePlanOptions options;
    options.memory_limit_bytes =
        SimulatePlain(graph, options.memory).peak_bytes / 2;
    ExpectReadable(graph, costs, options, name);
  }
}

TEST(PlanReadabilityTest, OpDisplayNameHasFrameworkNameTypeAndModule) {
  Op op;
  op.id = "17";
  EXPECT_EQ(OpDisplayName(op), "17");
  op.name = "addmm_3";
  op.op_type = "aten::addmm";
  EXPECT_EQ(OpDisplayName(op), "addmm_3 (aten::addmm)");
  op.attributes[kModuleAttribute] = "encoder.layers.0.attn";
  EXPECT_EQ(OpDisplayName(op),
            "addmm_3 (aten::addmm in encoder.layers.0.attn)");
  op.op_type.clear();
  EXPECT_EQ(OpDisplayName(op), "addmm_3 (in encoder.layers.0.attn)");
  std::string text = "ops: ";
  AppendOpDisplayName(op, text);
  EXPECT_EQ(text, "ops: addmm_3 (in encoder.layers.0.attn)");
}

}  // namespace
}  // namespace echo::planner
