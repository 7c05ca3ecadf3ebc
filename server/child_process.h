// Runs a helper program as a child process (posix_spawn, no shell), or a
// function in a fork of this process (contained_call.h): writes its stdin,
// reads its stdout, and polls the caller's interrupt so that a cancelled
// call, a passed deadline or a drain kills it (SIGKILL) within one poll
// interval. The child is always reaped before RunChild returns: no zombies.
#ifndef ECHO_SERVER_CHILD_PROCESS_H_
#define ECHO_SERVER_CHILD_PROCESS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/recompute/plan.h"

namespace echo::server {

struct ChildRun {
  std::string path;               // the executable, run as is
  std::vector<std::string> args;  // argv[1...]
  // Instead of `path`: run in a fork of this process, with its stdout as
  // `out_fd` and no other descriptor open but stdin and stderr; returns the
  // exit code. It must take no lock another thread may hold at the fork
  // (no logging, no registry): malloc is safe (glibc takes its locks
  // around fork), the planner is pure.
  std::function<int(int out_fd)> fork_body;
  // Locks the fork body may take (malloc's are glibc's concern): held by
  // the forking thread across fork(), released on both sides after it.
  std::vector<std::mutex*> held_across_fork;
  std::string input;  // its stdin, then closed
  // Killed once it has run this long (wall clock).
  double wall_limit_seconds = 60;
  // Polled every poll_interval; non-OK: the child is killed and RunChild
  // returns that status. Empty: never.
  planner::Interrupt interrupted;
  std::chrono::milliseconds poll_interval{10};
  // More output than this kills the child (a runaway writer).
  int64_t max_output_bytes = std::numeric_limits<int32_t>::max();
};

struct ChildResult {
  // Exactly one of: exited (exit_code), killed by a signal (signal), or
  // killed by RunChild at wall_limit_seconds (wall_limit_hit; signal is then
  // SIGKILL).
  bool exited = false;
  int exit_code = 0;
  int signal = 0;
  bool wall_limit_hit = false;
  // CPU time (user + system) the child used.
  double cpu_seconds = 0;
  double wall_seconds = 0;
  std::string output;  // its stdout, possibly truncated when killed
};

// Errors: the interrupt's status; INTERNAL when the program cannot be
// started (naming it) or its output exceeds max_output_bytes.
// `live_children`, when given, counts the children running at any moment.
absl::StatusOr<ChildResult> RunChild(const ChildRun& run,
                                     std::atomic<int>* live_children = nullptr);

// "signal 11 (SIGSEGV: Segmentation fault)".
std::string DescribeSignal(int signal);

}  // namespace echo::server

#endif  // ECHO_SERVER_CHILD_PROCESS_H_
