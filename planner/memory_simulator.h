// The memory model of docs/design.md section 4, over any schedule. The plain
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

// Memory over a schedule, by role: what a plot of memory over the steps
// shows. Each point is one schedule step and its bytes while that step runs
// (live instances + the step's outputs + its workspace), split by role exactly
// as SimulationResult::breakdown is at the peak, so a point's Total() equals
// the simulation's step_bytes at that step and the point at peak_step equals
// the peak breakdown.
struct TimelinePoint {
  int32_t step = 0;
  MemoryBreakdown bytes;
};

struct MemoryTimeline {
  int32_t num_steps = 0;
  int64_t peak_bytes = 0;
  int32_t peak_step = 0;
  // Steps in order. With more steps than max_points the steps are cut into
  // max_points buckets of consecutive steps and each bucket keeps its step
  // of most bytes (the first on ties), so the peak step is always a point.
  std::vector<TimelinePoint> points;
  bool downsampled = false;
};

// Bounds of max_points in SimulateTimeline (0 means the default).
inline constexpr int32_t kDefaultTimelinePoints = 2000;
inline constexpr int32_t kMaxTimelinePoints = 100000;

// INVALID_ARGUMENT naming timeline_max_points unless 0 <= max_points <=
// kMaxTimelinePoints.
absl::Status ValidateTimelinePoints(int32_t max_points);

// Replays `schedule` (any schedule ReplaySchedule accepts: the plain one or a
// plan's, with the same checks and errors) and returns its timeline of at
// most max_points points. INVALID_ARGUMENT for a bad max_points
// (ValidateTimelinePoints) or a schedule that is not a valid plan.
absl::StatusOr<MemoryTimeline> SimulateTimeline(
    const Graph& graph, const Schedule& schedule,
    const MemoryModelOptions& options, int32_t max_points = 0);

// A forward activation that some backward op reads: what frameworks stash.
bool IsStashCandidate(const Graph& graph, TensorIndex t);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_MEMORY_SIMULATOR_H_
