// FindMaxBatchSize and ComputeMemoryFrontier on small graphs: exact answers
// (by hand, and against a scan of every batch), the frontier's Pareto order
// and reproducibility, and the errors; the bracket search's estimates.
#include "planner/schedule/batch_search.h"

#include <string>
#include <vector>

#include "adapter/graph_convert.h"
#include "adapter/graph_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/batch.h"
#include "planner/chunk/chunk_rewrite.h"
#include "planner/chunk/chunk_search.h"
#include "planner/compose/plan_composer.h"
#include "planner/cost_model.h"
#include "planner/recompute/plan_report.h"
#include "planner/schedule/batch_bracket.h"
#include "planner/schedule/fit_check.h"
#include "planner/status_macros.h"
#include "test_util.h"

namespace echo::planner {
namespace {

using ::testing::HasSubstr;

constexpr const char* kTiny = testing::kTinyBatchGraph;

// A chain whose forward maps can be recomputed: the plain peak is
// 1004 + 600b at b4 (w, l and x, a, b, c, d, gd of 100b each), and
// recomputation lowers it, at a price.
constexpr char kChain[] = R"(
graph chain
batch 1
tensor w 1000 parameter
tensor x 100*B input
op f1 fwd gemm x w -> a:100*B cost=4
op f2 fwd elementwise a -> b:100*B cost=1
op f3 fwd elementwise b -> c:100*B cost=1
op f4 fwd elementwise c -> d:100*B cost=1
op loss fwd reduction d -> l:4 cost=1
op b4 bwd elementwise l d -> gd:100*B cost=1
op b3 bwd elementwise gd c -> gc:100*B cost=1
op b2 bwd elementwise gc b -> gb:100*B cost=1
op b1 bwd elementwise gb a -> ga:100*B cost=1
op bw bwd gemm ga x -> gw:1000 cost=4
op upd opt elementwise w gw -> w2:1000 cost=1
output w2
)";

OpCostFn Relative() {
  return [](const Graph& graph) -> absl::StatusOr<std::vector<double>> {
    return testing::RelativeCosts(graph);
  };
}

MaxBatchOptions Device(int64_t bytes, double ratio = 0.05) {
  MaxBatchOptions options;
  options.device_memory_bytes = bytes;
  options.max_overhead_ratio = ratio;
  return options;
}

TEST(BatchSearchTest, PlainAnswerIsExact) {
  const Graph graph = testing::ValueOrFail(ParseTextGraph(kTiny));
  // 1000 + 500b <= 4000: b <= 6 (peak 4000); b = 7 peaks at 4500.
  ASSERT_OK_AND_ASSIGN(const MaxBatchResult result,
                       FindMaxBatchSize(graph, Relative(), Device(4000)));
  EXPECT_TRUE(result.without_recompute.found);
  EXPECT_EQ(result.without_recompute.batch, 6);
  EXPECT_EQ(result.without_recompute.peak_bytes, 4000);
  EXPECT_EQ(result.without_recompute.next_batch_peak_bytes, 4500);
  EXPECT_EQ(result.graph_batch, 2);
  // Nothing here can be recomputed to any gain.
  EXPECT_EQ(result.with_recompute.batch, 6);

  MaxBatchOptions reserved = Device(4000);
  reserved.reserved_bytes = 500;  // 3500 usable: b <= 5
  reserved.multiple_of = 2;       // ... and even: 4
  ASSERT_OK_AND_ASSIGN(const MaxBatchResult even,
                       FindMaxBatchSize(graph, Relative(), reserved));
  EXPECT_EQ(even.without_recompute.batch, 4);
  EXPECT_EQ(even.without_recompute.peak_bytes, 3000);

  MaxBatchOptions bounded = Device(4000);
  bounded.max_batch = 3;
  ASSERT_OK_AND_ASSIGN(const MaxBatchResult capped,
                       FindMaxBatchSize(graph, Relative(), bounded));
  EXPECT_EQ(capped.without_recompute.batch, 3);

  // 2000 bytes: not even batch 1 (2100) fits.
  ASSERT_OK_AND_ASSIGN(const MaxBatchResult none,
                       FindMaxBatchSize(graph, Relative(), Device(2000)));
  EXPECT_FALSE(none.without_recompute.found);
  EXPECT_FALSE(none.with_recompute.found);
}

// The search's answers equal a scan of every batch with CheckFit (the same
// plans), for several devices and budgets.
TEST(BatchSearchTest, MatchesAScanOfEveryBatch) {
  const Graph graph = testing::ValueOrFail(ParseTextGraph(kChain));
  int recompute_wins = 0;
  int compute_limited = 0;  // answers whose next candidate fits the memory
  for (int64_t memory : {2000, 3500, 5000, 9000, 20000}) {
    for (double ratio : {0.0, 0.05, 0.2, 1.0}) {
      ASSERT_OK_AND_ASSIGN(
          const MaxBatchResult result,
          FindMaxBatchSize(graph, Relative(), Device(memory, ratio)));
      int64_t plain = 0;
      int64_t with = 0;
      for (int64_t b = 1; b <= 200; ++b) {
        ASSERT_OK_AND_ASSIGN(const Graph scaled, WithBatchSize(graph, b));
        FitOptions fit;
        fit.device_memory_bytes = memory;
        fit.reserved_bytes = 0;  // as the search's options
        fit.max_overhead_ratio = ratio;
        ASSERT_OK_AND_ASSIGN(
            const FitResult answer,
            CheckFit(scaled, testing::RelativeCosts(scaled), fit));
        if (answer.fits_without_recompute) plain = b;
        if (answer.fits) with = b;
      }
      SCOPED_TRACE(::testing::Message() << memory << " bytes, ratio " << ratio);
      EXPECT_EQ(result.without_recompute.batch, plain);
      EXPECT_EQ(result.with_recompute.batch, with);
      // The next candidate fails on memory or, within it, on compute.
      const BatchFit& next = result.with_recompute;
      if (next.found && next.next_batch_peak_bytes > 0 &&
          next.next_batch_peak_bytes <= memory) {
        EXPECT_GT(next.next_batch_overhead_ratio, ratio);
        ++compute_limited;
      }
      recompute_wins += with > plain;
    }
  }
  EXPECT_GT(recompute_wins, 0);   // the test exercises recomputation
  EXPECT_GT(compute_limited, 0);  // ... and a budget that binds first
}

// Peaks linear in the batch: one bisection (no peak above is known yet),
// then the crossing and its neighbour.
TEST(BatchBracketTest, LinearPeaksNeedTwoProbesOnceBracketed) {
  int evaluations = 0;
  const Interrupt none;
  BatchBracketSearch search(
      [&](int64_t k) -> absl::StatusOr<BatchProbe> {
        ++evaluations;
        BatchProbe probe;
        probe.peak_bytes = 1000 + 100 * k;
        probe.fits = probe.peak_bytes <= 50050;
        return probe;
      },
      PeakCrossing(50050), none);
  ASSERT_OK_AND_ASSIGN(const BatchProbe first, search.At(1));
  ASSERT_TRUE(first.fits);
  ASSERT_OK_AND_ASSIGN(const int64_t largest,
                       search.Largest(1, 1000, /*gallop=*/false));
  EXPECT_EQ(largest, 490);
  EXPECT_EQ(evaluations, 4);  // 1, 500, 490, 491
}

TEST(BatchBracketTest, OverheadCrossingInterpolatesAndExtrapolates) {
  const BatchEstimate estimate =
      OverheadCrossing(/*usable=*/1000, /*ratio=*/0.05, /*zero_batch=*/9.5);
  auto probe = [](bool fits, int64_t peak, double ratio) {
    BatchProbe p;
    p.fits = fits;
    p.peak_bytes = peak;
    p.overhead_ratio = ratio;
    return p;
  };
  // A plain-schedule probe and nothing above: its neighbour.
  EXPECT_EQ(estimate(9, 100, {{9, probe(true, 900, 0)}}), 10);
  // From the plain answer's crossing (9.5, 0) through (12, 0.02): 15.75.
  EXPECT_EQ(estimate(12, 100,
                     {{9, probe(true, 900, 0)}, {12, probe(true, 990, 0.02)}}),
            15);
  // Between a fit and a miss on overhead (the memory fits): 10 + 0.75 * 10.
  EXPECT_EQ(
      estimate(10, 20,
               {{10, probe(true, 990, 0.02)}, {20, probe(false, 995, 0.06)}}),
      17);
  // A miss on memory says nothing of the overhead: extrapolate, unless the
  // line reaches the miss (then bisect rather than creep down from it).
  EXPECT_EQ(estimate(12, 20,
                     {{9, probe(true, 900, 0)},
                      {12, probe(true, 990, 0.02)},
                      {20, probe(false, 2000, 0.07)}}),
            15);
  EXPECT_EQ(estimate(12, 14,
                     {{9, probe(true, 900, 0)},
                      {12, probe(true, 990, 0.02)},
                      {14, probe(false, 2000, 0.07)}}),
            std::nullopt);

  // A miss far steeper than the curve below (4.4x its slope): a jump, not
  // a curve to interpolate: bisect.
  EXPECT_EQ(estimate(12, 20,
                     {{9, probe(true, 900, 0)},
                      {12, probe(true, 990, 0.02)},
                      {20, probe(false, 995, 0.30)}}),
            std::nullopt);
}

// AUTO's extra compute creeping up to 4% and then jumping to 15% (its plan
// changes): bisection-like, not one sliver of the bracket per probe.
TEST(BatchBracketTest, OverheadJumpIsBisected) {
  int evaluations = 0;
  const Interrupt none;
  BatchBracketSearch search(
      [&](int64_t k) -> absl::StatusOr<BatchProbe> {
        ++evaluations;
        BatchProbe probe;
        probe.peak_bytes = 990;
        probe.overhead_ratio = k < 10000 ? 0.04 * k / 10000 : 0.15;
        probe.fits = probe.overhead_ratio <= 0.05;
        return probe;
      },
      OverheadCrossing(/*usable=*/1000, /*ratio=*/0.05, /*zero_batch=*/0.5),
      none);
  ASSERT_OK_AND_ASSIGN(const BatchProbe first, search.At(1));
  ASSERT_TRUE(first.fits);
  ASSERT_OK_AND_ASSIGN(const int64_t largest,
                       search.Largest(1, 20000, /*gallop=*/false));
  EXPECT_EQ(largest, 9999);
  // 1, two interpolations, then 13 bisections: 16; creeping took 22.
  EXPECT_LE(evaluations, 16) << evaluations;
}

// A captured GPT (tests/data/graphs/gpt.pb, batch 4) costed on a device,
// and chunking options as echod prices them (costs in seconds).
class GptOnDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gpt_ = testing::ValueOrFail(
        adapter::GraphFromProto(testing::ValueOrFail(adapter::LoadGraphFile(
            std::string(ECHO_TEST_DATA_DIR) + "/graphs/gpt.pb"))));
    device_ = testing::CatalogDevice("h100-80gb");
    chunking_.enabled = true;
    chunking_.launch_cost = CostModelOptions().launch_overhead_seconds;
  }

  OpCostFn Seconds() const {
    return [this](const Graph& graph) -> absl::StatusOr<std::vector<double>> {
      ASSIGN_OR_RETURN(CostTable table,
                       EstimateOpCosts(graph, &device_, nullptr));
      return table.Costs();
    };
  }

  MaxBatchOptions OnDevice(bool chunking) const {
    MaxBatchOptions options;
    options.device_memory_bytes = device_.memory_bytes;
    options.reserved_bytes = DefaultReservedBytes(device_.memory_bytes);
    options.max_overhead_ratio = 0.2;
    if (chunking) options.chunking = chunking_;
    return options;
  }

  // CheckFit at `batch` under the search's budget and reserve.
  FitResult FitAt(int64_t batch, bool chunking) const {
    const Graph scaled = testing::ValueOrFail(WithBatchSize(gpt_, batch));
    FitOptions fit;
    fit.device_memory_bytes = device_.memory_bytes;
    fit.max_overhead_ratio = 0.2;
    if (chunking) fit.chunking = chunking_;
    return testing::ValueOrFail(
        CheckFit(scaled, testing::ValueOrFail(Seconds()(scaled)), fit));
  }

  Graph gpt_;
  DeviceSpec device_;
  ChunkingOptions chunking_;
};

