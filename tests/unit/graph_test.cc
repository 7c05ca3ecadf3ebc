// Validation of graphs: every malformed graph is rejected with a message that
// names the offending op or tensor.
#include "planner/graph.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/text_format.h"
#include "test_util.h"

namespace echo::planner {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

void ExpectInvalid(absl::string_view text, absl::string_view fragment) {
  absl::StatusOr<Graph> graph = ParseTextGraph(text);
  ASSERT_FALSE(graph.ok()) << "accepted:\n" << text;
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(graph.status().message()), HasSubstr(fragment));
}

TEST(GraphTest, ParsesTextFormatAndResolvesIds) {
  Graph graph = testing::ParseOrFail(R"(
    graph mlp
    tensor x f32[4,8] input
    tensor w 128 parameter
    op fc fwd gemm x w -> h:f32[4,8] cost=2 flops=512 type=aten::mm
    op act fwd elementwise h -> a:128
    op act_bw bwd elementwise a h -> g:128 ws=64 norecompute
    output g
  )");
  EXPECT_EQ(graph.name(), "mlp");
  ASSERT_EQ(graph.num_ops(), 3);
  ASSERT_EQ(graph.num_tensors(), 5);
  const Tensor& x = graph.tensor(graph.FindTensor("x"));
  EXPECT_EQ(x.size_bytes, 4 * 8 * 4);
  EXPECT_EQ(x.role, TensorRole::kInput);
  EXPECT_EQ(x.producer, kNoOp);
  EXPECT_EQ(graph.tensor(graph.FindTensor("w")).role, TensorRole::kParameter);
  const Tensor& h = graph.tensor(graph.FindTensor("h"));
  EXPECT_EQ(h.role, TensorRole::kActivation);
  EXPECT_EQ(h.producer, graph.FindOp("fc"));
  EXPECT_EQ(h.readers, (std::vector<OpIndex>{1, 2}));
  const Op& fc = graph.op(graph.FindOp("fc"));
  EXPECT_EQ(fc.op_class, OpClass::kGemm);
  EXPECT_EQ(fc.relative_cost, 2);
  EXPECT_EQ(fc.flops, 512);
  EXPECT_EQ(fc.op_type, "aten::mm");
  const Op& bw = graph.op(graph.FindOp("act_bw"));
  EXPECT_EQ(bw.phase, Phase::kBackward);
  EXPECT_EQ(bw.workspace_bytes, 64);
  EXPECT_FALSE(bw.recomputable);
  EXPECT_TRUE(graph.tensor(graph.FindTensor("g")).is_output);
}

// The id indices view the graph's own ids (graph.h): a copy must index its
// copies, and a moved graph the ids it took. Short ids live inside each
// Tensor (the small-string buffer), long ones on the heap; both kinds here.
TEST(GraphTest, CopiesAndMovesFindTheirOwnIds) {
  const std::string long_id = "a_tensor_id_far_longer_than_any_small_string";
  const std::string text =
      absl::StrCat("tensor x 16 input\n",  //
                   "op f fwd elementwise x -> ", long_id, ":16\n",
                   "op g_with_a_long_op_id_on_the_heap fwd elementwise ",
                   long_id, " -> y:16\n");
  std::optional<Graph> original = testing::ParseOrFail(text);
  const auto expect_finds = [&](const Graph& graph) {
    ASSERT_EQ(graph.FindTensor("x"), 0);
    ASSERT_EQ(graph.FindTensor(long_id), 1);
    ASSERT_EQ(graph.FindTensor("y"), 2);
    EXPECT_EQ(graph.FindTensor("z"), -1);
    EXPECT_EQ(graph.FindOp("f"), 0);
    EXPECT_EQ(graph.FindOp("g_with_a_long_op_id_on_the_heap"), 1);
    // Each key views this graph's own id, not a destroyed one's.
    EXPECT_EQ(graph.tensor(graph.FindTensor(long_id)).id, long_id);
  };
  Graph copy = *original;
  Graph assigned = testing::ParseOrFail("tensor a 4\nop b fwd other a -> c:4");
  assigned = *original;
  // From a graph of its own: moving from `original` would keep its ids
  // alive in `moved`.
  std::optional<Graph> to_move = testing::ParseOrFail(text);
  Graph moved = std::move(*to_move);
  to_move.reset();
  // The ids the copies were made from are gone, and their memory is
  // written over by blocks of the same sizes (glibc hands freed blocks of a
  // size back first), so that a view of them reads other bytes (ASan also
  // names any such read).
  original.reset();
  std::vector<std::string> scribbles(64, std::string(long_id.size(), '#'));
  std::vector<std::vector<char>> blocks;
  for (size_t bytes : {3 * sizeof(Tensor), 2 * sizeof(Op)}) {
    for (int i = 0; i < 16; ++i) blocks.emplace_back(bytes, '#');
  }
  expect_finds(copy);
  expect_finds(assigned);
  expect_finds(moved);
  Graph move_assigned =
      testing::ParseOrFail("tensor a 4\nop b fwd other a -> c:4");
  move_assigned = std::move(copy);
  expect_finds(move_assigned);
  EXPECT_EQ(move_assigned.FindTensor("a"), -1);
}

