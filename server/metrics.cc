#include "server/metrics.h"

#include <map>

#include "server/status_map.h"

namespace echo::server {

namespace {

prometheus::Histogram::BucketBoundaries ExponentialBuckets(double start,
                                                           double factor,
                                                           int count) {
  prometheus::Histogram::BucketBoundaries buckets;
  double value = start;
  for (int i = 0; i < count; ++i, value *= factor) buckets.push_back(value);
  return buckets;
}

const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries(
      ExponentialBuckets(1e-4, 2.5, 14));
  return *buckets;
}

// 1 MiB .. 1 TiB.
const prometheus::Histogram::BucketBoundaries& ByteBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries(
      ExponentialBuckets(1 << 20, 4, 11));
  return *buckets;
}

}  // namespace

ServerMetrics::ServerMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)),
      requests_(prometheus::BuildCounter()
                    .Name("echo_requests_total")
                    .Help("RPCs served, by method and gRPC status code")
                    .Register(*registry_)),
      request_duration_(prometheus::BuildHistogram()
                            .Name("echo_request_duration_seconds")
                            .Help("RPC latency, by method")
                            .Register(*registry_)),
      graph_ops_(prometheus::BuildHistogram()
                     .Name("echo_graph_ops")
                     .Help("Ops per graph received, by method")
                     .Register(*registry_)),
      estimated_peak_(prometheus::BuildHistogram()
                          .Name("echo_estimated_peak_bytes")
                          .Help("Plain peak memory of estimated graphs")
                          .Register(*registry_)
                          .Add({}, ByteBuckets())),
      plans_(prometheus::BuildCounter()
                 .Name("echo_plans_total")
                 .Help("Recompute plans served, by policy and outcome")
                 .Register(*registry_)),
      plan_bytes_saved_(prometheus::BuildHistogram()
                            .Name("echo_plan_bytes_saved")
                            .Help("Baseline minus planned peak, per plan")
                            .Register(*registry_)),
      bytes_saved_total_(prometheus::BuildCounter()
                             .Name("echo_bytes_saved_total")
                             .Help("Sum of peak bytes saved by served plans")
                             .Register(*registry_)),
      plan_overhead_(prometheus::BuildHistogram()
                         .Name("echo_plan_overhead_ratio")
                         .Help("Recompute cost over baseline compute cost")
                         .Register(*registry_)),
      plan_solve_duration_(prometheus::BuildHistogram()
                               .Name("echo_plan_solve_duration_seconds")
                               .Help("Time to compute a plan, by policy")
                               .Register(*registry_)),
      max_batch_size_(
          prometheus::BuildHistogram()
              .Name("echo_max_batch_size")
              .Help("FindMaxBatchSize answers, by recompute (none | auto)")
              .Register(*registry_)),
      scheduler_plans_(prometheus::BuildHistogram()
                           .Name("echo_scheduler_plans_evaluated")
                           .Help("Plans evaluated per FindMaxBatchSize or "
                                 "GetMemoryFrontier answer, by method")
                           .Register(*registry_)),
      frontier_points_(
          prometheus::BuildHistogram()
              .Name("echo_frontier_points")
              .Help("Pareto points per GetMemoryFrontier answer")
              .Register(*registry_)
              .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 4, 8, 16,
                                                               32, 64})),
      cache_entries_(prometheus::BuildGauge()
                         .Name("echo_cache_entries")
                         .Help("Entries in a bounded cache (graph registry, "
                               "answers)")
                         .Register(*registry_)),
      cache_bytes_(prometheus::BuildGauge()
                       .Name("echo_cache_bytes")
                       .Help("Bytes charged to a bounded cache")
                       .Register(*registry_)),
      cache_hits_(prometheus::BuildCounter()
                      .Name("echo_cache_hits_total")
                      .Help("Lookups a cache answered")
                      .Register(*registry_)),
      cache_misses_(prometheus::BuildCounter()
                        .Name("echo_cache_misses_total")
                        .Help("Lookups a cache could not answer")
                        .Register(*registry_)),
      cache_evictions_(prometheus::BuildCounter()
                           .Name("echo_cache_evictions_total")
                           .Help("Entries evicted to stay within the cache's "
                                 "byte bound")
                           .Register(*registry_)),
      worker_crashes_(prometheus::BuildCounter()
                          .Name("echo_planning_worker_crashes_total")
                          .Help("Requests whose planning worker process "
                                "crashed (answered INTERNAL), by method")
                          .Register(*registry_)),
      request_memory_bytes_(
          prometheus::BuildGauge()
              .Name("echo_request_memory_bytes")
              .Help("Memory reserved by the requests in flight, of the "
                    "budget for requests")
              .Register(*registry_)
              .Add({})),
      requests_waiting_for_memory_(
          prometheus::BuildGauge()
              .Name("echo_requests_waiting_for_memory")
              .Help("Admitted calls waiting for memory before their request "
                    "is read")
              .Register(*registry_)
              .Add({})) {}

