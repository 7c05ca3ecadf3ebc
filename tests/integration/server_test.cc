// echod in-process on 127.0.0.1:0: EstimateMemory, health, metrics, bad input
// and drain, through the C++ client library.
#include <algorithm>
#include <future>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "adapter/graph_convert.h"
#include "adapter/graph_file.h"
#include "client/planner_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "http_get.h"
#include "loopback_server.h"
#include "planner/memory_simulator.h"
#include "server/echo_server.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/unit/test_util.h"

namespace echo {
namespace {

using ::grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(server::ServerOptions()); }

  void StartServer(server::ServerOptions options) {
    server_.reset();
    absl::StatusOr<std::unique_ptr<server::EchoServer>> started =
        server::EchoServer::Start(testing::Loopback(options));
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
    client_ = testing::ClientOf(*server_, 10 * testing::kTimeScale);
  }

  v1::EstimateMemoryRequest Vgg16Request() {
    v1::EstimateMemoryRequest request;
    *request.mutable_graph() = testing::ValueOrFail(adapter::LoadGraphFile(
        std::string(ECHO_TEST_DATA_DIR) + "/checkmate/vgg16_b256_train.json"));
    return request;
  }

  std::string Metrics() {
    return testing::HttpGet(server_->metrics_endpoint(), "/metrics");
  }

  std::unique_ptr<server::EchoServer> server_;
  std::unique_ptr<client::PlannerClient> client_;
};

TEST_F(ServerTest, HealthIsServing) {
  auto status = client_->Health("");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, HealthCheckResponse::SERVING);
  status = client_->Health("echo.v1.MemoryPlanner");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, HealthCheckResponse::SERVING);
}

TEST_F(ServerTest, EstimatesCheckmatePlainPeak) {
  auto response = client_->EstimateMemory(Vgg16Request());
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->peak_bytes(), 15825108992);
  EXPECT_EQ(response->op_count(), 45);
  EXPECT_EQ(response->peak_op_id(), absl::StrCat(response->peak_step()));
  const v1::MemoryBreakdown& b = response->breakdown();
  EXPECT_EQ(b.parameter_bytes() + b.optimizer_state_bytes() +
                b.gradient_bytes() + b.input_bytes() +
                b.stashed_activation_bytes() + b.transient_bytes() +
                b.workspace_bytes(),
            response->peak_bytes());
  // VGG16 holds 15 tensors at its peak: all fit the default of 20.
  ASSERT_EQ(response->live_at_peak_size(), 15);
  int64_t live_total = 0;
  for (const v1::LiveTensor& live : response->live_at_peak()) {
    live_total += live.size_bytes();
  }
  EXPECT_EQ(live_total, response->peak_bytes());

  v1::EstimateMemoryRequest top3 = Vgg16Request();
  top3.set_max_live_tensors(3);
  response = client_->EstimateMemory(top3);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->live_at_peak_size(), 3);
  EXPECT_EQ(response->live_at_peak(0).size_bytes(), 3288334336);
  EXPECT_GE(response->live_at_peak(1).size_bytes(),
            response->live_at_peak(2).size_bytes());
}

TEST_F(ServerTest, MalformedGraphIsInvalidArgumentNamingTheOp) {
  v1::EstimateMemoryRequest request = Vgg16Request();
  request.mutable_graph()->mutable_ops(3)->set_input_ids(0, "no_such_tensor");
  auto response = client_->EstimateMemory(request);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(response.status().message()),
              HasSubstr("op '3': reads unknown tensor 'no_such_tensor'"));

  request = Vgg16Request();
  request.mutable_graph()->mutable_tensors(5)->set_size_bytes(-1);
  response = client_->EstimateMemory(request);
  ASSERT_FALSE(response.ok());
  EXPECT_THAT(std::string(response.status().message()),
              HasSubstr("tensor '5': negative size_bytes"));

  request = Vgg16Request();
  request.mutable_allocator()->set_rounding_bytes(-512);
  response = client_->EstimateMemory(request);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);

  // Still serving.
  EXPECT_TRUE(client_->EstimateMemory(Vgg16Request()).ok());
}

