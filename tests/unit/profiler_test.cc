// NodeProfiler behind the OpTimer interface (FakeOpTimer), the real GPU
// discovery's no-GPU path, and the device/cost-source proto conversions.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "adapter/device_convert.h"
#include "adapter/profile_convert.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/cost_model.h"
#include "server/profiler/cuda_plugin_loader.h"
#include "server/profiler/fake_op_timer.h"
#include "server/profiler/gpu_backend.h"
#include "server/profiler/node_profiler.h"
#include "test_util.h"

namespace echo::server {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Labels = std::map<std::string, std::string>;

// 64x128 @ 128x256 and two identical 64x256 @ 256x256 GEMMs, an
// element-wise op and an op of unknown class with shapes.
constexpr absl::string_view kGraph = R"(
  tensor x f16[64,128] input
  tensor w f16[128,256] parameter
  tensor w2 f16[256,256] parameter
  op mm1 fwd gemm x w -> a:f16[64,256] type=aten::mm
  op relu fwd elementwise a -> b:f16[64,256] type=aten::relu
  op mm2 fwd gemm b w2 -> c:f16[64,256] type=aten::mm
  op mm3 fwd gemm c w2 -> d:f16[64,256] type=aten::mm
  op fused fwd other d -> e:f16[64,256] type=x::fused
  output e
)";

class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "echo_profiler_XXXXXX";
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

double Metric(prometheus::Registry& registry, const std::string& name,
              const Labels& labels = {}) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& metric : family.metric) {
      Labels got;
      for (const auto& label : metric.label) got[label.name] = label.value;
      if (got != labels) continue;
      switch (family.type) {
        case prometheus::MetricType::Counter:
          return metric.counter.value;
        case prometheus::MetricType::Gauge:
          return metric.gauge.value;
        case prometheus::MetricType::Histogram:
          return static_cast<double>(metric.histogram.sample_count);
        default:
          return -1;
      }
    }
    return 0;  // family present, this label set never recorded
  }
  return -1;  // no such family
}

class NodeProfilerTest : public ::testing::Test {
 protected:
  // Creates the profiler with a fake timer kept in `timer_`.
  std::unique_ptr<NodeProfiler> Make(NodeProfilerOptions options) {
    auto timer = std::make_unique<FakeOpTimer>();
    timer_ = timer.get();
    timer_->SetTime(planner::OpClass::kGemm, 2e-5);
    timer_->SetTime(planner::OpClass::kOther, 3e-6);
    return testing::ValueOrFail(
        NodeProfiler::Create(std::move(options), &registry_, std::move(timer)));
  }
  static NodeProfilerOptions Enabled() {
    NodeProfilerOptions options;
    options.enable_profiling = true;
    return options;
  }

  planner::Graph graph_ = testing::ParseOrFail(kGraph);
  prometheus::Registry registry_;
  FakeOpTimer* timer_ = nullptr;
};

TEST_F(NodeProfilerTest, DisabledIsFailedPrecondition) {
  std::unique_ptr<NodeProfiler> profiler = Make(NodeProfilerOptions{});
  absl::Status status = profiler->ProfileOps(graph_, {}, false).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "profiling is disabled on this node (start echod with "
            "--enable_profiling)");
  EXPECT_TRUE(timer_->calls().empty());
}

TEST_F(NodeProfilerTest, NoGpuIsFailedPreconditionSayingWhy) {
  GpuDiscovery discovery = DiscoverGpus();
  if (!discovery.gpus.empty()) GTEST_SKIP() << "this machine has a GPU";
  absl::StatusOr<std::unique_ptr<NodeProfiler>> profiler =
      NodeProfiler::Create(Enabled(), nullptr);
  ASSERT_TRUE(profiler.ok());
  absl::Status status = (*profiler)->ProfileOps(graph_, {}, false).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            absl::StrCat("profiling needs a GPU: ", discovery.status));
  EXPECT_THAT(std::string(status.message()), HasSubstr("no GPU ("));
  // Disabled and no GPU: both reasons.
  absl::StatusOr<std::unique_ptr<NodeProfiler>> disabled =
      NodeProfiler::Create(NodeProfilerOptions{}, nullptr);
  ASSERT_TRUE(disabled.ok());
  EXPECT_THAT(
      std::string(
          (*disabled)->ProfileOps(graph_, {}, false).status().message()),
      ::testing::MatchesRegex("profiling is disabled.*; profiling "
                              "needs a GPU: no GPU.*"));
}

