// The stash objective's minimum cut (stash_cut.h) on small graphs: the sets
// it picks within a budget, its Lagrangian bound, AUTO starting from it, and
// ops whose re-execution makes only some outputs (graph.h,
// kRecomputeOutputsAttribute).
#include "planner/recompute/search/stash_cut.h"

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/compose/plan_composer.h"
#include "planner/memory_simulator.h"
#include "planner/recompute/plan_report.h"
#include "planner/recompute/recompute_problem.h"
#include "planner/text_format.h"
#include "test_util.h"

namespace echo::planner {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using testing::Render;
using testing::TensorIds;

// The backward reads c (1000) and m (50, from a random op: never re-run) and
// l. Re-running f3 alone only trades c for b (1000); f2 and f3 together
// leave a (100) instead: cost 2, stash 151. Going back to x also needs t
// (5000) unless f0 runs again: f0..f3, cost 13, stash 51. The forward's
// peak is at f1 (x t a = 5110), far above any of these clones.
constexpr char kChainGraph[] = R"(
  tensor x 10 input
  op f0 fwd elementwise x -> t:5000 cost=1
  op f1 fwd gemm t -> a:100 cost=10
  op f2 fwd elementwise a -> b:1000 cost=1
  op f3 fwd elementwise b -> c:1000 cost=1
  op f4 fwd random c -> m:50 cost=1 norecompute
  op loss fwd reduction c m -> l:1 cost=1
  op b3 bwd elementwise l c m -> gc:10 cost=1
)";

std::vector<std::string> OpIds(const Graph& graph,
                               const RecomputeSet& recompute) {
  std::vector<std::string> ids;
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    if (recompute[o]) ids.push_back(graph.op(o).id);
  }
  return ids;
}

struct Fixture {
  explicit Fixture(const char* text)
      : graph(testing::ParseOrFail(text)),
        costs(testing::RelativeCosts(graph)),
        problem(graph, costs, MemoryModelOptions{}) {}
  StashCutPlans Cuts(double budget) {
    return testing::ValueOrFail(StashCutsWithinBudget(
        problem, problem.eligible, FirstBackwardOp(graph), budget, nullptr));
  }
  Graph graph;
  std::vector<double> costs;
  RecomputeProblem problem;
};

TEST(StashCutTest, RecomputesChainsTogetherWithinTheBudget) {
  Fixture f(kChainGraph);
  StashCutPlans cuts = f.Cuts(2);
  EXPECT_EQ(cuts.plain_stash_bytes, 1051);  // c m l
  ASSERT_EQ(cuts.plans.size(), 2u);
  // The best within 2, then the cheapest beyond it.
  EXPECT_THAT(OpIds(f.graph, cuts.plans[0]), ElementsAre("f2", "f3"));
  EXPECT_THAT(OpIds(f.graph, cuts.plans[1]),
              ElementsAre("f0", "f1", "f2", "f3"));
  // Exact here: at any lambda in (100/11, 450) per unit, f2 f3 minimize
  // stash + lambda * cost = 151 + 2 lambda.
  EXPECT_EQ(cuts.lower_bound_bytes, 151);

  cuts = f.Cuts(13);
  ASSERT_EQ(cuts.plans.size(), 2u);
  EXPECT_THAT(OpIds(f.graph, cuts.plans[0]),
              ElementsAre("f0", "f1", "f2", "f3"));
  // Beyond 13: loss as well, which saves l (1 byte).
  EXPECT_THAT(OpIds(f.graph, cuts.plans[1]),
              ElementsAre("f0", "f1", "f2", "f3", "loss"));
  EXPECT_EQ(cuts.lower_bound_bytes, 51);  // m l

  // Within 1 the best is re-running loss (stash c m: 1050), which no lambda
  // picks (the Lagrangian's duality gap): no cut within the budget, only
  // f2 f3 beyond it, and the bound is max over lambda of min(1051, 151 +
  // 2 lambda) - lambda = 601 (lambda = 450), below the optimum.
  cuts = f.Cuts(1);
  ASSERT_EQ(cuts.plans.size(), 1u);
  EXPECT_THAT(OpIds(f.graph, cuts.plans[0]), ElementsAre("f2", "f3"));
  EXPECT_EQ(cuts.lower_bound_bytes, 601);
}

