// Prometheus metrics of echod (echo_ prefix, base units, counters end in
// _total, no graph ids as labels).
#ifndef ECHO_SERVER_METRICS_H_
#define ECHO_SERVER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "grpcpp/support/status.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace echo::server {

// One bounded cache's gauges and counters (label cache="graph" | "answer").
struct CacheMetrics {
  prometheus::Gauge& entries;
  prometheus::Gauge& bytes;
  prometheus::Counter& hits;
  prometheus::Counter& misses;
  prometheus::Counter& evictions;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::shared_ptr<prometheus::Registry> registry);

  prometheus::Registry& registry() { return *registry_; }

  void RecordRequest(const std::string& method, grpc::StatusCode code,
                     double seconds);
  void RecordGraphOps(const std::string& method, int ops);
  void RecordEstimatedPeak(int64_t peak_bytes);
  // A plan served: outcome is feasible | infeasible | error.
  void RecordPlan(const std::string& policy, const std::string& outcome,
                  int64_t bytes_saved, double overhead_ratio,
                  double solve_seconds);
  // FindMaxBatchSize: the answers (0 when none fits) and plans evaluated.
  void RecordMaxBatch(int64_t plain_batch, int64_t recompute_batch,
                      int plans_evaluated);
  // GetMemoryFrontier: Pareto points returned and plans evaluated.
  void RecordFrontier(int points, int plans_evaluated);
  // A planning worker (contained_call.h) crashed serving `method`.
  void RecordWorkerCrash(const std::string& method);
  // The requests' memory (memory_budget.h): bytes reserved by requests in
  // flight, and calls waiting for memory before their request is read.
  void SetRequestMemory(int64_t in_use_bytes, int waiting_calls);
  // echo_cache_{entries,bytes} and echo_cache_{hits,misses,evictions}_total
  // of the cache named `cache`.
  CacheMetrics ForCache(const std::string& cache);

 private:
  void ObservePlans(const std::string& method, int plans);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Family<prometheus::Histogram>& graph_ops_;
  prometheus::Histogram& estimated_peak_;
  prometheus::Family<prometheus::Counter>& plans_;
  prometheus::Family<prometheus::Histogram>& plan_bytes_saved_;
  prometheus::Family<prometheus::Counter>& bytes_saved_total_;
  prometheus::Family<prometheus::Histogram>& plan_overhead_;
  prometheus::Family<prometheus::Histogram>& plan_solve_duration_;
  prometheus::Family<prometheus::Histogram>& max_batch_size_;
  prometheus::Family<prometheus::Histogram>& scheduler_plans_;
  prometheus::Histogram& frontier_points_;
  prometheus::Family<prometheus::Gauge>& cache_entries_;
  prometheus::Family<prometheus::Gauge>& cache_bytes_;
  prometheus::Family<prometheus::Counter>& cache_hits_;
  prometheus::Family<prometheus::Counter>& cache_misses_;
  prometheus::Family<prometheus::Counter>& cache_evictions_;
  prometheus::Family<prometheus::Counter>& worker_crashes_;
  prometheus::Gauge& request_memory_bytes_;
  prometheus::Gauge& requests_waiting_for_memory_;
};

}  // namespace echo::server

#endif  // ECHO_SERVER_METRICS_H_
