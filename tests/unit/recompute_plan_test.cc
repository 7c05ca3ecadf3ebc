// Recompute policies on small hand-built graphs: exact schedules, peaks and
// costs (hand-computed in the comments), the API's errors, the report.
#include <sys/resource.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/compose/plan_composer.h"
#include "planner/recompute/recompute_problem.h"
#include "planner/recompute/search/auto_recompute.h"
#include "test_util.h"
#include "too_big_graph.h"

namespace echo::planner {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using testing::Render;
using testing::TensorIds;

RecomputePlan PlanOrDie(const Graph& graph, RecomputePolicy policy,
                        std::optional<int64_t> limit = std::nullopt,
                        std::optional<double> ratio = std::nullopt) {
  RecomputePlanOptions options;
  options.policy = policy;
  options.memory_limit_bytes = limit;
  options.max_overhead_ratio = ratio;
  options.solver_time_limit_seconds = 20;
  return testing::ValueOrFail(
      GenerateRecomputePlan(graph, testing::RelativeCosts(graph), options));
}

TEST(RecomputePlanTest, PolicyNamesRoundTrip) {
  for (RecomputePolicy policy :
       {RecomputePolicy::kAuto, RecomputePolicy::kNone, RecomputePolicy::kEcho,
        RecomputePolicy::kChenSqrt, RecomputePolicy::kOptimal}) {
    absl::StatusOr<RecomputePolicy> parsed =
        ParseRecomputePolicy(RecomputePolicyName(policy));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, policy);
  }
  EXPECT_EQ(ParseRecomputePolicy("Chen_SQRT").value_or(RecomputePolicy::kAuto),
            RecomputePolicy::kChenSqrt);
  EXPECT_THAT(ParseRecomputePolicy("mirror").status().message(),
              HasSubstr("unknown recompute policy 'mirror'"));
}

TEST(RecomputePlanTest, RejectsBadInputs) {
  Graph graph = testing::ParseOrFail(testing::kTwoLayerChain);
  RecomputePlanOptions options;
  auto error = [&](std::vector<double> costs) {
    absl::StatusOr<RecomputePlan> plan =
        GenerateRecomputePlan(graph, costs, options);
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(plan.status().message());
  };
  EXPECT_THAT(error({1, 2}), HasSubstr("op_costs has 2 entries"));
  std::vector<double> costs = testing::RelativeCosts(graph);
  costs[3] = -1;
  EXPECT_THAT(error(costs), HasSubstr("op 'f4' has cost -1"));
  costs = testing::RelativeCosts(graph);
  options.memory_limit_bytes = -5;
  EXPECT_THAT(error(costs), HasSubstr("memory_limit_bytes is negative"));
  options.memory_limit_bytes = 100;
  options.max_overhead_ratio = 0.1;
  EXPECT_THAT(error(costs), HasSubstr("at most one"));
  options.memory_limit_bytes.reset();
  options.max_overhead_ratio = -0.1;
  EXPECT_THAT(error(costs), HasSubstr("max_overhead_ratio"));
  options.max_overhead_ratio.reset();
  options.policy = RecomputePolicy::kOptimal;
  EXPECT_THAT(error(costs), HasSubstr("set memory_limit_bytes"));
}

TEST(RecomputePlanTest, NoneIsThePlainSchedule) {
  Graph graph = testing::ParseOrFail(testing::kTwoLayerChain);
  RecomputePlan plan = PlanOrDie(graph, RecomputePolicy::kNone);
  EXPECT_EQ(plan.schedule, PlainSchedule(graph));
  // Peak at b4: a b d l + gd = 100 + 1000 + 1000 + 1 + 100.
  EXPECT_EQ(plan.baseline_peak_bytes, 2201);
  EXPECT_EQ(plan.planned_peak_bytes, 2201);
  EXPECT_EQ(plan.baseline_compute_cost, 45);
  EXPECT_EQ(plan.recompute_cost, 0);
  EXPECT_TRUE(plan.regions.empty());
  // Forward outputs read by the backward.
  EXPECT_THAT(TensorIds(graph, plan.stash), ElementsAre("a", "b", "d", "l"));
  EXPECT_EQ(plan.solver_status, "heuristic");
  // b3 needs gd + b + gc = 1200 in any schedule.
  EXPECT_EQ(plan.peak_lower_bound_bytes, 1200);
}

