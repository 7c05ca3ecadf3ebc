// The adapter's graph conversions: importer declarations become the proto
// without a Graph (the server validates once), and mean what the IR means;
// a Graph back to the proto (GraphToProto) is the same graph again.
#include <unistd.h>

#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "adapter/call_convert.h"
#include "adapter/device_convert.h"
#include "adapter/graph_convert.h"
#include "adapter/graph_file.h"
#include "adapter/plan_convert.h"
#include "adapter/schedule_convert.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "planner/checkmate_import.h"
#include "planner/device_catalog.h"
#include "planner/memory_simulator.h"
#include "planner/optimizer_step.h"
#include "planner/text_format.h"
#include "test_util.h"

namespace echo::adapter {
namespace {

using ::testing::HasSubstr;

constexpr char kGraph[] = R"(
  graph tiny
  tensor x f32[4,8] input
  tensor w 128 parameter
  op mm fwd gemm x w -> h:f32[4,8] time=0.5 on=cpu:x86_64 type=aten::mm
  op drop fwd random h -> d:f32[4,8]
  op keep fwd elementwise d -> y:f32[4,8] norecompute cost=3
  output y
)";

TEST(GraphSpecsToProtoTest, MeansWhatTheIrMeans) {
  ASSERT_OK_AND_ASSIGN(planner::GraphBuilder specs,
                       planner::ParseTextGraphSpecs(kGraph));
  ASSERT_OK_AND_ASSIGN(v1::Graph proto, GraphSpecsToProto(specs));
  ASSERT_OK_AND_ASSIGN(planner::Graph via_proto, GraphFromProto(proto));
  const planner::Graph direct = testing::ParseOrFail(kGraph);
  EXPECT_EQ(via_proto.name(), "tiny");
  ASSERT_EQ(via_proto.num_tensors(), direct.num_tensors());
  for (planner::TensorIndex t = 0; t < direct.num_tensors(); ++t) {
    const planner::Tensor& a = via_proto.tensor(t);
    const planner::Tensor& b = direct.tensor(t);
    EXPECT_EQ(a.id, b.id);
    EXPECT_EQ(a.size_bytes, b.size_bytes) << b.id;
    EXPECT_EQ(a.role, b.role) << b.id;
    EXPECT_EQ(a.is_output, b.is_output) << b.id;
  }
  ASSERT_EQ(via_proto.num_ops(), direct.num_ops());
  for (planner::OpIndex o = 0; o < direct.num_ops(); ++o) {
    const planner::Op& a = via_proto.op(o);
    const planner::Op& b = direct.op(o);
    EXPECT_EQ(a.recomputable, b.recomputable) << b.id;
    EXPECT_EQ(a.measured_time_seconds, b.measured_time_seconds) << b.id;
    EXPECT_EQ(a.measured_on, b.measured_on) << b.id;
    EXPECT_EQ(a.relative_cost, b.relative_cost) << b.id;
    EXPECT_EQ(a.op_type, b.op_type) << b.id;
  }
  // Unset stays unset on the wire: the server applies the defaults.
  EXPECT_FALSE(proto.ops(1).has_recomputable());
  EXPECT_FALSE(via_proto.op(1).recomputable);  // RANDOM
  EXPECT_EQ(proto.tensors(2).role(), v1::TENSOR_ROLE_UNSPECIFIED);
}

TEST(GraphSpecsToProtoTest, CheckmateGraphKeepsItsPeak) {
  ASSERT_OK_AND_ASSIGN(planner::GraphBuilder specs,
                       planner::ImportCheckmateSpecs(testing::ReadTestFile(
                           "checkmate/vgg16_b256_train.json")));
  ASSERT_OK_AND_ASSIGN(v1::Graph proto, GraphSpecsToProto(specs));
  ASSERT_OK_AND_ASSIGN(planner::Graph graph, GraphFromProto(proto));
  EXPECT_EQ(planner::SimulatePlain(graph, {}).peak_bytes, 15825108992);
}

// A Checkmate batch size given for another format is an error, not ignored.
TEST(GraphSpecsToProtoTest, CheckmateBatchOnlyForCheckmateFiles) {
  for (const int64_t batch : {int64_t{32}, planner::kCheckmateBatchFromName}) {
    const absl::StatusOr<v1::Graph> text = ParseGraph(
        "tensor x 16 input\n", GraphFormat::kEchoText, "g.graph", batch);
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(text.status().message()),
                HasSubstr("g.graph: a Checkmate batch size (echoctl "
                          "--batch_dim) applies to Checkmate JSON files only"));
  }
  ASSERT_OK_AND_ASSIGN(
      const v1::Graph vgg,
      ParseGraph(testing::ReadTestFile("checkmate/vgg16_b256_train.json"),
                 GraphFormat::kAuto, "vgg16_b256_train.json",
                 planner::kCheckmateBatchFromName));
  EXPECT_EQ(vgg.batch_size(), 256);
}

