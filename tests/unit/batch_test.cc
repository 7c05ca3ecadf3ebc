// The batch dimension: validation, rescaling (sizes, FLOPs, workspace; not
// parameters), the text form and the Checkmate importer's option.
#include "planner/batch.h"

#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/checkmate_import.h"
#include "planner/memory_simulator.h"
#include "test_util.h"

namespace echo::planner {
namespace {

using ::testing::HasSubstr;

constexpr const char* kTiny = testing::kTinyBatchGraph;

Graph Parse(const std::string& text) {
  return testing::ValueOrFail(ParseTextGraph(text));
}

TEST(BatchTest, TextFormMarksTheBatchDimension) {
  const Graph graph = Parse(kTiny);
  EXPECT_EQ(graph.batch_size(), 2);
  EXPECT_TRUE(HasBatchDimension(graph));
  EXPECT_EQ(graph.tensor(graph.FindTensor("x")).size_bytes, 200);
  EXPECT_EQ(graph.tensor(graph.FindTensor("x")).batch_dim, 0);
  EXPECT_EQ(graph.tensor(graph.FindTensor("w")).batch_dim, -1);
  EXPECT_EQ(SimulatePlain(graph).peak_bytes, 2200);
}

TEST(BatchTest, RescalesSizesButNotParameters) {
  const Graph graph = Parse(kTiny);
  for (const auto& [batch, peak] : {std::pair<int64_t, int64_t>{1, 2100},
                                    {2, 2200},
                                    {4, 3000},
                                    {7, 4500}}) {
    ASSERT_OK_AND_ASSIGN(const Graph scaled, WithBatchSize(graph, batch));
    EXPECT_EQ(scaled.batch_size(), batch);
    EXPECT_EQ(scaled.tensor(scaled.FindTensor("a")).size_bytes, 200 * batch);
    EXPECT_EQ(scaled.tensor(scaled.FindTensor("w")).size_bytes, 1000);
    EXPECT_EQ(scaled.tensor(scaled.FindTensor("w2")).size_bytes, 1000);
    EXPECT_EQ(SimulatePlain(scaled).peak_bytes, peak) << "batch " << batch;
  }
}

// Shapes, FLOPs and workspace: the graph rescaled to 8 equals the graph
// written at 8; the optimizer op and the parameter keep theirs.
TEST(BatchTest, RescaledShapesMatchTheGraphWrittenAtThatBatch) {
  const std::string text = R"(
graph mlp
batch 4
tensor x f32[B,16] input
tensor w f32[16,16] parameter
op fc fwd gemm x w -> h:f32[B,16] flops=2048 ws=64 cost=2
op bw bwd gemm h x -> gw:f32[16,16] flops=2048 cost=2
op sgd opt elementwise w gw -> w2:f32[16,16] flops=256 cost=1
output w2
)";
  const Graph graph = Parse(text);
  ASSERT_OK_AND_ASSIGN(const Graph scaled, WithBatchSize(graph, 8));
  std::string at8 = absl::StrReplaceAll(text, {{"batch 4", ""},
                                               {"[B,", "[8,"},
                                               {"flops=2048", "flops=4096"},
                                               {"ws=64", "ws=128"}});
  const Graph expected = Parse(at8);
  EXPECT_EQ(SimulatePlain(scaled).peak_bytes,
            SimulatePlain(expected).peak_bytes);
  for (TensorIndex t = 0; t < expected.num_tensors(); ++t) {
    EXPECT_EQ(scaled.tensor(t).size_bytes, expected.tensor(t).size_bytes)
        << expected.tensor(t).id;
    EXPECT_EQ(scaled.tensor(t).shape, expected.tensor(t).shape);
  }
  for (OpIndex o = 0; o < expected.num_ops(); ++o) {
    EXPECT_EQ(scaled.op(o).flops, expected.op(o).flops) << expected.op(o).id;
    EXPECT_EQ(scaled.op(o).workspace_bytes, expected.op(o).workspace_bytes);
  }
  EXPECT_EQ(scaled.op(scaled.FindOp("sgd")).relative_cost, 1);
  EXPECT_EQ(scaled.op(scaled.FindOp("fc")).relative_cost, 4);
}

// A batch folded with other axes ([batch*seq, d] after a flatten,
// [batch*heads, seq, seq] scores) scales as k * batch: rescaled to 8, the
// graph written with 3B at 4 equals the one written with 24 at 8.
TEST(BatchTest, FoldedBatchAxesScaleWithTheirMultiple) {
  const std::string text = R"(
graph attention
batch 4
tensor x f32[B,3,16] input
tensor w f32[16,16] parameter
op flat fwd other x -> xf:f32[3B,16]
op fc fwd gemm xf w -> h:f32[3B,16] flops=3072 cost=3
op scores fwd gemm h h -> s:f32[6B,3,3] flops=512 cost=1
op bw bwd gemm s h -> gw:f32[16,16] flops=3072 cost=3
output gw
)";
  const Graph graph = Parse(text);
  EXPECT_EQ(graph.tensor(graph.FindTensor("xf")).shape,
            (std::vector<int64_t>{12, 16}));
  EXPECT_EQ(graph.tensor(graph.FindTensor("s")).batch_dim, 0);
  ASSERT_OK_AND_ASSIGN(const Graph scaled, WithBatchSize(graph, 8));
  const Graph expected = Parse(absl::StrReplaceAll(
      text, {{"batch 4", ""},
             {"[B,", "[8,"},
             {"[3B,", "[24,"},
             {"[6B,", "[48,"},
             {"flops=3072 cost=3\nop scores", "flops=6144 cost=6\nop scores"},
             {"flops=512 cost=1", "flops=1024 cost=2"},
             {"flops=3072 cost=3\noutput", "flops=6144 cost=6\noutput"}}));
  for (TensorIndex t = 0; t < expected.num_tensors(); ++t) {
    EXPECT_EQ(scaled.tensor(t).shape, expected.tensor(t).shape)
        << expected.tensor(t).id;
    EXPECT_EQ(scaled.tensor(t).size_bytes, expected.tensor(t).size_bytes)
        << expected.tensor(t).id;
  }
  for (OpIndex o = 0; o < expected.num_ops(); ++o) {
    EXPECT_EQ(scaled.op(o).flops, expected.op(o).flops) << expected.op(o).id;
    EXPECT_EQ(scaled.op(o).relative_cost, expected.op(o).relative_cost);
  }
  EXPECT_EQ(SimulatePlain(scaled).peak_bytes,
            SimulatePlain(expected).peak_bytes);
  // And back: the multiple is kept, not the last batch's axis.
  ASSERT_OK_AND_ASSIGN(BatchScaler scaler, BatchScaler::Create(graph));
  ASSERT_OK(scaler.At(8).status());
  ASSERT_OK_AND_ASSIGN(const Graph* back, scaler.At(4));
  EXPECT_EQ(back->tensor(back->FindTensor("s")).shape,
            (std::vector<int64_t>{24, 3, 3}));
}