void ServerMetrics::SetRequestMemory(int64_t in_use_bytes, int waiting_calls) {
  request_memory_bytes_.Set(static_cast<double>(in_use_bytes));
  requests_waiting_for_memory_.Set(waiting_calls);
}

CacheMetrics ServerMetrics::ForCache(const std::string& cache) {
  const std::map<std::string, std::string> labels = {{"cache", cache}};
  return CacheMetrics{cache_entries_.Add(labels), cache_bytes_.Add(labels),
                      cache_hits_.Add(labels), cache_misses_.Add(labels),
                      cache_evictions_.Add(labels)};
}

void ServerMetrics::RecordRequest(const std::string& method,
                                  grpc::StatusCode code, double seconds) {
  requests_.Add({{"method", method}, {"code", GrpcCodeName(code)}}).Increment();
  request_duration_.Add({{"method", method}}, LatencyBuckets())
      .Observe(seconds);
}

void ServerMetrics::RecordGraphOps(const std::string& method, int ops) {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries(
      ExponentialBuckets(10, 4, 10));
  graph_ops_.Add({{"method", method}}, *buckets).Observe(ops);
}

void ServerMetrics::RecordEstimatedPeak(int64_t peak_bytes) {
  estimated_peak_.Observe(static_cast<double>(peak_bytes));
}

void ServerMetrics::RecordPlan(const std::string& policy,
                               const std::string& outcome, int64_t bytes_saved,
                               double overhead_ratio, double solve_seconds) {
  plans_.Add({{"policy", policy}, {"outcome", outcome}}).Increment();
  if (outcome == "error") return;
  static const auto* ratio_buckets =
      new prometheus::Histogram::BucketBoundaries(
          {0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 1});
  plan_bytes_saved_.Add({{"policy", policy}}, ByteBuckets())
      .Observe(static_cast<double>(bytes_saved));
  bytes_saved_total_.Add({{"policy", policy}})
      .Increment(static_cast<double>(bytes_saved > 0 ? bytes_saved : 0));
  plan_overhead_.Add({{"policy", policy}}, *ratio_buckets)
      .Observe(overhead_ratio);
  plan_solve_duration_.Add({{"policy", policy}}, LatencyBuckets())
      .Observe(solve_seconds);
}

void ServerMetrics::RecordMaxBatch(int64_t plain_batch, int64_t recompute_batch,
                                   int plans_evaluated) {
  static const auto* buckets =
      new prometheus::Histogram::BucketBoundaries(ExponentialBuckets(1, 2, 16));
  max_batch_size_.Add({{"recompute", "none"}}, *buckets)
      .Observe(static_cast<double>(plain_batch));
  max_batch_size_.Add({{"recompute", "auto"}}, *buckets)
      .Observe(static_cast<double>(recompute_batch));
  ObservePlans("FindMaxBatchSize", plans_evaluated);
}

void ServerMetrics::RecordFrontier(int points, int plans_evaluated) {
  frontier_points_.Observe(points);
  ObservePlans("GetMemoryFrontier", plans_evaluated);
}

void ServerMetrics::RecordWorkerCrash(const std::string& method) {
  worker_crashes_.Add({{"method", method}}).Increment();
}

void ServerMetrics::ObservePlans(const std::string& method, int plans) {
  static const auto* buckets =
      new prometheus::Histogram::BucketBoundaries(ExponentialBuckets(1, 2, 8));
  scheduler_plans_.Add({{"method", method}}, *buckets).Observe(plans);
}

}  // namespace echo::server
