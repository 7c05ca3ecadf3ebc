// The CUDA op timer on a real GPU. Every test skips, saying so, where
// cudaGetDeviceCount finds no GPU. Run with tests/gpu/run_on_gpu.sh.
#include <string>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/cost_model.h"
#include "server/profiler/gpu_backend.h"
#include "server/profiler/node_profiler.h"
#include "tests/unit/test_util.h"

namespace echo::server {
namespace {

using ::testing::HasSubstr;

class GpuProfilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    discovery_ = DiscoverGpus();
    if (discovery_.gpus.empty()) {
      GTEST_SKIP() << "skipped, no GPU here: " << discovery_.status;
    }
    NodeProfilerOptions options;
    options.enable_profiling = true;
    options.memory_fraction = 0.5;
    absl::StatusOr<std::unique_ptr<NodeProfiler>> profiler =
        NodeProfiler::Create(options, nullptr);
    ASSERT_TRUE(profiler.ok()) << profiler.status();
    profiler_ = *std::move(profiler);
  }

  planner::Graph Parse(const std::string& text) {
    return testing::ParseOrFail(text);
  }

  // Profiles op 0 of `graph`, forced; the profile.
  planner::OpProfile ProfileFirstOp(const planner::Graph& graph) {
    absl::StatusOr<planner::ProfileReport> report =
        profiler_->ProfileOps(graph, {0}, true);
    EXPECT_TRUE(report.ok()) << report.status();
    return report.ok() && !report->profiles.empty() ? report->profiles[0]
                                                    : planner::OpProfile();
  }

  GpuDiscovery discovery_;
  std::unique_ptr<NodeProfiler> profiler_;
};

TEST_F(GpuProfilerTest, DiscoveryDescribesTheGpu) {
  const GpuDevice& gpu = discovery_.gpus[0];
  std::printf(
      "%s: %s, %lld bytes, %d SMs, cc %s; driver %s, cudart %s, "
      "cublas %s, cudnn %s; catalog: %s\n",
      discovery_.status.c_str(), gpu.name.c_str(),
      static_cast<long long>(gpu.memory_bytes), gpu.sm_count,
      gpu.compute_capability.c_str(), discovery_.driver_version.c_str(),
      discovery_.cuda_runtime_version.c_str(),
      discovery_.cublas_version.c_str(), discovery_.cudnn_version.c_str(),
      profiler_->local_device() ? profiler_->local_device()->name.c_str()
                                : "(not in catalog)");
  EXPECT_GT(gpu.memory_bytes, 0);
  EXPECT_GT(gpu.sm_count, 0);
  EXPECT_NE(discovery_.driver_version, "none");
  const planner::NodeReport info = profiler_->NodeInfo();
  ASSERT_FALSE(info.gpus.empty());
  EXPECT_GT(info.gpus[0].free_memory_bytes, 0);
  EXPECT_LE(info.gpus[0].free_memory_bytes, info.gpus[0].memory_bytes);
}

TEST_F(GpuProfilerTest, GemmIsTimedAndNeverBeatsThePeak) {
  planner::Graph graph = Parse(R"(
    tensor a f16[4096,4096] input
    tensor b f16[4096,4096] input
    op mm fwd gemm a b -> c:f16[4096,4096] type=aten::mm
  )");
  const planner::OpProfile profile = ProfileFirstOp(graph);
  ASSERT_TRUE(profile.measured) << profile.reason;
  std::printf("f16 4096^3 GEMM: %.3f us profiled, %.3f us analytic\n",
              profile.time_seconds * 1e6, profile.analytic_time_seconds * 1e6);
  EXPECT_GT(profile.time_seconds, 0);
  if (profiler_->local_device()) {
    const double peak = planner::MatrixPeakFlops(
        *profiler_->local_device(), planner::DType::kFloat16, false);
    EXPECT_GE(profile.time_seconds, 2.0 * 4096 * 4096 * 4096 / peak * 0.95);
    EXPECT_LT(profile.time_seconds, profile.analytic_time_seconds * 5);
  }
}

TEST_F(GpuProfilerTest, BatchedAndF32GemmsAreTimed) {
  for (const char* text : {R"(
    tensor a f32[1024,1024] input
    tensor b f32[1024,1024] input
    op mm fwd gemm a b -> c:f32[1024,1024] type=aten::mm
  )",
                           R"(
    tensor q bf16[64,512,64] input
    tensor k bf16[64,64,512] input
    op bmm fwd gemm q k -> s:bf16[64,512,512] type=aten::bmm
  )"}) {
    const planner::OpProfile profile = ProfileFirstOp(Parse(text));
    EXPECT_TRUE(profile.measured) << profile.reason;
    EXPECT_GT(profile.time_seconds, 0);
  }
}

