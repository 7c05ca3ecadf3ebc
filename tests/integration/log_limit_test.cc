// Rate-limited logs (server/log_limiter.h): a flood of rejected requests
// writes a few lines per reason and then a count; libprotobuf's own
// messages go through echod's logger, its level and the same limit.
#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "echo/v1/planner.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "in_process_echod.h"
#include "server/log_limiter.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace echo::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Clock = LogLimiter::Clock;

TEST(LogLimiterTest, WritesAFewLinesPerReasonThenCountsTheRest) {
  std::vector<std::string> summaries;
  LogLimiter limiter(
      {/*lines_per_window=*/3, std::chrono::milliseconds(1000)},
      [&](const std::string& line) { summaries.push_back(line); });
  const Clock::time_point t0 = Clock::now();
  int written = 0;
  for (int i = 0; i < 100; ++i) written += limiter.Allow("Estimate A", t0);
  EXPECT_EQ(written, 3);
  // Another reason has a window of its own.
  EXPECT_TRUE(limiter.Allow("Plan B", t0));
  EXPECT_EQ(limiter.suppressed_total(), 97);
  EXPECT_THAT(summaries, ::testing::IsEmpty());
  // The window ends: the next line of any reason sums up the held-back ones
  // first, and the reason starts afresh.
  EXPECT_TRUE(limiter.Allow("Estimate A", t0 + std::chrono::seconds(2)));
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_THAT(summaries[0], HasSubstr("Estimate A: 97 more like it in 2 s"));
}

// Captures spdlog's default logger while alive.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    spdlog::set_default_logger(std::make_shared<spdlog::logger>(
        "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(text_)));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string text() const { return text_.str(); }
  int64_t Lines(const std::string& containing) const {
    std::istringstream lines(text_.str());
    int64_t count = 0;
    for (std::string line; std::getline(lines, line);) {
      count += line.find(containing) != std::string::npos;
    }
    return count;
  }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST(LogLimiterTest, AFloodOfRejectedRequestsWritesAFewLines) {
  testing::Echod echod(PlannerServiceOptions{});
  CapturedLog log;
  const int64_t held_before = RejectionLogLimiter().suppressed_total();
  for (int i = 0; i < 300; ++i) {
    // Not a protobuf message: INVALID_ARGUMENT each time.
    ASSERT_EQ(echod.RawCall("EstimateMemory", "\xff\xff\xff").error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_LE(log.Lines("EstimateMemory from"), 20) << log.text();
  EXPECT_GE(log.Lines("EstimateMemory from"), 1);
  EXPECT_GE(RejectionLogLimiter().suppressed_total() - held_before, 280);
  // Every call still answered and counted.
  EXPECT_THAT(echod.Metrics(),
              HasSubstr("echo_requests_total{code=\"INVALID_ARGUMENT\","
                        "method=\"EstimateMemory\"} 300"));
}

TEST(LogLimiterTest, ProtobufsOwnMessagesFollowTheLogLevel) {
  RouteProtobufLogs();
  v1::EstimateMemoryRequest request;
  request.mutable_graph()->set_name(std::string("bad \xff utf-8"));
  std::string bytes;
  {
    CapturedLog log;
    const spdlog::level::level_enum level = spdlog::get_level();
    spdlog::set_level(spdlog::level::err);
    request.SerializeToString(&bytes);  // libprotobuf complains, at ERROR
    spdlog::set_level(level);
    EXPECT_THAT(log.text(), HasSubstr("libprotobuf"));
    EXPECT_THAT(log.text(), HasSubstr("invalid UTF-8"));
  }
  {
    CapturedLog log;
    const spdlog::level::level_enum level = spdlog::get_level();
    spdlog::set_level(spdlog::level::off);
    request.SerializeToString(&bytes);
    spdlog::set_level(level);
    EXPECT_EQ(log.text(), "");
  }
}

}  // namespace
}  // namespace echo::server
