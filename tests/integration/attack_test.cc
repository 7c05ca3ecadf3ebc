// The attack suite: issue 11's findings replayed against an in-process
// echod (in_process_echod.h) whose fake GPU can sleep or throw. Findings 3/4
// (OPTIMAL in a child process) and 7 (mTLS, authorization) belong to other
// work; their parts that exist here are covered: AUTO cancellation and
// OPTIMAL's size refusal.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "adapter/graph_file.h"
#include "client/planner_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "in_process_echod.h"
#include "planner/device_catalog.h"
#include "server/planner_service.h"
#include "server/profiler/fake_op_timer.h"
#include "tests/unit/test_util.h"

namespace echo {
namespace {

using ::grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using testing::Echod;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A GPU whose every timing throws, as std::bad_alloc under a pod's memory
// limit would.
class ThrowingTimer : public server::FakeOpTimer {
 public:
  absl::StatusOr<double> TimeOp(const planner::Graph&, planner::OpIndex,
                                const server::TimingLimits&) override {
    throw std::bad_alloc();
  }
};

v1::Graph Fixture(const std::string& name) {
  return testing::ValueOrFail(adapter::LoadGraphFile(
      absl::StrCat(ECHO_TEST_DATA_DIR, "/graphs/", name)));
}

// One GEMM, for ProfileOps.
v1::Graph GemmGraph() {
  v1::Graph graph;
  for (const char* id : {"a", "b", "c"}) {
    v1::Tensor* tensor = graph.add_tensors();
    tensor->set_id(id);
    tensor->set_dtype(v1::DTYPE_FLOAT32);
    tensor->add_shape(64);
    tensor->add_shape(64);
  }
  v1::Op* op = graph.add_ops();
  op->set_id("mm");
  op->set_op_type("aten::mm");
  op->set_op_class(v1::OP_CLASS_GEMM);
  op->add_input_ids("a");
  op->add_input_ids("b");
  op->add_output_ids("c");
  return graph;
}

// An echod with one worker, busy for 2 s timing a profile when constructed:
// a request that waits for the worker takes over a second, one answered on
// gRPC's threads does not.
struct BusyWorkerEchod {
  static server::PlannerServiceOptions OneWorker() {
    server::PlannerServiceOptions options;
    options.worker_threads = 1;
    return options;
  }
  static std::unique_ptr<server::FakeOpTimer> TwoSecondTimer() {
    auto timer = std::make_unique<server::FakeOpTimer>();
    timer->SetCallDuration(std::chrono::milliseconds(2000));
    return timer;
  }