// Issue 23: ids with newlines and escape sequences went raw into the log,
// so a caller could forge log lines.
TEST_F(ServerTest, CallerTextIsEscapedInTheLog) {
  std::ostringstream captured;
  const std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(captured)));
  v1::EstimateMemoryRequest request = Vgg16Request();
  request.mutable_graph()->mutable_ops(3)->set_input_ids(
      0, "x\n[error] forged line\x1b[31m");
  const auto response = client_->EstimateMemory(request);
  spdlog::set_default_logger(previous);
  ASSERT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string log = captured.str();
  ASSERT_THAT(log, HasSubstr("EstimateMemory from"));
  // One line, the id's newline and escape written as text.
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  EXPECT_THAT(log, HasSubstr("x\\n[error] forged line\\x1b[31m"));
  EXPECT_EQ(log.find('\x1b'), std::string::npos);
}

TEST_F(ServerTest, OversizedRequestIsResourceExhaustedAndServerKeepsServing) {
  server::ServerOptions options;
  options.max_request_bytes = 2048;
  StartServer(options);
  auto response = client_->EstimateMemory(Vgg16Request());
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kResourceExhausted);
  v1::EstimateMemoryRequest small;
  *small.mutable_graph() = testing::ValueOrFail(
      adapter::ParseGraph("tensor x 10 input\nop a fwd other x -> y:20\n",
                          adapter::GraphFormat::kEchoText, "small"));
  auto ok = client_->EstimateMemory(small);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->peak_bytes(), 30);
}

TEST_F(ServerTest, MetricsCountRequestsByMethodAndCode) {
  ASSERT_TRUE(client_->EstimateMemory(Vgg16Request()).ok());
  v1::EstimateMemoryRequest bad;
  EXPECT_FALSE(client_->EstimateMemory(bad).ok());  // no ops
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("echo_requests_total{code=\"OK\",method="
                                 "\"EstimateMemory\"} 1"));
  EXPECT_THAT(metrics,
              HasSubstr("echo_requests_total{code=\"INVALID_ARGUMENT\","
                        "method=\"EstimateMemory\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("echo_request_duration_seconds_count{method="
                                 "\"EstimateMemory\"} 2"));
  EXPECT_THAT(metrics, HasSubstr("echo_estimated_peak_bytes_count 1"));
  EXPECT_THAT(metrics, HasSubstr("echo_graph_ops_sum{method="
                                 "\"EstimateMemory\"} 45"));
  // Both calls gave their memory back, and none waits.
  EXPECT_THAT(metrics, HasSubstr("echo_request_memory_bytes 0\n"));
  EXPECT_THAT(metrics, HasSubstr("echo_requests_waiting_for_memory 0\n"));
}

// Replays a served plan with the planner's checker: the schedule must be
// valid and its peak the one the server reported.
void ExpectReplays(const v1::Graph& proto,
                   const v1::GenerateRecomputePlanResponse& plan) {
  absl::StatusOr<planner::Graph> graph = adapter::GraphFromProto(proto);
  ASSERT_TRUE(graph.ok()) << graph.status();
  planner::Schedule schedule;
  for (const v1::Execution& e : plan.schedule()) {
    schedule.push_back({graph->FindOp(e.op_id()), e.recompute()});
  }
  absl::StatusOr<planner::SimulationResult> replay =
      planner::ReplaySchedule(*graph, schedule);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_EQ(replay->peak_bytes, plan.planned_peak_bytes());
  double baseline = 0, extra = 0;
  for (const v1::Execution& e : plan.schedule()) {
    const double cost = graph->op(graph->FindOp(e.op_id())).relative_cost;
    (e.recompute() ? extra : baseline) += cost;
  }
  EXPECT_DOUBLE_EQ(baseline, plan.baseline_compute_cost());
  EXPECT_DOUBLE_EQ(extra, plan.recompute_cost());
}

