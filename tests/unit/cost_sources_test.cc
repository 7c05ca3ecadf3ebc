// The cost model's sources: precedence (measured > profiled > analytic >
// relative), which device a measured time prices, units and scaling.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/cost_model.h"
#include "planner/device_catalog.h"
#include "test_util.h"

namespace echo::planner {
namespace {

class MapProfiledTimes : public ProfiledTimes {
 public:
  explicit MapProfiledTimes(std::map<std::string, double> times)
      : times_(std::move(times)) {}
  std::optional<double> Lookup(const Graph& graph, OpIndex op) const override {
    auto it = times_.find(graph.op(op).id);
    if (it == times_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::map<std::string, double> times_;
};

constexpr absl::string_view kMixedGraph = R"(
  tensor x f32[64,64] input
  tensor w f32[64,64] parameter
  op measured fwd gemm x w -> a:f32[64,64] time=0.001 on=h100-80gb cost=1 type=aten::mm
  op profiled fwd gemm a w -> b:f32[64,64] cost=2 type=aten::mm
  op analytic fwd elementwise b -> c:f32[64,64] type=aten::relu
  op relative fwd gemm c -> d:4096 cost=4
  op unknown fwd conv d -> e:4096
)";

TEST(CostModelSourcesTest, PrecedenceAndRelativeScaling) {
  Graph g = testing::ParseOrFail(kMixedGraph);
  MapProfiledTimes profiled({{"profiled", 0.002}, {"measured", 9.0}});
  const DeviceSpec h100 = testing::CatalogDevice("h100-80gb");
  absl::StatusOr<CostTable> table = EstimateOpCosts(g, &h100, &profiled, {});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->unit, "seconds");
  const std::vector<OpCostEstimate>& ops = table->ops;
  EXPECT_EQ(ops[0].source, CostSource::kMeasured);
  EXPECT_EQ(ops[0].cost, 0.001);
  EXPECT_EQ(ops[1].source, CostSource::kProfiled);
  EXPECT_EQ(ops[1].cost, 0.002);
  EXPECT_EQ(ops[2].source, CostSource::kAnalytic);
  // 2 * 16384 B / (3.35e12 * 0.8) + 5e-6.
  EXPECT_NEAR(ops[2].cost, 5.0122269e-6, 1e-12);
  // Scale = (0.001 + 0.002) s / (1 + 2) units; 4 units -> 0.004 s.
  EXPECT_EQ(ops[3].source, CostSource::kRelative);
  EXPECT_DOUBLE_EQ(ops[3].cost, 0.004);
  EXPECT_EQ(ops[4].source, CostSource::kUnknown);
  EXPECT_EQ(ops[4].cost, 0);