TEST(GraphSpecsToProtoTest, ValidationIsTheServersOnly) {
  // Syntax is fine; the dangling input is for GraphFromProto (the server).
  ASSERT_OK_AND_ASSIGN(
      v1::Graph proto,
      ParseGraph("tensor x 16 input\nop bad fwd elementwise x ghost -> y:16\n",
                 GraphFormat::kEchoText, "g.graph"));
  EXPECT_THAT(std::string(GraphFromProto(proto).status().message()),
              HasSubstr("op 'bad'"));
  // Syntax errors stay the client's, naming the file.
  EXPECT_THAT(std::string(ParseGraph("tensor x sixteen input\n",
                                     GraphFormat::kEchoText, "g.graph")
                              .status()
                              .message()),
              HasSubstr("g.graph: line 1"));
  // A negative cost is invalid, not "unknown" (found by the text_graph
  // fuzzer: echoctl dropped it and echod accepted the graph).
  ASSERT_OK_AND_ASSIGN(
      proto,
      ParseGraph("tensor x 16 input\nop a fwd other x -> y:16 cost=-.5\n",
                 GraphFormat::kEchoText, "g.graph"));
  EXPECT_THAT(std::string(GraphFromProto(proto).status().message()),
              HasSubstr("op 'a': relative_cost must be a non-negative number"));
  planner::GraphBuilder specs;
  specs.MarkOutputs({"nowhere"});
  EXPECT_EQ(GraphSpecsToProto(specs).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Every field the IR keeps, a against b (b: a through GraphToProto and
// GraphFromProto).
void ExpectSameGraph(const planner::Graph& a, const planner::Graph& b) {
  EXPECT_EQ(a.name(), b.name());
  EXPECT_EQ(a.batch_size(), b.batch_size());
  EXPECT_EQ(a.metadata(), b.metadata());
  ASSERT_EQ(a.num_tensors(), b.num_tensors());
  for (planner::TensorIndex t = 0; t < a.num_tensors(); ++t) {
    const planner::Tensor& x = a.tensor(t);
    const planner::Tensor& y = b.tensor(t);
    EXPECT_EQ(x.id, y.id);
    EXPECT_EQ(x.name, y.name) << x.id;
    EXPECT_EQ(x.shape, y.shape) << x.id;
    EXPECT_EQ(x.dtype, y.dtype) << x.id;
    EXPECT_EQ(x.size_bytes, y.size_bytes) << x.id;
    EXPECT_EQ(x.role, y.role) << x.id;
    EXPECT_EQ(x.is_output, y.is_output) << x.id;
    EXPECT_EQ(x.batch_dim, y.batch_dim) << x.id;
    EXPECT_EQ(x.producer, y.producer) << x.id;
    EXPECT_EQ(x.readers, y.readers) << x.id;
  }
  ASSERT_EQ(a.num_ops(), b.num_ops());
  for (planner::OpIndex o = 0; o < a.num_ops(); ++o) {
    const planner::Op& x = a.op(o);
    const planner::Op& y = b.op(o);
    EXPECT_EQ(x.id, y.id);
    EXPECT_EQ(x.name, y.name) << x.id;
    EXPECT_EQ(x.op_type, y.op_type) << x.id;
    EXPECT_EQ(x.op_class, y.op_class) << x.id;
    EXPECT_EQ(x.phase, y.phase) << x.id;
    EXPECT_EQ(x.inputs, y.inputs) << x.id;
    EXPECT_EQ(x.outputs, y.outputs) << x.id;
    EXPECT_EQ(x.flops, y.flops) << x.id;
    EXPECT_EQ(x.measured_time_seconds, y.measured_time_seconds) << x.id;
    EXPECT_EQ(x.measured_on, y.measured_on) << x.id;
    EXPECT_EQ(x.relative_cost, y.relative_cost) << x.id;
    EXPECT_EQ(x.workspace_bytes, y.workspace_bytes) << x.id;
    EXPECT_EQ(x.recomputable, y.recomputable) << x.id;
    EXPECT_EQ(x.recompute_outputs, y.recompute_outputs) << x.id;
    EXPECT_EQ(x.attributes, y.attributes) << x.id;
  }
}

// proto -> IR -> proto -> IR: the same graph and plain peak, and the second
// proto is the first again (nothing left to resolve).
void ExpectRoundTrip(const v1::Graph& original) {
  ASSERT_OK_AND_ASSIGN(const planner::Graph graph, GraphFromProto(original));
  const v1::Graph proto = GraphToProto(graph);
  ASSERT_OK_AND_ASSIGN(const planner::Graph again, GraphFromProto(proto));
  ExpectSameGraph(graph, again);
  planner::MemoryModelOptions rounded;
  rounded.rounding_bytes = 512;
  EXPECT_EQ(planner::SimulatePlain(again, {}).peak_bytes,
            planner::SimulatePlain(graph, {}).peak_bytes);
  EXPECT_EQ(planner::SimulatePlain(again, rounded).peak_bytes,
            planner::SimulatePlain(graph, rounded).peak_bytes);
  // Compared field by field (maps serialize in any order); not printed:
  // a fixture is megabytes.
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
      GraphToProto(again), proto));
}

class GraphToProtoFixtureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GraphToProtoFixtureTest, RoundTripIsTheSameGraph) {
  ASSERT_OK_AND_ASSIGN(
      const v1::Graph original,
      LoadGraphFile(absl::StrCat(ECHO_TEST_DATA_DIR, "/", GetParam())));
  ExpectRoundTrip(original);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GraphToProtoFixtureTest,
                         ::testing::Values("graphs/resnet50.pb",
                                           "graphs/transformer.pb",
                                           "graphs/gpt.pb", "graphs/nmt.pb",
                                           "graphs/deepspeech2.pb",
                                           "checkmate/vgg16_b256_train.json"));