TEST_F(ServerTest, EveryPolicyServesAReplayablePlan) {
  const v1::Graph graph = Vgg16Request().graph();
  for (v1::RecomputePolicy policy :
       {v1::RECOMPUTE_POLICY_NONE, v1::RECOMPUTE_POLICY_ECHO,
        v1::RECOMPUTE_POLICY_CHEN_SQRT, v1::RECOMPUTE_POLICY_AUTO}) {
    v1::GenerateRecomputePlanRequest request;
    *request.mutable_graph() = graph;
    request.set_policy(policy);
    auto plan = client_->GenerateRecomputePlan(request);
    ASSERT_TRUE(plan.ok()) << plan.status();
    SCOPED_TRACE(v1::RecomputePolicy_Name(policy));
    EXPECT_EQ(plan->policy(), policy);
    EXPECT_EQ(plan->baseline_peak_bytes(), 15825108992);
    EXPECT_EQ(plan->cost_unit(), "relative");
    EXPECT_DOUBLE_EQ(plan->baseline_compute_cost(), 15500);
    ExpectReplays(graph, *plan);
    if (policy == v1::RECOMPUTE_POLICY_NONE) {
      EXPECT_EQ(plan->planned_peak_bytes(), 15825108992);
      EXPECT_EQ(plan->recompute_cost(), 0);
    }
    if (policy == v1::RECOMPUTE_POLICY_AUTO) {
      // The default budget: 5% overhead.
      EXPECT_LT(plan->planned_peak_bytes(), 15825108992);
      EXPECT_LE(plan->recompute_overhead_ratio(), 0.05);
    }
  }
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("echo_plans_total{outcome=\"feasible\","
                                 "policy=\"auto\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("echo_bytes_saved_total{policy=\"auto\"}"));
}

// A captured GPT's loss and its backward, chunked only when the client asks
// (an older client never gets steps it cannot run), and a timeline that
// replays the chunked schedule to the peak the plan claims.
TEST_F(ServerTest, ChunkedLossOnlyWhenAskedAndItsScheduleReplays) {
  v1::GenerateRecomputePlanRequest request;
  *request.mutable_graph() = testing::ValueOrFail(adapter::LoadGraphFile(
      std::string(ECHO_TEST_DATA_DIR) + "/graphs/gpt.pb"));
  request.mutable_device()->set_name("h100-80gb");
  request.set_max_overhead_ratio(0.2);
  auto unasked = client_->GenerateRecomputePlan(request);
  ASSERT_TRUE(unasked.ok()) << unasked.status();
  EXPECT_EQ(unasked->chunked_regions_size(), 0);
  request.set_chunking(v1::CHUNKING_MODE_AUTO);
  request.set_include_timeline(true);
  auto plan = client_->GenerateRecomputePlan(request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->chunked_regions_size(), 1);
  const v1::ChunkedRegion& region = plan->chunked_regions(0);
  EXPECT_LT(plan->planned_peak_bytes(), unasked->planned_peak_bytes());
  EXPECT_LE(plan->recompute_overhead_ratio(), 0.2);
  EXPECT_GE(region.chunks(), 2);
  EXPECT_THAT(region.forward_op_ids(), ::testing::Contains("nll_loss_forward"));
  EXPECT_THAT(region.backward_op_ids(),
              ::testing::Contains("nll_loss_backward"));
  EXPECT_EQ(region.loss_gradient_tensor_id(), "tangents_1");
  EXPECT_FALSE(region.gradient_tensor_ids().empty());
  std::vector<std::string> ids;
  for (const v1::Execution& e : plan->schedule()) ids.push_back(e.op_id());
  EXPECT_THAT(ids, ::testing::Contains(region.forward_step_op_id()));
  EXPECT_THAT(ids, ::testing::Contains(region.backward_step_op_id()));
  EXPECT_THAT(ids, ::testing::Not(::testing::Contains("nll_loss_forward")));
  EXPECT_EQ(plan->timeline().peak_bytes(), plan->planned_peak_bytes());
  EXPECT_THAT(plan->message(), HasSubstr("chunk(s) of"));
  request.set_chunking(static_cast<v1::ChunkingMode>(7));
  auto bad = client_->GenerateRecomputePlan(request);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("unknown chunking mode 7"));
}

