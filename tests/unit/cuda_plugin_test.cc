// The CUDA plugin seam: the loader (search path, dlopen failures as "no GPU
// (CUDA plugin: ...)", the plugin built beside this binary), the formatting
// of the plugin's probe, and GpuOpTimer's mapping of ops to kernel problems
// (with a fake GpuKernelTimer, so on any machine).
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/cost_model.h"
#include "server/profiler/cuda_plugin_api.h"
#include "server/profiler/cuda_plugin_loader.h"
#include "server/profiler/gpu_backend.h"
#include "server/profiler/gpu_op_timer.h"
#include "test_util.h"

namespace echo::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string ExecutableDir() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
}

// Sets (or, with nullopt, unsets) an environment variable for a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// ------------------------------------------------------------ loader

TEST(CudaPluginLoaderTest, SearchPathIsTheEnvironmentOrBesideTheBinary) {
  const std::string dir = ExecutableDir();
  {
    ScopedEnv env(kCudaPluginEnvVar, std::nullopt);
    EXPECT_THAT(CudaPluginCandidates(),
                ElementsAre(dir + "/libecho_cuda_plugin.so",
                            dir + "/../lib/echo/libecho_cuda_plugin.so"));
  }
  {
    ScopedEnv env(kCudaPluginEnvVar, "");  // empty: as if unset
    EXPECT_EQ(CudaPluginCandidates().size(), 2u);
  }
  ScopedEnv env(kCudaPluginEnvVar, "/opt/echo/plugin.so");
  EXPECT_THAT(CudaPluginCandidates(), ElementsAre("/opt/echo/plugin.so"));
}

TEST(CudaPluginLoaderTest, MissingPluginIsNoGpuSayingWhy) {
  const absl::StatusOr<const CudaPluginApi*> plugin =
      LoadCudaPlugin("/nonexistent/libecho_cuda_plugin.so");
  ASSERT_FALSE(plugin.ok());
  EXPECT_EQ(plugin.status().code(), absl::StatusCode::kFailedPrecondition);
  // dlerror's text.
  EXPECT_EQ(plugin.status().message(),
            "/nonexistent/libecho_cuda_plugin.so: cannot open shared object "
            "file: No such file or directory");
  const GpuDiscovery discovery = DiscoverGpus(plugin);
  EXPECT_EQ(discovery.status,
            "no GPU (CUDA plugin: /nonexistent/libecho_cuda_plugin.so: cannot "
            "open shared object file: No such file or directory)");
  EXPECT_TRUE(discovery.gpus.empty());
  EXPECT_EQ(discovery.cuda_runtime_version, "");
  EXPECT_EQ(MakeGpuOpTimer(discovery), nullptr);
}

TEST(CudaPluginLoaderTest, LibraryWithoutTheEntryPointIsRejected) {
  // Any shared library that is not the plugin: the C math library.
  const absl::StatusOr<const CudaPluginApi*> plugin =
      LoadCudaPlugin("libm.so.6");
  ASSERT_FALSE(plugin.ok());
  EXPECT_EQ(plugin.status().message(),
            "libm.so.6: no entry point EchoCudaPluginApi");
}

TEST(CudaPluginLoaderTest, FileThatIsNoLibraryIsRejected) {
  const std::string path = ::testing::TempDir() + "echo_not_a_plugin.so";
  FILE* file = std::fopen(path.c_str(), "w");
  ASSERT_NE(file, nullptr);
  // Longer than an ELF header (64 bytes), so that dlopen reads one.
  std::fputs(std::string(128, 'x').c_str(), file);
  std::fclose(file);
  const absl::StatusOr<const CudaPluginApi*> plugin = LoadCudaPlugin(path);
  std::remove(path.c_str());
  ASSERT_FALSE(plugin.ok());
  EXPECT_THAT(std::string(plugin.status().message()),
              HasSubstr(path + ": invalid ELF header"));
}