TEST_F(NodeProfilerTest, ProfilesWhatTheModelCannotEstimateOncePerSignature) {
  std::unique_ptr<NodeProfiler> profiler = Make(Enabled());
  ASSERT_OK_AND_ASSIGN(planner::ProfileReport response,
                       profiler->ProfileOps(graph_, {}, false));
  EXPECT_EQ(response.gpu_name, "NVIDIA H100 80GB HBM3");
  ASSERT_EQ(response.profiles.size(), 4u);  // mm1, mm2, mm3, fused
  const std::vector<std::string> ids = {"mm1", "mm2", "mm3", "fused"};
  const std::vector<double> times = {2e-5, 2e-5, 2e-5, 3e-6};
  const std::vector<bool> cached = {false, false, true, false};
  for (int i = 0; i < 4; ++i) {
    const planner::OpProfile& profile = response.profiles[i];
    EXPECT_EQ(profile.op_id, ids[i]);
    EXPECT_TRUE(profile.measured) << profile.reason;
    EXPECT_EQ(profile.time_seconds, times[i]);
    EXPECT_EQ(profile.from_cache, cached[i]) << ids[i];
    EXPECT_GT(profile.analytic_time_seconds, 0);  // h100-80gb from the name
  }
  // mm2 and mm3 share a signature: timed once.
  EXPECT_EQ(timer_->calls().size(), 3u);
  EXPECT_EQ(Metric(registry_, "echo_profile_runs_total",
                   {{"op_class", "gemm"}, {"result", "ok"}}),
            2);
  EXPECT_EQ(Metric(registry_, "echo_profile_runs_total",
                   {{"op_class", "other"}, {"result", "ok"}}),
            1);
  EXPECT_EQ(Metric(registry_, "echo_profile_duration_seconds"), 3);
  EXPECT_EQ(Metric(registry_, "echo_profile_cache_misses_total"), 3);
  EXPECT_EQ(Metric(registry_, "echo_profile_cache_hits_total"), 0);
  EXPECT_EQ(Metric(registry_, "echo_profile_cache_entries"), 3);
  EXPECT_EQ(profiler->cache_entries(), 3);
}

TEST_F(NodeProfilerTest, CacheHitsUnlessForced) {
  std::unique_ptr<NodeProfiler> profiler = Make(Enabled());
  ASSERT_OK(profiler->ProfileOps(graph_, {}, false));
  ASSERT_OK_AND_ASSIGN(planner::ProfileReport second,
                       profiler->ProfileOps(graph_, {}, false));
  EXPECT_EQ(timer_->calls().size(), 3u);
  for (const planner::OpProfile& profile : second.profiles) {
    EXPECT_TRUE(profile.from_cache) << profile.op_id;
  }
  EXPECT_EQ(Metric(registry_, "echo_profile_cache_hits_total"), 4);
  timer_->SetTime(planner::OpClass::kGemm, 5e-5);
  ASSERT_OK_AND_ASSIGN(planner::ProfileReport forced,
                       profiler->ProfileOps(graph_, {}, true));
  EXPECT_EQ(timer_->calls().size(), 6u);
  EXPECT_FALSE(forced.profiles[0].from_cache);
  EXPECT_EQ(forced.profiles[0].time_seconds, 5e-5);
  EXPECT_EQ(profiler->Lookup(graph_, graph_.FindOp("mm2")), 5e-5);
}

