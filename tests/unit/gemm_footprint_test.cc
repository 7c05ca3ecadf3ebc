// DoTimeGemm's size check: operand products overflow-checked before the
// CUDA plugin allocates anything.
#include "server/profiler/gemm_footprint.h"

#include <climits>
#include <cstdint>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace echo::server {
namespace {

using ::testing::HasSubstr;

planner::GemmShape Shape(int64_t batch, int64_t m, int64_t n, int64_t k) {
  planner::GemmShape shape;
  shape.batch = batch;
  shape.m = m;
  shape.n = n;
  shape.k = k;
  return shape;
}

TEST(GemmFootprintTest, CountsOperands) {
  auto footprint = ComputeGemmFootprint(Shape(2, 3, 5, 7), 4);
  ASSERT_TRUE(footprint.ok()) << footprint.status();
  EXPECT_EQ(footprint->a_count, 2 * 3 * 7);
  EXPECT_EQ(footprint->b_count, 2 * 7 * 5);
  EXPECT_EQ(footprint->c_count, 2 * 3 * 5);
  EXPECT_EQ(footprint->data_bytes, (42 + 70 + 30) * 4);
}

TEST(GemmFootprintTest, LargestDimsThatFit) {
  // 2^31-1 x 1 x 1 GEMMs in a batch of 2^31-1: about 2^62 elements each.
  auto footprint = ComputeGemmFootprint(Shape(1, INT_MAX, INT_MAX, 1), 1);
  ASSERT_TRUE(footprint.ok()) << footprint.status();
  EXPECT_EQ(footprint->c_count, int64_t{INT_MAX} * INT_MAX);
}

TEST(GemmFootprintTest, RejectsProductsBeyond64Bits) {
  const struct {
    planner::GemmShape shape;
    int64_t element_bytes;
    const char* product;
  } cases[] = {
      // Each dim fits in an int, the products do not fit in int64.
      {Shape(INT_MAX, INT_MAX, 1, INT_MAX), 4, "batch*m*k"},
      {Shape(INT_MAX, 1, INT_MAX, INT_MAX), 4, "batch*k*n"},
      {Shape(INT_MAX, INT_MAX, INT_MAX, 1), 4, "batch*m*n"},
      // Elements fit, bytes do not: 3 * 2^62 / 2 elements.
      {Shape(2, int64_t{1} << 30, int64_t{1} << 30, int64_t{1} << 30), 8,
       "size in bytes"},
  };
  for (const auto& c : cases) {
    const absl::Status status =
        ComputeGemmFootprint(c.shape, c.element_bytes).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << c.product;
    EXPECT_THAT(status.message(), HasSubstr(c.product));
    EXPECT_THAT(status.message(), HasSubstr("overflows 64 bits"));
  }
}

TEST(GemmFootprintTest, RejectsDimsBeyondIntAndNegativeDims) {
  EXPECT_THAT(ComputeGemmFootprint(Shape(1, int64_t{INT_MAX} + 1, 1, 1), 4)
                  .status()
                  .message(),
              HasSubstr("dims beyond 32 bits"));
  EXPECT_EQ(ComputeGemmFootprint(Shape(1, -1, 1, 1), 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace echo::server
