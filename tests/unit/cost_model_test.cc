// The op cost model: FLOPs and bytes against hand-computed values, roofline
// times on catalog devices, source precedence, units, signatures, fitting.
#include "planner/cost_model.h"

#include <cmath>
#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/device_catalog.h"
#include "test_util.h"

namespace echo::planner {
namespace {

using Attributes = std::map<std::string, std::string>;

TensorSpec Shaped(std::string id, DType dtype, std::vector<int64_t> shape) {
  TensorSpec spec;
  spec.id = std::move(id);
  spec.dtype = dtype;
  spec.shape = std::move(shape);
  return spec;
}

TensorSpec Sized(std::string id, int64_t bytes) {
  TensorSpec spec;
  spec.id = std::move(id);
  spec.size_bytes = bytes;
  return spec;
}

// One op reading `inputs` and writing `outputs` (all declared here).
Graph OneOp(OpClass op_class, std::string op_type,
            std::vector<TensorSpec> inputs, std::vector<TensorSpec> outputs,
            Attributes attributes = {}, double flops = -1) {
  GraphBuilder builder("one_op");
  OpSpec op;
  op.id = "op";
  op.op_class = op_class;
  op.op_type = std::move(op_type);
  op.attributes = std::move(attributes);
  op.flops = flops;
  for (TensorSpec& t : inputs) {
    op.input_ids.push_back(t.id);
    builder.AddTensor(std::move(t));
  }
  for (TensorSpec& t : outputs) {
    op.output_ids.push_back(t.id);
    builder.AddTensor(std::move(t));
  }
  builder.AddOp(std::move(op));
  return testing::ValueOrFail(std::move(builder).Build());
}

constexpr DType kF32 = DType::kFloat32;
constexpr DType kF16 = DType::kFloat16;

TEST(CostModelWorkTest, MatmulIsTwoMnk) {
  Graph g = OneOp(OpClass::kGemm, "aten::mm",
                  {Shaped("a", kF16, {64, 128}), Shaped("b", kF16, {128, 256})},
                  {Shaped("c", kF16, {64, 256})});
  std::optional<GemmShape> shape = InferGemmShape(g, 0);
  ASSERT_TRUE(shape.has_value());
  EXPECT_EQ(shape->m, 64);
  EXPECT_EQ(shape->n, 256);
  EXPECT_EQ(shape->k, 128);
  EXPECT_EQ(shape->dtype, kF16);
  const OpWork work = EstimateOpWork(g, 0);
  EXPECT_TRUE(work.known);
  EXPECT_TRUE(work.matrix);
  EXPECT_EQ(work.flops, 2.0 * 64 * 256 * 128);
  EXPECT_EQ(work.bytes_moved, (64 * 128 + 128 * 256 + 64 * 256) * 2);
}

TEST(CostModelWorkTest, AddmmSkipsTheBias) {
  Graph g = OneOp(OpClass::kGemm, "aten::addmm",
                  {Shaped("bias", kF32, {32, 256}), Shaped("a", kF32, {32, 64}),
                   Shaped("b", kF32, {64, 256})},
                  {Shaped("c", kF32, {32, 256})});
  EXPECT_EQ(InferGemmShape(g, 0)->k, 64);
  EXPECT_EQ(EstimateOpWork(g, 0).flops, 2.0 * 32 * 256 * 64);
}

TEST(CostModelWorkTest, LinearFoldsLeadingDimsIntoM) {
  Graph g = OneOp(OpClass::kGemm, "aten::linear",
                  {Shaped("x", DType::kBFloat16, {8, 16, 512}),
                   Shaped("w", DType::kBFloat16, {1024, 512}),
                   Shaped("bias", DType::kBFloat16, {1024})},
                  {Shaped("y", DType::kBFloat16, {8, 16, 1024})});
  std::optional<GemmShape> shape = InferGemmShape(g, 0);
  ASSERT_TRUE(shape.has_value());
  EXPECT_EQ(shape->batch, 1);
  EXPECT_EQ(shape->m, 128);
  EXPECT_EQ(shape->n, 1024);
  EXPECT_EQ(shape->k, 512);
  EXPECT_EQ(EstimateOpWork(g, 0).flops, 2.0 * 128 * 1024 * 512);
}

TEST(CostModelWorkTest, BatchedMatmulKeepsTheBatch) {
  Graph g =
      OneOp(OpClass::kGemm, "aten::bmm",
            {Shaped("a", kF32, {12, 64, 32}), Shaped("b", kF32, {12, 32, 48})},
            {Shaped("c", kF32, {12, 64, 48})});
  std::optional<GemmShape> shape = InferGemmShape(g, 0);
  ASSERT_TRUE(shape.has_value());
  EXPECT_EQ(shape->batch, 12);
  EXPECT_EQ(shape->m, 64);
  EXPECT_EQ(shape->k, 32);
  EXPECT_EQ(EstimateOpWork(g, 0).flops, 2.0 * 12 * 64 * 48 * 32);
}

TEST(CostModelWorkTest, TransposedLeftOperand) {
  // dW = dY^T X: the left operand is stored [K, M].
  Graph g =
      OneOp(OpClass::kGemm, "aten::mm",
            {Shaped("dyt", kF32, {1024, 256}), Shaped("x", kF32, {1024, 128})},
            {Shaped("dw", kF32, {256, 128})});
  EXPECT_EQ(InferGemmShape(g, 0)->k, 1024);
  EXPECT_EQ(EstimateOpWork(g, 0).flops, 2.0 * 256 * 128 * 1024);
}

TEST(CostModelWorkTest, GemmDimsFromAttributesAndClientFlops) {
  Graph by_attrs = OneOp(
      OpClass::kGemm, "custom::gemm", {Sized("a", 100)}, {Sized("c", 100)},
      {{"m", "10"}, {"n", "20"}, {"k", "30"}, {"batch", "2"}});
  EXPECT_EQ(EstimateOpWork(by_attrs, 0).flops, 2.0 * 2 * 10 * 20 * 30);
  Graph no_shapes =
      OneOp(OpClass::kGemm, "fc", {Sized("a", 100)}, {Sized("c", 50)});
  EXPECT_FALSE(EstimateOpWork(no_shapes, 0).known);
  Graph client_flops =
      OneOp(OpClass::kGemm, "fc", {Sized("a", 100)}, {Sized("c", 50)}, {}, 1e9);
  const OpWork work = EstimateOpWork(client_flops, 0);
  EXPECT_TRUE(work.known);
  EXPECT_EQ(work.flops, 1e9);
  EXPECT_EQ(work.bytes_moved, 150);
}

TEST(CostModelWorkTest, ConvolutionForward) {
  // 2 * N * C_out * H_out * W_out * (C_in / groups) * kh * kw.
  Graph g = OneOp(
      OpClass::kConv, "aten::convolution",
      {Shaped("x", kF32, {8, 3, 32, 32}), Shaped("w", kF32, {16, 3, 3, 3})},
      {Shaped("y", kF32, {8, 16, 30, 30})});
  const OpWork work = EstimateOpWork(g, 0);
  EXPECT_EQ(work.flops, 2.0 * 8 * 16 * 30 * 30 * 3 * 3 * 3);
  EXPECT_EQ(work.flops, 6220800);
  EXPECT_EQ(work.bytes_moved, (8 * 3 * 32 * 32 + 16 * 27 + 8 * 16 * 900) * 4);
}

TEST(CostModelWorkTest, DepthwiseConvolutionUsesGroups) {
  Graph g = OneOp(
      OpClass::kConv, "aten::convolution",
      {Shaped("x", kF32, {2, 32, 16, 16}), Shaped("w", kF32, {32, 1, 3, 3})},
      {Shaped("y", kF32, {2, 32, 8, 8})},
      {{"groups", "32"}, {"stride", "2"}, {"padding", "1"}});
  EXPECT_EQ(EstimateOpWork(g, 0).flops, 2.0 * 2 * 32 * 64 * 1 * 9);
}

TEST(CostModelWorkTest, ConvolutionOutputFromStrideAndPadding) {
  // Output declared by size only: (10 + 2*1 - 2 - 1) / 1 + 1 = 10.
  Graph g = OneOp(
      OpClass::kConv, "aten::convolution",
      {Shaped("x", kF32, {1, 4, 10, 10}), Shaped("w", kF32, {8, 4, 3, 3})},
      {Sized("y", 3200)}, {{"stride", "[1, 1]"}, {"padding", "1"}});
  std::optional<ConvShape> conv = InferConvShape(g, 0);
  ASSERT_TRUE(conv.has_value());
  EXPECT_EQ(conv->out_spatial, (std::vector<int64_t>{10, 10}));
  EXPECT_EQ(EstimateOpWork(g, 0).flops, 2.0 * 1 * 8 * 100 * 4 * 9);
}

TEST(CostModelWorkTest, ConvolutionKernelFromAttributes) {
  Graph g = OneOp(OpClass::kConv, "aten::convolution",
                  {Shaped("x", kF32, {1, 4, 10, 10}), Sized("w", 1152)},
                  {Shaped("y", kF32, {1, 8, 8, 8})}, {{"kernel", "3"}});
  EXPECT_EQ(EstimateOpWork(g, 0).flops, 2.0 * 8 * 64 * 4 * 9);
}

TEST(CostModelWorkTest, TransposedConvolution) {
  // Output (8 - 1) * 2 - 2 * 1 + (4 - 1) + 1 = 16; FLOPs count per input.
  Graph g = OneOp(
      OpClass::kConv, "aten::convolution",
      {Shaped("x", kF32, {1, 16, 8, 8}), Shaped("w", kF32, {16, 8, 4, 4})},
      {Sized("y", 8192)},
      {{"transposed", "True"}, {"stride", "2"}, {"padding", "1"}});
  std::optional<ConvShape> conv = InferConvShape(g, 0);
  ASSERT_TRUE(conv.has_value());
  EXPECT_EQ(conv->out_channels, 8);
  EXPECT_EQ(conv->out_spatial, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(EstimateOpWork(g, 0).flops, 2.0 * 16 * 64 * 8 * 16);
}

TEST(CostModelWorkTest, ConvolutionBackwardCountsEachGradient) {
  const double forward = 2.0 * 8 * 16 * 30 * 30 * 3 * 3 * 3;
  Graph all = OneOp(
      OpClass::kConv, "aten::convolution_backward",
      {Shaped("dy", kF32, {8, 16, 30, 30}), Shaped("x", kF32, {8, 3, 32, 32}),
       Shaped("w", kF32, {16, 3, 3, 3})},
      {Shaped("dx", kF32, {8, 3, 32, 32}), Shaped("dw", kF32, {16, 3, 3, 3}),
       Shaped("db", kF32, {16})});
  std::optional<ConvShape> conv = InferConvShape(all, 0);
  ASSERT_TRUE(conv.has_value());
  EXPECT_TRUE(conv->grad_input && conv->grad_weight && conv->grad_bias);
  EXPECT_EQ(EstimateOpWork(all, 0).flops, 2 * forward + 8 * 16 * 900);

  Graph data_only = OneOp(
      OpClass::kConv, "aten::convolution_backward",
      {Shaped("dy", kF32, {8, 16, 30, 30}), Shaped("x", kF32, {8, 3, 32, 32}),
       Shaped("w", kF32, {16, 3, 3, 3})},
      {Shaped("dx", kF32, {8, 3, 32, 32})},
      {{"output_mask", "[True, False, False]"}});
  EXPECT_EQ(EstimateOpWork(data_only, 0).flops, forward);
}

TEST(CostModelWorkTest, MemoryBoundClasses) {
  // Broadcast add: one FLOP per output element; reads both inputs.
  Graph add = OneOp(OpClass::kElementwise, "aten::add",
                    {Shaped("a", kF32, {1024}), Shaped("b", kF32, {1})},
                    {Shaped("c", kF32, {1024})});
  EXPECT_EQ(EstimateOpWork(add, 0).flops, 1024);
  EXPECT_EQ(EstimateOpWork(add, 0).bytes_moved, (1024 + 1 + 1024) * 4);
  EXPECT_FALSE(EstimateOpWork(add, 0).matrix);

  Graph softmax =
      OneOp(OpClass::kSoftmax, "aten::_softmax",
            {Shaped("x", kF16, {32, 1000})}, {Shaped("y", kF16, {32, 1000})});
  EXPECT_EQ(EstimateOpWork(softmax, 0).flops, 5 * 32000);
  EXPECT_EQ(EstimateOpWork(softmax, 0).bytes_moved, 2 * 32000 * 2);

  Graph norm = OneOp(OpClass::kNorm, "aten::layer_norm",
                     {Shaped("x", kF32, {64, 512}), Shaped("g", kF32, {512}),
                      Shaped("b", kF32, {512})},
                     {Shaped("y", kF32, {64, 512})});
  EXPECT_EQ(EstimateOpWork(norm, 0).flops, 5 * 32768);
  EXPECT_EQ(EstimateOpWork(norm, 0).bytes_moved, (2 * 32768 + 1024) * 4);

  Graph sum = OneOp(OpClass::kReduction, "aten::sum",
                    {Shaped("x", kF32, {100, 10})}, {Shaped("y", kF32, {10})});
  EXPECT_EQ(EstimateOpWork(sum, 0).flops, 1000);
  EXPECT_EQ(EstimateOpWork(sum, 0).bytes_moved, 1010 * 4);

  Graph tanh =
      OneOp(OpClass::kElementwise, "aten::tanh", {Shaped("x", kF32, {100})},
            {Shaped("y", kF32, {100})}, {{"flops_per_element", "8"}});
  EXPECT_EQ(EstimateOpWork(tanh, 0).flops, 800);
}

TEST(CostModelWorkTest, ViewsAreFreeCopiesAreNot) {
  TensorSpec view_out = Shaped("v", kF32, {32});
  view_out.size_bytes = 0;
  Graph view = OneOp(OpClass::kDataMovement, "aten::reshape",
                     {Shaped("x", kF32, {4, 8})}, {view_out});
  EXPECT_TRUE(EstimateOpWork(view, 0).free);
  EXPECT_EQ(EstimateOpWork(view, 0).bytes_moved, 0);
  Graph transpose =
      OneOp(OpClass::kDataMovement, "aten::t", {Shaped("x", kF32, {4, 8})},
            {Shaped("y", kF32, {8, 4})});
  EXPECT_TRUE(EstimateOpWork(transpose, 0).free);
  Graph cat = OneOp(OpClass::kDataMovement, "aten::cat",
                    {Shaped("a", kF32, {4, 8}), Shaped("b", kF32, {4, 8})},
                    {Shaped("c", kF32, {8, 8})});
  EXPECT_FALSE(EstimateOpWork(cat, 0).free);
  EXPECT_EQ(EstimateOpWork(cat, 0).flops, 0);
  EXPECT_EQ(EstimateOpWork(cat, 0).bytes_moved, 128 * 4);
}

TEST(CostModelWorkTest, EmbeddingReadsOnlyTheGatheredRows) {
  Graph lookup = OneOp(
      OpClass::kEmbedding, "aten::embedding",
      {Shaped("table", kF32, {10000, 64}), Shaped("idx", DType::kInt64, {32})},
      {Shaped("e", kF32, {32, 64})});
  EXPECT_EQ(EstimateOpWork(lookup, 0).bytes_moved, 32 * 8 + 2 * 32 * 64 * 4);
  EXPECT_EQ(EstimateOpWork(lookup, 0).flops, 0);
}

TEST(CostModelWorkTest, CollectivesAreUnknown) {
  Graph g =
      OneOp(OpClass::kCollective, "c10d::allreduce_",
            {Shaped("x", kF32, {1024})}, {Shaped("y", kF32, {1024})}, {}, 1e6);
  EXPECT_FALSE(EstimateOpWork(g, 0).known);
  EXPECT_FALSE(AnalyticSeconds(g, 0, *FindCatalogDevice("h100-80gb"), {}));
}

// ------------------------------------------------------------ roofline

TEST(CostModelRooflineTest, ComputeBoundGemmOnH100) {
  Graph g =
      OneOp(OpClass::kGemm, "aten::mm",
            {Shaped("a", kF16, {4096, 4096}), Shaped("b", kF16, {4096, 4096})},
            {Shaped("c", kF16, {4096, 4096})});
  // 2 * 4096^3 = 137438953472 FLOPs / (989.5e12 * 0.7) = 1.98425e-4 s,
  // above 100663296 B / (3.35e12 * 0.8) = 3.756e-5 s; + 5 us launch.
  std::optional<double> t =
      AnalyticSeconds(g, 0, *FindCatalogDevice("h100-80gb"), {});
  ASSERT_TRUE(t.has_value());
  EXPECT_NEAR(*t, 2.0342482e-4, 1e-10);
  // On the paper's RTX 2080 Ti: 53.8 TFLOPS with FP32 accumulate.
  EXPECT_NEAR(*AnalyticSeconds(g, 0, *FindCatalogDevice("rtx-2080-ti"), {}),
              3.6544677e-3, 1e-9);
}

TEST(CostModelRooflineTest, F32GemmUsesTf32OnlyWhenAllowed) {
  Graph g =
      OneOp(OpClass::kGemm, "aten::mm",
            {Shaped("a", kF32, {1024, 1024}), Shaped("b", kF32, {1024, 1024})},
            {Shaped("c", kF32, {1024, 1024})});
  const DeviceSpec h100 = *FindCatalogDevice("h100-80gb");
  CostModelOptions options;
  // 2147483648 / (67e12 * 0.7) + 5e-6.
  EXPECT_NEAR(*AnalyticSeconds(g, 0, h100, options), 5.0788564e-5, 1e-11);
  options.tf32_for_f32_gemm = true;
  // 2147483648 / (494.5e12 * 0.7) + 5e-6.
  EXPECT_NEAR(*AnalyticSeconds(g, 0, h100, options), 1.1203911e-5, 1e-11);
}

TEST(CostModelRooflineTest, MemoryBoundElementwiseOnH100) {
  Graph g = OneOp(OpClass::kElementwise, "aten::add",
                  {Shaped("a", kF32, {1 << 24}), Shaped("b", kF32, {1 << 24})},
                  {Shaped("c", kF32, {1 << 24})});
  // 201326592 B / (3.35e12 * 0.8) + 5e-6.
  EXPECT_NEAR(*AnalyticSeconds(g, 0, *FindCatalogDevice("h100-80gb"), {}),
              8.0121863e-5, 1e-11);
}

TEST(CostModelRooflineTest, SmallSoftmaxIsLaunchBoundAndViewsCostNothing) {
  Graph softmax =
      OneOp(OpClass::kSoftmax, "aten::_softmax",
            {Shaped("x", kF16, {32, 1000})}, {Shaped("y", kF16, {32, 1000})});
  // 128000 B / (616e9 * 0.6) = 3.4632e-7 s, + 5e-6.
  EXPECT_NEAR(
      *AnalyticSeconds(softmax, 0, *FindCatalogDevice("rtx-2080-ti"), {}),
      5.3463203e-6, 1e-12);
  Graph view = OneOp(OpClass::kDataMovement, "aten::view",
                     {Shaped("x", kF32, {4, 8})}, {Shaped("y", kF32, {32})});
  EXPECT_EQ(*AnalyticSeconds(view, 0, *FindCatalogDevice("h100-80gb"), {}), 0);
}

// ------------------------------------------------------------ sources

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
  const DeviceSpec h100 = *FindCatalogDevice("h100-80gb");
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
  const DeviceSpec h100 = *FindCatalogDevice("h100-80gb");
  const DeviceSpec rtx = *FindCatalogDevice("rtx-2080-ti");
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
  const DeviceSpec h100 = *FindCatalogDevice("h100-80gb");
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
  const DeviceSpec device = *FindCatalogDevice("rtx-2080-ti");
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

// ------------------------------------------------------------ signatures

TEST(CostModelSignatureTest, IgnoresIdsAndIrrelevantAttributes) {
  Graph a = OneOp(
      OpClass::kConv, "aten::convolution",
      {Shaped("x", kF32, {8, 3, 32, 32}), Shaped("w", kF32, {16, 3, 3, 3})},
      {Shaped("y", kF32, {8, 16, 30, 30})},
      {{"stride", "1"}, {"scope", "layer1"}});
  Graph b = OneOp(
      OpClass::kConv, "aten::convolution",
      {Shaped("in", kF32, {8, 3, 32, 32}), Shaped("k", kF32, {16, 3, 3, 3})},
      {Shaped("out", kF32, {8, 16, 30, 30})},
      {{"stride", "1"}, {"scope", "layer7"}});
  EXPECT_EQ(OpSignature(a, 0), OpSignature(b, 0));
  EXPECT_EQ(OpSignature(a, 0),
            "conv|aten::convolution|in=f32[8,3,32,32];f32[16,3,3,3]|"
            "out=f32[8,16,30,30]|stride=1");
  Graph strided = OneOp(
      OpClass::kConv, "aten::convolution",
      {Shaped("x", kF32, {8, 3, 32, 32}), Shaped("w", kF32, {16, 3, 3, 3})},
      {Shaped("y", kF32, {8, 16, 30, 30})}, {{"stride", "2"}});
  EXPECT_NE(OpSignature(a, 0), OpSignature(strided, 0));
  Graph half = OneOp(
      OpClass::kConv, "aten::convolution",
      {Shaped("x", kF16, {8, 3, 32, 32}), Shaped("w", kF16, {16, 3, 3, 3})},
      {Shaped("y", kF16, {8, 16, 30, 30})}, {{"stride", "1"}});
  EXPECT_NE(OpSignature(a, 0), OpSignature(half, 0));
  Graph sized =
      OneOp(OpClass::kOther, "x::op", {Sized("a", 64)}, {Sized("b", 32)});
  EXPECT_EQ(OpSignature(sized, 0), "other|x::op|in=bytes:64|out=bytes:32|");
}

TEST(CostModelSignatureTest, NeedsProfiling) {
  Graph gemm =
      OneOp(OpClass::kGemm, "aten::mm",
            {Shaped("a", kF16, {64, 128}), Shaped("b", kF16, {128, 256})},
            {Shaped("c", kF16, {64, 256})});
  EXPECT_TRUE(NeedsProfiling(gemm, 0));
  Graph no_shapes =
      OneOp(OpClass::kGemm, "fc", {Sized("a", 100)}, {Sized("c", 50)});
  EXPECT_FALSE(NeedsProfiling(no_shapes, 0));
  Graph measured = testing::ParseOrFail(R"(
    tensor a f16[64,128] input
    tensor b f16[128,256] input
    op mm fwd gemm a b -> c:f16[64,256] time=0.001
  )");
  EXPECT_FALSE(NeedsProfiling(measured, 0));
  // A time measured on another device (here: unknown) does not stop the
  // profiler of a known GPU.
  const DeviceSpec h100 = *FindCatalogDevice("h100-80gb");
  EXPECT_TRUE(NeedsProfiling(measured, 0, &h100));
  Graph relu = OneOp(OpClass::kElementwise, "aten::relu",
                     {Shaped("a", kF32, {64})}, {Shaped("b", kF32, {64})});
  EXPECT_FALSE(NeedsProfiling(relu, 0));
  Graph other = OneOp(OpClass::kOther, "x::fused", {Shaped("a", kF32, {64})},
                      {Shaped("b", kF32, {64})});
  EXPECT_TRUE(NeedsProfiling(other, 0));
  Graph other_sized = OneOp(OpClass::kOther, "x::fused",
                            {Shaped("a", kF32, {64})}, {Sized("b", 256)});
  EXPECT_FALSE(NeedsProfiling(other_sized, 0));
}

// ------------------------------------------------------------ calibration

TEST(CostModelCalibrationTest, FitsMedianEfficiencyPerBound) {
  CostModelOptions start;
  const double launch = start.launch_overhead_seconds;
  std::vector<CalibrationSample> samples;
  // Compute-bound GEMMs at 40%, 50% and 90% of peak: median 0.5.
  for (double eff : {0.4, 0.5, 0.9}) {
    samples.push_back({OpClass::kGemm, {1e-3, 1e-5}, 1e-3 / eff + launch});
  }
  // Memory-bound elementwise at 80% of the bandwidth.
  samples.push_back({OpClass::kElementwise, {1e-7, 1e-4}, 1.25e-4 + launch});
  // Faster than the peak: clamped to 1.
  samples.push_back({OpClass::kSoftmax, {0, 1e-4}, 0.5e-4 + launch});
  // All launch overhead: ignored.
  samples.push_back({OpClass::kNorm, {0, 1e-9}, launch});
  const EfficiencyFit fit = FitEfficiencies(samples, start);
  EXPECT_DOUBLE_EQ(fit.options.efficiency(OpClass::kGemm).compute, 0.5);
  EXPECT_EQ(fit.compute_samples[static_cast<int>(OpClass::kGemm)], 3);
  EXPECT_EQ(fit.options.efficiency(OpClass::kGemm).memory,
            start.efficiency(OpClass::kGemm).memory);
  EXPECT_DOUBLE_EQ(fit.options.efficiency(OpClass::kElementwise).memory, 0.8);
  EXPECT_EQ(fit.options.efficiency(OpClass::kSoftmax).memory, 1.0);
  EXPECT_EQ(fit.options.efficiency(OpClass::kNorm).memory,
            start.efficiency(OpClass::kNorm).memory);
  EXPECT_EQ(fit.memory_samples[static_cast<int>(OpClass::kNorm)], 0);
}

TEST(CostModelCalibrationTest, FittedModelReproducesMeasurement) {
  Graph g =
      OneOp(OpClass::kGemm, "aten::mm",
            {Shaped("a", kF16, {4096, 4096}), Shaped("b", kF16, {4096, 4096})},
            {Shaped("c", kF16, {4096, 4096})});
  const DeviceSpec h100 = *FindCatalogDevice("h100-80gb");
  std::optional<CalibrationSample> sample =
      MakeCalibrationSample(g, 0, h100, {}, 4e-4);
  ASSERT_TRUE(sample.has_value());
  EXPECT_NEAR(sample->ideal.compute_seconds, 137438953472 / 989.5e12, 1e-15);
  const EfficiencyFit fit = FitEfficiencies({*sample}, {});
  EXPECT_NEAR(*AnalyticSeconds(g, 0, h100, fit.options), 4e-4, 1e-12);
}

}  // namespace
}  // namespace echo::planner
