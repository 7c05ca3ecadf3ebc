#include "server/profiler/node_profiler.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/status_macros.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "spdlog/spdlog.h"

namespace echo::server {

using Clock = std::chrono::steady_clock;

class ProfilerMetrics {
 public:
  explicit ProfilerMetrics(prometheus::Registry& registry)
      : runs_(prometheus::BuildCounter()
                  .Name("echo_profile_runs_total")
                  .Help("Ops timed on the local GPU, by op class and result "
                        "(ok, error, skipped)")
                  .Register(registry)),
        duration_(
            prometheus::BuildHistogram()
                .Name("echo_profile_duration_seconds")
                .Help("Wall time spent profiling one op: allocation, "
                      "warm-up and timed runs")
                .Register(registry)
                .Add({},
                     prometheus::Histogram::BucketBoundaries{
                         0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30})),
        hits_(prometheus::BuildCounter()
                  .Name("echo_profile_cache_hits_total")
                  .Help("Profile cache lookups that found a time")
                  .Register(registry)
                  .Add({})),
        misses_(prometheus::BuildCounter()
                    .Name("echo_profile_cache_misses_total")
                    .Help("Profile cache lookups for a profilable op that "
                          "found no time")
                    .Register(registry)
                    .Add({})),
        entries_(prometheus::BuildGauge()
                     .Name("echo_profile_cache_entries")
                     .Help("Entries in the profile cache")
                     .Register(registry)
                     .Add({})) {}

  void RecordRun(planner::OpClass op_class, absl::string_view result) {
    runs_
        .Add({{"op_class", std::string(planner::OpClassName(op_class))},
              {"result", std::string(result)}})
        .Increment();
  }
  void ObserveDuration(double seconds) { duration_.Observe(seconds); }
  void RecordLookup(bool hit) { (hit ? hits_ : misses_).Increment(); }
  void SetEntries(int64_t entries) {
    entries_.Set(static_cast<double>(entries));
  }

 private:
  prometheus::Family<prometheus::Counter>& runs_;
  prometheus::Histogram& duration_;
  prometheus::Counter& hits_;
  prometheus::Counter& misses_;
  prometheus::Gauge& entries_;
};

absl::StatusOr<std::unique_ptr<NodeProfiler>> NodeProfiler::Create(
    NodeProfilerOptions options, prometheus::Registry* registry,
    std::unique_ptr<OpTimer> timer) {
  if (!(options.memory_fraction > 0 && options.memory_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile memory fraction must be in (0, 1], got ",
                     options.memory_fraction));
  }
  if (options.max_cache_entries <= 0 ||
      !(options.max_seconds_per_request > 0) || options.warmup_runs < 0 ||
      options.timed_runs < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "profiler options need max_cache_entries > 0 (got ",
        options.max_cache_entries, "), max_seconds_per_request > 0 (got ",
        options.max_seconds_per_request, "), warmup_runs >= 0 (got ",
        options.warmup_runs, ") and timed_runs >= 1 (got ", options.timed_runs,
        ")"));
  }
  std::string cache_path;
  std::string cache_dir_error;
  if (!options.cache_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(options.cache_dir, error);
    if (error) {
      // A full or read-only disk does not stop echod: the cache lives in
      // memory only, and says so.
      cache_dir_error =
          absl::StrCat("cannot create profile cache directory ",
                       options.cache_dir, ": ", error.message(),
                       "; the profile cache is in memory only (lost at exit)");
    } else {
      cache_path = absl::StrCat(options.cache_dir, "/", kCacheFileName);
    }
  }
  GpuDiscovery discovery = DiscoverGpus();
  if (timer == nullptr) timer = MakeGpuOpTimer(discovery);
  std::unique_ptr<NodeProfiler> profiler(
      new NodeProfiler(std::move(options), std::move(discovery),
                       std::move(timer), std::move(cache_path), registry));
  profiler->load_report_ = profiler->cache_.Load();
  if (!cache_dir_error.empty()) profiler->load_report_.error = cache_dir_error;
  const CacheLoadReport& report = profiler->load_report_;
  if (!report.error.empty()) {
    spdlog::warn("{}", report.error);
  } else if (report.file_found || report.imported_entries > 0) {
    spdlog::info(
        "profile cache {}: {} entries{}", profiler->cache_.path(),
        report.entries,
        report.imported_entries == 0
            ? ""
            : absl::StrCat(" (", report.imported_entries, " imported from ",
                           kLegacyCacheFileName, ")"));
  }
  profiler->metrics_->SetEntries(profiler->cache_.size());
  spdlog::debug("profiler: {}; timer: {}; profiling {}",
                profiler->discovery_.status,
                profiler->timer_ ? profiler->timer_->DeviceName() : "none",
                profiler->options_.enable_profiling ? "enabled" : "disabled");
  return profiler;
}

