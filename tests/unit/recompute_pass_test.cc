// The pass registry, the one meaning of max_overhead_ratio (unset: the
// default budget; 0: no extra compute) in plans and in fit checks.
#include "planner/recompute/recompute_pass.h"

#include <optional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/compose/plan_composer.h"
#include "planner/schedule/fit_check.h"
#include "test_util.h"

namespace echo::planner {
namespace {

using ::testing::HasSubstr;

TEST(RecomputePassRegistryTest, EveryPolicyHasItsPass) {
  for (RecomputePolicy policy :
       {RecomputePolicy::kAuto, RecomputePolicy::kNone, RecomputePolicy::kEcho,
        RecomputePolicy::kChenSqrt, RecomputePolicy::kOptimal}) {
    EXPECT_EQ(RecomputePassFor(policy).policy(), policy)
        << RecomputePolicyName(policy);
  }
}

TEST(RecomputePassRegistryTest, OnlyOptimalNeedsAMemoryLimit) {
  RecomputePlanOptions options;
  for (RecomputePolicy policy :
       {RecomputePolicy::kAuto, RecomputePolicy::kNone, RecomputePolicy::kEcho,
        RecomputePolicy::kChenSqrt}) {
    EXPECT_OK(RecomputePassFor(policy).CheckOptions(options));
  }
  EXPECT_THAT(std::string(RecomputePassFor(RecomputePolicy::kOptimal)
                              .CheckOptions(options)
                              .message()),
              HasSubstr("set memory_limit_bytes"));
  options.memory_limit_bytes = 1000;
  options.solver_time_limit_seconds = 0;
  EXPECT_THAT(std::string(RecomputePassFor(RecomputePolicy::kOptimal)
                              .CheckOptions(options)
                              .message()),
              HasSubstr("solver_time_limit_seconds"));
}

// run_isolated_pass gets OPTIMAL's pass only (isolated()), with the budget
// GenerateRecomputePlan resolved; RunRecomputePass, its other end, answers
// what the pass answers in process, so the plan is the same either way.
TEST(RecomputePassRegistryTest, OnlyTheIsolatedPassRunsThroughTheRunner) {
  for (RecomputePolicy policy :
       {RecomputePolicy::kAuto, RecomputePolicy::kNone, RecomputePolicy::kEcho,
        RecomputePolicy::kChenSqrt, RecomputePolicy::kOptimal}) {
    EXPECT_EQ(RecomputePassFor(policy).isolated(),
              policy == RecomputePolicy::kOptimal)
        << RecomputePolicyName(policy);
  }
  const Graph graph = testing::ParseOrFail(testing::kTwoLayerChain);
  const std::vector<double> costs = testing::RelativeCosts(graph);
  for (RecomputePolicy policy :
       {RecomputePolicy::kAuto, RecomputePolicy::kOptimal}) {
    RecomputePlanOptions options;
    options.policy = policy;
    options.memory_limit_bytes = 1250;
    ASSERT_OK_AND_ASSIGN(const RecomputePlan in_process,
                         GenerateRecomputePlan(graph, costs, options));
    int runs = 0;
    options.run_isolated_pass = [&](const PassInput& input) {
      ++runs;
      EXPECT_EQ(&input.problem.graph, &graph);
      return RunRecomputePass(input.problem.graph, input.problem.op_costs,
                              input.options, input.max_overhead_ratio,
                              input.cost_budget);
    };
    ASSERT_OK_AND_ASSIGN(const RecomputePlan isolated,
                         GenerateRecomputePlan(graph, costs, options));
    EXPECT_EQ(runs, policy == RecomputePolicy::kOptimal ? 1 : 0)
        << RecomputePolicyName(policy);
    EXPECT_EQ(isolated.schedule, in_process.schedule);
    EXPECT_EQ(isolated.recompute_cost, in_process.recompute_cost);
    EXPECT_EQ(isolated.solver_status, in_process.solver_status);
    EXPECT_EQ(isolated.feasible, in_process.feasible);
  }
  RecomputePlanOptions options;
  options.policy = RecomputePolicy::kOptimal;
  options.memory_limit_bytes = 1250;
  // What the runner answers is the plan's: a failure is the plan's status.
  options.run_isolated_pass =
      [](const PassInput&) -> absl::StatusOr<PassOutput> {
    return absl::InternalError("the solver process crashed");
  };
  EXPECT_EQ(GenerateRecomputePlan(graph, costs, options).status(),
            absl::InternalError("the solver process crashed"));
}

TEST(OverheadBudgetTest, ZeroMeansNoExtraComputeUnsetMeansTheDefault) {
  const Graph graph = testing::ParseOrFail(testing::kTwoLayerChain);
  RecomputePlanOptions options;
  options.max_overhead_ratio = 0;
  ASSERT_OK_AND_ASSIGN(
      RecomputePlan none,
      GenerateRecomputePlan(graph, testing::RelativeCosts(graph), options));
  EXPECT_EQ(none.recompute_cost, 0);
  EXPECT_EQ(none.planned_peak_bytes, 2201);
  options.max_overhead_ratio.reset();
  ASSERT_OK_AND_ASSIGN(
      RecomputePlan by_default,
      GenerateRecomputePlan(graph, testing::RelativeCosts(graph), options));
  EXPECT_GT(by_default.recompute_cost, 0);
  EXPECT_LE(by_default.recompute_overhead_ratio, kDefaultMaxOverheadRatio);
  EXPECT_LT(by_default.planned_peak_bytes, 2201);
}

// On kTwoLayerChain, AUTO meets 1300 bytes by recomputing f2 (cost 1 of 45,
// 2.2%) and 1250 bytes only for cost 11 (24%): see recompute_plan_test.cc.
FitResult Fit(int64_t device_memory_bytes, std::optional<double> ratio,
              int64_t reserved_bytes = 0) {
  const Graph graph = testing::ParseOrFail(testing::kTwoLayerChain);
  FitOptions options;
  options.device_memory_bytes = device_memory_bytes;
  options.reserved_bytes = reserved_bytes;
  options.max_overhead_ratio = ratio;
  return testing::ValueOrFail(
      CheckFit(graph, testing::RelativeCosts(graph), options));
}

TEST(FitCheckTest, FitsWithoutRecomputation) {
  const FitResult fit = Fit(3000, std::nullopt);
  EXPECT_TRUE(fit.fits);
  EXPECT_TRUE(fit.fits_without_recompute);
  EXPECT_EQ(fit.baseline_peak_bytes, 2201);
  EXPECT_EQ(fit.planned_peak_bytes, 2201);
  EXPECT_EQ(fit.message,
            "fits without recomputation: peak 2201 of 3000 usable bytes");
}

TEST(FitCheckTest, TheOverheadBudgetMeansWhatItMeansForPlans) {
  // Unset: the default 5% admits recomputing f2 (2.2%).
  FitResult fit = Fit(1300, std::nullopt);
  EXPECT_TRUE(fit.fits);
  EXPECT_FALSE(fit.fits_without_recompute);
  EXPECT_EQ(fit.planned_peak_bytes, 1300);
  EXPECT_DOUBLE_EQ(fit.recompute_overhead_ratio, 1.0 / 45);
  // 0: no extra compute at all. Every plan without any then stashes the
  // plain 2101 bytes for the backward: no plan is made.
  fit = Fit(1300, 0.0);
  EXPECT_FALSE(fit.fits);
  EXPECT_EQ(fit.message,
            "does not fit within 0.00% extra compute: every plan within it "
            "stashes at least 2101 bytes for the backward, above 1300 usable "
            "bytes");
  // At 2% (f2 costs 2.2%) a plan is made and misses the budget.
  fit = Fit(1300, 0.02);
  EXPECT_FALSE(fit.fits);
  EXPECT_THAT(fit.message, HasSubstr("fits only at 2.22% extra compute, "
                                     "above the 2.00% budget"));
  // The reserve comes off the device's memory.
  EXPECT_TRUE(Fit(1400, std::nullopt, 100).fits);
  EXPECT_FALSE(Fit(1400, std::nullopt, 150).fits);
  // 1250 bytes cost 24%: over the default, within 0.5.
  EXPECT_FALSE(Fit(1250, std::nullopt).fits);
  EXPECT_TRUE(Fit(1250, 0.5).fits);
}

TEST(FitCheckTest, UnsetReserveIsTheDevicesDefaultAllowance) {
  const Graph graph = testing::ParseOrFail(testing::kTwoLayerChain);
  FitOptions options;
  options.device_memory_bytes = int64_t{16} << 30;
  const FitResult fit = testing::ValueOrFail(
      CheckFit(graph, testing::RelativeCosts(graph), options));
  // 512 MiB for the CUDA context and handles + 5% of 16 GiB.
  EXPECT_EQ(fit.reserved_bytes, (int64_t{512} << 20) + 858993459);
  EXPECT_EQ(fit.reserved_bytes, DefaultReservedBytes(int64_t{16} << 30));
  // A device smaller than the allowance has no usable memory.
  options.device_memory_bytes = int64_t{256} << 20;
  EXPECT_FALSE(testing::ValueOrFail(
                   CheckFit(graph, testing::RelativeCosts(graph), options))
                   .fits);
}

TEST(FitCheckTest, AnUnreachableMemoryIsAnAnswer) {
  const FitResult fit = Fit(100, std::nullopt);
  EXPECT_FALSE(fit.fits);
  EXPECT_THAT(fit.message,
              HasSubstr("does not fit even with maximal recomputation"));
}

TEST(FitCheckTest, RejectsNegativeBudgets) {
  const Graph graph = testing::ParseOrFail(testing::kTwoLayerChain);
  FitOptions options;
  options.device_memory_bytes = 1000;
  options.max_overhead_ratio = -1;
  EXPECT_EQ(
      CheckFit(graph, testing::RelativeCosts(graph), options).status().code(),
      absl::StatusCode::kInvalidArgument);
  options.max_overhead_ratio.reset();
  options.reserved_bytes = -1;
  EXPECT_EQ(
      CheckFit(graph, testing::RelativeCosts(graph), options).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace echo::planner