TEST(GraphTest, RandomAndCollectiveOpsAreNotRecomputableByDefault) {
  Graph graph = testing::ParseOrFail(R"(
    tensor x 16
    op drop fwd random x -> d:16
    op ar fwd collective d -> r:16
    op r2 fwd random r -> q:16 recompute
  )");
  EXPECT_FALSE(graph.op(0).recomputable);
  EXPECT_FALSE(graph.op(1).recomputable);
  EXPECT_TRUE(graph.op(2).recomputable);
}

TEST(GraphTest, RejectsDuplicateTensorId) {
  ExpectInvalid("tensor x 4\ntensor x 8\nop a fwd other x -> y:4",
                "tensor 'x': duplicate tensor id");
}

TEST(GraphTest, RejectsDuplicateOpId) {
  ExpectInvalid("tensor x 4\nop a fwd other x -> y:4\nop a fwd other y -> z:4",
                "op 'a': duplicate op id");
}

TEST(GraphTest, RejectsDanglingInput) {
  ExpectInvalid("tensor x 4\nop a fwd other nope -> y:4",
                "op 'a': reads unknown tensor 'nope'");
}

TEST(GraphTest, RejectsDanglingOutput) {
  ExpectInvalid("tensor x 4\nop a fwd other x -> ghost",
                "op 'a': writes unknown tensor 'ghost'");
}

TEST(GraphTest, RejectsDoublyProducedTensor) {
  ExpectInvalid("tensor x 4\nop a fwd other x -> y:4\nop b fwd other x -> y",
                "tensor 'y': produced twice, by op 'a' and op 'b'");
}

// Found by the text_graph fuzzer: the error message read the op's id past
// the end of the ops built so far (std::length_error or garbage).
TEST(GraphTest, RejectsOpWritingATensorTwice) {
  ExpectInvalid("tensor x 4\nop a fwd other x -> y y:4",
                "op 'a': writes tensor 'y' twice");
}

TEST(GraphTest, RejectsReadBeforeProduced) {
  ExpectInvalid(
      "tensor x 4\ntensor y 4\nop a fwd other y -> z:4\n"
      "op b fwd other x -> y",
      "op 'a': reads tensor 'y' before its producer 'b' runs");
}

TEST(GraphTest, RejectsInPlaceWrite) {
  ExpectInvalid("tensor x 4\ntensor y 4\nop a fwd other x y -> y",
                "op 'a': reads and writes tensor 'y'");
}

TEST(GraphTest, DistinctInputsOfAWideOpInFirstUseOrder) {
  // 65,536 inputs (the fan-in limit, graph_limits.h) over 4 tensors: a 4 MB
  // request with 200k once took 19 s of CPU here.
  std::string text =
      "tensor a 4 input\ntensor b 4 input\ntensor c 4 input\n"
      "tensor d 4 input\nop wide fwd elementwise";
  const char* ids[] = {" c", " a", " c", " d", " a"};
  for (int i = 0; i < 65536; ++i) text += ids[i % 5];
  text += " -> y:4\nop again fwd elementwise y y -> z:4\n";
  Graph graph = testing::ParseOrFail(text);
  EXPECT_EQ(graph.op(0).inputs.size(), 65536u);
  std::vector<std::string> distinct;
  for (TensorIndex t : graph.DistinctInputs(0)) {
    distinct.push_back(graph.tensor(t).id);
  }
  EXPECT_THAT(distinct, ElementsAre("c", "a", "d"));
  EXPECT_EQ(graph.DistinctInputs(1).size(), 1u);
  EXPECT_THAT(graph.tensor(graph.FindTensor("a")).readers, ElementsAre(0));
}

TEST(GraphTest, RejectsNegativeDimension) {
  ExpectInvalid("tensor x f32[2,-3]\nop a fwd other x -> y:4",
                "tensor 'x': negative dimension -3 at axis 1");
}

TEST(GraphTest, RejectsShapeOverflow) {
  ExpectInvalid("tensor x f32[4294967296,4294967296]\nop a fwd other x -> y:4",
                "tensor 'x': shape [4294967296,4294967296] overflows int64");
}

TEST(GraphTest, RejectsTotalSizeOverflow) {
  ExpectInvalid(
      "tensor x 4611686018427387000\ntensor z 4611686018427387000\n"
      "op a fwd other x z -> y:4",
      "overflow int64");
}

