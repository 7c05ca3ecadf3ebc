// RunChild (server/child_process.h) on small system programs: input and
// output through pipes larger than their buffers, exit codes and signals,
// interrupts and the wall limit killing the child, and no child left behind.
#include "server/child_process.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/test_util.h"

namespace echo::server {
namespace {

using ::testing::HasSubstr;

ChildRun Shell(const std::string& script) {
  ChildRun run;
  run.path = "/bin/sh";
  run.args = {"-c", script};
  return run;
}

TEST(ChildProcessTest, PassesMegabytesThroughStdinAndStdout) {
  ChildRun run;
  run.path = "/bin/cat";
  run.input.assign(8 << 20, 'x');  // far more than a pipe buffer
  run.input.back() = 'y';
  std::atomic<int> live{0};
  ASSERT_OK_AND_ASSIGN(const ChildResult result, RunChild(run, &live));
  EXPECT_TRUE(result.exited);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.output, run.input);
  EXPECT_EQ(live.load(), 0);
}

TEST(ChildProcessTest, ReportsExitCodesAndSignals) {
  ASSERT_OK_AND_ASSIGN(ChildResult result, RunChild(Shell("exit 7")));
  EXPECT_TRUE(result.exited);
  EXPECT_EQ(result.exit_code, 7);

  ASSERT_OK_AND_ASSIGN(result, RunChild(Shell("kill -SEGV $$")));
  EXPECT_FALSE(result.exited);
  EXPECT_EQ(result.signal, SIGSEGV);
  EXPECT_EQ(DescribeSignal(SIGSEGV), "signal 11 (SIGSEGV: Segmentation fault)");

  // The input is not read: a write to a closed pipe is EPIPE, not a SIGPIPE
  // that would end this process.
  ChildRun run = Shell("exit 0");
  run.input.assign(4 << 20, 'x');
  ASSERT_OK_AND_ASSIGN(result, RunChild(run));
  EXPECT_TRUE(result.exited);
}

TEST(ChildProcessTest, AnInterruptKillsTheChildWithinAPollInterval) {
  ChildRun run = Shell("exec sleep 30");
  const auto start = std::chrono::steady_clock::now();
  run.interrupted = [start]() -> absl::Status {
    if (std::chrono::steady_clock::now() - start >
        std::chrono::milliseconds(200))
      return absl::DeadlineExceededError("test deadline");
    return absl::OkStatus();
  };
  std::atomic<int> live{0};
  const absl::StatusOr<ChildResult> result = RunChild(run, &live);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(live.load(), 0);  // killed and reaped
  // 200 ms plus a poll interval, with room for a loaded machine; the child
  // would have slept 30 s.
  EXPECT_LT(seconds, 5.0);
}

TEST(ChildProcessTest, TheWallLimitKillsTheChild) {
  ChildRun run = Shell("exec sleep 30");
  run.wall_limit_seconds = 0.2;
  ASSERT_OK_AND_ASSIGN(const ChildResult result, RunChild(run));
  EXPECT_TRUE(result.wall_limit_hit);
  EXPECT_EQ(result.signal, SIGKILL);
  EXPECT_LT(result.wall_seconds, 5.0);
}

TEST(ChildProcessTest, AMissingProgramIsAnErrorNamingIt) {
  ChildRun run;
  run.path = "/nonexistent/echo_milp_worker";
  const absl::StatusOr<ChildResult> result = RunChild(run);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("cannot start /nonexistent/echo_milp_worker"));
}

}  // namespace
}  // namespace echo::server
