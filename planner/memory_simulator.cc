#include "planner/memory_simulator.h"

#include <algorithm>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "planner/status_macros.h"

namespace echo::planner {

Schedule PlainSchedule(const Graph& graph) {
  Schedule schedule;
  schedule.reserve(graph.num_ops());
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    schedule.push_back({o, false});
  }
  return schedule;
}

absl::Status ValidateMemoryModelOptions(const MemoryModelOptions& options) {
  if (options.rounding_bytes < 0 ||
      options.rounding_bytes > kMaxRoundingBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("allocator.rounding_bytes must be in [0, ",
                     kMaxRoundingBytes, "], got ", options.rounding_bytes));
  }
  return absl::OkStatus();
}

int64_t AllocatedBytes(int64_t size_bytes, const MemoryModelOptions& options) {
  const int64_t r = options.rounding_bytes;
  if (r <= 1 || size_bytes == 0) return size_bytes;
  return (size_bytes + r - 1) / r * r;
}

bool IsStashCandidate(const Graph& graph, TensorIndex t) {
  const Tensor& tensor = graph.tensor(t);
  if (tensor.role != TensorRole::kActivation || tensor.producer == kNoOp ||
      graph.op(tensor.producer).phase != Phase::kForward) {
    return false;
  }
  for (OpIndex reader : tensor.readers) {
    if (graph.op(reader).phase == Phase::kBackward) return true;
  }
  return false;
}

namespace {

constexpr int32_t kNeverRead = std::numeric_limits<int32_t>::min();
constexpr int32_t kNeverFreed = std::numeric_limits<int32_t>::max();

struct Instance {
  TensorIndex tensor;
  int32_t created_step;  // -1: present at start
  int32_t last_read_step = kNeverRead;
  bool from_recompute = false;
};

std::string StepName(const Graph& graph, int32_t step, const Execution& e) {
  return absl::StrCat("schedule step ", step, " (op '", graph.op(e.op).id,
                      e.recompute ? "', recompute)" : "')");
}

// Step after which the instance is freed, or kNeverFreed. Instances of graph
// inputs that nobody reads are never allocated: returns -2 for them.
int32_t FreeStep(const Graph& graph, const Instance& instance) {
  const Tensor& tensor = graph.tensor(instance.tensor);
  if (IsPersistentRole(tensor.role) || tensor.is_output) return kNeverFreed;
  if (instance.last_read_step != kNeverRead) return instance.last_read_step;
  return instance.created_step;  // unread: freed right after it is made
}

// The breakdown field an instance's bytes count in.
int64_t MemoryBreakdown::*RoleField(const Graph& graph,
                                    const Instance& instance) {
  const Tensor& tensor = graph.tensor(instance.tensor);
  switch (tensor.role) {
    case TensorRole::kParameter:
      return &MemoryBreakdown::parameter_bytes;
    case TensorRole::kOptimizerState:
      return &MemoryBreakdown::optimizer_state_bytes;
    case TensorRole::kGradient:
      return &MemoryBreakdown::gradient_bytes;
    case TensorRole::kInput:
      return &MemoryBreakdown::input_bytes;
    case TensorRole::kActivation:
      break;
  }
  return !instance.from_recompute && IsStashCandidate(graph, instance.tensor)
             ? &MemoryBreakdown::stashed_activation_bytes
             : &MemoryBreakdown::transient_bytes;
}

constexpr int64_t MemoryBreakdown::*kAllFields[] = {
    &MemoryBreakdown::parameter_bytes,
    &MemoryBreakdown::optimizer_state_bytes,
    &MemoryBreakdown::gradient_bytes,
    &MemoryBreakdown::input_bytes,
    &MemoryBreakdown::stashed_activation_bytes,
    &MemoryBreakdown::transient_bytes,
    &MemoryBreakdown::workspace_bytes,
};

void AddBreakdown(const MemoryBreakdown& from, MemoryBreakdown& to) {
  for (int64_t MemoryBreakdown::*field : kAllFields) {
    to.*field += from.*field;
  }
}

// Pass 1 of every replay: checks that `schedule` is a valid plan and
// returns every tensor instance with its creation step and last reader.
absl::StatusOr<std::vector<Instance>> TraceInstances(const Graph& graph,
                                                     const Schedule& schedule,
                                                     int32_t& recompute_count) {
  if (schedule.size() >
      static_cast<size_t>(std::numeric_limits<int32_t>::max() / 2)) {
    return absl::InvalidArgumentError("schedule is too long");
  }
  const int32_t num_steps = static_cast<int32_t>(schedule.size());
  std::vector<Instance> instances;
  instances.reserve(graph.num_tensors() + schedule.size() - graph.num_ops());
  std::vector<int32_t> current(graph.num_tensors(), -1);
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    if (graph.tensor(t).producer == kNoOp) {
      current[t] = static_cast<int32_t>(instances.size());
      instances.push_back({t, -1});
    }
  }

