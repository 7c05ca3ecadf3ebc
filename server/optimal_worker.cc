#include "server/optimal_worker.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "adapter/graph_convert.h"
#include "adapter/plan_convert.h"
#include "planner/status_macros.h"
#include "server/child_process.h"
#include "server/milp_worker.pb.h"
#include "server/pass_codec.h"

namespace echo::server {
namespace {

std::string DefaultWorkerPath() {
  std::error_code error;
  const std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return kMilpWorkerName;
  return (self.parent_path() / kMilpWorkerName).string();
}

// The planner's status, carried as its code and message.
absl::Status ReplyStatus(const internal::MilpWorkerReply& reply) {
  if (reply.code() < 0 ||
      reply.code() > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::InternalError(
        absl::StrCat("OPTIMAL: the solver process answered with unknown code ",
                     reply.code(), ": ", reply.message()));
  }
  return absl::Status(static_cast<absl::StatusCode>(reply.code()),
                      reply.message());
}

// The worker sets its hard limits to what echod asks (milp_worker_main.cc),
// which fails when that is above echod's own hard limit (prlimit, ulimit):
// said here, before a child starts, instead of as the child's failure.
absl::Status CheckHardLimit(int resource, absl::string_view name,
                            absl::string_view setting, int64_t wanted,
                            absl::string_view fix) {
  rlimit limit{};
  if (::getrlimit(resource, &limit) != 0 || limit.rlim_max == RLIM_INFINITY ||
      limit.rlim_max >= static_cast<rlim_t>(wanted)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "policy OPTIMAL cannot limit its solver process to ", setting,
      ": echod itself runs under a hard ", name, " limit of ",
      static_cast<int64_t>(limit.rlim_max), " (prlimit, ulimit); ", fix));
}

}  // namespace

OptimalWorker::OptimalWorker(const OptimalWorkerOptions& options)
    : path_(options.worker_path.empty() ? DefaultWorkerPath()
                                        : options.worker_path),
      memory_limit_bytes_(options.memory_limit_bytes) {}

absl::Status OptimalWorker::CheckUsable() const {
  if (::access(path_.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "policy OPTIMAL needs its solver process, ", path_,
        ", which is missing or not executable (install ", kMilpWorkerName,
        " next to echod or set --optimal_worker_path)"));
  }
  return CheckHardLimit(
      RLIMIT_AS, "address-space",
      absl::StrCat("--optimal_memory_limit_bytes=", memory_limit_bytes_),
      memory_limit_bytes_,
      "set --optimal_memory_limit_bytes at most that, or raise echod's limit");
}

absl::StatusOr<planner::PassOutput> OptimalWorker::RunPass(
    const planner::PassInput& input) {
  const planner::Graph& graph = input.problem.graph;
  const double solver_time_limit_seconds =
      input.options.solver_time_limit_seconds;
  RETURN_IF_ERROR(CheckUsable());
  const int64_t time_limit = static_cast<int64_t>(
      std::ceil(solver_time_limit_seconds + kOptimalTimeMarginSeconds));
  RETURN_IF_ERROR(CheckHardLimit(
      RLIMIT_CPU, "CPU-time", absl::StrCat(time_limit + 1, " CPU seconds"),
      time_limit + 1,
      absl::StrCat("use a solver_time_limit_seconds ",
                   kOptimalTimeMarginSeconds + 1,
                   " s below it, or raise echod's limit")));
  internal::MilpWorkerRequest work;
  // The engine's input: the problem's graph (maybe chunked) and options.
  *work.mutable_graph() = adapter::GraphToProto(graph);
  PassOptionsToProto(input.options, work.mutable_options());
  work.mutable_op_costs()->Assign(input.problem.op_costs.begin(),
                                  input.problem.op_costs.end());
  work.set_max_overhead_ratio(input.max_overhead_ratio);
  work.set_cost_budget(input.cost_budget);
  ChildRun run;
  run.path = path_;
  run.args = {absl::StrCat("--cpu_seconds=", time_limit),
              absl::StrCat("--address_space_bytes=", memory_limit_bytes_)};
  if (!work.SerializeToString(&run.input)) {
    return absl::InternalError("OPTIMAL: cannot serialize the request");
  }
  // CBC keeps to its limit in elapsed time; the wall limit catches the steps
  // it cannot interrupt, with slack for a loaded node.
  run.wall_limit_seconds = kOptimalWallSlack * static_cast<double>(time_limit);
  run.interrupted = input.options.interrupted;
  ASSIGN_OR_RETURN(const ChildResult result, RunChild(run, &live_children_));

  const std::string limits =
      absl::StrFormat("solver_time_limit_seconds %g + %g s",
                      solver_time_limit_seconds, kOptimalTimeMarginSeconds);
  if (result.wall_limit_hit) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "OPTIMAL: the solver did not stop within %g times its time limit "
        "(%s) and was killed after %.1f s; use AUTO",
        kOptimalWallSlack, limits, result.wall_seconds));
  }
  if (result.signal == SIGXCPU ||
      (result.signal == SIGKILL &&
       result.cpu_seconds >= static_cast<double>(time_limit))) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "OPTIMAL: the solver used its CPU-time limit (%s) and was killed "
        "after %.1f CPU s; use AUTO",
        limits, result.cpu_seconds));
  }
  if (result.signal != 0) {
    return absl::InternalError(
        absl::StrCat("OPTIMAL: the solver process crashed: killed by ",
                     DescribeSignal(result.signal),
                     result.signal == SIGKILL
                         ? " (not sent by echod: the kernel's OOM killer?)"
                         : "",
                     "; echod is unaffected; try policy AUTO, another "
                     "memory limit or another solver time limit"));
  }
  if (result.exit_code == kMilpWorkerExitOutOfMemory) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "OPTIMAL: the solver process ran out of memory: its address space is "
        "limited to ",
        memory_limit_bytes_,
        " bytes (--optimal_memory_limit_bytes); use AUTO or a smaller "
        "graph"));
  }
  if (result.exit_code != 0) {
    return absl::InternalError(absl::StrCat(
        "OPTIMAL: the solver process ", path_, " exited with status ",
        result.exit_code, " (its stderr is in echod's log)"));
  }
  internal::MilpWorkerReply reply;
  if (!reply.ParseFromString(result.output)) {
    return absl::InternalError(absl::StrCat(
        "OPTIMAL: the solver process ", path_, " wrote an unreadable reply (",
        result.output.size(), " bytes)"));
  }
  RETURN_IF_ERROR(ReplyStatus(reply));
  // The child's answer is echod's to check: a bad one is echod's fault, not
  // the caller's.
  absl::StatusOr<planner::Schedule> schedule =
      adapter::ScheduleFromProto(graph, reply.result().schedule());
  if (!schedule.ok()) {
    return absl::InternalError(absl::StrCat(
        "OPTIMAL: the solver process ", path_,
        " answered a bad schedule: ", schedule.status().message()));
  }
  planner::PassOutput output;
  output.schedule = *std::move(schedule);
  output.limit_reachable = reply.result().limit_reachable();
  output.solver_status = reply.result().solver_status();
  output.solver_bound_cost = reply.result().solver_bound_cost();
  output.stash_bound_bytes = reply.result().stash_bound_bytes();
  return output;
}

}  // namespace echo::server