// A training dropout as the PyTorch hook splits it: the random op makes
// the mask, `out` makes the output from h and the mask (its first run
// hands on out0: no work), and the backward reads y, h and the mask.
constexpr char kSplitDropout[] = R"(
graph split_dropout
tensor x f32[100] input
tensor g f32[100] input
op h fwd elementwise x -> h:f32[100] cost=1
op drop fwd random h -> out0:f32[100] mask:bool[100] cost=2
op out fwd elementwise h mask -> y:f32[100] cost=2 first_run_alias=out0
op sq fwd elementwise y -> z:f32[100] cost=1
op zb bwd elementwise g y -> gy:f32[100] cost=1
op hb bwd elementwise gy mask h -> gh:f32[100] cost=1
output z gh
)";

TEST(RecomputePlanTest,
     AFirstRunAliasIsFreeInTheBaselineAndPaidWhenRecomputed) {
  const Graph graph = testing::ParseOrFail(kSplitDropout);
  const RecomputePlan plain = PlanOrDie(graph, RecomputePolicy::kNone);
  // 1 + 2 + 1 + 1 + 1: `out`'s 2 is not the plain iteration's.
  EXPECT_EQ(plain.baseline_compute_cost, 6);
  EXPECT_THAT(TensorIds(graph, plain.stash), ElementsAre("h", "mask", "y"));
  // The fewest bytes held: only the mask (100 bytes, not 900); h is
  // recomputed from x for 1 and y from h and the mask for `out`'s 2.
  RecomputePlanOptions options;
  options.objective = RecomputeObjective::kStashBytes;
  options.max_overhead_ratio = 1.0;
  ASSERT_OK_AND_ASSIGN(
      const RecomputePlan least,
      GenerateRecomputePlan(graph, testing::RelativeCosts(graph), options));
  EXPECT_THAT(TensorIds(graph, least.stash), ElementsAre("mask"));
  EXPECT_EQ(least.recompute_cost, 1 + 2);
  EXPECT_DOUBLE_EQ(least.recompute_overhead_ratio, 3.0 / 6);
}

TEST(RecomputePlanTest, EchoKeepsCheapOpsRecomputedByTheFrontierRule) {
  Graph graph = testing::ParseOrFail(testing::kTwoLayerChain);
  RecomputePlan plan = PlanOrDie(graph, RecomputePolicy::kEcho);
  // Cheap ops: f2, f4, loss. Frontier {f2}: releases nothing (a is also read
  // by b2) and allocates b + a = 1100; {f4}: releases c (100), allocates d
  // (1000). Neither flips, so all three stay recomputed, each cloned before
  // its first backward reader (f4 before b4 because loss's clone needs d).
  EXPECT_EQ(Render(graph, plan.schedule),
            "f1 f2 f3 f4 loss (f4) (loss) b4 (f2) b3 b2 b1");
  // b3: a b' gd gc = 100 + 1000 + 100 + 100.
  EXPECT_EQ(plan.planned_peak_bytes, 1300);
  EXPECT_EQ(plan.recompute_cost, 3);
  EXPECT_DOUBLE_EQ(plan.recompute_overhead_ratio, 3.0 / 45);
  // c too: f4's clone runs in the backward, from c.
  EXPECT_THAT(TensorIds(graph, plan.stash), ElementsAre("a", "c"));
  ASSERT_EQ(plan.regions.size(), 2u);
  EXPECT_THAT(TensorIds(graph, plan.regions[0].freed_tensors),
              ElementsAre("d", "l"));
  EXPECT_THAT(TensorIds(graph, plan.regions[0].source_tensors),
              ElementsAre("c"));
}