// LoadGraphFile reads a regular file in one read and anything else as a
// stream; a directory or a missing path says what it is.
TEST(LoadGraphFileTest, ReadsFilesAndPipesAndNamesWhatItCannot) {
  const std::string fixture =
      absl::StrCat(ECHO_TEST_DATA_DIR, "/graphs/transformer.pb");
  ASSERT_OK_AND_ASSIGN(const v1::Graph from_file,
                       LoadGraphFile(fixture, GraphFormat::kBinary));
  EXPECT_GT(from_file.ops_size(), 100);
  int pipe_ends[2];
  ASSERT_EQ(pipe(pipe_ends), 0);
  const std::string bytes = from_file.SerializeAsString();
  std::thread writer([&] {
    for (size_t done = 0; done < bytes.size();) {
      const ssize_t wrote =
          write(pipe_ends[1], bytes.data() + done, bytes.size() - done);
      if (wrote <= 0) break;
      done += static_cast<size_t>(wrote);
    }
    close(pipe_ends[1]);
  });
  absl::StatusOr<v1::Graph> from_pipe = LoadGraphFile(
      absl::StrCat("/proc/self/fd/", pipe_ends[0]), GraphFormat::kBinary);
  writer.join();
  close(pipe_ends[0]);
  ASSERT_TRUE(from_pipe.ok()) << from_pipe.status();
  // Field by field (maps serialize in any order); not printed.
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*from_pipe,
                                                                 from_file));

  // A read that fails (address 0 of this process: EIO) is an error, not an
  // exception out of the stream.
  absl::StatusOr<v1::Graph> unreadable = LoadGraphFile("/proc/self/mem");
  EXPECT_EQ(unreadable.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(unreadable.status().message()),
              HasSubstr("cannot read /proc/self/mem"));

  absl::StatusOr<v1::Graph> directory = LoadGraphFile(ECHO_TEST_DATA_DIR);
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(directory.status().message()),
              HasSubstr("is a directory, not a graph file"));
  absl::StatusOr<v1::Graph> missing = LoadGraphFile("/nonexistent/graph.pb");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("cannot open /nonexistent/graph.pb"));
}

