// Policy OPTIMAL's pass runs in a child process, echo_milp_worker
// (milp_worker_main.cc): CBC has crashed and aborted inside echod before,
// its root LP cannot be interrupted, and its memory grows with the model.
// echod plans OPTIMAL as every policy (planner::GenerateRecomputePlan: checks,
// prechecks, replay and report in echod); only the pass's Run is the child's,
// through RecomputePlanOptions::run_isolated_pass.
// The child gets CPU-time and address-space limits (setrlimit, applied by
// the worker before it reads the request) and is killed (SIGKILL) when the
// call is cancelled, its deadline passes or a drain times out. Outcomes:
//   the worker's answer       the planner's status and plan, as in-process
//   killed by a signal        INTERNAL naming the signal
//   CPU or wall time limit    RESOURCE_EXHAUSTED (solver_time_limit_seconds
//                             + 10 s of CPU, 3 times that of wall clock)
//   out of address space      RESOURCE_EXHAUSTED naming
//                             --optimal_memory_limit_bytes
//   cancelled / deadline      CANCELLED / DEADLINE_EXCEEDED (the interrupt's)
#ifndef ECHO_SERVER_OPTIMAL_WORKER_H_
#define ECHO_SERVER_OPTIMAL_WORKER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "echo/v1/planner.pb.h"
#include "planner/recompute/plan.h"
#include "planner/recompute/recompute_pass.h"

namespace echo::server {

inline constexpr char kMilpWorkerName[] = "echo_milp_worker";
inline constexpr int64_t kDefaultOptimalMemoryLimitBytes = int64_t{4} << 30;
// CPU and wall time the worker may take beyond solver_time_limit_seconds
// (decoding, AUTO's warm start, building the model, CBC's last steps).
inline constexpr double kOptimalTimeMarginSeconds = 10;
// The wall-clock limit is this many times the CPU-time limit.
inline constexpr double kOptimalWallSlack = 3;

// echo_milp_worker's exit statuses besides 0 (a MilpWorkerReply written).
inline constexpr int kMilpWorkerExitUsage = 2;
inline constexpr int kMilpWorkerExitBadRequest = 3;
inline constexpr int kMilpWorkerExitOutOfMemory = 4;

struct OptimalWorkerOptions {
  // Empty: echo_milp_worker in the directory of the running executable.
  std::string worker_path;
  // The worker's RLIMIT_AS.
  int64_t memory_limit_bytes = kDefaultOptimalMemoryLimitBytes;
};

class OptimalWorker {
 public:
  explicit OptimalWorker(const OptimalWorkerOptions& options);

  const std::string& path() const { return path_; }
  // OK when the worker can be started; else FAILED_PRECONDITION saying what
  // is missing.
  absl::Status CheckUsable() const;

  // Runs the pass of `input` (OPTIMAL's) in a child process: the problem's
  // graph (maybe a chunked one), op costs, options (pass_codec.h) and
  // budget, as the engine gave them; input.options.interrupted is polled
  // every 10 ms. A planner::PassRunner for
  // RecomputePlanOptions::run_isolated_pass.
  absl::StatusOr<planner::PassOutput> RunPass(const planner::PassInput& input);

  // Worker processes running now (for tests and metrics).
  int live_children() const { return live_children_.load(); }

 private:
  std::string path_;
  int64_t memory_limit_bytes_;
  std::atomic<int> live_children_{0};
};

}  // namespace echo::server

#endif  // ECHO_SERVER_OPTIMAL_WORKER_H_