NodeProfiler::NodeProfiler(NodeProfilerOptions options, GpuDiscovery discovery,
                           std::unique_ptr<OpTimer> timer,
                           std::string cache_path,
                           prometheus::Registry* registry)
    : options_(std::move(options)),
      discovery_(std::move(discovery)),
      timer_(std::move(timer)),
      cache_(cache_path, options_.max_cache_entries,
             cache_path.empty() ? ""
                                : absl::StrCat(options_.cache_dir, "/",
                                               kLegacyCacheFileName)) {
  if (registry == nullptr) {
    own_registry_ = std::make_shared<prometheus::Registry>();
    registry = own_registry_.get();
  }
  metrics_ = std::make_unique<ProfilerMetrics>(*registry);
  if (timer_ != nullptr) {
    device_key_ = timer_->DeviceKey();
    if (std::optional<std::string> name = planner::CatalogNameForGpu(
            timer_->DeviceName(), timer_->DeviceMemoryBytes())) {
      local_device_ = *planner::FindCatalogDevice(*name);
    }
  }
}

NodeProfiler::~NodeProfiler() = default;

absl::Status NodeProfiler::CheckAvailable() const {
  std::vector<std::string> problems;
  if (!options_.enable_profiling) {
    problems.push_back(
        "profiling is disabled on this node (start echod with "
        "--enable_profiling)");
  }
  if (timer_ == nullptr) {
    problems.push_back(
        absl::StrCat("profiling needs a GPU: ", discovery_.status));
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrJoin(problems, "; "));
}

std::string NodeProfiler::CacheKey(const planner::Graph& graph,
                                   planner::OpIndex op) const {
  return planner::OpSignature(graph, op);
}

int64_t NodeProfiler::cache_entries() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  return cache_.size();
}

absl::string_view NodeProfiler::TimeOne(const planner::Graph& graph,
                                        planner::OpIndex op,
                                        Clock::time_point deadline,
                                        planner::OpProfile* profile) {
  const Clock::time_point now = Clock::now();
  const double remaining =
      std::chrono::duration<double>(deadline - now).count();
  if (remaining <= 0) {
    profile->reason =
        absl::StrCat("skipped: the request's time budget of ",
                     options_.max_seconds_per_request, " s is spent");
    return "skipped";
  }
  const double expected =
      profile->analytic_time_seconds * (options_.warmup_runs + 1);
  if (expected > remaining) {
    profile->reason = absl::StrCat(
        "skipped: an estimated ", expected, " s of warm-up and one run does ",
        "not fit the ", remaining, " s left of the request's time budget");
    return "skipped";
  }
  absl::StatusOr<int64_t> free_bytes = timer_->FreeMemoryBytes();
  if (!free_bytes.ok()) {
    profile->reason = absl::StrCat("cannot read free device memory: ",
                                   free_bytes.status().message());
    return "error";
  }
  TimingLimits limits;
  limits.max_memory_bytes =
      static_cast<int64_t>(options_.memory_fraction * *free_bytes);
  limits.deadline = deadline;
  limits.warmup_runs = options_.warmup_runs;
  limits.timed_runs = options_.timed_runs;
  const Clock::time_point start = Clock::now();
  absl::StatusOr<double> seconds = timer_->TimeOp(graph, op, limits);
  metrics_->ObserveDuration(
      std::chrono::duration<double>(Clock::now() - start).count());
  if (seconds.ok()) {
    profile->measured = true;
    profile->time_seconds = *seconds;
    return "ok";
  }
  const absl::StatusCode code = seconds.status().code();
  const bool skipped = code == absl::StatusCode::kUnimplemented ||
                       code == absl::StatusCode::kResourceExhausted ||
                       code == absl::StatusCode::kDeadlineExceeded;
  profile->reason = absl::StrCat(skipped ? "skipped: " : "failed: ",
                                 seconds.status().message());
  return skipped ? "skipped" : "error";
}

absl::StatusOr<planner::ProfileReport> NodeProfiler::ProfileOps(
    const planner::Graph& graph, const std::vector<planner::OpIndex>& ops,
    bool force, const planner::Interrupt& interrupted) {
  RETURN_IF_ERROR(CheckAvailable());
  for (planner::OpIndex op : ops) {
    if (op < 0 || op >= graph.num_ops()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "op index ", op, " out of range [0, ", graph.num_ops(), ")"));
    }
  }
  // The same budget bounds the wait for the profiler and, once it is ours,
  // the request's timing.
  const auto budget = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.max_seconds_per_request));
  std::unique_lock<std::timed_mutex> lock(profile_mutex_, std::defer_lock);
  RETURN_IF_ERROR(LockProfiler(lock, budget, interrupted));
  const Clock::time_point deadline = Clock::now() + budget;
  std::vector<planner::OpIndex> selected = ops;
  if (selected.empty()) {
    for (planner::OpIndex op = 0; op < graph.num_ops(); ++op) {
      if (planner::NeedsProfiling(graph, op, LocalDevice())) {
        selected.push_back(op);
      }
    }
  }
  planner::ProfileReport report;
  report.gpu_name = timer_->DeviceName();
  report.profiles.reserve(selected.size());
  // Ops of one signature are timed once per request, even when forced.
  absl::flat_hash_map<std::string, double> timed_now;
  for (planner::OpIndex op : selected) {
    planner::OpProfile* profile = &report.profiles.emplace_back();
    profile->op_id = graph.op(op).id;
    if (local_device_) {
      if (std::optional<double> analytic =
              planner::AnalyticSeconds(graph, op, *local_device_, {})) {
        profile->analytic_time_seconds = *analytic;
      }
    }
    const std::string key = CacheKey(graph, op);
    std::optional<double> cached;
    if (auto it = timed_now.find(key); it != timed_now.end()) {
      cached = it->second;
    } else if (!force) {
      std::lock_guard<std::mutex> cache_lock(cache_mutex_);
      cached = cache_.Get(device_key_, key);
      metrics_->RecordLookup(cached.has_value());
    }
    if (cached) {
      profile->measured = true;
      profile->time_seconds = *cached;
      profile->from_cache = true;
      continue;
    }
    if (interrupted) {
      if (absl::Status stop = interrupted(); !stop.ok()) {
        StoreTimes(timed_now);
        return stop;
      }
    }
    metrics_->RecordRun(graph.op(op).op_class,
                        TimeOne(graph, op, deadline, profile));
    if (profile->measured) timed_now[key] = profile->time_seconds;
  }
  StoreTimes(timed_now);
  return report;
}