TEST(CudaPluginLoaderTest, BuiltPluginLoadsHereAndReportsTheDeviceCount) {
  if (!CudaPluginBuilt()) {
    EXPECT_EQ(DiscoverGpus().status, "no GPU (built without CUDA)");
    EXPECT_EQ(ProcessCudaPlugin().status().message(),
              "not built (ECHO_WITH_CUDA=OFF)");
    return;
  }
  std::vector<std::string> candidates;
  {
    ScopedEnv env(kCudaPluginEnvVar, std::nullopt);
    candidates = CudaPluginCandidates();
  }
  const absl::StatusOr<const CudaPluginApi*> plugin =
      LoadCudaPlugin(candidates.front());
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  EXPECT_EQ((*plugin)->abi_version, kCudaPluginAbiVersion);
  const GpuDiscovery discovery = DiscoverGpus(plugin);
  std::printf(
      "plugin %s: %s; cudart %s, driver %s, cublas %s, cudnn %s\n",
      candidates.front().c_str(), discovery.status.c_str(),
      discovery.cuda_runtime_version.c_str(), discovery.driver_version.c_str(),
      discovery.cublas_version.c_str(), discovery.cudnn_version.c_str());
  EXPECT_THAT(discovery.cuda_runtime_version,
              ::testing::MatchesRegex("[0-9]+\\.[0-9]"));
  EXPECT_THAT(discovery.cublas_version,
              ::testing::MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+"));
  if (discovery.gpus.empty()) {
    EXPECT_THAT(discovery.status,
                ::testing::MatchesRegex("no GPU \\(cudaGetDeviceCount: "
                                        "cuda[A-Za-z]+ \\([0-9]+\\)\\)"));
    EXPECT_EQ(MakeGpuOpTimer(discovery, **plugin), nullptr);
  } else {
    EXPECT_THAT(discovery.status, ::testing::MatchesRegex("[0-9]+ GPUs?"));
    EXPECT_NE(MakeGpuOpTimer(discovery, **plugin), nullptr);
  }
  // The process's plugin is the same library, loaded once.
  if (std::getenv(kCudaPluginEnvVar) == nullptr) {
    ASSERT_TRUE(ProcessCudaPlugin().ok()) << ProcessCudaPlugin().status();
    EXPECT_EQ(*ProcessCudaPlugin(), *plugin);
    EXPECT_EQ(DiscoverGpus().status, discovery.status);
  }
}

// ------------------------------------------------------------ probe

TEST(CudaProbeTest, DeviceCountErrorIsNoGpuWithItsCode) {
  CudaProbe probe;
  probe.runtime_version = 13000;
  probe.driver_version = 0;
  probe.cublas_major = 13;
  probe.cublas_minor = 1;
  probe.cublas_patch = 0;
  probe.cudnn_version = 91200;
  probe.device_count_error = 35;
  probe.device_count_error_name = "cudaErrorInsufficientDriver";
  const GpuDiscovery discovery = DiscoveryFromProbe(probe);
  EXPECT_EQ(discovery.status,
            "no GPU (cudaGetDeviceCount: cudaErrorInsufficientDriver (35))");
  EXPECT_EQ(discovery.cuda_runtime_version, "13.0");
  EXPECT_EQ(discovery.driver_version, "none");
  EXPECT_EQ(discovery.cublas_version, "13.1.0");
  EXPECT_EQ(discovery.cudnn_version, "9.12.0");
  EXPECT_TRUE(discovery.gpus.empty());
}

TEST(CudaProbeTest, DevicesAndUnknownVersions) {
  CudaProbe probe;
  probe.runtime_version = 12040;
  probe.driver_version = 12080;
  probe.device_count = 2;
  probe.gpus.push_back(
      {0, "NVIDIA H100 80GB HBM3", int64_t{80} << 30, 132, "9.0"});
  GpuDiscovery discovery = DiscoveryFromProbe(probe);
  EXPECT_EQ(discovery.status, "1 GPU");
  ASSERT_EQ(discovery.gpus.size(), 1u);
  EXPECT_EQ(discovery.gpus[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(discovery.driver_version, "12.8");
  EXPECT_EQ(discovery.cublas_version, "");  // cublasGetProperty failed
  EXPECT_EQ(discovery.cudnn_version, "none");
  probe.gpus.push_back(probe.gpus[0]);
  EXPECT_EQ(DiscoveryFromProbe(probe).status, "2 GPUs");
  probe.gpus.clear();
  EXPECT_EQ(DiscoveryFromProbe(probe).status,
            "no GPU (cudaGetDeviceCount: 2 devices, none readable)");
}

// ------------------------------------------------------------ op mapping

// Records each problem as a line; returns `result`.
class FakeKernelTimer : public GpuKernelTimer {
 public:
  FakeKernelTimer(std::vector<std::string>* calls,
                  absl::StatusOr<double> result)
      : calls_(calls), result_(std::move(result)) {}
  absl::StatusOr<int64_t> FreeMemoryBytes() override { return 12345; }
  absl::StatusOr<double> TimeGemm(const planner::GemmShape& s,
                                  const TimingLimits& limits) override {
    return Record(absl::StrCat("gemm ", s.batch, "x", s.m, "x", s.n, "x", s.k,
                               " ", planner::DTypeName(s.dtype)),
                  limits);
  }
  absl::StatusOr<double> TimeConv(const planner::ConvShape& s,
                                  const TimingLimits& limits) override {
    return Record(
        absl::StrCat("conv n", s.batch, " c", s.in_channels, "->",
                     s.out_channels, " in[", absl::StrJoin(s.in_spatial, ","),
                     "] out[", absl::StrJoin(s.out_spatial, ","), "] k[",
                     absl::StrJoin(s.kernel, ","), "] ",
                     planner::DTypeName(s.dtype)),
        limits);
  }
  absl::StatusOr<double> TimeStreamBytes(int64_t in_bytes, int64_t out_bytes,
                                         const TimingLimits& limits) override {
    return Record(absl::StrCat("stream ", in_bytes, " ", out_bytes), limits);
  }
  absl::StatusOr<double> TimeRowSoftmax(int64_t rows, int64_t cols,
                                        const TimingLimits& limits) override {
    return Record(absl::StrCat("softmax ", rows, "x", cols), limits);
  }

 private:
  absl::StatusOr<double> Record(std::string call, const TimingLimits& limits) {
    calls_->push_back(absl::StrCat(call, " limit ", limits.max_memory_bytes));
    return result_;
  }
  std::vector<std::string>* calls_;
  absl::StatusOr<double> result_;
};

constexpr absl::string_view kOps = R"(
  tensor x f16[64,128] input
  tensor w f16[128,256] parameter
  tensor q i8[64,128] input
  tensor wq i8[128,256] parameter
  tensor img f32[2,4,10,10] input
  tensor k f32[8,4,3,3] parameter
  tensor s f32[8,1024] input
  op mm fwd gemm x w -> a:f16[64,256] type=aten::mm
  op relu fwd elementwise a -> b:f16[64,256] type=aten::relu
  op sm fwd softmax s -> p:f32[8,1024] type=aten::softmax
  op v fwd data_movement b -> c:f16[256,64] type=aten::t
  op ar fwd collective c -> d:f16[256,64] type=c10d::allreduce_
  op qmm fwd gemm q wq -> e:i8[64,256] type=aten::mm
  op conv fwd conv img k -> y:f32[2,8,8,8] type=aten::convolution
  op mm_unknown fwd gemm x w -> f:65536 type=aten::mm
)";

class GpuOpTimerTest : public ::testing::Test {
 protected:
  GpuOpTimer MakeTimer(absl::StatusOr<double> result = 2e-5) {
    GpuDevice gpu{0, "NVIDIA H100 80GB HBM3", int64_t{80} << 30, 132, "9.0"};
    return GpuOpTimer(std::make_unique<FakeKernelTimer>(&calls_, result), gpu,
                      "key");
  }
  absl::StatusOr<double> Time(GpuOpTimer& timer, absl::string_view id) {
    for (planner::OpIndex op = 0; op < graph_.num_ops(); ++op) {
      if (graph_.op(op).id == id) return timer.TimeOp(graph_, op, limits_);
    }
    return absl::NotFoundError(id);
  }

  planner::Graph graph_ = testing::ParseOrFail(kOps);
  TimingLimits limits_ = [] {
    TimingLimits limits;
    limits.max_memory_bytes = 1 << 20;
    return limits;
  }();
  std::vector<std::string> calls_;
};

TEST_F(GpuOpTimerTest, EachOpClassBecomesItsKernelProblem) {
  GpuOpTimer timer = MakeTimer();
  EXPECT_EQ(timer.DeviceName(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(timer.DeviceMemoryBytes(), int64_t{80} << 30);
  EXPECT_EQ(timer.DeviceKey(), "key");
  EXPECT_EQ(*timer.FreeMemoryBytes(), 12345);
  EXPECT_EQ(*Time(timer, "mm"), 2e-5);
  EXPECT_EQ(*Time(timer, "relu"), 2e-5);
  EXPECT_EQ(*Time(timer, "sm"), 2e-5);
  EXPECT_EQ(*Time(timer, "conv"), 2e-5);
  // A view launches nothing.
  EXPECT_EQ(*Time(timer, "v"), 0.0);
  EXPECT_THAT(calls_, ElementsAre("gemm 1x64x256x128 f16 limit 1048576",
                                  // 64*256 f16 read and written.
                                  "stream 32768 32768 limit 1048576",
                                  "softmax 8x1024 limit 1048576",
                                  "conv n2 c4->8 in[10,10] out[8,8] k[3,3] f32 "
                                  "limit 1048576"));
}

TEST_F(GpuOpTimerTest, WhatCannotBeTimedIsUnimplementedWithoutALaunch) {
  GpuOpTimer timer = MakeTimer();
  absl::StatusOr<double> collective = Time(timer, "ar");
  EXPECT_EQ(collective.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(collective.status().message(),
            "collectives are not timed on one GPU");
  absl::StatusOr<double> int8 = Time(timer, "qmm");
  EXPECT_EQ(int8.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(int8.status().message(),
            "GEMM timing supports f32, f16, bf16 and f64, not i8");
  absl::StatusOr<double> unknown = Time(timer, "mm_unknown");
  EXPECT_EQ(unknown.status().message(),
            "GEMM dims cannot be inferred from the op's shapes");
  EXPECT_TRUE(calls_.empty());
}

TEST_F(GpuOpTimerTest, KernelErrorsPassThrough) {
  GpuOpTimer timer = MakeTimer(absl::ResourceExhaustedError("needs more"));
  absl::StatusOr<double> seconds = Time(timer, "mm");
  EXPECT_EQ(seconds.status(), absl::ResourceExhaustedError("needs more"));
  EXPECT_EQ(calls_.size(), 1u);
}

TEST(GpuDeviceKeyTest, NamesEveryVersion) {
  GpuDiscovery discovery;
  discovery.driver_version = "13.0";
  discovery.cuda_runtime_version = "13.0";
  discovery.cublas_version = "13.1.0";
  discovery.cudnn_version = "9.12.0";
  const GpuDevice gpu{0, "NVIDIA H200", int64_t{141} << 30, 132, "9.0"};
  EXPECT_EQ(GpuDeviceKey(discovery, gpu),
            "NVIDIA H200|cc 9.0|driver 13.0|cudart 13.0|cublas 13.1.0|cudnn "
            "9.12.0");
}

}  // namespace
}  // namespace echo::server
