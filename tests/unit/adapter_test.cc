// The adapter's graph conversions: importer declarations become the proto
// without a Graph (the server validates once), and mean what the IR means.
#include <string>

#include "adapter/graph_convert.h"
#include "adapter/graph_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/checkmate_import.h"
#include "planner/memory_simulator.h"
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

}  // namespace
}  // namespace echo::adapter
