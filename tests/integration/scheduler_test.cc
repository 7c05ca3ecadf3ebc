// The scheduler RPCs through the C++ client: FindMaxBatchSize and
// GetMemoryFrontier on the Checkmate VGG16 (batch dimension from its file
// name), answers checked against plans and fit checks the test replays,
// bad input, metrics.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "adapter/graph_convert.h"
#include "adapter/graph_file.h"
#include "client/planner_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "http_get.h"
#include "loopback_server.h"
#include "planner/batch.h"
#include "planner/checkmate_import.h"
#include "server/echo_server.h"
#include "tests/unit/test_util.h"

namespace echo {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kVgg16Peak = 15825108992;  // at batch 256

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<server::EchoServer>> started =
        server::EchoServer::Start(testing::Loopback());
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
    client_ = testing::ClientOf(*server_, 30 * testing::kTimeScale);
    vgg16_ = testing::ValueOrFail(adapter::LoadGraphFile(
        std::string(ECHO_TEST_DATA_DIR) + "/checkmate/vgg16_b256_train.json",
        adapter::GraphFormat::kAuto, planner::kCheckmateBatchFromName));
  }

  // VGG16 at `batch`: every Checkmate node scales with the batch.
  v1::Graph Vgg16At(int64_t batch) const {
    v1::Graph graph = vgg16_;
    graph.set_batch_size(batch);
    for (v1::Tensor& tensor : *graph.mutable_tensors()) {
      tensor.set_size_bytes(tensor.size_bytes() / 256 * batch);
    }
    return graph;
  }

  v1::FindMaxBatchSizeRequest MaxBatchRequest(const std::string& device) {
    v1::FindMaxBatchSizeRequest request;
    *request.mutable_graph() = vgg16_;
    request.mutable_device()->set_name(device);
    return request;
  }

  std::unique_ptr<server::EchoServer> server_;
  std::unique_ptr<client::PlannerClient> client_;
  v1::Graph vgg16_;
};

TEST_F(SchedulerTest, MaxBatchMatchesReplayedFitChecks) {
  ASSERT_EQ(vgg16_.batch_size(), 256);
  v1::FindMaxBatchSizeRequest request = MaxBatchRequest("v100-16gb");
  request.set_reserved_bytes(int64_t{1} << 30);
  request.set_max_overhead_ratio(0.2);
  auto response = client_->FindMaxBatchSize(request);
  ASSERT_TRUE(response.ok()) << response.status();
  // Every VGG16 tensor scales with the batch: peak(b) = kVgg16Peak * b / 256.
  const int64_t usable = response->usable_bytes();
  EXPECT_EQ(usable, response->device_memory_bytes() - (int64_t{1} << 30));
  const int64_t plain = usable / (kVgg16Peak / 256);
  EXPECT_EQ(response->without_recompute().batch_size(), plain);
  EXPECT_EQ(response->without_recompute().peak_bytes(),
            kVgg16Peak / 256 * plain);
  EXPECT_EQ(response->graph_batch_size(), 256);
  const int64_t with = response->with_recompute().batch_size();
  EXPECT_GT(with, plain);
  EXPECT_LE(response->with_recompute().recompute_overhead_ratio(), 0.2);
  EXPECT_LE(response->with_recompute().peak_bytes(), usable);

  // Replay: CheckFit at the answers agrees.
  v1::CheckFitRequest fit;
  fit.mutable_device()->set_name("v100-16gb");
  fit.set_reserved_bytes(int64_t{1} << 30);
  fit.set_max_overhead_ratio(0.2);
  *fit.mutable_graph() = Vgg16At(with);
  auto answer = client_->CheckFit(fit);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_TRUE(answer->fits());
  EXPECT_EQ(answer->planned_peak_bytes(),
            response->with_recompute().peak_bytes());
  *fit.mutable_graph() = Vgg16At(plain + 1);
  answer = client_->CheckFit(fit);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_FALSE(answer->fits_without_recompute());

  // multiple_of and a range.
  request.set_multiple_of(8);
  request.set_max_batch_size(64);
  response = client_->FindMaxBatchSize(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->without_recompute().batch_size(),
            std::min<int64_t>(64, plain / 8 * 8));
  EXPECT_THAT(testing::HttpGet(server_->metrics_endpoint(), "/metrics"),
              HasSubstr("echo_max_batch_size_count{recompute=\"auto\"} 2"));
}