TEST(BatchTest, ScalerRewritesInPlaceAndBack) {
  const Graph graph = Parse(kTiny);
  ASSERT_OK_AND_ASSIGN(BatchScaler scaler, BatchScaler::Create(graph));
  ASSERT_OK_AND_ASSIGN(const Graph* big, scaler.At(100));
  EXPECT_EQ(SimulatePlain(*big).peak_bytes, 51000);
  ASSERT_OK_AND_ASSIGN(const Graph* back, scaler.At(2));
  EXPECT_EQ(SimulatePlain(*back).peak_bytes, 2200);
  EXPECT_EQ(scaler.At(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scaler.At(int64_t{1} << 62).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(BatchTest, BadBatchDimensionsAreNamed) {
  const auto error = [](const std::string& text) {
    return std::string(ParseTextGraph(text).status().message());
  };
  // A batch dim whose size is not the graph's batch.
  GraphBuilder builder("g");
  builder.SetBatchSize(4);
  TensorSpec x;
  x.id = "x";
  x.shape = {3, 8};
  x.dtype = DType::kFloat32;
  x.batch_dim = 0;
  builder.AddTensor(x);
  OpSpec op;
  op.id = "f";
  op.input_ids = {"x"};
  builder.AddOp(op);
  EXPECT_THAT(std::move(builder).Build().status().message(),
              HasSubstr("tensor 'x': batch_dim 0 of shape [3,8] is 3, not a "
                        "multiple of the graph's batch_size 4"));
  EXPECT_THAT(error("batch 2\ntensor x f32[0B,4] input\nop f fwd other x -> "
                    "y:4\n"),
              HasSubstr("bad batch dimension '0B' for tensor 'x'"));
  EXPECT_THAT(error("batch 2\ntensor w f32[B,4] parameter\nop f fwd other w "
                    "-> y:4\n"),
              HasSubstr("tensor 'w': is a parameter and marks batch_dim 0"));
  EXPECT_THAT(error("tensor x f32[B,4] input\nop f fwd other x -> y:4\n"),
              HasSubstr("uses B before a 'batch <size>' line"));
  // Found by the text-graph fuzzer: "<k>B" without a batch line divided by
  // the batch size 0.
  EXPECT_THAT(error("tensor x f32[32,12B] input\nop f fwd other x -> y:4\n"),
              HasSubstr("uses B before a 'batch <size>' line"));
  EXPECT_THAT(error("batch 0\n"), HasSubstr("bad batch size '0'"));

  GraphBuilder outside("g");
  outside.SetBatchSize(4);
  TensorSpec y;
  y.id = "y";
  y.shape = {4};
  y.dtype = DType::kFloat32;
  y.batch_dim = 1;
  outside.AddTensor(y);
  outside.AddOp(op);
  EXPECT_THAT(std::move(outside).Build().status().message(),
              HasSubstr("tensor 'y': batch_dim 1 is outside its shape [4]"));

  EXPECT_EQ(BatchScaler::Create(Parse("tensor x 4\nop f fwd other x -> y:4\n"))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(BatchTest, CheckmateBatchFromNames) {
  EXPECT_EQ(CheckmateBatchFromName("vgg16_b256_train.json"), 256);
  EXPECT_EQ(CheckmateBatchFromName("fcn8_vgg_b32_train.json"), 32);
  EXPECT_EQ(CheckmateBatchFromName("VGG16 (MLSys)_256_(224, 224, 3)_train"),
            256);
  EXPECT_EQ(CheckmateBatchFromName("resnet_train"), 0);
}

TEST(BatchTest, CheckmateImportMarksEveryNode) {
  const std::string json =
      testing::ReadTestFile("checkmate/vgg16_b256_train.json");
  CheckmateImportOptions options;
  options.batch_size = kCheckmateBatchFromName;
  ASSERT_OK_AND_ASSIGN(const Graph graph, ImportCheckmateJson(json, options));
  EXPECT_EQ(graph.batch_size(), 256);
  // docs/design.md: VGG16 at batch 256 peaks at 15,825,108,992 bytes; at 128,
  // every node's size halves.
  EXPECT_EQ(SimulatePlain(graph).peak_bytes, 15825108992);
  ASSERT_OK_AND_ASSIGN(const Graph half, WithBatchSize(graph, 128));
  EXPECT_EQ(SimulatePlain(half).peak_bytes, 15825108992 / 2);
  ASSERT_OK_AND_ASSIGN(const Graph plain, ImportCheckmateJson(json));
  EXPECT_EQ(plain.batch_size(), 0);
}

}  // namespace
}  // namespace echo::planner
