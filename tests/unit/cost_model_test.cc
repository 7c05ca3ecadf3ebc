// The op cost model: FLOPs and bytes against hand-computed values, roofline
// times on catalog devices, signatures, fitting (sources and units:
// cost_sources_test.cc).
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
  EXPECT_FALSE(AnalyticSeconds(g, 0, testing::CatalogDevice("h100-80gb"), {}));
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
      AnalyticSeconds(g, 0, testing::CatalogDevice("h100-80gb"), {});
  ASSERT_TRUE(t.has_value());
  EXPECT_NEAR(*t, 2.0342482e-4, 1e-10);
  // On the paper's RTX 2080 Ti: 53.8 TFLOPS with FP32 accumulate.
  EXPECT_NEAR(*AnalyticSeconds(g, 0, testing::CatalogDevice("rtx-2080-ti"), {}),
              3.6544677e-3, 1e-9);
}

TEST(CostModelRooflineTest, F32GemmUsesTf32OnlyWhenAllowed) {
  Graph g =
      OneOp(OpClass::kGemm, "aten::mm",
            {Shaped("a", kF32, {1024, 1024}), Shaped("b", kF32, {1024, 1024})},
            {Shaped("c", kF32, {1024, 1024})});
  const DeviceSpec h100 = testing::CatalogDevice("h100-80gb");
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
  EXPECT_NEAR(*AnalyticSeconds(g, 0, testing::CatalogDevice("h100-80gb"), {}),
              8.0121863e-5, 1e-11);
}

TEST(CostModelRooflineTest, SmallSoftmaxIsLaunchBoundAndViewsCostNothing) {
  Graph softmax =
      OneOp(OpClass::kSoftmax, "aten::_softmax",
            {Shaped("x", kF16, {32, 1000})}, {Shaped("y", kF16, {32, 1000})});
  // 128000 B / (616e9 * 0.6) = 3.4632e-7 s, + 5e-6.
  EXPECT_NEAR(
      *AnalyticSeconds(softmax, 0, testing::CatalogDevice("rtx-2080-ti"), {}),
      5.3463203e-6, 1e-12);
  Graph view = OneOp(OpClass::kDataMovement, "aten::view",
                     {Shaped("x", kF32, {4, 8})}, {Shaped("y", kF32, {32})});
  EXPECT_EQ(*AnalyticSeconds(view, 0, testing::CatalogDevice("h100-80gb"), {}),
            0);
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
  const DeviceSpec h100 = testing::CatalogDevice("h100-80gb");
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
  const DeviceSpec h100 = testing::CatalogDevice("h100-80gb");
  std::optional<CalibrationSample> sample =
      MakeCalibrationSample(g, 0, h100, {}, 4e-4);
  ASSERT_TRUE(sample.has_value());
  EXPECT_NEAR(sample->ideal.compute_seconds, 137438953472 / 989.5e12, 1e-15);
  const EfficiencyFit fit = FitEfficiencies({*sample}, {});
  EXPECT_NEAR(*AnalyticSeconds(g, 0, h100, fit.options), 4e-4, 1e-12);
}

TEST(CostModelWorkTest, GemmWhoseOperandsOverflowInt64HasNoShape) {
  // m, n, k and batch each fit 32 bits; batch * m * k does not fit int64
  // (the profiler's operand sizes overflowed).
  const Attributes huge = {{"m", "2147483647"},
                           {"n", "2147483647"},
                           {"k", "2147483647"},
                           {"batch", "2147483647"}};
  Graph g = OneOp(OpClass::kGemm, "aten::bmm", {Sized("a", 8)}, {Sized("c", 8)},
                  huge);
  EXPECT_EQ(InferGemmShape(g, 0), std::nullopt);
  Attributes fits = huge;
  fits["batch"] = "1";
  fits["k"] = "1024";
  fits["n"] = "1024";
  g = OneOp(OpClass::kGemm, "aten::bmm", {Sized("a", 8)}, {Sized("c", 8)},
            fits);
  ASSERT_TRUE(InferGemmShape(g, 0).has_value());
  EXPECT_EQ(InferGemmShape(g, 0)->m, 2147483647);
}

TEST(CostModelWorkTest, ConvolutionBeyond32BitDimsHasNoShape) {
  // A dilation of 2^62 overflowed the output size; a stride over 32 bits
  // reached cuDNN truncated.
  for (const char* attribute : {"dilation", "stride", "padding"}) {
    Graph g = OneOp(
        OpClass::kConv, "aten::convolution",
        {Shaped("x", kF32, {1, 4, 10, 10}), Shaped("w", kF32, {8, 4, 3, 3})},
        {Sized("y", 3200)}, {{attribute, "4611686018427387904"}});
    EXPECT_EQ(InferConvShape(g, 0), std::nullopt) << attribute;
  }
  // A transposed convolution whose output would not fit int64 bytes.
  Graph g = OneOp(
      OpClass::kConv, "aten::convolution",
      {Shaped("x", kF32, {1, 4, 2147483647}), Shaped("w", kF32, {4, 8, 3})},
      {Sized("y", 8)}, {{"transposed", "true"}, {"stride", "2147483647"}});
  EXPECT_EQ(InferConvShape(g, 0), std::nullopt);
}

}  // namespace
}  // namespace echo::planner