TEST(RecomputePlanTest, EchoGroupsSharedInputsAndStashesWhenItReleases) {
  Graph graph = testing::ParseOrFail(R"(
    tensor x 10 input
    op f1 fwd gemm x -> k:100 cost=10
    op s1 fwd elementwise k -> e1:400 cost=1
    op s2 fwd elementwise k -> e2:400 cost=1
    op f2 fwd gemm x -> big:1000 cost=10
    op r fwd reduction big -> small:10 cost=1
    op q fwd elementwise small -> q1:10 cost=1
    op loss fwd gemm e1 e2 q1 -> l:1 cost=10
    op bl bwd gemm l e1 e2 q1 -> g:10 cost=10
    op bq bwd elementwise g small -> gs:10 cost=1
    op br bwd elementwise gs -> gb:1000 cost=1
  )");
  RecomputePlan plan = PlanOrDie(graph, RecomputePolicy::kEcho);
  // Frontier: {s1, s2} (grouped: both read k) releases k (100) for e1 + e2
  // (800): stays recomputed. {r} releases big (1000) for small (10): stashed.
  // Then {q} releases nothing (bq also reads small) for q1: recomputed.
  EXPECT_EQ(Render(graph, plan.schedule),
            "f1 s1 s2 f2 r q loss (s1) (s2) (q) bl bq br");
  EXPECT_EQ(plan.recompute_cost, 3);
  ASSERT_EQ(plan.regions.size(), 2u);
  EXPECT_THAT(TensorIds(graph, plan.regions[0].source_tensors),
              ElementsAre("k"));
  EXPECT_THAT(TensorIds(graph, plan.regions[1].source_tensors),
              ElementsAre("small"));
}

TEST(RecomputePlanTest, ChenKeepsEverySqrtNthArticulationPoint) {
  Graph graph = testing::ParseOrFail(testing::kTwoLayerChain);
  RecomputePlan plan = PlanOrDie(graph, RecomputePolicy::kChenSqrt);
  // Five forward ops, segments of round(sqrt(5)) = 2: f2 and f4 are kept
  // (articulation points), f1, f3 and loss are recomputed; f3's output is
  // read by the forward only, so only f1 (before b2) and loss (before b4)
  // run again. x stays alive for f1's clone.
  EXPECT_EQ(Render(graph, plan.schedule),
            "f1 f2 f3 f4 loss (loss) b4 b3 (f1) b2 b1");
  // b4: x b d l' gd = 10 + 1000 + 1000 + 1 + 100.
  EXPECT_EQ(plan.planned_peak_bytes, 2111);
  EXPECT_EQ(plan.recompute_cost, 11);
}

TEST(RecomputePlanTest, AutoMeetsALimitAtTheLeastCost) {
  Graph graph = testing::ParseOrFail(testing::kTwoLayerChain);
  // Recomputing f2 (cost 1) from a, which b2 keeps alive anyway, frees b
  // between f3 and b3: the peak drops to b3's 1300.
  RecomputePlan plan = PlanOrDie(graph, RecomputePolicy::kAuto, 1300);
  EXPECT_TRUE(plan.feasible);
  EXPECT_EQ(Render(graph, plan.schedule), "f1 f2 f3 f4 loss b4 (f2) b3 b2 b1");
  EXPECT_EQ(plan.planned_peak_bytes, 1300);
  EXPECT_EQ(plan.recompute_cost, 1);
  ASSERT_EQ(plan.regions.size(), 1u);
  const RecomputeRegionReport& region = plan.regions[0];
  EXPECT_THAT(TensorIds(graph, region.source_tensors), ElementsAre("a"));
  EXPECT_THAT(TensorIds(graph, region.freed_tensors), ElementsAre("b"));
  EXPECT_EQ(region.recompute_cost, 1);
  EXPECT_EQ(region.explanation,
            "re-runs 1 op(s) ('f2') before op 'b3' from 1 stashed tensor(s) "
            "('a'), cost 1; frees 1 stashed tensor(s) ('b'), 0 B at the peak");
  EXPECT_THAT(plan.message, HasSubstr("meets the memory limit"));
}

TEST(RecomputePlanTest, AutoKeepsAStashUntilAReuseThenClonesIt) {
  Graph graph = testing::ParseOrFail(testing::kTwoLayerChain);
  // Under 1250, a must not be live at b3 either: a stays stashed until f2's
  // clone reads it before b3, and f1 runs again from x (kept alive, 10 B)
  // right before b2. Cost 1 + 10. Peak at b4: x a d l gd = 1211.
  RecomputePlan plan = PlanOrDie(graph, RecomputePolicy::kAuto, 1250);
  EXPECT_TRUE(plan.feasible);
  EXPECT_EQ(Render(graph, plan.schedule),
            "f1 f2 f3 f4 loss b4 (f2) b3 (f1) b2 b1");
  EXPECT_EQ(plan.planned_peak_bytes, 1211);
  EXPECT_EQ(plan.recompute_cost, 11);
}

