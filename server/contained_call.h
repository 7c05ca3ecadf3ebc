// Crash containment: the planning part of a request runs in a fork of echod
// (a supervised worker process, as nginx's master runs its workers), so a
// planner bug that crashes on one graph answers that request with INTERNAL
// and a request id, and echod serves everyone else. The child has the
// request's IR already (the fork shares the parent's memory); it sends back
// its status and the serialized response on a pipe. A cancelled call, a
// passed deadline or a drain kills it at once: its CPU stops with the call.
#ifndef ECHO_SERVER_CONTAINED_CALL_H_
#define ECHO_SERVER_CONTAINED_CALL_H_

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/message.h"
#include "planner/recompute/plan.h"

namespace echo::server {

struct ContainedCall {
  const char* method = "";
  // Named in the crash's answer and log line, to find the dump.
  std::string request_id;
  planner::Interrupt interrupted;
  // A child still running after this long is killed (the call's deadline
  // normally ends it first).
  double wall_limit_seconds = 3600;
  // Locks the work may take (ChildRun::held_across_fork).
  std::vector<std::mutex*> held_across_fork;
};

// What the child's run cost, for the log and the metrics.
struct ContainedRun {
  bool crashed = false;  // killed by a signal it raised (not by us)
  std::string crash;     // "signal 11 (SIGSEGV: Segmentation fault)"
  double cpu_seconds = 0;
  double wall_seconds = 0;
};

// Runs `work` (which fills `response`) in a fork; returns work's status and
// leaves the response it filled in `response`. A crash of the child:
// INTERNAL naming the method, the signal and the request id, with `run`
// saying so. The interrupt's status when it stops the child.
absl::Status RunContained(const ContainedCall& call,
                          google::protobuf::Message* response,
                          const std::function<absl::Status()>& work,
                          ContainedRun* run,
                          std::atomic<int>* live_children = nullptr);

// A request id: "<pid hex>-<counter>", unique within a run of echod and
// across restarts of its pod (pids differ), short enough for a log line.
std::string NewRequestId();

}  // namespace echo::server

#endif  // ECHO_SERVER_CONTAINED_CALL_H_