TEST(GraphToProtoTest, KeepsWhatTheFixturesLeaveOut) {
  // Batch dimensions, a shapeless per-sample size, a partial re-execution,
  // workspace, FLOPs, every phase, unset and explicit flags and roles.
  constexpr char kEveryField[] = R"(
    graph everything
    batch 4
    tensor x f32[B,8] input
    tensor w bf16[8,8] parameter
    tensor m 256 optimizer_state
    tensor gw bf16[8,8] gradient gradient_of=w
    op mm fwd gemm x w x -> h:f32[B,8] flops=1e6 ws=4096 time=0.5 on=a100-80gb type=aten::mm name=fc1
    op bn fwd norm h -> y:f32[B,8] s:64*B recompute_outputs=1 cost=2
    op drop fwd random y -> d:f32[B,8] recompute
    op loss fwd reduction d -> l:f32[1] norecompute
    op grad bwd gemm l h w -> gw
    op step opt elementwise w gw m -> w2:bf16[8,8]
    output l
  )";
  ASSERT_OK_AND_ASSIGN(planner::GraphBuilder specs,
                       planner::ParseTextGraphSpecs(kEveryField));
  specs.SetMetadata("framework", "torch 2.4");
  ASSERT_OK_AND_ASSIGN(const v1::Graph original, GraphSpecsToProto(specs));
  ExpectRoundTrip(original);

  ASSERT_OK_AND_ASSIGN(const planner::Graph graph, GraphFromProto(original));
  const v1::Graph proto = GraphToProto(graph);
  EXPECT_EQ(proto.batch_size(), 4);
  EXPECT_EQ(proto.metadata().at("framework"), "torch 2.4");
  const v1::Op& bn = proto.ops(1);
  EXPECT_EQ(bn.attributes().at(planner::kRecomputeOutputsAttribute), "1");
  EXPECT_EQ(graph.op(1).recompute_outputs, 1);
  // Defaults Build resolved are written out: roles, sizes, recomputable.
  EXPECT_EQ(proto.tensors(0).role(), v1::TENSOR_ROLE_INPUT);
  EXPECT_EQ(proto.tensors(0).batch_dim(), 0);
  EXPECT_EQ(proto.tensors(0).size_bytes(), 4 * 8 * 4);
  EXPECT_EQ(proto.ops(0).input_ids_size(), 3);  // the repeat is kept
  EXPECT_EQ(proto.ops(0).workspace_bytes(), 4096);
  EXPECT_EQ(proto.ops(0).flops(), 1e6);
  EXPECT_TRUE(proto.ops(2).has_recomputable());
  EXPECT_TRUE(proto.ops(2).recomputable());  // RANDOM, asked for
  EXPECT_FALSE(proto.ops(3).recomputable());
  EXPECT_EQ(proto.ops(5).phase(), v1::PHASE_OPTIMIZER);
  EXPECT_EQ(proto.tensors(3).gradient_of(), "w");
  EXPECT_EQ(graph.tensor(graph.FindTensor("gw")).gradient_of,
            graph.FindTensor("w"));
}

TEST(GraphFromProtoTest, UpdateInTheBackwardNeedsAnOptimizer) {
  ASSERT_OK_AND_ASSIGN(
      planner::GraphBuilder specs,
      planner::ParseTextGraphSpecs("tensor w f32[4] parameter\n"
                                   "op f bwd other w -> g:f32[4]\n"));
  ASSERT_OK_AND_ASSIGN(v1::Graph proto, GraphSpecsToProto(specs));
  proto.mutable_optimizer()->set_update_in_backward(true);
  EXPECT_THAT(std::string(GraphFromProto(proto).status().message()),
              HasSubstr("graph.optimizer.update_in_backward is set but "
                        "graph.optimizer.kind is not"));
  proto.mutable_optimizer()->set_kind(v1::OPTIMIZER_KIND_ADAMW);
  ASSERT_OK_AND_ASSIGN(const planner::Graph graph, GraphFromProto(proto));
  EXPECT_EQ(graph.metadata().at(planner::kOptimizerUpdateInBackwardKey),
            "true");
}

