// Rate-limited warnings: a flood of rejected requests (a fuzzer, a broken
// client in a loop) writes a few lines per reason and a count of the rest,
// not one line each (124k rejections once wrote 33 MB in 3 minutes).
// Reasons are bounded by the caller (method and status code, or
// libprotobuf's file and line), never caller text.
#ifndef ECHO_SERVER_LOG_LIMITER_H_
#define ECHO_SERVER_LOG_LIMITER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

namespace echo::server {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    // Lines written per reason in each window; the rest are counted.
    int64_t lines_per_window = 20;
    std::chrono::milliseconds window{10000};
  };
  // `summary` writes "N more like it" lines (spdlog by default).
  explicit LogLimiter(Options options,
                      std::function<void(const std::string&)> summary = {});

  // True when a line for `reason` may be written now. Before answering,
  // writes a summary for each reason whose window has ended with lines
  // held back.
  bool Allow(const std::string& reason, Clock::time_point now = Clock::now());
  // Lines held back so far, over all reasons (for tests and metrics).
  int64_t suppressed_total() const;

 private:
  struct Window {
    Clock::time_point start;
    int64_t written = 0;
    int64_t suppressed = 0;
  };
  void SummarizeEnded(Clock::time_point now);

  const Options options_;
  const std::function<void(const std::string&)> summary_;
  mutable std::mutex mutex_;
  std::map<std::string, Window> windows_;
  int64_t suppressed_total_ = 0;
};

// The process's limiter for rejected requests and libprotobuf's messages.
LogLimiter& RejectionLogLimiter();

// Routes libprotobuf's own messages (e.g. "String field contains invalid
// UTF-8 data") into spdlog at their level, through RejectionLogLimiter,
// so that --log_level and the limit apply to them too.
void RouteProtobufLogs();

}  // namespace echo::server

#endif  // ECHO_SERVER_LOG_LIMITER_H_