TEST_F(GpuProfilerTest, ConvolutionForwardAndBackward) {
  planner::Graph graph = Parse(R"(
    tensor x f16[32,64,56,56] input
    tensor w f16[64,64,3,3] parameter
    tensor dy f16[32,64,54,54] input
    op conv fwd conv x w -> y:f16[32,64,54,54] type=aten::convolution
    op conv_bw bwd conv dy x w -> dx:f16[32,64,56,56] dw:f16[64,64,3,3] type=aten::convolution_backward
  )");
  ASSERT_OK_AND_ASSIGN(planner::ProfileReport response,
                       profiler_->ProfileOps(graph, {0, 1}, true));
  ASSERT_EQ(response.profiles.size(), 2u);
  ASSERT_TRUE(response.profiles[0].measured) << response.profiles[0].reason;
  ASSERT_TRUE(response.profiles[1].measured) << response.profiles[1].reason;
  std::printf("conv 3x3 64->64 @56: forward %.1f us, backward %.1f us\n",
              response.profiles[0].time_seconds * 1e6,
              response.profiles[1].time_seconds * 1e6);
  // Two passes of the forward's FLOPs.
  EXPECT_GT(response.profiles[1].time_seconds,
            response.profiles[0].time_seconds);
}

TEST_F(GpuProfilerTest, TransposedConvolution) {
  planner::Graph graph = Parse(R"(
    tensor x f32[8,64,16,16] input
    tensor w f32[64,32,3,3] parameter
    op up fwd conv x w -> y:f32[8,32,18,18] type=aten::conv_transpose2d
  )");
  const planner::OpProfile profile = ProfileFirstOp(graph);
  EXPECT_TRUE(profile.measured) << profile.reason;
}

TEST_F(GpuProfilerTest, MemoryBoundOpsRunNearTheBandwidth) {
  planner::Graph graph = Parse(R"(
    tensor a f32[67108864] input
    tensor b f32[67108864] input
    op add fwd elementwise a b -> c:f32[67108864] type=aten::add
  )");
  const planner::OpProfile profile = ProfileFirstOp(graph);
  ASSERT_TRUE(profile.measured) << profile.reason;
  const double bytes = 3.0 * 67108864 * 4;
  std::printf("add of 3 x 256 MiB: %.1f us, %.0f GB/s\n",
              profile.time_seconds * 1e6, bytes / profile.time_seconds / 1e9);
  if (profiler_->local_device()) {
    const double bandwidth =
        profiler_->local_device()->memory_bandwidth_bytes_per_second;
    EXPECT_GE(profile.time_seconds, bytes / bandwidth * 0.95);
    EXPECT_LT(profile.time_seconds, bytes / bandwidth * 4);
  }
}

TEST_F(GpuProfilerTest, SoftmaxNormReductionAndViews) {
  planner::Graph graph = Parse(R"(
    tensor x f16[4096,4096] input
    op sm fwd softmax x -> s:f16[4096,4096] type=aten::_softmax
    op ln fwd norm s -> n:f16[4096,4096] type=aten::layer_norm
    op sum fwd reduction n -> r:f16[4096] type=aten::sum
    op v fwd data_movement r -> q:f16[64,64] type=aten::view
  )");
  ASSERT_OK_AND_ASSIGN(planner::ProfileReport response,
                       profiler_->ProfileOps(graph, {0, 1, 2, 3}, true));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(response.profiles[i].measured) << response.profiles[i].reason;
    EXPECT_GT(response.profiles[i].time_seconds, 0);
  }
  EXPECT_TRUE(response.profiles[3].measured);
  EXPECT_EQ(response.profiles[3].time_seconds, 0);  // a view runs no kernel
}

TEST_F(GpuProfilerTest, UnsupportedDtypesAndMemoryLimitsAreSkipped) {
  planner::Graph int8 = Parse(R"(
    tensor a i8[256,256] input
    tensor b i8[256,256] input
    op mm fwd gemm a b -> c:i8[256,256] type=aten::mm
  )");
  EXPECT_THAT(ProfileFirstOp(int8).reason, HasSubstr("skipped: GEMM timing"));

  NodeProfilerOptions options;
  options.enable_profiling = true;
  options.memory_fraction = 1e-9;
  absl::StatusOr<std::unique_ptr<NodeProfiler>> tiny =
      NodeProfiler::Create(options, nullptr);
  ASSERT_TRUE(tiny.ok());
  planner::Graph gemm = Parse(R"(
    tensor a f16[4096,4096] input
    tensor b f16[4096,4096] input
    op mm fwd gemm a b -> c:f16[4096,4096] type=aten::mm
  )");
  ASSERT_OK_AND_ASSIGN(planner::ProfileReport response,
                       (*tiny)->ProfileOps(gemm, {}, true));
  EXPECT_FALSE(response.profiles[0].measured);
  EXPECT_THAT(response.profiles[0].reason, HasSubstr("of device memory"));
}

TEST_F(GpuProfilerTest, SecondRequestComesFromTheCache) {
  planner::Graph graph = Parse(R"(
    tensor a f16[1024,2048] input
    tensor b f16[2048,512] input
    op mm fwd gemm a b -> c:f16[1024,512] type=aten::mm
  )");
  ASSERT_OK_AND_ASSIGN(planner::ProfileReport first,
                       profiler_->ProfileOps(graph, {}, false));
  ASSERT_OK_AND_ASSIGN(planner::ProfileReport second,
                       profiler_->ProfileOps(graph, {}, false));
  EXPECT_TRUE(second.profiles[0].from_cache);
  EXPECT_EQ(second.profiles[0].time_seconds, first.profiles[0].time_seconds);
  EXPECT_EQ(profiler_->Lookup(graph, 0), first.profiles[0].time_seconds);
}

}  // namespace
}  // namespace echo::server