// Chunking the loss fits a larger batch than recomputation alone (99393
// without, 135442 with, on an H100 at 20% extra compute), and CheckFit
// with the same options agrees at the answers.
TEST_F(GptOnDeviceTest, ChunkingFitsALargerBatch) {
  ASSERT_OK_AND_ASSIGN(const MaxBatchResult off,
                       FindMaxBatchSize(gpt_, Seconds(), OnDevice(false)));
  ASSERT_OK_AND_ASSIGN(const MaxBatchResult on,
                       FindMaxBatchSize(gpt_, Seconds(), OnDevice(true)));
  EXPECT_EQ(on.without_recompute.batch, off.without_recompute.batch);
  ASSERT_TRUE(off.with_recompute.found);
  EXPECT_GT(on.with_recompute.batch, off.with_recompute.batch);
  EXPECT_LE(on.with_recompute.recompute_overhead_ratio, 0.2);
  EXPECT_LE(on.with_recompute.peak_bytes, on.usable_bytes);

  const FitResult fits = FitAt(on.with_recompute.batch, /*chunking=*/true);
  EXPECT_TRUE(fits.fits) << fits.message;
  EXPECT_EQ(fits.planned_peak_bytes, on.with_recompute.peak_bytes);
  EXPECT_FALSE(FitAt(on.with_recompute.batch + 1, /*chunking=*/true).fits);
  EXPECT_FALSE(FitAt(on.with_recompute.batch, /*chunking=*/false).fits);
}

