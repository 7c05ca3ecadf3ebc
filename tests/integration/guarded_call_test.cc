#include "server/guarded_call.h"

#include <new>
#include <stdexcept>

#include "gtest/gtest.h"

namespace echo::server {
namespace {

TEST(RunGuardedTest, PassesStatusesThrough) {
  EXPECT_TRUE(RunGuarded("M", [] { return absl::OkStatus(); }).ok());
  const absl::Status status =
      RunGuarded("M", [] { return absl::InvalidArgumentError("bad graph"); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "bad graph");
}

TEST(RunGuardedTest, ExceptionsBecomeInternalNamingTheMethod) {
  const absl::Status oom =
      RunGuarded("GenerateRecomputePlan",
                 []() -> absl::Status { throw std::bad_alloc(); });
  EXPECT_EQ(oom.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(oom.message(),
            "GenerateRecomputePlan: out of memory while serving the request");
  const absl::Status error = RunGuarded("CheckFit", []() -> absl::Status {
    throw std::runtime_error("vector::reserve");
  });
  EXPECT_EQ(error.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(error.message(), "CheckFit: unexpected error: vector::reserve");
  const absl::Status odd =
      RunGuarded("ProfileOps", []() -> absl::Status { throw 42; });
  EXPECT_EQ(odd.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(odd.message(), "ProfileOps: unexpected non-standard exception");
}

}  // namespace
}  // namespace echo::server