  explicit BusyWorkerEchod(
      std::unique_ptr<server::FakeOpTimer> gpu = TwoSecondTimer())
      : timer(gpu.get()), echod(OneWorker(), std::move(gpu)) {
    v1::ProfileOpsRequest profile;
    *profile.mutable_graph() = GemmGraph();
    profile.set_force(true);
    profiled = std::async(std::launch::async, [this, profile] {
      return echod.Client().ProfileOps(profile).status();
    });
    while (timer->max_concurrent_calls() == 0) {  // the worker is timing
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  const server::FakeOpTimer* timer;  // owned by echod
  Echod echod;
  std::future<absl::Status> profiled;
};

// Finding 1: an exception escaping a handler jammed every admission slot and
// came back UNIMPLEMENTED without a message.
TEST(AttackTest, ExceptionsAreInternalAndReleaseTheirSlot) {
  server::PlannerServiceOptions options;
  options.max_concurrent_requests = 2;
  Echod echod(options, std::make_unique<ThrowingTimer>());
  client::PlannerClient client = echod.Client();
  v1::ProfileOpsRequest profile;
  *profile.mutable_graph() = GemmGraph();
  profile.set_force(true);
  for (int i = 0; i < 5; ++i) {
    absl::Status status = client.ProfileOps(profile).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("ProfileOps: out of memory"));
  }
  v1::EstimateMemoryRequest estimate;
  *estimate.mutable_graph() = GemmGraph();
  EXPECT_TRUE(client.EstimateMemory(estimate).ok());  // slots released
  EXPECT_THAT(echod.Metrics(),
              HasSubstr("echo_requests_total{code=\"INTERNAL\",method="
                        "\"ProfileOps\"} 5"));
}

// Finding 2, deterministic: 40 concurrent heavy calls (profiles that take
// 2 s each) against 4 admission slots. The 36 beyond get RESOURCE_EXHAUSTED
// at once; health, GetNodeInfo and /metrics answer meanwhile.
TEST(AttackTest, OverloadIsRefusedAtOnceAndHealthAnswers) {
  server::PlannerServiceOptions options;
  options.max_concurrent_requests = 4;
  options.worker_threads = 2;
  auto timer = std::make_unique<server::FakeOpTimer>();
  timer->SetCallDuration(std::chrono::milliseconds(2000));
  Echod echod(options, std::move(timer));
  v1::ProfileOpsRequest profile;
  *profile.mutable_graph() = GemmGraph();
  profile.set_force(true);

  struct Outcome {
    absl::StatusCode code;
    double seconds;
  };
  std::vector<std::future<Outcome>> calls;
  for (int i = 0; i < 40; ++i) {
    calls.push_back(std::async(std::launch::async, [&] {
      client::PlannerClient client = echod.Client();
      const Clock::time_point start = Clock::now();
      const absl::StatusCode code = client.ProfileOps(profile).status().code();
      return Outcome{code, SecondsSince(start)};
    }));
  }
  // While the admitted four run: health, node info and metrics.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  client::PlannerClient probe = echod.Client(5);
  double health_max = 0, info_max = 0, metrics_max = 0;
  for (int i = 0; i < 10; ++i) {
    Clock::time_point start = Clock::now();
    const auto health = probe.Health("");
    EXPECT_TRUE(health.ok() && *health == HealthCheckResponse::SERVING);
    health_max = std::max(health_max, SecondsSince(start));
    start = Clock::now();
    EXPECT_TRUE(probe.GetNodeInfo().ok());
    info_max = std::max(info_max, SecondsSince(start));
    start = Clock::now();
    EXPECT_THAT(echod.Metrics(), HasSubstr("echo_requests_total"));
    metrics_max = std::max(metrics_max, SecondsSince(start));
  }
  int refused = 0, admitted = 0;
  double refusal_max = 0;
  for (auto& call : calls) {
    const Outcome outcome = call.get();
    if (outcome.code == absl::StatusCode::kResourceExhausted) {
      ++refused;
      refusal_max = std::max(refusal_max, outcome.seconds);
    } else {
      ++admitted;
      EXPECT_TRUE(outcome.code == absl::StatusCode::kOk) << int(outcome.code);
    }
  }
  std::cout << "[ measured ] health max " << health_max * 1e3
            << " ms, GetNodeInfo max " << info_max * 1e3 << " ms, /metrics max "
            << metrics_max * 1e3 << " ms, slowest refusal " << refusal_max * 1e3
            << " ms\n";
  EXPECT_EQ(admitted, 4);
  EXPECT_EQ(refused, 36);
  // Goals: 100 ms; margins for a loaded 2-core machine, well under the 2 s
  // a call that waited behind the profiles would take.
  EXPECT_LT(health_max, 0.5);
  EXPECT_LT(info_max, 0.5);
  EXPECT_LT(metrics_max, 0.5);
  EXPECT_LT(refusal_max, 1.5);
}

// Finding 2 with real planning: 40 concurrent AUTO plans of DeepSpeech2
// (5,785 ops, 883 KB each) against 4 slots and 2 workers. While the admitted
// plans burn both cores, health answers in milliseconds (before, it waited
// behind the plans). The 35 MB arrival burst itself is measured apart: gRPC
// reads every request, refused or not, on the threads that serve health.
TEST(AttackTest, HealthAnswersWhilePlansBurnTheWorkers) {
  server::PlannerServiceOptions options;
  options.max_concurrent_requests = 4;
  options.worker_threads = 2;
  Echod echod(options);
  v1::GenerateRecomputePlanRequest plan;
  *plan.mutable_graph() = Fixture("deepspeech2.pb");
  plan.set_policy(v1::RECOMPUTE_POLICY_AUTO);
  Clock::time_point start = Clock::now();
  ASSERT_TRUE(echod.Client().GenerateRecomputePlan(plan).ok());
  const double plan_seconds = SecondsSince(start);

  client::PlannerClient probe = echod.Client(10);
  ASSERT_TRUE(probe.Health("").ok());  // connected before the burst
  std::atomic<int> refused{0}, served{0};
  std::vector<std::future<void>> calls;
  for (int i = 0; i < 40; ++i) {
    calls.push_back(std::async(std::launch::async, [&] {
      const absl::StatusCode code =
          echod.Client().GenerateRecomputePlan(plan).status().code();
      ++(code == absl::StatusCode::kResourceExhausted ? refused : served);
    }));
  }
  double burst_max = 0;
  std::vector<double> running;  // probes while the admitted plans run
  while (refused + served < 40) {
    const bool arriving = refused + served < 36;
    start = Clock::now();
    const auto health = probe.Health("");
    EXPECT_TRUE(health.ok() && *health == HealthCheckResponse::SERVING);
    const double seconds = SecondsSince(start);
    if (arriving) {
      burst_max = std::max(burst_max, seconds);
    } else if (refused + served < 40) {
      running.push_back(seconds);
    }
    // Often enough for a few probes while the last plans run: a plan takes
    // ~50 ms now (it took 20 ms probes to get 2 there in CI, 2026-12-03).
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& call : calls) call.get();
  std::sort(running.begin(), running.end());
  const double p90 = running.empty() ? 0 : running[running.size() * 9 / 10];
  std::cout << "[ measured ] one plan alone " << plan_seconds * 1e3
            << " ms; health max " << burst_max * 1e3
            << " ms while 40 requests arrive; while " << served
            << " admitted plans run, over " << running.size() << " probes: p90 "
            << p90 * 1e3 << " ms, max "
            << (running.empty() ? 0 : running.back() * 1e3) << " ms; "
            << refused << " refused\n";
  EXPECT_EQ(served + refused, 40);
  EXPECT_GE(refused, 30);
  ASSERT_GE(running.size(), 3u);
  // Goal 100 ms. A health check queued behind the plans waits about a plan;
  // the p90 ignores a few scheduling hiccups of a loaded 2-core machine.
  EXPECT_LT(p90, std::min(0.25, plan_seconds / 2));
}

// The arrival burst: a request over max_inline_request_bytes is parsed on
// the worker pool, never on gRPC's threads, which answer health checks.
// With the only worker busy on a 2 s profile, a big unparsable request
// waits for the worker (before, a callback thread parsed it at once), while
// a small one, health and GetNodeInfo answer at once.
TEST(AttackTest, BigRequestsAreParsedOnTheWorkerPool) {
  BusyWorkerEchod busy;
  Echod& echod = busy.echod;
  const std::string garbage(2 << 20, '\xff');
  ASSERT_GT(static_cast<int64_t>(garbage.size()),
            server::kDefaultMaxInlineRequestBytes);
  const Clock::time_point sent = Clock::now();
  auto big = std::async(std::launch::async, [&] {
    const grpc::Status status = echod.RawCall("EstimateMemory", garbage);
    return std::make_pair(status, SecondsSince(sent));
  });
  client::PlannerClient probe = echod.Client(5);
  const grpc::Status small = echod.RawCall("EstimateMemory", "\xff\xff\xff");
  EXPECT_EQ(small.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  double probe_max = 0;
  for (int i = 0; i < 5; ++i) {
    const Clock::time_point start = Clock::now();
    EXPECT_TRUE(probe.Health("").ok());
    EXPECT_TRUE(probe.GetNodeInfo().ok());
    probe_max = std::max(probe_max, SecondsSince(start));
  }
  const double small_seconds = SecondsSince(sent);
  EXPECT_TRUE(busy.profiled.get().ok());
  const auto [status, big_seconds] = big.get();
  std::cout << "[ measured ] small unparsable request and 5 health + "
            << "GetNodeInfo probes within " << small_seconds * 1e3
            << " ms (probe max " << probe_max * 1e3 << " ms); 2 MiB one "
            << big_seconds * 1e3 << " ms, behind the profile\n";
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("not a valid echo.v1.EstimateMemoryRequest: malformed "
                        "protobuf wire data in the message at byte 0"));
  // Structural: the big one waited for the worker (most of the profile's
  // 2 s); the rest did not (0.5 s: a loaded 2-core machine's margin).
  EXPECT_GT(big_seconds, 1.0);
  EXPECT_LT(probe_max, 0.5);
  EXPECT_LT(small_seconds, big_seconds);
  // A big valid request is served as before, and every call was counted.
  v1::EstimateMemoryRequest estimate;
  *estimate.mutable_graph() = Fixture("deepspeech2.pb");
  ASSERT_GT(static_cast<int64_t>(estimate.ByteSizeLong()),
            server::kDefaultMaxInlineRequestBytes);
  EXPECT_GT(testing::ValueOrFail(echod.Client().EstimateMemory(estimate))
                .peak_bytes(),
            0);
  const std::string metrics = echod.Metrics();
  EXPECT_THAT(metrics, HasSubstr("echo_requests_total{code=\"INVALID_"
                                 "ARGUMENT\",method=\"EstimateMemory\"} 2"));
  EXPECT_THAT(metrics, HasSubstr("echo_requests_total{code=\"OK\",method="
                                 "\"EstimateMemory\"} 1"));
}

// CheckFit on "all" devices, or with a batch search per device, plans many
// times whatever the graph's size: it waits for the worker pool (before, a
// small graph's ran on a gRPC thread: 8 devices x a search each).
TEST(AttackTest, ManyDeviceFitChecksRunOnTheWorkerPool) {
  BusyWorkerEchod busy;
  v1::CheckFitRequest all;
  *all.mutable_graph() = GemmGraph();
  all.add_device_names("ALL");  // any case, as device names
  v1::CheckFitRequest batch;
  *batch.mutable_graph() = GemmGraph();
  batch.mutable_device()->set_name("v100-16gb");
  batch.set_include_max_batch(true);
  v1::CheckFitRequest one;
  *one.mutable_graph() = GemmGraph();
  one.mutable_device()->set_name("v100-16gb");
  const Clock::time_point sent = Clock::now();
  auto timed = [&](const v1::CheckFitRequest& request) {
    return std::async(std::launch::async, [&] {
      absl::StatusOr<v1::CheckFitResponse> response =
          busy.echod.Client().CheckFit(request);
      return std::make_pair(std::move(response), SecondsSince(sent));
    });
  };
  auto on_all = timed(all);
  auto with_batch = timed(batch);
  auto [single, single_seconds] = timed(one).get();
  auto [every, all_seconds] = on_all.get();
  auto [batched, batch_seconds] = with_batch.get();
  EXPECT_TRUE(busy.profiled.get().ok());
  std::cout << "[ measured ] behind a 2 s profile: one device "
            << single_seconds * 1e3 << " ms, all " << all_seconds * 1e3
            << " ms, include_max_batch " << batch_seconds * 1e3 << " ms\n";
  ASSERT_TRUE(single.ok()) << single.status();
  ASSERT_TRUE(every.ok()) << every.status();
  ASSERT_TRUE(batched.ok()) << batched.status();
  EXPECT_EQ(every->devices_size(),
            static_cast<int>(planner::CatalogDeviceNames().size()));
  // Structural, as above: the small single-device check did not wait.
  EXPECT_LT(single_seconds, 0.5);
  EXPECT_GT(all_seconds, 1.0);
  EXPECT_GT(batch_seconds, 1.0);
}

// Finding 3 (the part that exists): a client whose deadline passes stops
// AUTO's search, and its slot is free within a second.
TEST(AttackTest, DeadlineStopsAutoAndFreesItsSlot) {
  server::PlannerServiceOptions options;
  options.max_concurrent_requests = 1;
  options.worker_threads = 1;
  Echod echod(options);
  v1::GenerateRecomputePlanRequest plan;
  *plan.mutable_graph() = Fixture("deepspeech2.pb");
  plan.set_policy(v1::RECOMPUTE_POLICY_AUTO);
  plan.set_max_overhead_ratio(0.3);
  const Clock::time_point start = Clock::now();
  const absl::Status status =
      echod.Client(0.02).GenerateRecomputePlan(plan).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  // The one slot frees once the search notices; until then a second call
  // is refused.
  v1::EstimateMemoryRequest small;
  *small.mutable_graph() = GemmGraph();
  client::PlannerClient client = echod.Client();
  while (!client.EstimateMemory(small).ok() && SecondsSince(start) < 30) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double freed = SecondsSince(start);
  std::cout << "[ measured ] slot free " << freed * 1e3
            << " ms after a call with a 200 ms deadline\n";
  EXPECT_LT(freed, 1.2);
}

// Finding 4 (the part that exists): OPTIMAL on the 2,278-op NMT graph is
// refused from its size before the model is built (RSS went 316 MB ->
// 1.5 GB before the refusal).
TEST(AttackTest, OptimalTooBigIsRefusedBeforeAllocating) {
  Echod echod(server::PlannerServiceOptions{});
  v1::GenerateRecomputePlanRequest plan;
  *plan.mutable_graph() = Fixture("nmt.pb");
  plan.set_policy(v1::RECOMPUTE_POLICY_OPTIMAL);
  plan.set_memory_limit_bytes(int64_t{1} << 30);
  const int64_t peak_before = testing::PeakResidentBytes();
  const absl::Status status =
      echod.Client().GenerateRecomputePlan(plan).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("solver_max_nonzeros"));
  EXPECT_LT(testing::PeakResidentBytes() - peak_before, int64_t{400} << 20);
}

// Finding 5: values that overflowed int64 are refused, never answered.
TEST(AttackTest, OverflowingSizesAreInvalidArgument) {
  Echod echod(server::PlannerServiceOptions{});
  client::PlannerClient client = echod.Client();
  v1::EstimateMemoryRequest estimate;
  *estimate.mutable_graph() = GemmGraph();
  estimate.mutable_allocator()->set_rounding_bytes(int64_t{1} << 62);
  EXPECT_EQ(client.EstimateMemory(estimate).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Shape x dtype, and the sum of sizes.
  estimate.clear_allocator();
  estimate.mutable_graph()->mutable_tensors(0)->set_shape(0, int64_t{1} << 62);
  absl::Status status = client.EstimateMemory(estimate).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("tensor 'a': shape [4611686018427387904,64] "
                        "overflows int64 bytes"));
  *estimate.mutable_graph() = GemmGraph();
  for (v1::Tensor& tensor : *estimate.mutable_graph()->mutable_tensors()) {
    tensor.set_size_bytes(int64_t{1} << 61);
  }
  status = client.EstimateMemory(estimate).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("sizes of the graph's tensors overflow int64"));
  v1::CheckFitRequest fit;
  *fit.mutable_graph() = estimate.graph();
  fit.mutable_device()->set_name("h100-80gb");
  EXPECT_EQ(client.CheckFit(fit).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Finding 6: an op with 200k inputs cost 19 s of CPU; now fan-in is limited
// and the check below the limit is linear.
TEST(AttackTest, FanInIsLimitedAndCheckedInLinearTime) {
  Echod echod(server::PlannerServiceOptions{});
  client::PlannerClient client = echod.Client();
  v1::EstimateMemoryRequest estimate;
  v1::Graph& graph = *estimate.mutable_graph();
  for (int i = 0; i < 256; ++i) {
    v1::Tensor* tensor = graph.add_tensors();
    tensor->set_id(absl::StrCat("t", i));
    tensor->set_size_bytes(64);
  }
  v1::Op* op = graph.add_ops();
  op->set_id("wide");
  op->add_output_ids("t0");
  for (int i = 0; i < 200000; ++i)
    op->add_input_ids(absl::StrCat("t", 1 + i % 255));
  Clock::time_point start = Clock::now();
  absl::Status status = client.EstimateMemory(estimate).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("op 'wide': 200000 input_ids (limit 65536)"));
  op->mutable_input_ids()->DeleteSubrange(65536, 200000 - 65536);
  start = Clock::now();
  status = client.EstimateMemory(estimate).status();
  const double seconds = SecondsSince(start);
  EXPECT_TRUE(status.ok()) << status;
  std::cout << "[ measured ] 65,536 inputs: " << seconds * 1e3 << " ms\n";
  EXPECT_LT(seconds, 1.0);  // quadratic: about 2 s of CPU
}

// Finding 6: a request gRPC cannot parse (a string that is not UTF-8, or
// bytes that are not protobuf) came back UNIMPLEMENTED with no message and
// was not counted.
TEST(AttackTest, UnparsableRequestsAreInvalidArgumentAndCounted) {
  Echod echod(server::PlannerServiceOptions{});
  v1::EstimateMemoryRequest estimate;
  *estimate.mutable_graph() = GemmGraph();
  v1::Graph& graph = *estimate.mutable_graph();
  graph.mutable_tensors(1)->set_id("QQQQ");
  graph.mutable_ops(0)->set_input_ids(1, "QQQQ");
  (*graph.mutable_ops(0)->mutable_attributes())["k"] = "ZZZZ";
  const std::string valid = estimate.SerializeAsString();
  const auto replace = [](std::string bytes, const std::string& from,
                          const std::string& to) {
    for (size_t at = bytes.find(from); at != std::string::npos;
         at = bytes.find(from)) {
      bytes.replace(at, from.size(), to);
    }
    return bytes;
  };
  grpc::Status status = echod.RawCall(
      "EstimateMemory", replace(valid, "QQQQ", std::string("Q\xff\xfeQ")));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "the request is not a valid echo.v1.EstimateMemoryRequest: "
            "graph.tensors[1].id is not valid UTF-8 (string fields must be "
            "UTF-8); it begins \"Q\\xff\\xfeQ\"");
  status = echod.RawCall("EstimateMemory",
                         replace(valid, "ZZZZ", std::string("\xc0\x80zz")));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("graph.ops[0].attributes[0].value is not valid UTF-8"));
  // A length running past the end, and bytes that are no protobuf at all.
  status = echod.RawCall("EstimateMemory", valid.substr(0, valid.size() - 3));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("malformed protobuf wire data in graph"));
  status = echod.RawCall("GetNodeInfo", "\xff\xff\xff");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("not a valid echo.v1.GetNodeInfoRequest: malformed "
                        "protobuf wire data in the message at byte"));
  // The valid bytes still parse, and every refusal was counted.
  EXPECT_TRUE(echod.RawCall("EstimateMemory", valid).ok());
  const std::string metrics = echod.Metrics();
  EXPECT_THAT(metrics, HasSubstr("echo_requests_total{code=\"INVALID_"
                                 "ARGUMENT\",method=\"EstimateMemory\"} 3"));
  EXPECT_THAT(metrics, HasSubstr("echo_requests_total{code=\"INVALID_"
                                 "ARGUMENT\",method=\"GetNodeInfo\"} 1"));
}