TEST(StashCutTest, FillsTheBudgetWithTheDearerCutsGroups) {
  // Two copies of kChainGraph's f1 f2 f3 chain: each re-run pair saves 900
  // for 2; the cuts jump from neither (cost 0) to both (cost 4) at the same
  // lambda. Within 3 one pair fits: the fill takes it. (z keeps the
  // forward's peak above the clones'.)
  Fixture f(R"(
    tensor x 10 input
    op big fwd elementwise x -> z:5000 cost=1
    op f1 fwd gemm x z -> a:100 cost=10
    op f2 fwd elementwise a -> b:1000 cost=1
    op f3 fwd elementwise b -> c:1000 cost=1
    op g1 fwd gemm x -> d:100 cost=10
    op g2 fwd elementwise d -> e:1000 cost=1
    op g3 fwd elementwise e -> h:1000 cost=1
    op loss fwd reduction c h -> l:1 cost=1 norecompute
    op b3 bwd elementwise l c h -> gc:10 cost=1
  )");
  StashCutPlans cuts = f.Cuts(3);
  EXPECT_EQ(cuts.plain_stash_bytes, 2001);  // c h l
  ASSERT_EQ(cuts.plans.size(), 2u);
  // No cut within 3 re-runs anything; the fill takes one pair (the first
  // group found), the dearer cut both.
  EXPECT_EQ(OpIds(f.graph, cuts.plans[0]).size(), 2u);
  EXPECT_THAT(OpIds(f.graph, cuts.plans[1]),
              ElementsAre("f2", "f3", "g2", "g3"));
  // max over lambda of min(2001, 201 + 4 lambda) - 3 lambda = 651.
  EXPECT_EQ(cuts.lower_bound_bytes, 651);
  RecomputePlanOptions options;
  options.objective = RecomputeObjective::kStashBytes;
  options.max_overhead_ratio = 3.0 / 37;  // the ops cost 37 in all
  const RecomputePlan plan =
      testing::ValueOrFail(GenerateRecomputePlan(f.graph, f.costs, options));
  EXPECT_EQ(plan.stash_bytes, 1101);  // a or d, the other pair's end, l
  EXPECT_EQ(plan.recompute_cost, 2);
}

TEST(StashCutTest, TakesAPrefixOfAGroupTooDearAsAWhole) {
  // g1 g2 g3 enter the cut together (each saves 1000 per 1) and form one
  // group, linked by u1 u2: within 2 the fill takes its prefix g1 g2, which
  // leaves u3 and l.
  Fixture f(R"(
    tensor s0 10 input
    op g1 fwd elementwise s0 -> u1:1000 cost=1
    op g2 fwd elementwise u1 -> u2:1000 cost=1
    op g3 fwd elementwise u2 -> u3:1000 cost=1
    op loss fwd reduction u3 -> l:1 cost=1 norecompute
    op b bwd elementwise l u1 u2 u3 -> gb:10 cost=1
  )");
  StashCutPlans cuts = f.Cuts(2);
  EXPECT_EQ(cuts.plain_stash_bytes, 3001);
  ASSERT_EQ(cuts.plans.size(), 2u);
  EXPECT_THAT(OpIds(f.graph, cuts.plans[0]), ElementsAre("g1", "g2"));
  EXPECT_THAT(OpIds(f.graph, cuts.plans[1]), ElementsAre("g1", "g2", "g3"));
  // At lambda = 1000 per unit: min(3001, 1 + 3 * 1000) - 2 * 1000.
  EXPECT_EQ(cuts.lower_bound_bytes, 1001);
}

TEST(StashCutTest, BoundBeatsTheKnapsackWhereInputsMustStay) {
  // The knapsack thinks re-running f3 (cost 1) takes c's 1000 bytes out of
  // the stash and half of loss's byte with the rest: 51. The cut knows that
  // b must then stay: max over lambda of min(1051, 151 + 2 lambda) - 1.5
  // lambda = 376 (lambda = 450).
  Fixture f(kChainGraph);
  EXPECT_EQ(
      testing::ValueOrFail(StashLowerBound(f.problem, 1.5, true, nullptr)),
      376);
  // OPTIMAL's clones may run inside the forward: the knapsack alone.
  EXPECT_EQ(
      testing::ValueOrFail(StashLowerBound(f.problem, 1.5, false, nullptr)),
      51);
}

TEST(StashCutTest, AutoStashObjectiveStartsFromTheCut) {
  Fixture f(kChainGraph);
  RecomputePlanOptions options;
  options.objective = RecomputeObjective::kStashBytes;
  options.max_overhead_ratio = 2.0 / 16;  // the ops cost 16 in all
  RecomputePlan plan =
      testing::ValueOrFail(GenerateRecomputePlan(f.graph, f.costs, options));
  EXPECT_EQ(Render(f.graph, plan.schedule), "f0 f1 f2 f3 f4 loss (f2) (f3) b3");
  EXPECT_THAT(TensorIds(f.graph, plan.stash), ElementsAre("a", "m", "l"));
  EXPECT_EQ(plan.stash_bytes, 151);
  EXPECT_EQ(plan.stash_lower_bound_bytes, 151);
  EXPECT_EQ(plan.recompute_cost, 2);
  EXPECT_LE(plan.planned_peak_bytes, plan.baseline_peak_bytes);
}