// A captured graph carries no op costs: without a device it is priced on
// the default device, and the answer says so, instead of calling every
// recomputation free.
TEST_F(ServerTest, CostlessGraphWithoutDeviceIsPricedOnTheDefaultDevice) {
  v1::GenerateRecomputePlanRequest request;
  *request.mutable_graph() = testing::ValueOrFail(adapter::LoadGraphFile(
      std::string(ECHO_TEST_DATA_DIR) + "/graphs/nmt.pb"));
  auto plan = client_->GenerateRecomputePlan(request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->cost_unit(), "seconds");
  EXPECT_GT(plan->regions_size(), 0);
  EXPECT_GT(plan->recompute_overhead_ratio(), 0);
  EXPECT_THAT(plan->message(),
              HasSubstr("priced on h100-80gb: no device was named"));
}

TEST_F(ServerTest, MemoryLimitBelowLowerBoundIsAnAnswerNotAnError) {
  v1::GenerateRecomputePlanRequest request;
  *request.mutable_graph() = Vgg16Request().graph();
  request.set_memory_limit_bytes(1000);
  auto plan = client_->GenerateRecomputePlan(request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->feasible());
  EXPECT_GT(plan->peak_lower_bound_bytes(), 1000);
  EXPECT_LE(plan->peak_lower_bound_bytes(), plan->planned_peak_bytes());
  ExpectReplays(request.graph(), *plan);
  EXPECT_THAT(Metrics(), HasSubstr("echo_plans_total{outcome=\"infeasible\","
                                   "policy=\"auto\"} 1"));
}

TEST_F(ServerTest, BadPlanRequestsAreInvalidArgument) {
  v1::GenerateRecomputePlanRequest request;
  *request.mutable_graph() = Vgg16Request().graph();
  request.set_policy(static_cast<v1::RecomputePolicy>(42));
  auto plan = client_->GenerateRecomputePlan(request);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("unknown policy"));

  request.set_policy(v1::RECOMPUTE_POLICY_AUTO);
  request.set_max_overhead_ratio(-0.5);
  plan = client_->GenerateRecomputePlan(request);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("max_overhead_ratio"));

  request.set_max_overhead_ratio(0.1);
  request.set_memory_limit_bytes(1 << 30);
  plan = client_->GenerateRecomputePlan(request);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("at most one"));

  request.clear_max_overhead_ratio();
  request.set_memory_limit_bytes(-5);
  plan = client_->GenerateRecomputePlan(request);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);

  // Values that used to overflow: a depth of INT32_MAX (cap + 1 in the chain
  // walk) and a rounding of 2^62 (a peak of -1).
  request.clear_memory_limit_bytes();
  request.set_max_recompute_depth(std::numeric_limits<int32_t>::max());
  plan = client_->GenerateRecomputePlan(request);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("max_recompute_depth must be in [0, 16777216], got "
                        "2147483647"));
  request.set_max_recompute_depth(0);
  request.mutable_allocator()->set_rounding_bytes(int64_t{1} << 62);
  plan = client_->GenerateRecomputePlan(request);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("allocator.rounding_bytes must be in [0, 1073741824]"));
  v1::CheckFitRequest fit;
  *fit.mutable_graph() = Vgg16Request().graph();
  fit.mutable_device()->set_name("v100-16gb");
  fit.mutable_allocator()->set_rounding_bytes(int64_t{1} << 62);
  EXPECT_EQ(client_->CheckFit(fit).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(client_->EstimateMemory(Vgg16Request()).ok());  // still serving
}

