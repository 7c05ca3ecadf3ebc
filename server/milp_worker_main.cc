// echo_milp_worker: plans one OPTIMAL request for echod in a child process
// (optimal_worker.h), so that a solver crash, abort or runaway allocation
// ends this process and not the server.
//
//   echo_milp_worker --cpu_seconds=N --address_space_bytes=M
//       < echo.internal.MilpWorkerRequest > echo.internal.MilpWorkerReply
//
// It sets its own limits before it reads the request (the loader must map
// its libraries first, so they are not set before exec), runs OPTIMAL's
// pass (planner::RunRecomputePass) and writes its schedule. Exit statuses: 0
// reply written; 2 bad arguments; 3 unreadable request; 4 out of memory (under
// --address_space_bytes); 1 reply not written; killed by SIGXCPU past
// --cpu_seconds.
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "adapter/graph_convert.h"
#include "adapter/plan_convert.h"
#include "planner/recompute/recompute_planner.h"
#include "planner/status_macros.h"
#include "server/milp_worker.pb.h"
#include "server/optimal_worker.h"
#include "server/pass_codec.h"

namespace {

using echo::internal::MilpWorkerReply;
using echo::internal::MilpWorkerRequest;

struct Limits {
  int64_t cpu_seconds = 0;
  int64_t address_space_bytes = 0;
};

bool ParseArguments(int argc, char** argv, Limits* limits) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    int64_t* value = nullptr;
    std::string text;
    if (absl::StartsWith(arg, "--cpu_seconds=")) {
      value = &limits->cpu_seconds;
      text = arg.substr(sizeof("--cpu_seconds=") - 1);
    } else if (absl::StartsWith(arg, "--address_space_bytes=")) {
      value = &limits->address_space_bytes;
      text = arg.substr(sizeof("--address_space_bytes=") - 1);
    }
    if (value == nullptr || !absl::SimpleAtoi(text, value) || *value <= 0) {
      std::fprintf(stderr, "%s: bad argument '%s'\n",
                   echo::server::kMilpWorkerName, arg.c_str());
      return false;
    }
  }
  return limits->cpu_seconds > 0 && limits->address_space_bytes > 0;
}

// No core files (a crash is reported by its signal), the CPU time (SIGXCPU
// at the soft limit, SIGKILL a second later) and the address space; and
// SIGKILL when echod dies, so that no worker outlives it.
bool ApplyLimits(const Limits& limits) {
  const rlimit no_core{0, 0};
  const rlimit cpu{static_cast<rlim_t>(limits.cpu_seconds),
                   static_cast<rlim_t>(limits.cpu_seconds + 1)};
  const rlimit address_space{static_cast<rlim_t>(limits.address_space_bytes),
                             static_cast<rlim_t>(limits.address_space_bytes)};
  return ::prctl(PR_SET_PDEATHSIG, SIGKILL) == 0 &&
         ::setrlimit(RLIMIT_CORE, &no_core) == 0 &&
         ::setrlimit(RLIMIT_CPU, &cpu) == 0 &&
         ::setrlimit(RLIMIT_AS, &address_space) == 0;
}

bool ReadAll(int fd, std::string* data) {
  char buffer[65536];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      data->append(buffer, static_cast<size_t>(n));
    } else if (n == 0) {
      return true;
    } else if (errno != EINTR) {
      return false;
    }
  }
}

bool WriteAll(int fd, const std::string& data) {
  size_t written = 0;
  while (written < data.size()) {
    const ssize_t n = ::write(fd, data.data() + written, data.size() - written);
    if (n > 0) {
      written += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      return false;
    }
  }
  return true;
}

// The pass echod's planner asked for, with echod's costs and budget; echod
// replays and reports its schedule.
absl::StatusOr<echo::internal::PassResult> RunPass(
    const MilpWorkerRequest& work) {
  if (!work.has_options() || !work.has_graph()) {
    // An echod of another version (one still running after an upgrade).
    return absl::InvalidArgumentError(
        "the request has no pass options or no graph: echod and "
        "echo_milp_worker are of different versions; restart echod");
  }
  ASSIGN_OR_RETURN(const echo::planner::RecomputePlanOptions options,
                   echo::server::PassOptionsFromProto(work.options()));
  ASSIGN_OR_RETURN(const echo::planner::Graph graph,
                   echo::adapter::GraphFromProto(work.graph()));
  const std::vector<double> costs(work.op_costs().begin(),
                                  work.op_costs().end());
  ASSIGN_OR_RETURN(const echo::planner::PassOutput output,
                   echo::planner::RunRecomputePass(graph, costs, options,
                                                   work.max_overhead_ratio(),
                                                   work.cost_budget()));
  echo::internal::PassResult result;
  echo::adapter::ScheduleToProto(graph, output.schedule,
                                 result.mutable_schedule());
  result.set_limit_reachable(output.limit_reachable);
  result.set_solver_status(output.solver_status);
  result.set_solver_bound_cost(output.solver_bound_cost);
  result.set_stash_bound_bytes(output.stash_bound_bytes);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  // An allocation refused under the address-space limit ends the process
  // with a status echod reports as such.
  std::set_new_handler(
      [] { ::_exit(echo::server::kMilpWorkerExitOutOfMemory); });
  Limits limits;
  if (!ParseArguments(argc, argv, &limits)) {
    std::fprintf(stderr,
                 "usage: %s --cpu_seconds=N --address_space_bytes=M "
                 "< request > reply\n",
                 echo::server::kMilpWorkerName);
    return echo::server::kMilpWorkerExitUsage;
  }
  // The reply goes to a private copy of stdout; whatever the solver prints
  // goes to /dev/null and cannot corrupt it.
  const int reply_fd = ::dup(STDOUT_FILENO);
  std::FILE* null = std::fopen("/dev/null", "w");
  if (reply_fd < 0 || null == nullptr ||
      ::dup2(::fileno(null), STDOUT_FILENO) < 0) {
    std::perror("echo_milp_worker: cannot redirect stdout");
    return echo::server::kMilpWorkerExitUsage;
  }
  if (!ApplyLimits(limits)) {
    std::perror("echo_milp_worker: cannot set its limits");
    return echo::server::kMilpWorkerExitUsage;
  }
  std::string input;
  MilpWorkerRequest work;
  if (!ReadAll(STDIN_FILENO, &input) || !work.ParseFromString(input)) {
    std::fprintf(stderr, "echo_milp_worker: unreadable request\n");
    return echo::server::kMilpWorkerExitBadRequest;
  }
  input.clear();
  input.shrink_to_fit();
  MilpWorkerReply reply;
  absl::StatusOr<echo::internal::PassResult> result = RunPass(work);
  if (result.ok()) {
    *reply.mutable_result() = *std::move(result);
  } else {
    reply.set_code(static_cast<int>(result.status().code()));
    reply.set_message(std::string(result.status().message()));
  }
  std::string output;
  if (!reply.SerializeToString(&output) || !WriteAll(reply_fd, output)) {
    std::perror("echo_milp_worker: cannot write its reply");
    return 1;
  }
  return 0;
}