  OpIndex next_original = 0;
  for (int32_t step = 0; step < num_steps; ++step) {
    const Execution& e = schedule[step];
    if (e.op < 0 || e.op >= graph.num_ops()) {
      return absl::InvalidArgumentError(
          absl::StrCat("schedule step ", step, " names op index ", e.op,
                       " outside the graph's ", graph.num_ops(), " ops"));
    }
    const Op& op = graph.op(e.op);
    if (e.recompute) {
      if (!op.recomputable) {
        return absl::InvalidArgumentError(absl::StrCat(
            StepName(graph, step, e), ": op may not be recomputed"));
      }
      if (e.op >= next_original) {
        return absl::InvalidArgumentError(
            absl::StrCat(StepName(graph, step, e),
                         ": recomputes an op before its original execution"));
      }
      ++recompute_count;
    } else {
      if (e.op != next_original) {
        return absl::InvalidArgumentError(absl::StrCat(
            StepName(graph, step, e),
            ": original ops must run once each in "
            "graph order; expected op '",
            next_original < graph.num_ops() ? graph.op(next_original).id
                                            : std::string("<none>"),
            "'"));
      }
      ++next_original;
    }
    for (TensorIndex t : op.inputs) {
      const int32_t instance = current[t];
      if (instance < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(StepName(graph, step, e), ": input tensor '",
                         graph.tensor(t).id, "' has no live instance"));
      }
      instances[instance].last_read_step = step;
    }
    for (TensorIndex t : op.outputs) {
      // A re-execution leaves the outputs it does not make to the original.
      if (e.recompute && !graph.RemadeOnRecompute(t)) continue;
      current[t] = static_cast<int32_t>(instances.size());
      instances.push_back({t, step, kNeverRead, e.recompute});
    }
  }
  if (next_original != graph.num_ops()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "schedule ends before op '", graph.op(next_original).id, "' runs"));
  }
  return instances;
}

}  // namespace

absl::StatusOr<SimulationResult> ReplaySchedule(
    const Graph& graph, const Schedule& schedule,
    const MemoryModelOptions& options) {
  SimulationResult result;
  ASSIGN_OR_RETURN(std::vector<Instance> instances,
                   TraceInstances(graph, schedule, result.recompute_count));
  const int32_t num_steps = static_cast<int32_t>(schedule.size());

  // Pass 2: bytes per step. Each instance adds at its creation step and
  // leaves after its free step.
  std::vector<int64_t> created_bytes(num_steps, 0);
  std::vector<int64_t> freed_after(num_steps, 0);
  int64_t live = 0;
  for (const Instance& instance : instances) {
    const int32_t free_step = FreeStep(graph, instance);
    const int64_t bytes =
        AllocatedBytes(graph.tensor(instance.tensor).size_bytes, options);
    if (instance.created_step < 0) {
      if (free_step == -1) continue;  // unread graph input
      live += bytes;
      if (free_step == kNeverFreed) result.persistent_bytes += bytes;
    } else {
      created_bytes[instance.created_step] += bytes;
    }
    if (free_step != kNeverFreed) freed_after[free_step] += bytes;
  }
  result.step_bytes.resize(num_steps);
  result.peak_bytes = -1;
  for (int32_t step = 0; step < num_steps; ++step) {
    const int64_t workspace = graph.op(schedule[step].op).workspace_bytes;
    const int64_t at_step = live + created_bytes[step] + workspace;
    result.step_bytes[step] = at_step;
    if (at_step > result.peak_bytes) {
      result.peak_bytes = at_step;
      result.peak_step = step;
    }
    live += created_bytes[step] - freed_after[step];
  }

  // What is live at the peak, and its breakdown.
  const int32_t peak = result.peak_step;
  result.peak_op = schedule[peak].op;
  for (const Instance& instance : instances) {
    const int32_t free_step = FreeStep(graph, instance);
    if (instance.created_step > peak || free_step < peak) continue;
    const int64_t bytes =
        AllocatedBytes(graph.tensor(instance.tensor).size_bytes, options);
    result.breakdown.*RoleField(graph, instance) += bytes;
    result.live_at_peak.push_back(
        {instance.tensor, bytes, instance.created_step});
  }
  result.breakdown.workspace_bytes =
      graph.op(schedule[peak].op).workspace_bytes;
  std::stable_sort(result.live_at_peak.begin(), result.live_at_peak.end(),
                   [](const LiveInstance& a, const LiveInstance& b) {
                     return a.bytes > b.bytes;
                   });
  return result;
}

