#include "planner/byte_size.h"

#include "gtest/gtest.h"
#include "test_util.h"

namespace echo::planner {
namespace {

TEST(ByteSizeTest, ParsesNumbersAndUnits) {
  const std::pair<const char*, int64_t> cases[] = {
      {"0", 0},
      {"1048576", 1048576},
      {"1e10", 10000000000},
      {"1.5e3", 1500},
      {"512MiB", 512LL << 20},
      {"10GiB", 10LL << 30},
      {"10 gib", 10LL << 30},
      {"2G", 2LL << 30},
      {"1GB", 1000000000},
      {"3kb", 3000},
      {"1.5KiB", 1536},
      {"100B", 100},
      {" 7 ", 7},
  };
  for (const auto& [text, bytes] : cases) {
    ASSERT_OK_AND_ASSIGN(const int64_t parsed, ParseByteSize(text));
    EXPECT_EQ(parsed, bytes) << text;
  }
}

TEST(ByteSizeTest, RejectsWhatIsNotASize) {
  for (const char* text :
       {"", "lots", "GiB", "-1", "10 parsecs", "1e", "1e30", "nan", "1..2"}) {
    EXPECT_EQ(ParseByteSize(text).status().code(),
              absl::StatusCode::kInvalidArgument)
        << text;
  }
}

TEST(ByteSizeTest, HumanBytes) {
  EXPECT_EQ(HumanBytes(512), "512 B");
  EXPECT_EQ(HumanBytes(1536), "1.50 KiB");
  EXPECT_EQ(HumanBytes(15825108992), "14.74 GiB");
}

}  // namespace
}  // namespace echo::planner