// The scheduler requests' chunking means what the plan request's does:
// unspecified and OFF disable it, AUTO enables it, anything else is
// INVALID_ARGUMENT.
TEST(DeviceConvertTest, TheHostCpusFirstTouchCostCrossesBothWays) {
  v1::DeviceSpec proto;
  proto.set_name("cpu:x86_64");
  proto.set_memory_bytes(int64_t{24} << 30);
  proto.set_memory_bandwidth_bytes_per_second(5e10);
  proto.set_first_touch_seconds_per_byte(5e-10);
  v1::PeakFlops* peak = proto.add_peak_flops();
  peak->set_dtype(v1::DTYPE_FLOAT32);
  peak->set_flops_per_second(1e11);
  ASSERT_OK_AND_ASSIGN(const planner::DeviceSpec spec, ResolveDevice(proto));
  EXPECT_EQ(spec.name, "cpu:x86_64");
  EXPECT_DOUBLE_EQ(spec.first_touch_seconds_per_byte, 5e-10);
  v1::DeviceSpec back;
  DeviceSpecToProto(spec, &back);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(back, proto))
      << back.DebugString();
  // A first-touch cost alone names a device (an incomplete one), not none.
  v1::DeviceSpec alone;
  alone.set_first_touch_seconds_per_byte(5e-10);
  EXPECT_TRUE(NamesDevice(alone));
  const auto resolved = DeviceOf(alone);
  ASSERT_FALSE(resolved.ok());
  EXPECT_THAT(std::string(resolved.status().message()),
              HasSubstr("memory_bytes must be positive"));
}

TEST(ScheduleConvertTest, ChunkingAsInPlanRequests) {
  const planner::DeviceSpec h100 = testing::CatalogDevice("h100-80gb");
  for (const auto& [mode, enabled] :
       {std::pair{v1::CHUNKING_MODE_UNSPECIFIED, false},
        std::pair{v1::CHUNKING_MODE_OFF, false},
        std::pair{v1::CHUNKING_MODE_AUTO, true}}) {
    SCOPED_TRACE(mode);
    v1::CheckFitRequest fit;
    fit.set_chunking(mode);
    EXPECT_EQ(testing::ValueOrFail(FitOptionsFromProto(fit)).chunking.enabled,
              enabled);
    v1::FindMaxBatchSizeRequest batch;
    batch.set_chunking(mode);
    EXPECT_EQ(testing::ValueOrFail(BatchSearchOptionsFromProto(batch, h100))
                  .chunking.enabled,
              enabled);
    v1::GetMemoryFrontierRequest frontier;
    frontier.set_chunking(mode);
    EXPECT_EQ(testing::ValueOrFail(FrontierOptionsFromProto(frontier))
                  .chunking.enabled,
              enabled);
  }
  v1::FindMaxBatchSizeRequest bad;
  bad.set_chunking(static_cast<v1::ChunkingMode>(7));
  EXPECT_THAT(BatchSearchOptionsFromProto(bad, h100).status().message(),
              HasSubstr("unknown chunking mode 7"));
  v1::GetMemoryFrontierRequest bad_frontier;
  bad_frontier.set_chunking(static_cast<v1::ChunkingMode>(7));
  EXPECT_EQ(FrontierOptionsFromProto(bad_frontier).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Zeros are the planner's defaults; an unset reserve is the device's.
TEST(ScheduleConvertTest, BatchSearchDefaultsAndReserve) {
  const planner::DeviceSpec h100 = testing::CatalogDevice("h100-80gb");
  v1::FindMaxBatchSizeRequest request;
  planner::MaxBatchOptions options =
      testing::ValueOrFail(BatchSearchOptionsFromProto(request, h100));
  EXPECT_EQ(options.device_memory_bytes, h100.memory_bytes);
  EXPECT_EQ(options.reserved_bytes,
            planner::DefaultReservedBytes(h100.memory_bytes));
  EXPECT_EQ(options.min_batch, 1);
  EXPECT_EQ(options.multiple_of, 1);
  EXPECT_FALSE(options.max_overhead_ratio.has_value());
  request.set_reserved_bytes(0);
  request.set_min_batch_size(8);
  request.set_multiple_of(8);
  request.set_max_overhead_ratio(0);
  options = testing::ValueOrFail(BatchSearchOptionsFromProto(request, h100));
  EXPECT_EQ(options.reserved_bytes, 0);
  EXPECT_EQ(options.min_batch, 8);
  EXPECT_EQ(options.multiple_of, 8);
  EXPECT_EQ(options.max_overhead_ratio, 0);

  const planner::FrontierOptions frontier =
      testing::ValueOrFail(FrontierOptionsFromProto({}));
  EXPECT_EQ(frontier.max_points, planner::kDefaultFrontierPoints);
  EXPECT_EQ(frontier.time_budget_seconds,
            planner::kDefaultFrontierTimeBudgetSeconds);
}

}  // namespace
}  // namespace echo::adapter