absl::Status NodeProfiler::LockProfiler(
    std::unique_lock<std::timed_mutex>& lock,
    std::chrono::steady_clock::duration budget,
    const planner::Interrupt& interrupted) {
  const Clock::time_point give_up = Clock::now() + budget;
  constexpr auto kPoll = std::chrono::milliseconds(10);
  while (!lock.try_lock_for(std::min<Clock::duration>(
      kPoll, std::max<Clock::duration>(give_up - Clock::now(),
                                       Clock::duration::zero())))) {
    if (interrupted) RETURN_IF_ERROR(interrupted());
    if (Clock::now() >= give_up) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the profiler is busy with another request for over ",
          options_.max_seconds_per_request, " s (it runs one at a time)"));
    }
  }
  return absl::OkStatus();
}

void NodeProfiler::StoreTimes(
    const absl::flat_hash_map<std::string, double>& timed) {
  if (timed.empty()) return;
  std::vector<StoredTiming> changes;
  {
    std::lock_guard<std::mutex> cache_lock(cache_mutex_);
    for (const auto& [op, seconds] : timed) {
      if (!cache_.Put(device_key_, op, seconds)) {
        spdlog::warn("not caching the time of {}: {} s is not a number >= 0",
                     op, seconds);
      }
    }
    metrics_->SetEntries(cache_.size());
    changes = cache_.TakeChanges();
  }
  // Outside the lock: lookups of plans go on while the save syncs.
  if (absl::Status s = cache_.Write(changes); !s.ok()) {
    spdlog::warn(
        "cannot save the profile cache (the next save tries again): "
        "{}",
        std::string(s.message()));
    std::lock_guard<std::mutex> cache_lock(cache_mutex_);
    cache_.Requeue(changes);
  }
}

std::optional<double> NodeProfiler::Lookup(const planner::Graph& graph,
                                           planner::OpIndex op) const {
  if (device_key_.empty()) return std::nullopt;
  std::optional<double> seconds;
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    seconds = cache_.Get(device_key_, CacheKey(graph, op));
  }
  // A miss counts only for ops the profiler would time; ops the model
  // estimates well are never expected in the cache.
  if (seconds || planner::NeedsProfiling(graph, op, LocalDevice())) {
    metrics_->RecordLookup(seconds.has_value());
  }
  return seconds;
}

const planner::ProfiledTimes* NodeProfiler::TimesFor(
    const planner::DeviceSpec* device) const {
  if (device == nullptr || !local_device_) return nullptr;
  return absl::AsciiStrToLower(device->name) == local_device_->name ? this
                                                                    : nullptr;
}

planner::NodeReport NodeProfiler::NodeInfo() const {
  planner::NodeReport report;
  char hostname[256] = {};
  if (gethostname(hostname, sizeof(hostname) - 1) == 0) {
    report.hostname = hostname;
  }
  for (const GpuDevice& gpu : discovery_.gpus) {
    planner::GpuReport& info = report.gpus.emplace_back();
    info.index = gpu.index;
    info.name = gpu.name;
    info.memory_bytes = gpu.memory_bytes;
    info.sm_count = gpu.sm_count;
    info.compute_capability = gpu.compute_capability;
    // Reading free memory needs a CUDA context; only the profiling GPU of a
    // node with profiling enabled has one to spare.
    if (gpu.index == 0 && timer_ != nullptr && options_.enable_profiling) {
      if (absl::StatusOr<int64_t> free_bytes = timer_->FreeMemoryBytes();
          free_bytes.ok()) {
        info.free_memory_bytes = *free_bytes;
      }
    }
  }
  report.gpu_status = discovery_.status;
  report.driver_version = discovery_.driver_version;
  report.cuda_runtime_version = discovery_.cuda_runtime_version;
  report.cublas_version = discovery_.cublas_version;
  report.cudnn_version = discovery_.cudnn_version;
  report.device_catalog = planner::DeviceCatalog();
  report.profile_cache_entries = cache_entries();
  report.profiling_enabled = options_.enable_profiling;
  return report;
}

}  // namespace echo::server