TEST_F(SchedulerTest, FitOnEveryDeviceByFingerprintGivesTheLargestBatch) {
  // A scheduler registers once, then asks by fingerprint only.
  v1::RegisterGraphRequest registration;
  *registration.mutable_graph() = vgg16_;
  auto registered = client_->RegisterGraph(registration);
  ASSERT_TRUE(registered.ok()) << registered.status();
  v1::CheckFitRequest fit;
  fit.set_graph_fingerprint(registered->graph_fingerprint());
  fit.add_device_names("all");
  fit.set_max_overhead_ratio(0.2);
  fit.set_include_max_batch(true);
  auto answer = client_->CheckFit(fit);
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_GT(answer->devices_size(), 2);
  int with_batch = 0;
  for (const v1::DeviceFit& device : answer->devices()) {
    SCOPED_TRACE(device.device_name());
    v1::FindMaxBatchSizeRequest request;
    request.set_graph_fingerprint(registered->graph_fingerprint());
    request.mutable_device()->set_name(device.device_name());
    request.set_max_overhead_ratio(0.2);
    auto batch = client_->FindMaxBatchSize(request);
    ASSERT_TRUE(batch.ok()) << batch.status();
    // The same reserve as the fit answer, and the same largest batch.
    EXPECT_EQ(batch->usable_bytes(),
              device.device_memory_bytes() - device.reserved_bytes());
    ASSERT_EQ(device.has_max_batch_size(), batch->with_recompute().found());
    if (!device.has_max_batch_size()) continue;
    ++with_batch;
    EXPECT_EQ(device.max_batch_size(), batch->with_recompute().batch_size());
    // At 256 (the graph's batch) the fit answer and the batch agree.
    EXPECT_EQ(device.fits(), device.max_batch_size() >= 256);
  }
  EXPECT_GT(with_batch, 2);
}

TEST_F(SchedulerTest, MaxBatchBadInput) {
  v1::FindMaxBatchSizeRequest request = MaxBatchRequest("v100-16gb");
  request.set_min_batch_size(64);
  request.set_max_batch_size(32);
  auto response = client_->FindMaxBatchSize(request);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(response.status().message()),
              HasSubstr("max_batch (32) is below min_batch (64)"));

  response = client_->FindMaxBatchSize(MaxBatchRequest("tpu-v9"));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(response.status().message()), HasSubstr("tpu-v9"));

  request = MaxBatchRequest("v100-16gb");
  request.mutable_graph()->mutable_tensors(3)->set_size_bytes(12);
  request.mutable_graph()->mutable_tensors(3)->add_shape(100);
  request.mutable_graph()->mutable_tensors(3)->set_dtype(v1::DTYPE_FLOAT32);
  response = client_->FindMaxBatchSize(request);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(response.status().message()),
              HasSubstr("tensor '3': batch_dim 0 of shape [100] is 100, not "
                        "a multiple of the graph's batch_size 256"));

  request = MaxBatchRequest("v100-16gb");
  request.mutable_graph()->set_batch_size(0);
  response = client_->FindMaxBatchSize(request);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(response.status().message()),
              HasSubstr("but the graph has no batch_size"));

  request = MaxBatchRequest("v100-16gb");
  request.clear_graph();
  request.set_graph_fingerprint("abc");
  response = client_->FindMaxBatchSize(request);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(response.status().message()),
              HasSubstr("graph fingerprint 'abc' is not registered"));

  request = MaxBatchRequest("");
  EXPECT_EQ(client_->FindMaxBatchSize(request).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(client_->FindMaxBatchSize(MaxBatchRequest("a100-80gb")).ok());
}