// With chunking the frontier reaches lower, its bound counts the chunked
// loss, and every point (chunked ones too) comes back from
// GenerateRecomputePlan with the same options.
TEST_F(GptOnDeviceTest, ChunkedFrontierIsReproducible) {
  const std::vector<double> costs = testing::ValueOrFail(Seconds()(gpt_));
  ASSERT_OK_AND_ASSIGN(const MemoryFrontier off,
                       ComputeMemoryFrontier(gpt_, costs, {}));
  FrontierOptions options;
  options.chunking = chunking_;
  ASSERT_OK_AND_ASSIGN(const MemoryFrontier on,
                       ComputeMemoryFrontier(gpt_, costs, options));
  EXPECT_LT(on.peak_lower_bound_bytes, off.peak_lower_bound_bytes);
  ASSERT_FALSE(on.points.empty());
  EXPECT_LT(on.points.back().peak_bytes, off.points.back().peak_bytes);
  int chunked = 0;
  for (const FrontierPoint& point : on.points) {
    SCOPED_TRACE(point.memory_limit_bytes);
    EXPECT_GE(point.peak_bytes, on.peak_lower_bound_bytes);
    RecomputePlanOptions plan_options;
    plan_options.chunking = chunking_;
    plan_options.memory_limit_bytes = point.memory_limit_bytes;
    ASSERT_OK_AND_ASSIGN(const RecomputePlan plan,
                         GenerateRecomputePlan(gpt_, costs, plan_options));
    EXPECT_EQ(PlanFingerprint(PlanGraph(gpt_, plan), plan.schedule),
              point.plan_fingerprint);
    EXPECT_EQ(plan.planned_peak_bytes, point.peak_bytes);
    EXPECT_DOUBLE_EQ(plan.recompute_cost, point.recompute_cost);
    chunked += plan.chunked_graph != nullptr;
  }
  EXPECT_GT(chunked, 0);  // the test exercises chunked points
}

