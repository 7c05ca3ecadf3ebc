// The memory model of design.md section 4, over any schedule. The plain
// schedule (every op once, in graph order) gives the framework's peak; a
// recompute plan's schedule gives the plan's peak. The same replay validates
// a plan, so every number a plan claims comes from here.
#ifndef ECHO_PLANNER_MEMORY_SIMULATOR_H_
#define ECHO_PLANNER_MEMORY_SIMULATOR_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/graph.h"

namespace echo::planner {

// One execution of an op. Each creates a new instance of the op's outputs;
// readers use the most recent instance.
struct Execution {
  OpIndex op = kNoOp;
  bool recompute = false;
  bool operator==(const Execution& other) const {
    return op == other.op && recompute == other.recompute;
  }
};
using Schedule = std::vector<Execution>;

// Every op once, in graph order.
Schedule PlainSchedule(const Graph& graph);

struct MemoryModelOptions {
  // Every allocation rounded up to a multiple of this; 0 is exact bytes.
  int64_t rounding_bytes = 0;
};

// No allocator rounds to more than this; larger values would overflow int64
// when sizes are rounded up and summed (2^62 gave a peak of -1).
inline constexpr int64_t kMaxRoundingBytes = int64_t{1} << 30;

// INVALID_ARGUMENT naming the field unless 0 <= rounding_bytes <=
// kMaxRoundingBytes.
absl::Status ValidateMemoryModelOptions(const MemoryModelOptions& options);

int64_t AllocatedBytes(int64_t size_bytes, const MemoryModelOptions& options);

struct MemoryBreakdown {
  int64_t parameter_bytes = 0;
  int64_t optimizer_state_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t input_bytes = 0;
  int64_t stashed_activation_bytes = 0;
  int64_t transient_bytes = 0;
  int64_t workspace_bytes = 0;
  int64_t Total() const {
    return parameter_bytes + optimizer_state_bytes + gradient_bytes +
           input_bytes + stashed_activation_bytes + transient_bytes +
           workspace_bytes;
  }
};

struct LiveInstance {
  TensorIndex tensor = -1;
  int64_t bytes = 0;
  // Schedule step that created it; -1 for graph inputs present at start.
  int32_t created_step = -1;
};

struct SimulationResult {
  int64_t peak_bytes = 0;
  int32_t peak_step = 0;
  OpIndex peak_op = 0;  // the op executing at the peak step
  // Memory while each step runs: live instances + its outputs + workspace.
  std::vector<int64_t> step_bytes;
  // Parameters and optimizer state present from the start.
  int64_t persistent_bytes = 0;
  MemoryBreakdown breakdown;  // at the peak step
  // Instances live at the peak step, largest first.
  std::vector<LiveInstance> live_at_peak;
  int32_t recompute_count = 0;
};

// Replays `schedule` and checks it is a valid plan: every original op runs
// exactly once and in graph order, only recomputable ops run again, and every
// execution finds its inputs live. Errors name the step and the op.
absl::StatusOr<SimulationResult> ReplaySchedule(
    const Graph& graph, const Schedule& schedule,
    const MemoryModelOptions& options = {});

// ReplaySchedule over PlainSchedule (cannot fail on a built Graph).
SimulationResult SimulatePlain(const Graph& graph,
                               const MemoryModelOptions& options = {});

// A forward activation that some backward op reads: what frameworks stash.
bool IsStashCandidate(const Graph& graph, TensorIndex t);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_MEMORY_SIMULATOR_H_