TEST(RecomputePlanTest, AutoReportsAnUnreachableLimit) {
  Graph graph = testing::ParseOrFail(testing::kTwoLayerChain);
  RecomputePlan plan = PlanOrDie(graph, RecomputePolicy::kAuto, 1000);
  EXPECT_FALSE(plan.feasible);
  // The lowest peak it found, never above the plain one.
  EXPECT_EQ(plan.planned_peak_bytes, 1210);
  EXPECT_THAT(plan.message, HasSubstr("CANNOT meet"));
  EXPECT_THAT(plan.message, HasSubstr("no schedule can go below"));
}

TEST(RecomputePlanTest, AutoStaysWithinTheOverheadBudget) {
  Graph graph = testing::ParseOrFail(testing::kTwoLayerChain);
  // Default budget 5% of 45 = 2.25: only f2 fits.
  RecomputePlan plan = PlanOrDie(graph, RecomputePolicy::kAuto);
  EXPECT_EQ(Render(graph, plan.schedule), "f1 f2 f3 f4 loss b4 (f2) b3 b2 b1");
  EXPECT_EQ(plan.planned_peak_bytes, 1300);
  // No budget: the plain schedule.
  plan = PlanOrDie(graph, RecomputePolicy::kAuto, std::nullopt, 0.0);
  EXPECT_EQ(plan.schedule, PlainSchedule(graph));
  // A budget of 11/45 buys the plan that also re-runs f1.
  plan = PlanOrDie(graph, RecomputePolicy::kAuto, std::nullopt, 11.0 / 45);
  EXPECT_EQ(plan.planned_peak_bytes, 1211);
  EXPECT_EQ(plan.recompute_cost, 11);
}