TEST(StashCutTest, BoundHoldsWhenAForwardOpFollowsTheFirstBackwardOp) {
  // f2 (forward) runs after b1: with f0 re-run before b1, f2 reads t's
  // clone too, so {f0} stashes only l and z (11 bytes) for cost 1. The bound
  // must not count t as stashed whatever the plan.
  Fixture f(R"(
    tensor x 10 input
    op f0 fwd elementwise x -> t:1000 cost=1
    op loss fwd reduction t -> l:1 cost=1
    op b1 bwd elementwise l t -> g:10 cost=1
    op f2 fwd elementwise t -> z:10 cost=1
    op b2 bwd elementwise g z -> gz:10 cost=1
  )");
  RecomputePlanOptions options;
  options.objective = RecomputeObjective::kStashBytes;
  options.max_overhead_ratio = 0.2;
  const RecomputePlan plan =
      testing::ValueOrFail(GenerateRecomputePlan(f.graph, f.costs, options));
  EXPECT_EQ(Render(f.graph, plan.schedule), "f0 loss (f0) b1 f2 b2");
  EXPECT_EQ(plan.stash_bytes, 11);
  EXPECT_LE(plan.stash_lower_bound_bytes, 11);
}

TEST(StashCutTest, FreeRecomputationGivesAnExactCut) {
  // f0 costs nothing: re-running it leaves only l (1 byte).
  Fixture f(R"(
    tensor x 10 input
    op f0 fwd elementwise x -> t:1000 cost=0
    op f1 fwd random t -> l:1 cost=1 norecompute
    op b1 bwd elementwise l t -> g:10 cost=1
  )");
  StashCutPlans cuts = f.Cuts(0.1);
  ASSERT_EQ(cuts.plans.size(), 1u);
  EXPECT_THAT(OpIds(f.graph, cuts.plans[0]), ElementsAre("f0"));
  EXPECT_EQ(cuts.lower_bound_bytes, 1);
}

TEST(StashCutTest, NothingToCutWithoutABackward) {
  Fixture f(R"(
    tensor x 10 input
    op f1 fwd elementwise x -> a:100 cost=1
    op f2 fwd elementwise a -> b:100 cost=1
    output b
  )");
  StashCutPlans cuts = testing::ValueOrFail(StashCutsWithinBudget(
      f.problem, f.problem.eligible, FirstBackwardOp(f.graph), 10, nullptr));
  EXPECT_EQ(cuts.plain_stash_bytes, 0);
  EXPECT_THAT(cuts.plans, IsEmpty());
  EXPECT_EQ(cuts.lower_bound_bytes, 0);
}

TEST(StashCutTest, StopsWhenInterrupted) {
  Fixture f(kChainGraph);
  absl::StatusOr<StashCutPlans> cuts = StashCutsWithinBudget(
      f.problem, f.problem.eligible, FirstBackwardOp(f.graph), 2,
      [] { return absl::DeadlineExceededError("deadline"); });
  EXPECT_EQ(cuts.status().code(), absl::StatusCode::kDeadlineExceeded);
}

// A training batch norm returns its updated running statistics as graph
// outputs: a clone of it would make them again, so it cannot re-run, unless
// its re-execution makes only its first outputs (recompute_outputs, as the
// PyTorch hook re-runs it without the statistics). The backward reads r (for
// the ReLU), c and mean (for the batch norm): 2009 bytes with l. Re-running
// bn and relu (cost 2) leaves c and l.
constexpr char kBatchNormGraph[] = R"(
  tensor x 10 input
  op conv fwd gemm x -> c:1000 cost=10
  op bn fwd norm c -> y:1000 mean:8 stats:8 cost=1 %s
  op relu fwd elementwise y -> r:1000 cost=1
  op loss fwd reduction r -> l:1 cost=1
  op b_relu bwd elementwise l r -> gr:1000 cost=1
  op b_bn bwd norm gr c mean -> gc:1000 cost=1
  output stats
)";

RecomputePlan StashPlan(const Graph& graph, double ratio) {
  RecomputePlanOptions options;
  options.objective = RecomputeObjective::kStashBytes;
  options.max_overhead_ratio = ratio;
  return testing::ValueOrFail(
      GenerateRecomputePlan(graph, testing::RelativeCosts(graph), options));
}