TEST_F(SchedulerTest, FrontierIsParetoAndEveryPointReplays) {
  v1::GetMemoryFrontierRequest request;
  *request.mutable_graph() = vgg16_;
  auto frontier = client_->GetMemoryFrontier(request);
  ASSERT_TRUE(frontier.ok()) << frontier.status();
  EXPECT_EQ(frontier->baseline_peak_bytes(), kVgg16Peak);
  ASSERT_GE(frontier->points_size(), 3);
  EXPECT_EQ(frontier->points(0).peak_bytes(), kVgg16Peak);
  EXPECT_EQ(frontier->points(0).recompute_cost(), 0);
  for (int i = 0; i < frontier->points_size(); ++i) {
    const v1::FrontierPoint& point = frontier->points(i);
    if (i > 0) {
      EXPECT_LT(point.peak_bytes(), frontier->points(i - 1).peak_bytes());
      EXPECT_GT(point.recompute_cost(),
                frontier->points(i - 1).recompute_cost());
    }
    v1::GenerateRecomputePlanRequest plan_request;
    *plan_request.mutable_graph() = vgg16_;
    plan_request.set_policy(v1::RECOMPUTE_POLICY_AUTO);
    plan_request.set_memory_limit_bytes(point.memory_limit_bytes());
    auto plan = client_->GenerateRecomputePlan(plan_request);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->plan_fingerprint(), point.plan_fingerprint());
    EXPECT_EQ(plan->planned_peak_bytes(), point.peak_bytes());
    EXPECT_DOUBLE_EQ(plan->recompute_cost(), point.recompute_cost());
  }
}

// The scheduler questions take the plan's chunking, so that their answers
// are what a client planning with it gets: on a captured GPT (batch 4) on
// an H100 at 20% extra compute, AUTO fits a larger batch than OFF (chunks
// of the loss free what recomputation cannot), and unspecified is OFF.
class ChunkedSchedulerTest : public SchedulerTest {
 protected:
  void SetUp() override {
    SchedulerTest::SetUp();
    gpt_ = testing::ValueOrFail(adapter::LoadGraphFile(
        std::string(ECHO_TEST_DATA_DIR) + "/graphs/gpt.pb"));
  }

  v1::FindMaxBatchSizeResponse MaxBatch(v1::ChunkingMode chunking) {
    v1::FindMaxBatchSizeRequest request;
    *request.mutable_graph() = gpt_;
    request.mutable_device()->set_name("h100-80gb");
    request.set_max_overhead_ratio(0.2);
    request.set_chunking(chunking);
    return testing::ValueOrFail(client_->FindMaxBatchSize(request));
  }

  v1::CheckFitResponse FitAt(int64_t batch, v1::ChunkingMode chunking) {
    v1::CheckFitRequest request;
    *request.mutable_graph() =
        adapter::GraphToProto(testing::ValueOrFail(planner::WithBatchSize(
            testing::ValueOrFail(adapter::GraphFromProto(gpt_)), batch)));
    request.mutable_device()->set_name("h100-80gb");
    request.set_max_overhead_ratio(0.2);
    request.set_chunking(chunking);
    return testing::ValueOrFail(client_->CheckFit(request));
  }

  v1::Graph gpt_;
};