TEST(RecomputePlanTest, AutoStashObjectiveTradesThePeakForTheStash) {
  // Stash: b d l (read by b1 and b4) and c: 801. The plain peak is at b4:
  // b c d l gd = 2801 (x dies at f1). A budget of 1.5 buys one cheap op: f2
  // saves 50 at the peak (its input a, 450, stays alive instead of b, 500); f4
  // saves nothing at the peak (its clone is live at b4) but 200 of stash.
  Graph graph = testing::ParseOrFail(R"(
    tensor x 10 input
    op f1 fwd gemm x -> a:450 cost=10
    op f2 fwd elementwise a -> b:500 cost=1
    op f3 fwd gemm b -> c:100 cost=10
    op f4 fwd elementwise c -> d:200 cost=1
    op loss fwd reduction d -> l:1 cost=1
    op b4 bwd elementwise l d -> gd:2000 cost=1
    op b3 bwd gemm gd c -> gc:100 cost=10
    op b1 bwd elementwise gc b -> gb:10 cost=1
  )");
  RecomputePlanOptions options;
  options.max_overhead_ratio = 1.5 / 35;
  const std::vector<double> costs = testing::RelativeCosts(graph);
  RecomputePlan peak =
      testing::ValueOrFail(GenerateRecomputePlan(graph, costs, options));
  EXPECT_EQ(Render(graph, peak.schedule), "f1 f2 f3 f4 loss b4 b3 (f2) b1");
  EXPECT_EQ(peak.planned_peak_bytes, 2751);
  EXPECT_EQ(peak.stash_bytes, 751);  // a c d l

  options.objective = RecomputeObjective::kStashBytes;
  RecomputePlan stash =
      testing::ValueOrFail(GenerateRecomputePlan(graph, costs, options));
  EXPECT_EQ(Render(graph, stash.schedule), "f1 f2 f3 f4 loss (f4) b4 b3 b1");
  EXPECT_EQ(stash.planned_peak_bytes, 2801);  // never above the plain peak
  EXPECT_EQ(stash.stash_bytes, 601);          // b c l
  EXPECT_THAT(TensorIds(graph, stash.stash), ElementsAre("b", "c", "l"));
  // The knapsack bound (f2, 500 per 1, whole, then half of f4, 200 per 1)
  // is 201; the cut's is higher. At lambda = 50 bytes per unit, {f4} and
  // {f2 f4} both minimize stash + lambda * cost: 651, so no plan within 1.5
  // stashes fewer than 651 - 50 * 1.5.
  EXPECT_EQ(stash.stash_lower_bound_bytes, 576);
  EXPECT_THAT(stash.message, HasSubstr("stash 801 B -> 601 B"));

  // The stash objective is AUTO's (or OPTIMAL's), with an overhead budget.
  options.policy = RecomputePolicy::kEcho;
  EXPECT_THAT(GenerateRecomputePlan(graph, costs, options).status().message(),
              HasSubstr("objective stash_bytes is AUTO's"));
  options.policy = RecomputePolicy::kAuto;
  options.max_overhead_ratio.reset();
  options.memory_limit_bytes = 2800;
  EXPECT_EQ(GenerateRecomputePlan(graph, costs, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RecomputePlanTest, ClonesBeforeTheFirstBackwardOpReadTheStash) {
  // f2's clone runs before b2, after the forward has returned: its input a
  // is what the backward keeps instead of b (frameworks cut the graph after
  // the last forward op). The peak stays at b2: b l gb = 4001.
  Graph graph = testing::ParseOrFail(R"(
    tensor x 10 input
    op f1 fwd gemm x -> a:100 cost=10
    op f2 fwd elementwise a -> b:1000 cost=1
    op loss fwd reduction b -> l:1 cost=1
    op b2 bwd elementwise l b -> gb:3000 cost=1
  )");
  RecomputePlanOptions options;
  options.max_overhead_ratio = 0.1;
  options.objective = RecomputeObjective::kStashBytes;
  RecomputePlan plan = testing::ValueOrFail(
      GenerateRecomputePlan(graph, testing::RelativeCosts(graph), options));
  EXPECT_EQ(Render(graph, plan.schedule), "f1 f2 loss (f2) b2");
  EXPECT_THAT(TensorIds(graph, plan.stash), ElementsAre("a", "l"));
  EXPECT_EQ(plan.stash_bytes, 101);
}

TEST(RecomputePlanTest, ObjectiveNamesRoundTrip) {
  for (RecomputeObjective objective :
       {RecomputeObjective::kPeakBytes, RecomputeObjective::kStashBytes}) {
    EXPECT_EQ(ParseRecomputeObjective(RecomputeObjectiveName(objective))
                  .value_or(RecomputeObjective::kPeakBytes),
              objective);
  }
  EXPECT_EQ(
      ParseRecomputeObjective("STASH").value_or(RecomputeObjective::kPeakBytes),
      RecomputeObjective::kStashBytes);
  EXPECT_THAT(ParseRecomputeObjective("time").status().message(),
              HasSubstr("unknown recompute objective 'time'"));
}

TEST(RecomputePlanTest, AutoRespectsTheDepthBound) {
  // Plain peak at g6: c e y z l gz = 3031. Dropping e means recomputing it
  // from d (only read by the forward): with depth 1, d (800) stays alive
  // instead (peak 2831); with depth 2, f2 recomputes d from c, which g1
  // keeps anyway, and the peak is g6's 2031 (the clones run with
  // c gy d' e' = 1820).
  Graph graph = testing::ParseOrFail(R"(
    tensor x 10 input
    op f1 fwd gemm x -> c:10 cost=10
    op f2 fwd elementwise c -> d:800 cost=1
    op f3 fwd elementwise d -> e:1000 cost=1
    op f4 fwd gemm e -> y:10 cost=10
    op f5 fwd gemm y -> z:2000 cost=10
    op f6 fwd reduction z -> l:1 cost=1
    op g6 bwd elementwise l z -> gz:10 cost=1
    op g5 bwd gemm gz y -> gy:10 cost=10
    op g4 bwd gemm gy e -> ge:10 cost=10
    op g1 bwd gemm ge c -> gx:10 cost=10
  )");
  RecomputePlanOptions options;
  options.memory_limit_bytes = 2100;
  options.max_recompute_depth = 1;
  absl::StatusOr<RecomputePlan> shallow =
      GenerateRecomputePlan(graph, testing::RelativeCosts(graph), options);
  ASSERT_TRUE(shallow.ok());
  EXPECT_FALSE(shallow->feasible);
  EXPECT_EQ(shallow->planned_peak_bytes, 2831);
  options.max_recompute_depth = 2;
  absl::StatusOr<RecomputePlan> deep =
      GenerateRecomputePlan(graph, testing::RelativeCosts(graph), options);
  ASSERT_TRUE(deep.ok());
  EXPECT_TRUE(deep->feasible);
  EXPECT_EQ(Render(graph, deep->schedule),
            "f1 f2 f3 f4 f5 f6 g6 g5 (f2) (f3) g4 g1");
  EXPECT_EQ(deep->planned_peak_bytes, 2031);
  EXPECT_EQ(deep->recompute_cost, 2);
}

TEST(RecomputePlanTest, AnInterruptedPlanStopsWithTheCallersStatus) {
  Graph graph = testing::ParseOrFail(testing::kTwoLayerChain);
  RecomputePlanOptions options;
  options.memory_limit_bytes = 1300;
  // Cancelled before the pass starts.
  options.interrupted = [] { return absl::CancelledError("client gone"); };
  absl::StatusOr<RecomputePlan> plan =
      GenerateRecomputePlan(graph, testing::RelativeCosts(graph), options);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kCancelled);
  // Past its deadline during AUTO's search: the search stops at its next
  // check and the plan returns that status.
  int calls = 0;
  options.interrupted = [&calls]() -> absl::Status {
    return ++calls > 1 ? absl::DeadlineExceededError("deadline passed")
                       : absl::OkStatus();
  };
  plan = GenerateRecomputePlan(graph, testing::RelativeCosts(graph), options);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GT(calls, 1);
  // Inside the search itself (not just between passes).
  calls = 0;
  AutoRecompute::Options auto_options;
  auto_options.memory_limit_bytes = 1300;
  auto_options.interrupted = options.interrupted;
  const std::vector<double> costs = testing::RelativeCosts(graph);
  const RecomputeProblem problem(graph, costs, MemoryModelOptions{});
  absl::StatusOr<std::vector<RecomputeChoice>> candidates =
      AutoRecompute(auto_options).Run(problem);
  ASSERT_FALSE(candidates.ok());
  EXPECT_EQ(candidates.status().code(), absl::StatusCode::kDeadlineExceeded);
  // Never interrupted: the same plan as without the check.
  options.interrupted = [] { return absl::OkStatus(); };
  plan = GenerateRecomputePlan(graph, testing::RelativeCosts(graph), options);
  ASSERT_TRUE(plan.ok());
  options.interrupted = nullptr;
  absl::StatusOr<RecomputePlan> plain_run =
      GenerateRecomputePlan(graph, testing::RelativeCosts(graph), options);
  ASSERT_TRUE(plain_run.ok());
  EXPECT_EQ(plan->schedule, plain_run->schedule);
}

TEST(RecomputePlanTest, OptimalRefusesATooBigModelBeforeBuildingIt) {
  // Refused from the R columns' count alone (building them took GBs).
  Graph graph = testing::ParseOrFail(testing::TooBigForOptimalText());
  RecomputePlanOptions options;
  options.policy = RecomputePolicy::kOptimal;
  options.memory_limit_bytes = 10000;
  absl::StatusOr<RecomputePlan> plan =
      GenerateRecomputePlan(graph, testing::RelativeCosts(graph), options);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("MILP of this 3000-op graph has over 250000 nonzeros "
                        "(solver_max_nonzeros); use AUTO"));
  // The precheck (what echod runs before starting a solver process) refuses
  // it the same way without planning.
  EXPECT_EQ(
      PrecheckRecomputePlan(graph, testing::RelativeCosts(graph), options),
      plan.status());
  // A limit below every schedule's peak needs no MILP: not refused.
  options.memory_limit_bytes = 10;
  EXPECT_OK(
      PrecheckRecomputePlan(graph, testing::RelativeCosts(graph), options));
  // Bad options are refused as GenerateRecomputePlan refuses them.
  options.memory_limit_bytes.reset();
  EXPECT_EQ(PrecheckRecomputePlan(graph, testing::RelativeCosts(graph), options)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Issue 23, item 5: S columns count toward the size before the model is
// built, like R columns, so a graph whose ops cannot be re-run is refused
// in the precheck too.
TEST(RecomputePlanTest, OptimalCountsHoldColumnsBeforeBuilding) {
  Graph graph = testing::ParseOrFail(testing::TooBigForOptimalText(false));
  RecomputePlanOptions options;
  options.policy = RecomputePolicy::kOptimal;
  options.memory_limit_bytes = 1000000;
  const absl::Status precheck =
      PrecheckRecomputePlan(graph, testing::RelativeCosts(graph), options);
  EXPECT_EQ(precheck.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(precheck.message()),
              HasSubstr("over 250000 nonzeros (solver_max_nonzeros)"));
}

// Issue 23, item 5: the model's memory follows its nonzeros, not ops^2. A
// 30,000-op chain of ops that cannot be re-run has O(ops) nonzeros; dense
// stage-by-op tables took 1.8 GB for it before it was refused (26 MB now).
TEST(RecomputePlanTest, OptimalModelMemoryFollowsItsNonzeros) {
  Graph graph = testing::ParseOrFail(testing::LongFixedChainText(30000));
  RecomputePlanOptions options;
  options.policy = RecomputePolicy::kOptimal;
  options.memory_limit_bytes = 1000000;
  options.solver_time_limit_seconds = 5;
  struct rusage before;
  getrusage(RUSAGE_SELF, &before);
  const absl::StatusOr<RecomputePlan> plan =
      GenerateRecomputePlan(graph, testing::RelativeCosts(graph), options);
  struct rusage after;
  getrusage(RUSAGE_SELF, &after);
  // ru_maxrss is in KiB: the high-water mark grew by under 400 MB.
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 400 * 1024);
  // It is still over the limit: refused while being built, at a few MB.
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition)
      << plan.status();
}