TEST(StashCutTest, OpsWhoseCloneMakesFewerOutputsMayReRun) {
  const Graph whole =
      testing::ParseOrFail(absl::StrFormat(kBatchNormGraph, ""));
  RecomputePlan plan = StashPlan(whole, 2.0 / 15);
  EXPECT_EQ(plan.stash_bytes, 2008);  // only loss may re-run: c mean r
  // Re-running conv (cost 10) would spare c: at lambda = 100 per unit the
  // cut prices it even with the plain plan, 2009 - 100 * 2.
  EXPECT_EQ(plan.stash_lower_bound_bytes, 1809);

  const Graph partial = testing::ParseOrFail(
      absl::StrFormat(kBatchNormGraph, "recompute_outputs=2"));
  plan = StashPlan(partial, 2.0 / 15);
  EXPECT_EQ(Render(partial, plan.schedule),
            "conv bn relu loss (bn) (relu) b_relu b_bn");
  EXPECT_THAT(TensorIds(partial, plan.stash), ElementsAre("c", "l"));
  EXPECT_EQ(plan.stash_bytes, 1001);
  EXPECT_EQ(plan.stash_lower_bound_bytes, 1001);
  // The clone makes y and mean, not stats: the original's stays the output.
  const SimulationResult replay =
      testing::ValueOrFail(ReplaySchedule(partial, plan.schedule, {}));
  EXPECT_EQ(plan.planned_peak_bytes, replay.peak_bytes);
  EXPECT_LE(replay.peak_bytes, plan.baseline_peak_bytes);
}

// The backward reads a3 at b3 and a1, a0 at b1. Within 6.4 (of 16) the cut
// re-runs f0..f3 (stash: l alone), but f2's clone before b3 then needs a1
// and a0 re-made too, and with f3's workspace that step holds 4401 bytes,
// one over the plain peak (4400, f3 in the forward): the selection rejects
// it. Without the repair AUTO kept (f0) (f1), 1001 bytes: the greedy cannot
// add f2 and f3 without raising the peak. The repair takes f1 out (a1
// stays, 600 bytes, the least stash for the excess), so a0 is re-made only
// before b1, and the freed budget finds nothing more: 601 bytes.
TEST(StashCutTest, AutoRepairsACutAboveThePlainPeak) {
  Fixture f(R"(
    tensor x 10 input
    op f0 fwd elementwise x -> a0:1000 cost=1
    op f1 fwd elementwise a0 -> a1:600 cost=1
    op f2 fwd elementwise a1 -> a2:800 cost=1 ws=900
    op f3 fwd elementwise a2 -> a3:1000 cost=3 ws=1000
    op loss fwd reduction a3 -> l:1 cost=1
    op b3 bwd elementwise l a3 -> g3:100 cost=2
    op b2 bwd elementwise g3 -> g2:1000 cost=3
    op b1 bwd elementwise g2 a1 a0 -> g1:100 cost=2
    op b0 bwd elementwise g1 -> g0:300 cost=2
    output l
  )");
  const StashCutPlans cuts = f.Cuts(6.4);
  ASSERT_FALSE(cuts.plans.empty());
  EXPECT_THAT(OpIds(f.graph, cuts.plans[0]),
              ElementsAre("f0", "f1", "f2", "f3"));
  const SimulationResult cut_replay = testing::ValueOrFail(ReplaySchedule(
      f.graph, ScheduleFromRecomputeSet(f.problem, cuts.plans[0]), {}));
  const int64_t plain = SimulatePlain(f.graph, {}).peak_bytes;
  EXPECT_EQ(plain, 4400);
  EXPECT_EQ(cut_replay.peak_bytes, 4401);

  const RecomputePlan plan = StashPlan(f.graph, 0.4);
  EXPECT_EQ(Render(f.graph, plan.schedule),
            "f0 f1 f2 f3 loss (f2) (f3) b3 b2 (f0) b1 b0");
  EXPECT_THAT(TensorIds(f.graph, plan.stash), ElementsAre("a1", "l"));
  EXPECT_EQ(plan.stash_bytes, 601);
  EXPECT_EQ(plan.planned_peak_bytes, 3411);
  EXPECT_EQ(plan.baseline_peak_bytes, plain);
  EXPECT_EQ(plan.recompute_cost, 5);
}

TEST(StashCutTest, RecomputeOutputsIsValidated) {
  for (const char* bad : {"recompute_outputs=0", "recompute_outputs=4",
                          "recompute_outputs=two"}) {
    SCOPED_TRACE(bad);
    absl::StatusOr<Graph> graph =
        ParseTextGraph(absl::StrFormat(kBatchNormGraph, bad));
    EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(graph.status().message(),
                ::testing::HasSubstr("op 'bn': attribute recompute_outputs"));
  }
}

}  // namespace
}  // namespace echo::planner