// The chunk-aware bound (PlanPeakLowerBound, from the most chunks) bounds
// the graph chunked in every count AUTO may try, and the chunking plan's
// own bound.
TEST_F(GptOnDeviceTest, ChunkedLowerBoundBoundsEveryChunkCount) {
  for (int64_t batch : {4, 100000}) {
    SCOPED_TRACE(batch);
    const Graph scaled = testing::ValueOrFail(WithBatchSize(gpt_, batch));
    const std::vector<double> costs = testing::ValueOrFail(Seconds()(scaled));
    RecomputePlanOptions options;
    options.chunking = chunking_;
    ASSERT_OK_AND_ASSIGN(const int64_t bound,
                         PlanPeakLowerBound(scaled, options));
    EXPECT_LT(bound, PeakLowerBound(scaled, options.memory));
    const ChunkRegionSearch found = FindChunkRegions(scaled);
    ASSERT_EQ(found.regions.size(), 1u);
    // The counts AUTO may try: chunks of at least kDefaultMinChunkRows.
    const int64_t rows = found.regions[0].rows;
    for (int32_t chunks = 1;
         chunks == 1 || (chunks <= kDefaultMaxChunks &&
                         (rows + chunks - 1) / chunks >= kDefaultMinChunkRows);
         chunks *= 2) {
      ASSERT_OK_AND_ASSIGN(const ChunkedGraph chunked,
                           ChunkGraph(scaled, costs, found.regions, chunks,
                                      options.memory, chunking_.launch_cost));
      EXPECT_LE(bound, PeakLowerBound(chunked.graph, options.memory)) << chunks;
    }
    ASSERT_OK_AND_ASSIGN(const RecomputePlan plan,
                         GenerateRecomputePlan(scaled, costs, options));
    EXPECT_LE(bound, plan.peak_lower_bound_bytes);
  }
}

