// Limits on one graph's declarations (planner/graph_limits.h): each is
// INVALID_ARGUMENT naming the op or tensor, the field, its size and the limit;
// a graph at every limit builds.
#include "planner/graph_limits.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/graph.h"

namespace echo::planner {
namespace {

using ::testing::HasSubstr;

// x -> op "f" -> y.
GraphBuilder Simple() {
  GraphBuilder builder("g");
  TensorSpec x;
  x.id = "x";
  x.size_bytes = 8;
  builder.AddTensor(x);
  TensorSpec y = x;
  y.id = "y";
  builder.AddTensor(y);
  OpSpec f;
  f.id = "f";
  f.input_ids = {"x"};
  f.output_ids = {"y"};
  builder.AddOp(f);
  return builder;
}

std::string Error(GraphBuilder builder) {
  absl::StatusOr<Graph> graph = std::move(builder).Build();
  EXPECT_FALSE(graph.ok());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(graph.status().message());
}

TEST(GraphLimitsTest, AGraphAtEveryLimitBuilds) {
  GraphBuilder builder("g");
  TensorSpec x;
  x.id = std::string(kMaxIdBytes, 'x');
  x.name = std::string(kMaxTextBytes, 'n');
  x.shape.assign(kMaxShapeRank, 1);
  x.dtype = DType::kFloat32;
  builder.AddTensor(x);
  OpSpec op;
  op.id = "op";
  op.op_type = std::string(kMaxTextBytes, 't');
  op.input_ids.assign(kMaxOpInputs, x.id);
  for (size_t i = 0; i < kMaxOpOutputs; ++i) {
    TensorSpec out;
    out.id = absl::StrCat("o", i);
    out.size_bytes = 1;
    builder.AddTensor(out);
    op.output_ids.push_back(out.id);
  }
  for (size_t i = 0; i < kMaxAttributesPerOp; ++i) {
    op.attributes[absl::StrCat(std::string(kMaxKeyBytes - 4, 'k'), 1000 + i)] =
        std::string(kMaxTextBytes, 'v');
  }
  builder.AddOp(op);
  builder.SetMetadata("notes", std::string(kMaxMetadataValueBytes, 'm'));
  absl::StatusOr<Graph> graph = std::move(builder).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->op(0).inputs.size(), kMaxOpInputs);
  EXPECT_EQ(graph->DistinctInputs(0).size(), 1u);
}

TEST(GraphLimitsTest, EachLimitIsNamedInItsError) {
  GraphBuilder builder = Simple();
  TensorSpec long_id;
  long_id.id = std::string(kMaxIdBytes + 1, 'z');
  long_id.size_bytes = 1;
  builder.AddTensor(long_id);
  EXPECT_THAT(Error(std::move(builder)),
              HasSubstr(absl::StrCat("tensor #2 '", std::string(64, 'z'),
                                     "...': its id is 1025 bytes (limit "
                                     "1024)")));

  builder = Simple();
  TensorSpec deep;
  deep.id = "deep";
  deep.dtype = DType::kFloat32;
  deep.shape.assign(kMaxShapeRank + 1, 1);
  builder.AddTensor(deep);
  EXPECT_THAT(Error(std::move(builder)),
              HasSubstr("tensor 'deep': 65 shape dimensions (limit 64)"));

  builder = Simple();
  OpSpec wide;
  wide.id = "wide";
  wide.input_ids.assign(kMaxOpInputs + 1, "x");
  builder.AddOp(wide);
  EXPECT_THAT(Error(std::move(builder)),
              HasSubstr("op 'wide': 65537 input_ids (limit 65536)"));

  builder = Simple();
  OpSpec fan_out;
  fan_out.id = "fan_out";
  fan_out.output_ids.assign(kMaxOpOutputs + 1, "y");
  builder.AddOp(fan_out);
  EXPECT_THAT(Error(std::move(builder)),
              HasSubstr("op 'fan_out': 65537 output_ids (limit 65536)"));

  builder = Simple();
  OpSpec long_input;
  long_input.id = "reader";
  long_input.input_ids = {"x", std::string(kMaxIdBytes + 1, 'q')};
  builder.AddOp(long_input);
  EXPECT_THAT(Error(std::move(builder)),
              HasSubstr("op 'reader': input_ids[1] is 1025 bytes (limit "
                        "1024)"));

  builder = Simple();
  OpSpec typed;
  typed.id = "typed";
  typed.op_type = std::string(kMaxTextBytes + 1, 't');
  builder.AddOp(typed);
  EXPECT_THAT(Error(std::move(builder)),
              HasSubstr("op 'typed': op_type is 4097 bytes (limit 4096)"));

  builder = Simple();
  OpSpec keyed;
  keyed.id = "keyed";
  keyed.attributes[std::string(kMaxKeyBytes + 1, 'k')] = "v";
  builder.AddOp(keyed);
  EXPECT_THAT(Error(std::move(builder)),
              HasSubstr("op 'keyed': a key of attributes is 257 bytes "
                        "(limit 256)"));

  builder = Simple();
  for (size_t i = 0; i <= kMaxMetadataEntries; ++i) {
    builder.SetMetadata(absl::StrCat("k", i), "v");
  }
  EXPECT_THAT(Error(std::move(builder)),
              HasSubstr("graph: 257 metadata (limit 256)"));

  builder = Simple();
  builder.SetName(std::string(kMaxTextBytes + 1, 'g'));
  EXPECT_THAT(Error(std::move(builder)),
              HasSubstr("graph: its name is 4097 bytes (limit 4096)"));
}

}  // namespace
}  // namespace echo::planner
