#include "server/contained_call.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/child_process.h"
#include "server/guarded_call.h"

namespace echo::server {
namespace {

// The child's answer: [int32 code][uint32 message bytes][message][response].
constexpr size_t kHeaderBytes = 8;

bool WriteAll(int fd, const std::string& bytes) {
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n =
        ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    written += static_cast<size_t>(n);
  }
  return true;
}

std::string EncodeAnswer(const absl::Status& status,
                         const google::protobuf::Message& response) {
  const int32_t code = static_cast<int32_t>(status.code());
  const std::string message(status.message());
  const uint32_t length = static_cast<uint32_t>(message.size());
  std::string out(kHeaderBytes, '\0');
  std::memcpy(out.data(), &code, 4);
  std::memcpy(out.data() + 4, &length, 4);
  out += message;
  if (status.ok()) response.AppendToString(&out);
  return out;
}

absl::Status DecodeAnswer(const char* method, const std::string& answer,
                          google::protobuf::Message* response) {
  int32_t code = 0;
  uint32_t length = 0;
  if (answer.size() >= kHeaderBytes) {
    std::memcpy(&code, answer.data(), 4);
    std::memcpy(&length, answer.data() + 4, 4);
  }
  if (answer.size() < kHeaderBytes || answer.size() - kHeaderBytes < length) {
    return absl::InternalError(
        absl::StrCat(method, ": the planning worker's answer is cut short (",
                     answer.size(), " bytes)"));
  }
  absl::Status status(static_cast<absl::StatusCode>(code),
                      answer.substr(kHeaderBytes, length));
  if (!status.ok()) return status;
  response->Clear();
  if (!response->ParseFromArray(
          answer.data() + kHeaderBytes + length,
          static_cast<int>(answer.size() - kHeaderBytes - length))) {
    return absl::InternalError(absl::StrCat(
        method, ": the planning worker's response does not parse"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunContained(const ContainedCall& call,
                          google::protobuf::Message* response,
                          const std::function<absl::Status()>& work,
                          ContainedRun* run, std::atomic<int>* live_children) {
  *run = ContainedRun();
  ChildRun child;
  child.path = absl::StrCat(call.method, "'s planning worker");
  child.wall_limit_seconds = call.wall_limit_seconds;
  child.interrupted = call.interrupted;
  child.held_across_fork = call.held_across_fork;
  child.fork_body = [&](int out_fd) {
    const absl::Status status = RunGuarded(call.method, work);
    return WriteAll(out_fd, EncodeAnswer(status, *response)) ? 0 : 1;
  };
  absl::StatusOr<ChildResult> result = RunChild(child, live_children);
  if (!result.ok()) return result.status();
  run->cpu_seconds = result->cpu_seconds;
  run->wall_seconds = result->wall_seconds;
  if (result->wall_limit_hit) {
    return absl::DeadlineExceededError(absl::StrCat(
        call.method, " ran past echod's limit of ", call.wall_limit_seconds,
        " s and was stopped (request id ", call.request_id, ")"));
  }
  if (!result->exited) {
    run->crashed = true;
    run->crash = DescribeSignal(result->signal);
    return absl::InternalError(absl::StrCat(
        "echod's planner crashed on this request (", run->crash,
        ") in an isolated worker; echod goes on serving. Request id ",
        call.request_id,
        ": please report it (the graph is kept when echod "
        "runs with --crash_dump_dir)"));
  }
  if (result->exit_code != 0) {
    return absl::InternalError(
        absl::StrCat(call.method, ": the planning worker exited with code ",
                     result->exit_code, " (request id ", call.request_id, ")"));
  }
  return DecodeAnswer(call.method, result->output, response);
}

std::string NewRequestId() {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(absl::Hex(::getpid()), "-", counter.fetch_add(1) + 1);
}

}  // namespace echo::server