TEST(GraphTest, RejectsNegativeSizeThroughBuilder) {
  GraphBuilder builder;
  TensorSpec tensor;
  tensor.id = "t";
  tensor.size_bytes = -5;
  builder.AddTensor(tensor);
  OpSpec op;
  op.id = "o";
  op.input_ids = {"t"};
  builder.AddOp(op);
  absl::StatusOr<Graph> graph = std::move(builder).Build();
  ASSERT_FALSE(graph.ok());
  EXPECT_THAT(std::string(graph.status().message()),
              HasSubstr("tensor 't': negative size_bytes -5"));
}

TEST(GraphTest, RejectsEmptyGraph) { ExpectInvalid("tensor x 4", "no ops"); }

TEST(GraphTest, RejectsUnknownOutputMark) {
  ExpectInvalid("tensor x 4\nop a fwd other x -> y:4\noutput q",
                "tensor 'q': marked as output");
}

TEST(GraphTest, TextErrorsCarryLineNumbers) {
  ExpectInvalid("tensor x 4\nop a sideways other x -> y:4",
                "line 2: unknown phase 'sideways'");
  ExpectInvalid("tensor x 4\nop a fwd magic x -> y:4",
                "line 2: unknown op class 'magic'");
  ExpectInvalid("tensor x f99[2]\n", "line 1: unknown dtype 'f99'");
}

TEST(CheckmateImportTest, ImportsVgg16) {
  Graph graph = testing::LoadCheckmate("vgg16_b256_train");
  EXPECT_EQ(graph.num_ops(), 45);
  EXPECT_EQ(graph.num_tensors(), 45);
  const Op& first = graph.op(0);
  EXPECT_EQ(first.id, "0");
  EXPECT_EQ(first.name, "block1_conv1");
  EXPECT_EQ(first.op_class, OpClass::kConv);
  EXPECT_EQ(first.relative_cost, 385);
  EXPECT_EQ(graph.tensor(0).size_bytes, 3288334336);
  EXPECT_EQ(graph.op(44).phase, Phase::kBackward);
  int edges = 0;
  for (const Op& op : graph.ops()) edges += static_cast<int>(op.inputs.size());
  EXPECT_EQ(edges, 87);
}

TEST(CheckmateImportTest, RejectsMalformedJson) {
  for (const char* bad :
       {"{", "[]", R"({"nodes": [], "links": 3})",
        R"({"nodes": [{"id": 0, "cost_cpu": 1}], "links": []})",
        R"({"nodes": [{"id": 0, "cost_cpu": 1, "cost_ram": 4}],
            "links": [{"source": 0, "target": 5}]})",
        R"({"nodes": [{"id": 0, "cost_cpu": 1, "cost_ram": 4},
                      {"id": 0, "cost_cpu": 1, "cost_ram": 4}], "links": []})"}) {
    absl::StatusOr<Graph> graph = ImportCheckmateJson(bad);
    EXPECT_FALSE(graph.ok()) << bad;
    EXPECT_THAT(std::string(graph.status().message()),
                HasSubstr("checkmate graph"));
  }
}

TEST(CheckmateImportTest, RejectsCycleAsOrderError) {
  absl::StatusOr<Graph> graph = ImportCheckmateJson(R"({"nodes": [
      {"id": 0, "cost_cpu": 1, "cost_ram": 4},
      {"id": 1, "cost_cpu": 1, "cost_ram": 4}],
      "links": [{"source": 1, "target": 0}]})");
  ASSERT_FALSE(graph.ok());
  EXPECT_THAT(std::string(graph.status().message()),
              HasSubstr("op '0': reads tensor '1' before its producer"));
}

TEST(OpClassFromLayerNameTest, MapsKerasNames) {
  EXPECT_EQ(OpClassFromLayerName("block3_conv2_backward"), OpClass::kConv);
  EXPECT_EQ(OpClassFromLayerName("fc1"), OpClass::kGemm);
  EXPECT_EQ(OpClassFromLayerName("conv2_block1_1_bn"), OpClass::kNorm);
  EXPECT_EQ(OpClassFromLayerName("conv_dw_3"), OpClass::kConv);
  EXPECT_EQ(OpClassFromLayerName("conv1_pad"), OpClass::kDataMovement);
  EXPECT_EQ(OpClassFromLayerName("bn_5"), OpClass::kNorm);
  EXPECT_EQ(OpClassFromLayerName("block1_pool"), OpClass::kReduction);
  EXPECT_EQ(OpClassFromLayerName("flatten"), OpClass::kDataMovement);
  EXPECT_EQ(OpClassFromLayerName("activation_3"), OpClass::kElementwise);
}

}  // namespace
}  // namespace echo::planner