  const CostSourceSummary summary = table->Summary();
  for (CostSource s :
       {CostSource::kMeasured, CostSource::kProfiled, CostSource::kAnalytic,
        CostSource::kRelative, CostSource::kUnknown}) {
    EXPECT_EQ(summary.count(s), 1) << CostSourceName(s);
  }
  const double total = 0.001 + 0.002 + ops[2].cost + 0.004;
  EXPECT_DOUBLE_EQ(table->TotalCost(), total);
  EXPECT_DOUBLE_EQ(summary.fraction(CostSource::kRelative), 0.004 / total);
  EXPECT_DOUBLE_EQ(summary.fraction(CostSource::kMeasured), 0.001 / total);
  EXPECT_EQ(summary.fraction(CostSource::kUnknown), 0);
  EXPECT_EQ(table->Costs(),
            (std::vector<double>{0.001, 0.002, ops[2].cost, 0.004, 0}));
  const CostSourceSummary recomputed = table->SummaryOf({2, 2, 3});
  EXPECT_EQ(recomputed.count(CostSource::kAnalytic), 2);
  EXPECT_DOUBLE_EQ(recomputed.total_cost(), 2 * ops[2].cost + 0.004);
}

TEST(CostModelSourcesTest, RelativeUnitsWithoutDeviceOrTimes) {
  Graph g = testing::ParseOrFail(R"(
    tensor x 16 input
    op a fwd elementwise x -> y:16 cost=3
    op b fwd elementwise y -> z:16
  )");
  absl::StatusOr<CostTable> table = EstimateOpCosts(g, nullptr, nullptr);
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(table->unit, "relative");
  EXPECT_EQ(table->ops[0].source, CostSource::kRelative);
  EXPECT_EQ(table->ops[0].cost, 3);
  EXPECT_EQ(table->ops[1].source, CostSource::kUnknown);
  EXPECT_EQ(table->Summary().fraction(CostSource::kRelative), 1);
}

TEST(CostModelSourcesTest, MeasuredTimeWithoutDeviceSwitchesToSeconds) {
  Graph g = testing::ParseOrFail(R"(
    tensor x 16 input
    op a fwd elementwise x -> y:16 time=0.5
    op b fwd elementwise y -> z:16
    op c fwd elementwise z -> q:16 cost=7
  )");
  absl::StatusOr<CostTable> table = EstimateOpCosts(g, nullptr, nullptr);
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(table->unit, "seconds");
  EXPECT_EQ(table->ops[0].cost, 0.5);
  // No analytic without a device; no op has both a time and a relative cost.
  EXPECT_EQ(table->ops[1].source, CostSource::kUnknown);
  EXPECT_EQ(table->ops[2].source, CostSource::kUnknown);
  EXPECT_EQ(table->Summary().count(CostSource::kUnknown), 2);
}

TEST(CostModelSourcesTest, MeasuredTimesPriceOnlyTheDeviceTheyWereMeasuredOn) {
  Graph g = testing::ParseOrFail(R"(
    tensor x f32[1024] input
    op cpu fwd elementwise x -> a:f32[1024] time=0.5 on=cpu:x86_64
    op h100 fwd elementwise a -> b:f32[1024] time=0.25 on=H100-80GB
    op unknown fwd elementwise b -> c:f32[1024] time=0.125
  )");
  const DeviceSpec h100 = testing::CatalogDevice("h100-80gb");
  const DeviceSpec rtx = testing::CatalogDevice("rtx-2080-ti");
  // No device: the capture machine's times are all there is.
  ASSERT_OK_AND_ASSIGN(CostTable none, EstimateOpCosts(g, nullptr, nullptr));
  EXPECT_EQ(none.Costs(), (std::vector<double>{0.5, 0.25, 0.125}));
  EXPECT_EQ(none.Summary().count(CostSource::kMeasured), 3);
  // H100: its own time (names compare case-insensitively); the CPU's time
  // and the time of unknown origin give way to the roofline.
  ASSERT_OK_AND_ASSIGN(CostTable on_h100, EstimateOpCosts(g, &h100, nullptr));
  EXPECT_EQ(on_h100.ops[0].source, CostSource::kAnalytic);
  EXPECT_EQ(on_h100.ops[1].source, CostSource::kMeasured);
  EXPECT_EQ(on_h100.ops[1].cost, 0.25);
  EXPECT_EQ(on_h100.ops[2].source, CostSource::kAnalytic);
  EXPECT_LT(on_h100.ops[0].cost, 1e-4);
  // Another GPU: nothing measured applies, and its roofline is slower.
  ASSERT_OK_AND_ASSIGN(CostTable on_rtx, EstimateOpCosts(g, &rtx, nullptr));
  EXPECT_EQ(on_rtx.Summary().count(CostSource::kAnalytic), 3);
  EXPECT_GT(on_rtx.ops[0].cost, on_h100.ops[0].cost);
  EXPECT_FALSE(MeasuredTimeApplies(g.op(0), &h100));
  EXPECT_TRUE(MeasuredTimeApplies(g.op(0), nullptr));
  EXPECT_FALSE(MeasuredTimeApplies(g.op(2), &h100));
}

TEST(CostModelSourcesTest, InvalidProfiledTimesAreIgnored) {
  Graph g = testing::ParseOrFail(kMixedGraph);
  MapProfiledTimes profiled({{"profiled", std::nan("")}});
  const DeviceSpec h100 = testing::CatalogDevice("h100-80gb");
  absl::StatusOr<CostTable> table = EstimateOpCosts(g, &h100, &profiled);
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(table->ops[1].source, CostSource::kAnalytic);
}

TEST(CostModelSourcesTest, RejectsInvalidDevice) {
  Graph g = testing::ParseOrFail(kMixedGraph);
  DeviceSpec bad;
  bad.name = "bad";
  bad.memory_bytes = 1;
  absl::StatusOr<CostTable> table = EstimateOpCosts(g, &bad, nullptr);
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CostModelSourcesTest, CheckmateGraphWithDeviceScalesRelativeCosts) {
  Graph g = testing::LoadCheckmate("vgg16_b256_train");
  const DeviceSpec device = testing::CatalogDevice("rtx-2080-ti");
  absl::StatusOr<CostTable> table = EstimateOpCosts(g, &device, nullptr);
  ASSERT_TRUE(table.ok());
  const CostSourceSummary summary = table->Summary();
  // Checkmate graphs have sizes, not shapes: memory-bound ops are analytic,
  // convolutions and dense layers fall back to scaled relative costs.
  EXPECT_GT(summary.count(CostSource::kAnalytic), 0);
  EXPECT_GT(summary.count(CostSource::kRelative), 0);
  EXPECT_EQ(summary.count(CostSource::kAnalytic) +
                summary.count(CostSource::kRelative) +
                summary.count(CostSource::kUnknown),
            g.num_ops());
  EXPECT_GT(table->TotalCost(), 0);
}

}  // namespace
}  // namespace echo::planner