TEST(RecomputePlanTest, OptimalMatchesTheHandOptimum) {
  Graph graph = testing::ParseOrFail(testing::kTwoLayerChain);
  RecomputePlan plan = PlanOrDie(graph, RecomputePolicy::kOptimal, 1300);
  EXPECT_EQ(plan.solver_status, "optimal");
  EXPECT_TRUE(plan.feasible);
  EXPECT_EQ(plan.recompute_cost, 1);
  EXPECT_LE(plan.planned_peak_bytes, 1300);
  EXPECT_DOUBLE_EQ(plan.solver_bound_cost, 1);
  plan = PlanOrDie(graph, RecomputePolicy::kOptimal, 1250);
  EXPECT_EQ(plan.solver_status, "optimal");
  EXPECT_EQ(plan.recompute_cost, 11);
  EXPECT_LE(plan.planned_peak_bytes, 1250);
}

TEST(RecomputePlanTest, OptimalReportsInfeasibleLimits) {
  Graph graph = testing::ParseOrFail(testing::kTwoLayerChain);
  RecomputePlan plan = PlanOrDie(graph, RecomputePolicy::kOptimal, 1199);
  EXPECT_EQ(plan.solver_status, "infeasible");
  EXPECT_FALSE(plan.feasible);
  EXPECT_EQ(plan.schedule, PlainSchedule(graph));
}

TEST(RecomputePlanTest, PersistentAndOutputsCountInTheLowerBound) {
  Graph graph = testing::ParseOrFail(R"(
    tensor w 500 parameter
    tensor x 10 input
    op f1 fwd random x -> m:100 cost=1
    op f2 fwd gemm m w -> y:50 cost=1
    op f3 bwd gemm y m -> g:20 cost=1
    op opt opt elementwise w g -> w2:500 cost=1
  )");
  RecomputePlan plan = PlanOrDie(graph, RecomputePolicy::kNone);
  // w always; m cannot be recomputed (random) and lives f1..f3: at f3,
  // w + m + y + g = 670. The updated parameter w2 counts from opt on:
  // w + g + w2 = 1020.
  EXPECT_EQ(plan.peak_lower_bound_bytes, 1020);
  EXPECT_EQ(plan.baseline_peak_bytes, 1020);
}

}  // namespace
}  // namespace echo::planner