TEST_F(ServerTest, UnknownDeviceIsNotFoundListingTheCatalog) {
  v1::EstimateMemoryRequest request = Vgg16Request();
  request.mutable_device()->set_name("tpu-v9");
  auto response = client_->EstimateMemory(request);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(response.status().message()), HasSubstr("h100-80gb"));
}

TEST_F(ServerTest, CheckFitAnswersForACatalogDevice) {
  v1::CheckFitRequest request;
  *request.mutable_graph() = Vgg16Request().graph();
  request.mutable_device()->set_name("a100-80gb");
  auto fit = client_->CheckFit(request);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_TRUE(fit->fits());
  EXPECT_TRUE(fit->fits_without_recompute());
  EXPECT_EQ(fit->baseline_peak_bytes(), 15825108992);

  // 11 GiB: below VGG16's best reachable peak, so it cannot fit.
  request.mutable_device()->set_name("rtx-2080-ti");
  fit = client_->CheckFit(request);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_FALSE(fit->fits());
  EXPECT_FALSE(fit->fits_without_recompute());
  EXPECT_THAT(fit->message(), HasSubstr("does not fit"));

  request.clear_device();
  EXPECT_EQ(client_->CheckFit(request).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ServerTest, ProfilingWithoutAGpuIsFailedPrecondition) {
  v1::ProfileOpsRequest request;
  *request.mutable_graph() = Vgg16Request().graph();
  auto profiles = client_->ProfileOps(request);
  ASSERT_FALSE(profiles.ok());
  EXPECT_EQ(profiles.status().code(), absl::StatusCode::kFailedPrecondition);

  request.add_op_ids("no_such_op");
  EXPECT_EQ(client_->ProfileOps(request).status().code(),
            absl::StatusCode::kInvalidArgument);

  auto info = client_->GetNodeInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_THAT(info->gpu_status(), HasSubstr("no GPU"));
  EXPECT_EQ(info->gpus_size(), 0);
  EXPECT_GE(info->device_catalog_size(), 8);
  EXPECT_FALSE(info->profiling_enabled());
  EXPECT_FALSE(info->server_version().empty());
}

TEST_F(ServerTest, HeavyRequestsRunOnTheWorkerPoolAndHealthStillAnswers) {
  server::ServerOptions options;
  options.worker_threads = 1;
  options.heavy_graph_ops = 0;  // every plan, fit check and profile
  StartServer(options);
  v1::GenerateRecomputePlanRequest request;
  *request.mutable_graph() = Vgg16Request().graph();
  std::vector<std::future<absl::StatusOr<v1::GenerateRecomputePlanResponse>>>
      plans;
  for (int i = 0; i < 4; ++i) {
    plans.push_back(std::async(std::launch::async, [&] {
      return client_->GenerateRecomputePlan(request);
    }));
  }
  // Four plans queue on one worker; health is served meanwhile.
  EXPECT_EQ(*client_->Health(""), HealthCheckResponse::SERVING);
  for (auto& plan : plans) {
    absl::StatusOr<v1::GenerateRecomputePlanResponse> answer = plan.get();
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_TRUE(answer->feasible());
    EXPECT_LT(answer->planned_peak_bytes(), answer->baseline_peak_bytes());
  }
  EXPECT_THAT(Metrics(), HasSubstr("echo_requests_total{code=\"OK\","
                                   "method=\"GenerateRecomputePlan\"} 4"));
}

TEST_F(ServerTest, DrainTurnsHealthOffAndRefusesNewWork) {
  server_->Drain();
  auto response = client_->EstimateMemory(Vgg16Request());
  EXPECT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace echo