TEST(BatchSearchTest, BadRangesAreNamed) {
  const Graph graph = testing::ValueOrFail(ParseTextGraph(kTiny));
  MaxBatchOptions options = Device(4000);
  options.min_batch = 8;
  options.max_batch = 4;
  EXPECT_THAT(FindMaxBatchSize(graph, Relative(), options).status().message(),
              HasSubstr("max_batch (4) is below min_batch (8)"));
  options = Device(4000);
  options.min_batch = 5;
  options.max_batch = 7;
  options.multiple_of = 8;
  EXPECT_THAT(FindMaxBatchSize(graph, Relative(), options).status().message(),
              HasSubstr("no multiple of multiple_of (8)"));
  options = Device(4000);
  options.multiple_of = 0;
  EXPECT_THAT(FindMaxBatchSize(graph, Relative(), options).status().message(),
              HasSubstr("multiple_of must be >= 1"));
  const Graph unbatched = testing::ValueOrFail(
      ParseTextGraph("tensor x 4\nop f fwd other x -> y:4\n"));
  EXPECT_EQ(
      FindMaxBatchSize(unbatched, Relative(), Device(4000)).status().code(),
      absl::StatusCode::kFailedPrecondition);
}

TEST(BatchSearchTest, FrontierIsParetoAndReproducible) {
  const Graph graph = testing::ValueOrFail(ParseTextGraph(kChain));
  ASSERT_OK_AND_ASSIGN(const Graph scaled, WithBatchSize(graph, 10));
  const std::vector<double> costs = testing::RelativeCosts(scaled);
  ASSERT_OK_AND_ASSIGN(const MemoryFrontier frontier,
                       ComputeMemoryFrontier(scaled, costs, {}));
  ASSERT_GE(frontier.points.size(), 2u);
  // The plain schedule first: 1004 + 600 * 10 at no extra compute.
  EXPECT_EQ(frontier.baseline_peak_bytes, 7004);
  EXPECT_EQ(frontier.points.front().peak_bytes, 7004);
  EXPECT_EQ(frontier.points.front().recompute_cost, 0);
  for (size_t i = 1; i < frontier.points.size(); ++i) {
    EXPECT_LT(frontier.points[i].peak_bytes, frontier.points[i - 1].peak_bytes);
    EXPECT_GT(frontier.points[i].recompute_cost,
              frontier.points[i - 1].recompute_cost);
  }
  EXPECT_GE(frontier.points.back().peak_bytes, frontier.peak_lower_bound_bytes);
  for (const FrontierPoint& point : frontier.points) {
    RecomputePlanOptions options;
    options.memory_limit_bytes = point.memory_limit_bytes;
    ASSERT_OK_AND_ASSIGN(const RecomputePlan plan,
                         GenerateRecomputePlan(scaled, costs, options));
    EXPECT_EQ(PlanFingerprint(scaled, plan.schedule), point.plan_fingerprint);
    EXPECT_EQ(plan.planned_peak_bytes, point.peak_bytes);
    EXPECT_DOUBLE_EQ(plan.recompute_cost, point.recompute_cost);
  }
}

TEST(BatchSearchTest, FrontierLimits) {
  const Graph graph = testing::ValueOrFail(ParseTextGraph(kChain));
  const std::vector<double> costs = testing::RelativeCosts(graph);
  FrontierOptions options;
  options.max_ops = 5;
  EXPECT_EQ(ComputeMemoryFrontier(graph, costs, options).status().code(),
            absl::StatusCode::kResourceExhausted);
  options = {};
  options.max_points = 1;
  EXPECT_THAT(ComputeMemoryFrontier(graph, costs, options).status().message(),
              HasSubstr("max_points must be in [2, 64]"));
  // No time: the plain point and the lowest peak only, marked truncated.
  options = {};
  options.time_budget_seconds = 0;
  ASSERT_OK_AND_ASSIGN(const Graph scaled, WithBatchSize(graph, 10));
  ASSERT_OK_AND_ASSIGN(
      const MemoryFrontier cut,
      ComputeMemoryFrontier(scaled, testing::RelativeCosts(scaled), options));
  EXPECT_TRUE(cut.truncated);
  EXPECT_LE(cut.plans_evaluated, 2);
  ASSERT_GE(cut.points.size(), 1u);
  EXPECT_EQ(cut.points.front().peak_bytes, 7004);
  options = {};
  options.interrupted = [] { return absl::CancelledError("gone"); };
  EXPECT_EQ(ComputeMemoryFrontier(graph, costs, options).status().code(),
            absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace echo::planner
