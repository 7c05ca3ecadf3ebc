// The node-local profiler: owns GPU discovery, the op timer, the persistent
// profile cache and the profiler metrics, and serves cached times to the
// cost model (planner::ProfiledTimes).
//
// It shares the GPU with training jobs: it profiles only when enabled, one
// request at a time, allocates at most memory_fraction of the *free* device
// memory, and stops a request after max_seconds_per_request.
#ifndef ECHO_SERVER_PROFILER_NODE_PROFILER_H_
#define ECHO_SERVER_PROFILER_NODE_PROFILER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "planner/cost_model.h"
#include "planner/device_catalog.h"
#include "planner/graph.h"
#include "planner/node_report.h"
#include "planner/recompute/plan.h"
#include "prometheus/registry.h"
#include "server/profiler/gpu_backend.h"
#include "server/profiler/op_timer.h"
#include "server/profiler/profile_cache.h"

namespace echo::server {

struct NodeProfilerOptions {
  bool enable_profiling = false;
  // Where profile_cache.db lives; empty: in memory only.
  std::string cache_dir;
  // Of the device memory free at the time of each op, in (0, 1].
  double memory_fraction = 0.1;
  int64_t max_cache_entries = 100000;
  double max_seconds_per_request = 30;
  int warmup_runs = 3;
  int timed_runs = 20;
};

class ProfilerMetrics;

class NodeProfiler : public planner::ProfiledTimes {
 public:
  // The SQLite database (profile_store.h), and the text file of echod
  // before it, imported once.
  static constexpr absl::string_view kCacheFileName = "profile_cache.db";
  static constexpr absl::string_view kLegacyCacheFileName = "profile_cache.v1";

  // timer == nullptr: the CUDA timer when built with CUDA and a GPU is
  // present, else none (ProfileOps then fails with FAILED_PRECONDITION).
  // `registry` nullptr: metrics go to a private registry. Errors:
  // INVALID_ARGUMENT for bad options. A cache_dir that cannot be created
  // (the cache is then in memory only) and a corrupt cache file are logged
  // and reported in cache_load_report().
  static absl::StatusOr<std::unique_ptr<NodeProfiler>> Create(
      NodeProfilerOptions options, prometheus::Registry* registry,
      std::unique_ptr<OpTimer> timer = nullptr);
  ~NodeProfiler() override;

  // Profiles `ops` (empty: every op for which planner::NeedsProfiling
  // holds), from the cache unless `force`. FAILED_PRECONDITION when there is
  // no GPU or profiling is disabled (the message says which);
  // RESOURCE_EXHAUSTED when another request keeps the profiler busy longer
  // than max_seconds_per_request; INVALID_ARGUMENT for an op index out of
  // range. Otherwise one OpProfile per op, with a reason when not measured.
  // `interrupted` (the caller's cancellation or deadline) is checked while
  // waiting for the profiler and before each op is timed, so a cancelled
  // request stops after the op being timed; what it timed is cached, and
  // it returns the interrupt's status.
  absl::StatusOr<planner::ProfileReport> ProfileOps(
      const planner::Graph& graph, const std::vector<planner::OpIndex>& ops,
      bool force, const planner::Interrupt& interrupted = nullptr);

  // Hostname, GPUs, versions, gpu_status, device catalog, cache size and
  // profiling_enabled.
  planner::NodeReport NodeInfo() const;

  // Cached time of the op on this node's GPU. Counts a hit, or a miss when
  // planner::NeedsProfiling holds for the op.
  std::optional<double> Lookup(const planner::Graph& graph,
                               planner::OpIndex op) const override;

  // This profiler when `device` is this node's GPU model (same catalog
  // name), else nullptr: profiles of one GPU do not price another.
  const planner::ProfiledTimes* TimesFor(
      const planner::DeviceSpec* device) const;

  // The catalog spec of the profiled GPU, when the catalog knows it.
  const std::optional<planner::DeviceSpec>& local_device() const {
    return local_device_;
  }
  const GpuDiscovery& discovery() const { return discovery_; }
  bool profiling_enabled() const { return options_.enable_profiling; }
  int64_t cache_entries() const;
  // The cache file's load report from Create.
  const CacheLoadReport& cache_load_report() const { return load_report_; }
  // The lock Lookup takes, for a fork of echod (contained_call.h) to hold
  // across fork(): the child then never starts with it taken by a thread it
  // does not have.
  std::mutex* lookup_mutex() const { return &cache_mutex_; }

 private:
  NodeProfiler(NodeProfilerOptions options, GpuDiscovery discovery,
               std::unique_ptr<OpTimer> timer, std::string cache_path,
               prometheus::Registry* registry);

  // local_device_ as a pointer (nullptr when not in the catalog).
  const planner::DeviceSpec* LocalDevice() const {
    return local_device_ ? &*local_device_ : nullptr;
  }
  // Why profiling cannot run, or OK.
  absl::Status CheckAvailable() const;
  // The cache's key of `op` on this node's device: its signature.
  std::string CacheKey(const planner::Graph& graph, planner::OpIndex op) const;
  // Waits up to `budget` for profile_mutex_, polling `interrupted`.
  absl::Status LockProfiler(std::unique_lock<std::timed_mutex>& lock,
                            std::chrono::steady_clock::duration budget,
                            const planner::Interrupt& interrupted);
  // Puts this request's times into the cache and saves it (under
  // profile_mutex_, so saves never race each other).
  void StoreTimes(const absl::flat_hash_map<std::string, double>& timed);
  // Times one op (not cached) into `profile`; returns the result label.
  absl::string_view TimeOne(const planner::Graph& graph, planner::OpIndex op,
                            std::chrono::steady_clock::time_point deadline,
                            planner::OpProfile* profile);

  const NodeProfilerOptions options_;
  const GpuDiscovery discovery_;
  const std::unique_ptr<OpTimer> timer_;
  std::string device_key_;
  std::optional<planner::DeviceSpec> local_device_;
  std::shared_ptr<prometheus::Registry> own_registry_;
  std::unique_ptr<ProfilerMetrics> metrics_;

  // One profile at a time; waits at most max_seconds_per_request.
  std::timed_mutex profile_mutex_;
  mutable std::mutex cache_mutex_;
  mutable ProfileCache cache_;
  CacheLoadReport load_report_;
};

}  // namespace echo::server

#endif  // ECHO_SERVER_PROFILER_NODE_PROFILER_H_