TEST_F(NodeProfilerTest, ExplicitOpsAreProfiledWhateverTheirClass) {
  std::unique_ptr<NodeProfiler> profiler = Make(Enabled());
  ASSERT_OK_AND_ASSIGN(
      planner::ProfileReport response,
      profiler->ProfileOps(graph_, {graph_.FindOp("relu")}, false));
  ASSERT_EQ(response.profiles.size(), 1u);
  EXPECT_EQ(response.profiles[0].op_id, "relu");
  EXPECT_EQ(response.profiles[0].time_seconds, 1e-3);
  EXPECT_EQ(profiler->ProfileOps(graph_, {99}, false).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(NodeProfilerTest, MemoryFractionOfFreeMemoryBoundsTheTimer) {
  NodeProfilerOptions options = Enabled();
  options.memory_fraction = 0.25;
  std::unique_ptr<NodeProfiler> profiler = Make(options);
  timer_->SetFreeMemoryBytes(1000);
  timer_->SetRequiredBytes(300);
  ASSERT_OK_AND_ASSIGN(
      planner::ProfileReport response,
      profiler->ProfileOps(graph_, {graph_.FindOp("mm1")}, false));
  ASSERT_EQ(timer_->calls().size(), 1u);
  EXPECT_EQ(timer_->calls()[0].limits.max_memory_bytes, 250);
  EXPECT_FALSE(response.profiles[0].measured);
  EXPECT_EQ(response.profiles[0].reason, "skipped: needs 300 bytes, limit 250");
  EXPECT_EQ(Metric(registry_, "echo_profile_runs_total",
                   {{"op_class", "gemm"}, {"result", "skipped"}}),
            1);
  EXPECT_EQ(profiler->cache_entries(), 0);
  timer_->SetFreeMemoryBytes(2000);  // free memory is read per op
  ASSERT_OK_AND_ASSIGN(
      response, profiler->ProfileOps(graph_, {graph_.FindOp("mm1")}, false));
  EXPECT_EQ(timer_->calls()[1].limits.max_memory_bytes, 500);
  EXPECT_TRUE(response.profiles[0].measured);
}

TEST_F(NodeProfilerTest, TimerFailuresAreReportedPerOp) {
  std::unique_ptr<NodeProfiler> profiler = Make(Enabled());
  timer_->SetFailure(planner::OpSignature(graph_, graph_.FindOp("fused")),
                     absl::InternalError("cudaErrorLaunchFailure (719)"));
  ASSERT_OK_AND_ASSIGN(planner::ProfileReport response,
                       profiler->ProfileOps(graph_, {}, false));
  EXPECT_TRUE(response.profiles[0].measured);
  EXPECT_FALSE(response.profiles[3].measured);
  EXPECT_EQ(response.profiles[3].reason,
            "failed: cudaErrorLaunchFailure (719)");
  EXPECT_EQ(Metric(registry_, "echo_profile_runs_total",
                   {{"op_class", "other"}, {"result", "error"}}),
            1);
}

TEST_F(NodeProfilerTest, OneProfileAtATime) {
  std::unique_ptr<NodeProfiler> profiler = Make(Enabled());
  timer_->SetCallDuration(std::chrono::milliseconds(20));
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back(
        [&] { EXPECT_OK(profiler->ProfileOps(graph_, {}, true)); });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(timer_->calls().size(), 12u);
  EXPECT_EQ(timer_->max_concurrent_calls(), 1);
}

TEST_F(NodeProfilerTest, BusyProfilerIsResourceExhausted) {
  NodeProfilerOptions options = Enabled();
  options.max_seconds_per_request = 0.05;
  std::unique_ptr<NodeProfiler> profiler = Make(options);
  timer_->SetCallDuration(std::chrono::milliseconds(400));
  std::thread slow([&] {
    EXPECT_OK(profiler->ProfileOps(graph_, {graph_.FindOp("mm1")}, true));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  absl::Status status = profiler->ProfileOps(graph_, {}, true).status();
  slow.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()), HasSubstr("one at a time"));
}

// Cancellation reaches the profiler: a request cancelled while mm1 is timed
// stops before the next op, keeps mm1's time in the cache and returns the
// interrupt's status.
TEST_F(NodeProfilerTest, CancelledRequestStopsAfterTheOpBeingTimed) {
  std::unique_ptr<NodeProfiler> profiler = Make(Enabled());
  timer_->SetCallDuration(std::chrono::milliseconds(20));
  auto cancelled_once_timing = [&]() -> absl::Status {
    if (timer_->calls().empty()) return absl::OkStatus();
    return absl::CancelledError("the client cancelled the call");
  };
  absl::Status status =
      profiler->ProfileOps(graph_, {}, true, cancelled_once_timing).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(timer_->calls().size(), 1u);
  ASSERT_OK_AND_ASSIGN(
      planner::ProfileReport again,
      profiler->ProfileOps(graph_, {graph_.FindOp("mm1")}, false));
  EXPECT_TRUE(again.profiles[0].from_cache);
  EXPECT_EQ(timer_->calls().size(), 1u);
}

// A request waiting for a busy profiler gives up when its caller does,
// not after max_seconds_per_request.
TEST_F(NodeProfilerTest, CancelledWhileWaitingForTheProfiler) {
  std::unique_ptr<NodeProfiler> profiler = Make(Enabled());
  timer_->SetCallDuration(std::chrono::milliseconds(600));
  std::atomic<bool> slow_done{false};
  std::thread slow([&] {
    EXPECT_OK(profiler->ProfileOps(graph_, {graph_.FindOp("mm1")}, true));
    slow_done = true;
  });
  while (timer_->running_calls() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::atomic<int> polls{0};
  auto deadline_after_three_polls = [&]() -> absl::Status {
    return ++polls < 3 ? absl::OkStatus()
                       : absl::DeadlineExceededError("deadline passed");
  };
  absl::Status status =
      profiler->ProfileOps(graph_, {}, true, deadline_after_three_polls)
          .status();
  EXPECT_FALSE(slow_done) << "gave up only when the other request ended";
  slow.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(polls, 3);
  EXPECT_EQ(timer_->calls().size(), 1u);
}

TEST_F(NodeProfilerTest, RequestTimeBudgetSkipsTheRest) {
  NodeProfilerOptions options = Enabled();
  options.max_seconds_per_request = 0.1;
  std::unique_ptr<NodeProfiler> profiler = Make(options);
  timer_->SetCallDuration(std::chrono::milliseconds(150));
  ASSERT_OK_AND_ASSIGN(planner::ProfileReport response,
                       profiler->ProfileOps(graph_, {}, true));
  EXPECT_EQ(timer_->calls().size(), 1u);
  EXPECT_TRUE(response.profiles[0].measured);
  for (int i : {1, 3}) {
    EXPECT_FALSE(response.profiles[i].measured);
    EXPECT_EQ(response.profiles[i].reason,
              "skipped: the request's time budget of 0.1 s is spent");
  }
  // mm2 and mm3 (one signature, but neither measured) and fused.
  EXPECT_EQ(Metric(registry_, "echo_profile_runs_total",
                   {{"op_class", "gemm"}, {"result", "skipped"}}),
            2);
  EXPECT_EQ(Metric(registry_, "echo_profile_runs_total",
                   {{"op_class", "other"}, {"result", "skipped"}}),
            1);
}

TEST_F(NodeProfilerTest, OpsEstimatedBeyondTheBudgetAreNotStarted) {
  // 2 * 65536^3 f32 FLOPs at 67e12 * 0.7: ~12 s a run, 4 runs > 30 s.
  planner::Graph huge = testing::ParseOrFail(R"(
    tensor a f32[65536,65536] input
    tensor b f32[65536,65536] input
    op mm fwd gemm a b -> c:f32[65536,65536] type=aten::mm
  )");
  std::unique_ptr<NodeProfiler> profiler = Make(Enabled());
  ASSERT_OK_AND_ASSIGN(planner::ProfileReport response,
                       profiler->ProfileOps(huge, {}, false));
  EXPECT_TRUE(timer_->calls().empty());
  EXPECT_THAT(response.profiles[0].reason, StartsWith("skipped: an estimated"));
}

TEST_F(NodeProfilerTest, CachePersistsAcrossRestartsPerDeviceKey) {
  TempDir dir;
  NodeProfilerOptions options = Enabled();
  options.cache_dir = dir.path() + "/nested/profiles";
  {
    std::unique_ptr<NodeProfiler> profiler = Make(options);
    ASSERT_OK(profiler->ProfileOps(graph_, {}, false));
  }
  std::unique_ptr<NodeProfiler> restarted = Make(options);
  EXPECT_EQ(restarted->cache_load_report().entries, 3);
  EXPECT_EQ(restarted->cache_entries(), 3);
  EXPECT_EQ(restarted->Lookup(graph_, graph_.FindOp("mm3")), 2e-5);
  EXPECT_EQ(restarted->Lookup(graph_, graph_.FindOp("fused")), 3e-6);
  EXPECT_EQ(Metric(registry_, "echo_profile_cache_hits_total"), 2);

  // Another driver or library version: the old profiles do not apply.
  auto timer = std::make_unique<FakeOpTimer>();
  timer->SetDeviceKey("NVIDIA H100 80GB HBM3|driver 2");
  prometheus::Registry registry;
  absl::StatusOr<std::unique_ptr<NodeProfiler>> upgraded =
      NodeProfiler::Create(options, &registry, std::move(timer));
  ASSERT_TRUE(upgraded.ok());
  EXPECT_EQ((*upgraded)->Lookup(graph_, graph_.FindOp("mm3")), std::nullopt);
  EXPECT_EQ(Metric(registry, "echo_profile_cache_misses_total"), 1);
}

TEST_F(NodeProfilerTest, CorruptCacheFileIsIgnoredAtStart) {
  TempDir dir;
  std::ofstream(dir.path() + "/profile_cache.db") << std::string(4096, 'x');
  std::ofstream(dir.path() + "/profile_cache.v1")
      << "echo-profile-cache 1\ngarbage";
  NodeProfilerOptions options = Enabled();
  options.cache_dir = dir.path();
  std::unique_ptr<NodeProfiler> profiler = Make(options);
  EXPECT_THAT(profiler->cache_load_report().error,
              HasSubstr("damaged profile cache"));
  EXPECT_THAT(profiler->cache_load_report().error,
              HasSubstr("ignoring corrupt old profile cache"));
  EXPECT_EQ(profiler->cache_entries(), 0);
  EXPECT_OK(profiler->ProfileOps(graph_, {}, false));
  EXPECT_EQ(profiler->cache_entries(), 3);
}

TEST_F(NodeProfilerTest, LookupCountsMissesOnlyForProfilableOps) {
  std::unique_ptr<NodeProfiler> profiler = Make(Enabled());
  EXPECT_EQ(profiler->Lookup(graph_, graph_.FindOp("relu")), std::nullopt);
  EXPECT_EQ(Metric(registry_, "echo_profile_cache_misses_total"), 0);
  EXPECT_EQ(profiler->Lookup(graph_, graph_.FindOp("mm1")), std::nullopt);
  EXPECT_EQ(Metric(registry_, "echo_profile_cache_misses_total"), 1);
}

TEST_F(NodeProfilerTest, ProfiledTimesFeedTheCostModelForThisGpuOnly) {
  std::unique_ptr<NodeProfiler> profiler = Make(Enabled());
  ASSERT_OK(profiler->ProfileOps(graph_, {}, false));
  const planner::DeviceSpec h100 = testing::CatalogDevice("h100-80gb");
  const planner::DeviceSpec a100 = testing::CatalogDevice("a100-80gb");
  EXPECT_EQ(profiler->TimesFor(&h100), profiler.get());
  EXPECT_EQ(profiler->TimesFor(&a100), nullptr);
  EXPECT_EQ(profiler->TimesFor(nullptr), nullptr);
  absl::StatusOr<planner::CostTable> table =
      planner::EstimateOpCosts(graph_, &h100, profiler->TimesFor(&h100));
  ASSERT_TRUE(table.ok());
  const planner::CostSourceSummary summary = table->Summary();
  EXPECT_EQ(summary.count(planner::CostSource::kProfiled), 4);
  EXPECT_EQ(summary.count(planner::CostSource::kAnalytic), 1);  // relu
  EXPECT_EQ(table->ops[graph_.FindOp("mm2")].cost, 2e-5);
  v1::CostSourceSummary proto;
  adapter::CostSourceSummaryToProto(summary, &proto);
  EXPECT_EQ(proto.profiled_ops(), 4);
  EXPECT_EQ(proto.analytic_ops(), 1);
  EXPECT_EQ(proto.measured_ops(), 0);
  EXPECT_DOUBLE_EQ(
      proto.profiled_cost_fraction() + proto.analytic_cost_fraction(), 1.0);
  EXPECT_DOUBLE_EQ(proto.profiled_cost_fraction(),
                   (3 * 2e-5 + 3e-6) / table->TotalCost());
}

TEST_F(NodeProfilerTest, NodeInfo) {
  std::unique_ptr<NodeProfiler> profiler = Make(Enabled());
  ASSERT_OK(profiler->ProfileOps(graph_, {}, false));
  const planner::NodeReport info = profiler->NodeInfo();
  EXPECT_FALSE(info.hostname.empty());
  EXPECT_EQ(info.gpu_status, profiler->discovery().status);
  EXPECT_EQ(info.gpus.size(), profiler->discovery().gpus.size());
  ASSERT_EQ(info.device_catalog.size(), 8u);
  EXPECT_EQ(info.device_catalog[0].name, "rtx-2080-ti");
  EXPECT_EQ(info.profile_cache_entries, 3);
  EXPECT_TRUE(info.profiling_enabled);
  v1::GetNodeInfoResponse proto;
  adapter::NodeReportToProto(info, &proto);
  EXPECT_EQ(proto.hostname(), info.hostname);
  EXPECT_EQ(proto.device_catalog_size(), 8);
  EXPECT_EQ(proto.device_catalog(0).name(), "rtx-2080-ti");
  EXPECT_EQ(proto.profile_cache_entries(), 3);
}

TEST(NodeProfilerOptionsTest, RejectsBadOptions) {
  for (double fraction : {0.0, -0.1, 1.5}) {
    NodeProfilerOptions options;
    options.memory_fraction = fraction;
    EXPECT_EQ(
        NodeProfiler::Create(options, nullptr, std::make_unique<FakeOpTimer>())
            .status()
            .code(),
        absl::StatusCode::kInvalidArgument);
  }
  NodeProfilerOptions options;
  options.max_seconds_per_request = 0;
  EXPECT_EQ(
      NodeProfiler::Create(options, nullptr, std::make_unique<FakeOpTimer>())
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
}

// Issue 23: echod did not start when the cache directory could not be made
// (a full or read-only disk), even with profiling off.
TEST(NodeProfilerCacheTest, AnUncreatableDirectoryLeavesTheCacheInMemory) {
  for (bool profiling : {false, true}) {
    NodeProfilerOptions options;
    options.enable_profiling = profiling;
    options.cache_dir = "/proc/echo_cannot_create_here";
    absl::StatusOr<std::unique_ptr<NodeProfiler>> profiler =
        NodeProfiler::Create(options, nullptr, std::make_unique<FakeOpTimer>());
    ASSERT_TRUE(profiler.ok()) << profiler.status();
    EXPECT_THAT((*profiler)->cache_load_report().error,
                HasSubstr("in memory only"));
    EXPECT_EQ((*profiler)->cache_entries(), 0);
  }
}

// ------------------------------------------------------------ discovery

TEST(GpuDiscoveryTest, NoGpuIsReportedWithTheErrorCode) {
  const GpuDiscovery discovery = DiscoverGpus();
  std::printf("gpu_status: %s; cudart %s, driver %s, cublas %s, cudnn %s\n",
              discovery.status.c_str(), discovery.cuda_runtime_version.c_str(),
              discovery.driver_version.c_str(),
              discovery.cublas_version.c_str(),
              discovery.cudnn_version.c_str());
  if (!discovery.gpus.empty()) {
    GTEST_SKIP() << "this machine has a GPU: " << discovery.status;
  }
  if (CudaPluginBuilt()) {
    // The plugin beside this binary loads and finds no device.
    EXPECT_THAT(discovery.status,
                ::testing::MatchesRegex("no GPU \\(cudaGetDeviceCount: "
                                        "cuda[A-Za-z]+ \\([0-9]+\\)\\)"));
    EXPECT_NE(discovery.cuda_runtime_version, "");
    EXPECT_NE(discovery.cublas_version, "");
  } else {
    EXPECT_EQ(discovery.status, "no GPU (built without CUDA)");
  }
  EXPECT_EQ(MakeGpuOpTimer(discovery), nullptr);
}

TEST(GpuDiscoveryTest, Formats) {
  EXPECT_EQ(NoGpuStatus("cudaGetDeviceCount", "cudaErrorNoDevice", 100),
            "no GPU (cudaGetDeviceCount: cudaErrorNoDevice (100))");
  EXPECT_EQ(CudaVersionString(12040), "12.4");
  EXPECT_EQ(CudaVersionString(13000), "13.0");
  EXPECT_EQ(CudaVersionString(0), "none");
}

// ------------------------------------------------------------ conversions

TEST(DeviceConvertTest, CatalogRoundTrips) {
  for (const planner::DeviceSpec& spec : planner::DeviceCatalog()) {
    v1::DeviceSpec proto;
    adapter::DeviceSpecToProto(spec, &proto);
    absl::StatusOr<planner::DeviceSpec> back = adapter::ResolveDevice(proto);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->name, spec.name);
    EXPECT_EQ(back->memory_bytes, spec.memory_bytes);
    EXPECT_EQ(back->memory_bandwidth_bytes_per_second,
              spec.memory_bandwidth_bytes_per_second);
    EXPECT_EQ(back->sm_count, spec.sm_count);
    EXPECT_EQ(back->tensor_core_flops, spec.tensor_core_flops);
    EXPECT_EQ(back->vector_flops, spec.vector_flops);
  }
  v1::DeviceSpec h100;
  adapter::DeviceSpecToProto(testing::CatalogDevice("h100-80gb"), &h100);
  bool found_tf32 = false;
  for (const v1::PeakFlops& peak : h100.peak_flops()) {
    if (peak.dtype() == v1::DTYPE_FLOAT32 && peak.tensor_core()) {
      found_tf32 = true;
      EXPECT_EQ(peak.flops_per_second(), 494.5e12);
    }
  }
  EXPECT_TRUE(found_tf32);
}

TEST(DeviceConvertTest, ResolvesNamesAndValidatesNumbers) {
  v1::DeviceSpec by_name;
  by_name.set_name("A100-40GB");
  absl::StatusOr<planner::DeviceSpec> a100 = adapter::ResolveDevice(by_name);
  ASSERT_TRUE(a100.ok());
  EXPECT_EQ(a100->memory_bandwidth_bytes_per_second, 1555e9);
  by_name.set_name("mi300x");
  EXPECT_EQ(adapter::ResolveDevice(by_name).status().code(),
            absl::StatusCode::kNotFound);

  v1::DeviceSpec custom;
  custom.set_name("custom");
  custom.set_memory_bytes(1 << 30);
  custom.set_memory_bandwidth_bytes_per_second(-1);
  v1::PeakFlops* peak = custom.add_peak_flops();
  peak->set_dtype(v1::DTYPE_FLOAT16);
  peak->set_flops_per_second(1e14);
  peak->set_tensor_core(true);
  EXPECT_EQ(adapter::ResolveDevice(custom).status().code(),
            absl::StatusCode::kInvalidArgument);
  custom.set_memory_bandwidth_bytes_per_second(1e12);
  absl::StatusOr<planner::DeviceSpec> resolved = adapter::ResolveDevice(custom);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->tensor_core_flops.at(planner::DType::kFloat16), 1e14);
  *custom.add_peak_flops() = *peak;
  EXPECT_THAT(std::string(adapter::ResolveDevice(custom).status().message()),
              HasSubstr("peak_flops[1] repeats f16 tensor-core peak"));
  custom.mutable_peak_flops(1)->set_dtype(v1::DTYPE_UNSPECIFIED);
  EXPECT_THAT(std::string(adapter::ResolveDevice(custom).status().message()),
              HasSubstr("peak_flops[1] has no dtype"));
}

}  // namespace
}  // namespace echo::server