absl::Status ValidateTimelinePoints(int32_t max_points) {
  if (max_points < 0 || max_points > kMaxTimelinePoints) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeline_max_points must be in [0, ", kMaxTimelinePoints,
                     "] (0: ", kDefaultTimelinePoints, "), got ", max_points));
  }
  return absl::OkStatus();
}

absl::StatusOr<MemoryTimeline> SimulateTimeline(
    const Graph& graph, const Schedule& schedule,
    const MemoryModelOptions& options, int32_t max_points) {
  RETURN_IF_ERROR(ValidateTimelinePoints(max_points));
  const int64_t buckets = max_points == 0 ? kDefaultTimelinePoints : max_points;
  int32_t recompute_count = 0;
  ASSIGN_OR_RETURN(std::vector<Instance> instances,
                   TraceInstances(graph, schedule, recompute_count));
  MemoryTimeline timeline;
  timeline.num_steps = static_cast<int32_t>(schedule.size());
  const int32_t num_steps = timeline.num_steps;

  // Per role: what is live at the start, and what each step adds and removes
  // (an instance counts from its creation step through its free step).
  MemoryBreakdown live;
  std::vector<MemoryBreakdown> delta(static_cast<size_t>(num_steps) + 1);
  for (const Instance& instance : instances) {
    const int32_t free_step = FreeStep(graph, instance);
    if (instance.created_step < 0 && free_step == -1) continue;  // unread
    const int64_t bytes =
        AllocatedBytes(graph.tensor(instance.tensor).size_bytes, options);
    int64_t MemoryBreakdown::*field = RoleField(graph, instance);
    if (instance.created_step < 0) {
      live.*field += bytes;
    } else {
      delta[instance.created_step].*field += bytes;
    }
    if (free_step != kNeverFreed) delta[free_step + 1].*field -= bytes;
  }

  timeline.downsampled = num_steps > buckets;
  timeline.peak_bytes = -1;
  int64_t bucket = -1;
  for (int32_t step = 0; step < num_steps; ++step) {
    AddBreakdown(delta[step], live);
    TimelinePoint point{step, live};
    point.bytes.workspace_bytes = graph.op(schedule[step].op).workspace_bytes;
    const int64_t total = point.bytes.Total();
    if (total > timeline.peak_bytes) {
      timeline.peak_bytes = total;
      timeline.peak_step = step;
    }
    const int64_t step_bucket = int64_t{step} * buckets / num_steps;
    if (step_bucket != bucket) {
      bucket = step_bucket;
      timeline.points.push_back(point);
    } else if (total > timeline.points.back().bytes.Total()) {
      timeline.points.back() = point;
    }
  }
  if (num_steps == 0) timeline.peak_bytes = 0;
  return timeline;
}

SimulationResult SimulatePlain(const Graph& graph,
                               const MemoryModelOptions& options) {
  absl::StatusOr<SimulationResult> result =
      ReplaySchedule(graph, PlainSchedule(graph), options);
  // A built Graph is ordered, so its plain schedule always replays.
  return *std::move(result);
}

}  // namespace echo::planner
