// CheckFit's shortcuts (FitWithRecompute): no plan below the lower bound
// or below the least stash within the budget, and AUTO under a memory
// limit that stops at the first plan within the budget and tries no chunk
// count when even their relief misses it. The answers must equal the full
// search's.
#include "planner/schedule/fit_check.h"

#include <limits>
#include <string>
#include <vector>

#include "adapter/graph_convert.h"
#include "adapter/graph_file.h"
#include "gtest/gtest.h"
#include "planner/compose/plan_composer.h"
#include "planner/cost_model.h"
#include "planner/memory_simulator.h"
#include "planner/recompute/plan_report.h"
#include "test_util.h"

namespace echo::planner {
namespace {

struct Priced {
  Graph graph;
  std::vector<double> costs;  // seconds on an H100
};

Priced Load(const std::string& name) {
  Priced priced{
      testing::ValueOrFail(
          adapter::GraphFromProto(testing::ValueOrFail(adapter::LoadGraphFile(
              std::string(ECHO_TEST_DATA_DIR) + "/graphs/" + name + ".pb")))),
      {}};
  const DeviceSpec device = testing::CatalogDevice("h100-80gb");
  priced.costs =
      testing::ValueOrFail(EstimateOpCosts(priced.graph, &device, nullptr))
          .Costs();
  return priced;
}

// AUTO's options as echod plans a chunking request.
RecomputePlanOptions Chunking() {
  RecomputePlanOptions options;
  options.chunking.enabled = true;
  options.chunking.launch_cost = CostModelOptions().launch_overhead_seconds;
  return options;
}

// Below the lower bound no plan is made: the answer is the bound.
TEST(FitWithRecomputeTest, BelowTheLowerBoundNothingIsPlanned) {
  const Priced gpt = Load("gpt");
  const RecomputePlanOptions options = Chunking();
  ASSERT_OK_AND_ASSIGN(const int64_t bound,
                       PlanPeakLowerBound(gpt.graph, options));
  ASSERT_OK_AND_ASSIGN(
      const RecomputeFit below,
      FitWithRecompute(gpt.graph, gpt.costs, options, bound - 1, 1.0));
  EXPECT_FALSE(below.planned);
  EXPECT_FALSE(below.fits);
  EXPECT_EQ(below.peak_bytes, bound);
  EXPECT_EQ(below.peak_lower_bound_bytes, bound);
  // The chunked bound is below the plain one here: a limit between them is
  // planned (chunks can reach it).
  ASSERT_LT(bound, PeakLowerBound(gpt.graph, options.memory));
  ASSERT_OK_AND_ASSIGN(
      const RecomputeFit between,
      FitWithRecompute(gpt.graph, gpt.costs, options, bound + 1, 1.0));
  EXPECT_TRUE(between.planned);
}

// Over limits from the lower bound to the plain peak and several budgets,
// FitWithRecompute answers as the cheapest plan of the full search does,
// and both shortcuts are taken somewhere.
TEST(FitWithRecomputeTest, AnswersAsTheFullSearch) {
  int fits = 0, misses = 0, stopped_early = 0, skipped = 0, by_stash = 0;
  for (const char* name : {"gpt", "hf_gpt2"}) {
    const Priced model = Load(name);
    const RecomputePlanOptions options = Chunking();
    ASSERT_OK_AND_ASSIGN(const int64_t bound,
                         PlanPeakLowerBound(model.graph, options));
    const int64_t plain = SimulatePlain(model.graph).peak_bytes;
    constexpr int kSteps = 8;
    for (int step = 0; step < kSteps; ++step) {
      const int64_t limit = bound + (plain - bound) * step / kSteps;
      RecomputePlanOptions full_options = options;
      full_options.memory_limit_bytes = limit;
      ASSERT_OK_AND_ASSIGN(
          const RecomputePlan full,
          GenerateRecomputePlan(model.graph, model.costs, full_options));
      for (double ratio : {0.0, 0.01, 0.05, 0.2}) {
        SCOPED_TRACE(::testing::Message()
                     << name << " limit " << limit << " ratio " << ratio);
        const bool full_fits =
            full.feasible &&
            WithinOverheadRatio(full.recompute_overhead_ratio, ratio);
        ASSERT_OK_AND_ASSIGN(
            const RecomputeFit fit,
            FitWithRecompute(model.graph, model.costs, options, limit, ratio));
        EXPECT_EQ(fit.fits, full_fits);
        (full_fits ? fits : misses) += 1;
        by_stash += fit.stash_lower_bound_bytes > 0;
        // The stash bound holds for every plan within the ratio.
        ASSERT_OK_AND_ASSIGN(
            const int64_t stash_bound,
            PlanStashLowerBound(
                model.graph, model.costs, options,
                ratio * full.baseline_compute_cost * (1 + kBudgetSlack)));
        if (full_fits) {
          EXPECT_LE(stash_bound, full.planned_peak_bytes);
        }
        // Which shortcut it took: the accepting plan with fewer chunks, or
        // the unchunked plan where the full search chunked in vain.
        RecomputePlanOptions accept_options = full_options;
        accept_options.accept_overhead_ratio = ratio;
        ASSERT_OK_AND_ASSIGN(
            const RecomputePlan accepted,
            GenerateRecomputePlan(model.graph, model.costs, accept_options));
        const int full_chunks =
            full.chunked_regions.empty() ? 0 : full.chunked_regions[0].chunks;
        const int chunks = accepted.chunked_regions.empty()
                               ? 0
                               : accepted.chunked_regions[0].chunks;
        if (full_fits && chunks < full_chunks) ++stopped_early;
        if (!full_fits && chunks == 0 && full_chunks > 0) ++skipped;
        if (full_fits) {
          EXPECT_TRUE(accepted.feasible);
          EXPECT_LE(accepted.planned_peak_bytes, limit);
        }
      }
    }
  }
  EXPECT_GT(fits, 0);
  EXPECT_GT(misses, 0);
  EXPECT_GT(stopped_early, 0);
  EXPECT_GT(skipped, 0);
  EXPECT_GT(by_stash, 0);
}

// Bad costs are an error, not an answer, also where a bound answers.
TEST(FitWithRecomputeTest, BadCostsAreAnErrorBeforeAnyBound) {
  const Priced gpt = Load("gpt");
  const std::vector<double> short_costs(gpt.costs.begin(), gpt.costs.end() - 1);
  for (double ratio : {0.05, std::numeric_limits<double>::infinity()}) {
    const absl::StatusOr<RecomputeFit> fit =
        FitWithRecompute(gpt.graph, short_costs, Chunking(), 1, ratio);
    EXPECT_EQ(fit.status().code(), absl::StatusCode::kInvalidArgument)
        << fit.status();
  }
}

TEST(FitWithRecomputeTest, ANegativeAcceptedRatioIsNamed) {
  const Priced gpt = Load("gpt");
  RecomputePlanOptions options = Chunking();
  options.memory_limit_bytes = SimulatePlain(gpt.graph).peak_bytes / 2;
  options.accept_overhead_ratio = -0.1;
  const absl::StatusOr<RecomputePlan> plan =
      GenerateRecomputePlan(gpt.graph, gpt.costs, options);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("accept_overhead_ratio"),
            std::string::npos)
      << plan.status();
}

}  // namespace
}  // namespace echo::planner