TEST_F(ChunkedSchedulerTest, MaxBatchAndFitTakeTheChunking) {
  const v1::FindMaxBatchSizeResponse unspecified =
      MaxBatch(v1::CHUNKING_MODE_UNSPECIFIED);
  const v1::FindMaxBatchSizeResponse off = MaxBatch(v1::CHUNKING_MODE_OFF);
  const v1::FindMaxBatchSizeResponse on = MaxBatch(v1::CHUNKING_MODE_AUTO);
  EXPECT_EQ(unspecified.with_recompute().batch_size(),
            off.with_recompute().batch_size());
  EXPECT_EQ(unspecified.with_recompute().peak_bytes(),
            off.with_recompute().peak_bytes());
  EXPECT_EQ(unspecified.plans_evaluated(), off.plans_evaluated());
  EXPECT_EQ(on.without_recompute().batch_size(),
            off.without_recompute().batch_size());
  ASSERT_TRUE(off.with_recompute().found());
  const int64_t batch = on.with_recompute().batch_size();
  EXPECT_GT(batch, off.with_recompute().batch_size());
  EXPECT_LE(on.with_recompute().recompute_overhead_ratio(), 0.2);

  // CheckFit at AUTO's answer: fits with AUTO, at the search's peak, not
  // with OFF or unspecified.
  const v1::CheckFitResponse fits = FitAt(batch, v1::CHUNKING_MODE_AUTO);
  EXPECT_TRUE(fits.fits()) << fits.message();
  EXPECT_EQ(fits.planned_peak_bytes(), on.with_recompute().peak_bytes());
  EXPECT_FALSE(FitAt(batch, v1::CHUNKING_MODE_OFF).fits());
  EXPECT_FALSE(FitAt(batch, v1::CHUNKING_MODE_UNSPECIFIED).fits());

  // By fingerprint, with the device's largest batch: the same search.
  v1::RegisterGraphRequest registration;
  *registration.mutable_graph() = gpt_;
  auto registered = client_->RegisterGraph(registration);
  ASSERT_TRUE(registered.ok()) << registered.status();
  v1::CheckFitRequest fit;
  fit.set_graph_fingerprint(registered->graph_fingerprint());
  fit.add_device_names("h100-80gb");
  fit.set_max_overhead_ratio(0.2);
  fit.set_include_max_batch(true);
  fit.set_chunking(v1::CHUNKING_MODE_AUTO);
  auto answer = client_->CheckFit(fit);
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_EQ(answer->devices_size(), 1);
  EXPECT_EQ(answer->devices(0).max_batch_size(), batch);

  fit.set_chunking(static_cast<v1::ChunkingMode>(7));
  EXPECT_EQ(client_->CheckFit(fit).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A chunked frontier reaches lower, its bound counts the chunked loss, and
// each point, chunked ones included, is GenerateRecomputePlan's answer at
// its memory limit with the same chunking.
TEST_F(ChunkedSchedulerTest, ChunkedFrontierPointsReplay) {
  v1::GetMemoryFrontierRequest request;
  *request.mutable_graph() = gpt_;
  request.mutable_device()->set_name("h100-80gb");
  // No truncation (under the sanitizers too): the sweeps compare.
  request.set_time_budget_seconds(600);
  const v1::GetMemoryFrontierResponse unspecified =
      testing::ValueOrFail(client_->GetMemoryFrontier(request));
  request.set_chunking(v1::CHUNKING_MODE_AUTO);
  const v1::GetMemoryFrontierResponse on =
      testing::ValueOrFail(client_->GetMemoryFrontier(request));
  EXPECT_LT(on.peak_lower_bound_bytes(), unspecified.peak_lower_bound_bytes());
  ASSERT_GT(on.points_size(), 0);
  ASSERT_GT(unspecified.points_size(), 0);
  EXPECT_LT(on.points(on.points_size() - 1).peak_bytes(),
            unspecified.points(unspecified.points_size() - 1).peak_bytes());
  int chunked = 0;
  for (const v1::FrontierPoint& point : on.points()) {
    SCOPED_TRACE(point.memory_limit_bytes());
    v1::GenerateRecomputePlanRequest plan_request;
    *plan_request.mutable_graph() = gpt_;
    plan_request.mutable_device()->set_name("h100-80gb");
    plan_request.set_memory_limit_bytes(point.memory_limit_bytes());
    plan_request.set_chunking(v1::CHUNKING_MODE_AUTO);
    auto plan = client_->GenerateRecomputePlan(plan_request);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->plan_fingerprint(), point.plan_fingerprint());
    EXPECT_EQ(plan->planned_peak_bytes(), point.peak_bytes());
    EXPECT_DOUBLE_EQ(plan->recompute_cost(), point.recompute_cost());
    chunked += plan->chunked_regions_size() > 0;
  }
  EXPECT_GT(chunked, 0);
  // Unspecified is OFF: the same points.
  request.set_chunking(v1::CHUNKING_MODE_OFF);
  const v1::GetMemoryFrontierResponse off =
      testing::ValueOrFail(client_->GetMemoryFrontier(request));
  ASSERT_EQ(off.points_size(), unspecified.points_size());
  for (int i = 0; i < off.points_size(); ++i) {
    EXPECT_EQ(off.points(i).plan_fingerprint(),
              unspecified.points(i).plan_fingerprint());
  }
}

TEST_F(SchedulerTest, HugeFrontierIsResourceExhaustedAndServerServes) {
  v1::GetMemoryFrontierRequest request;
  v1::Graph* graph = request.mutable_graph();
  graph->add_tensors()->set_id("x");
  for (int i = 0; i < 250000; ++i) {
    v1::Op* op = graph->add_ops();
    op->set_id(absl::StrCat(i));
    op->add_input_ids("x");
  }
  auto frontier = client_->GetMemoryFrontier(request);
  EXPECT_EQ(frontier.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(frontier.status().message()),
              HasSubstr("250000 ops"));
  v1::GetMemoryFrontierRequest small;
  *small.mutable_graph() = vgg16_;
  small.set_max_points(3);
  EXPECT_TRUE(client_->GetMemoryFrontier(small).ok());
}

}  // namespace
}  // namespace echo