// Input limits, named in errors: ids, attributes, metadata.
TEST(AttackTest, OversizedFieldsAreInvalidArgumentNamingTheLimit) {
  Echod echod(server::PlannerServiceOptions{});
  client::PlannerClient client = echod.Client();
  const auto message = [&](const v1::Graph& graph) {
    v1::EstimateMemoryRequest request;
    *request.mutable_graph() = graph;
    const absl::Status status = client.EstimateMemory(request).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    return std::string(status.message());
  };
  v1::Graph graph = GemmGraph();
  graph.mutable_tensors(0)->set_id(std::string(5000, 'x'));
  EXPECT_THAT(message(graph), HasSubstr("tensor #0 '" + std::string(64, 'x') +
                                        "...': its id is 5000 bytes (limit "
                                        "1024)"));
  graph = GemmGraph();
  for (int i = 0; i < 300; ++i) {
    (*graph.mutable_ops(0)->mutable_attributes())[absl::StrCat("k", i)] = "v";
  }
  EXPECT_THAT(message(graph), HasSubstr("op 'mm': 300 attributes (limit 256)"));
  graph = GemmGraph();
  (*graph.mutable_metadata())["notes"] = std::string(70000, 'n');
  EXPECT_THAT(message(graph),
              HasSubstr("graph: metadata 'notes' is 70000 bytes (limit "
                        "65536)"));
}

}  // namespace
}  // namespace echo
