#include "server/log_limiter.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/stubs/logging.h"
#include "server/log_text.h"
#include "spdlog/spdlog.h"

namespace echo::server {

LogLimiter::LogLimiter(Options options,
                       std::function<void(const std::string&)> summary)
    : options_(options), summary_(std::move(summary)) {}

bool LogLimiter::Allow(const std::string& reason, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  SummarizeEnded(now);
  Window& window = windows_[reason];
  if (window.written == 0 && window.suppressed == 0) window.start = now;
  if (window.written < options_.lines_per_window) {
    ++window.written;
    return true;
  }
  ++window.suppressed;
  ++suppressed_total_;
  return false;
}

int64_t LogLimiter::suppressed_total() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return suppressed_total_;
}

void LogLimiter::SummarizeEnded(Clock::time_point now) {
  for (auto it = windows_.begin(); it != windows_.end();) {
    Window& window = it->second;
    if (now - window.start < options_.window) {
      ++it;
      continue;
    }
    if (window.suppressed > 0) {
      const std::string line = absl::StrCat(
          it->first, ": ", window.suppressed, " more like it in ",
          std::chrono::duration<double>(now - window.start).count(),
          " s, not logged (at most ", options_.lines_per_window, " per ",
          std::chrono::duration<double>(options_.window).count(),
          " s a reason)");
      if (summary_) {
        summary_(line);
      } else {
        spdlog::warn("{}", line);
      }
    }
    it = windows_.erase(it);
  }
}

LogLimiter& RejectionLogLimiter() {
  static LogLimiter* limiter = new LogLimiter(LogLimiter::Options());
  return *limiter;
}

namespace {

void ProtobufToSpdlog(google::protobuf::LogLevel level, const char* filename,
                      int line, const std::string& message) {
  const spdlog::level::level_enum as =
      level == google::protobuf::LOGLEVEL_INFO      ? spdlog::level::debug
      : level == google::protobuf::LOGLEVEL_WARNING ? spdlog::level::warn
                                                    : spdlog::level::err;
  if (!spdlog::should_log(as)) return;
  if (!RejectionLogLimiter().Allow(
          absl::StrCat("libprotobuf ", filename, ":", line))) {
    return;
  }
  spdlog::log(as, "libprotobuf {}:{}: {}", filename, line, LogText(message));
}

}  // namespace

void RouteProtobufLogs() { google::protobuf::SetLogHandler(&ProtobufToSpdlog); }

}  // namespace echo::server
