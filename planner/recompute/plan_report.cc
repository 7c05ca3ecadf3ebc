#include "planner/recompute/plan_report.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "planner/byte_size.h"
#include "planner/recompute/search/stash_cut.h"
#include "planner/recompute/search/union_find.h"
#include "planner/status_macros.h"

namespace echo::planner {
namespace {

constexpr int32_t kNone = -1;
// A region's explanation is ~150-350 characters: reserved at once, not
// grown by each append.
constexpr size_t kExplanationReserve = 384;

// Regions' steps, each region's ascending, in one array: region r's are
// steps[begin[r]] .. steps[begin[r + 1] - 1].
struct RegionIndex {
  std::vector<int32_t> steps;
  std::vector<int32_t> begin = {0};
  int32_t size() const { return static_cast<int32_t>(begin.size()) - 1; }
  absl::Span<const int32_t> region(int32_t r) const {
    return absl::MakeConstSpan(steps.data() + begin[r],
                               steps.data() + begin[r + 1]);
  }
};

// Groups consecutive recompute executions into regions: runs of clones,
// split into components connected by data or by a shared stashed source.
RegionIndex RegionSteps(const Graph& graph, const Schedule& schedule) {
  RegionIndex regions;
  std::vector<int32_t> producer_step(graph.num_tensors(), kNone);
  const int32_t num_steps = static_cast<int32_t>(schedule.size());
  // Per run of clones, reset for each (a plan may have 10k runs).
  UnionFind run;
  absl::flat_hash_map<TensorIndex, int32_t> reader_of;
  std::vector<int32_t> region_of_root;
  std::vector<int32_t> region_of_step;
  // Per region of the run: its step count, then where its next step goes.
  std::vector<int32_t> fill;
  for (int32_t begin = 0; begin < num_steps;) {
    if (!schedule[begin].recompute) {
      for (TensorIndex t : graph.op(schedule[begin].op).outputs) {
        producer_step[t] = begin;
      }
      ++begin;
      continue;
    }
    int32_t end = begin;
    while (end < num_steps && schedule[end].recompute) ++end;
    // Steps of the run, joined by data and by shared stashed sources.
    run.Reset(end - begin);
    reader_of.clear();
    for (int32_t step = begin; step < end; ++step) {
      for (TensorIndex t : graph.op(schedule[step].op).inputs) {
        if (producer_step[t] >= begin) {
          run.Union(step - begin, producer_step[t] - begin);
        } else if (!IsPersistentRole(graph.tensor(t).role)) {
          // Clones sharing a stashed source form one region.
          auto [it, inserted] = reader_of.emplace(t, step);
          if (!inserted) run.Union(step - begin, it->second - begin);
        }
      }
      for (TensorIndex t : graph.op(schedule[step].op).outputs) {
        if (graph.RemadeOnRecompute(t)) producer_step[t] = step;
      }
    }
    // The run's regions in order of their first step, each region's steps
    // ascending: counted, then filled (a counting sort).
    region_of_root.assign(end - begin, kNone);
    region_of_step.resize(end - begin);
    fill.clear();
    for (int32_t step = begin; step < end; ++step) {
      const int32_t root = run.Find(step - begin);
      if (region_of_root[root] == kNone) {
        region_of_root[root] = static_cast<int32_t>(fill.size());
        fill.push_back(0);
      }
      region_of_step[step - begin] = region_of_root[root];
      ++fill[region_of_root[root]];
    }
    for (int32_t& count : fill) {
      const int32_t start = regions.begin.back();
      regions.begin.push_back(start + count);
      count = start;
    }
    regions.steps.resize(regions.begin.back());
    for (int32_t step = begin; step < end; ++step) {
      regions.steps[fill[region_of_step[step - begin]]++] = step;
    }
    begin = end;
  }
  return regions;
}

// Appends the first three names of `items` (ops or tensors), quoted, and
// how many more there are. Into `out`: a plan may have 10k regions.
void AppendNameList(const Graph& graph, absl::Span<const int32_t> items,
                    bool ops, std::string& out) {
  for (size_t i = 0; i < items.size() && i < 3; ++i) {
    out.append(i == 0 ? "'" : ", '");
    if (ops) {
      AppendOpDisplayName(graph.op(items[i]), out);
    } else {
      out.append(graph.tensor(items[i]).id);
    }
    out.push_back('\'');
  }
  if (items.size() > 3) {
    absl::StrAppend(&out, " and ", items.size() - 3, " more");
  }
}

}  // namespace

std::vector<TensorIndex> StashedTensors(const Graph& graph,
                                        const Schedule& schedule) {
  // Forward-produced activations whose original instance is read in the
  // backward: from the first non-forward original op, and by the clones
  // right before it (they run after the forward returns, as frameworks cut
  // the graph after its last forward op).
  const int32_t num_steps = static_cast<int32_t>(schedule.size());
  int32_t backward_start = num_steps;
  for (int32_t step = 0; step < num_steps; ++step) {
    if (!schedule[step].recompute &&
        graph.op(schedule[step].op).phase != Phase::kForward) {
      backward_start = step;
      break;
    }
  }
  while (backward_start > 0 && backward_start < num_steps &&
         schedule[backward_start - 1].recompute) {
    --backward_start;
  }
  std::vector<int32_t> original_last_read(graph.num_tensors(), kNone);
  std::vector<uint8_t> original_current(graph.num_tensors(), 0);
  for (int32_t step = 0; step < num_steps; ++step) {
    const Execution& e = schedule[step];
    for (TensorIndex t : graph.op(e.op).inputs) {
      if (original_current[t]) original_last_read[t] = step;
    }
    for (TensorIndex t : graph.op(e.op).outputs) {
      if (!e.recompute || graph.RemadeOnRecompute(t)) {
        original_current[t] = !e.recompute;
      }
    }
  }
  std::vector<TensorIndex> stash;
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    const Tensor& tensor = graph.tensor(t);
    if (tensor.producer == kNoOp || IsPersistentRole(tensor.role) ||
        graph.op(tensor.producer).phase != Phase::kForward) {
      continue;
    }
    if (original_last_read[t] >= backward_start) stash.push_back(t);
  }
  return stash;
}

int64_t StashBytes(const Graph& graph, const Schedule& schedule,
                   const MemoryModelOptions& memory) {
  int64_t bytes = 0;
  for (TensorIndex t : StashedTensors(graph, schedule)) {
    bytes += AllocatedBytes(graph.tensor(t).size_bytes, memory);
  }
  return bytes;
}

absl::StatusOr<int64_t> StashLowerBound(const RecomputeProblem& problem,
                                        double cost_budget, bool with_cut,
                                        const Interrupt& interrupted) {
  const Graph& graph = problem.graph;
  const std::vector<double>& op_costs = problem.op_costs;
  const MemoryModelOptions& memory = problem.memory;
  // Per producer: the stashed bytes one clone of it takes out of the stash.
  absl::flat_hash_map<OpIndex, int64_t> bytes_of_op;
  int64_t stash = 0;
  for (TensorIndex t : StashedTensors(graph, PlainSchedule(graph))) {
    const int64_t bytes = AllocatedBytes(graph.tensor(t).size_bytes, memory);
    stash += bytes;
    const OpIndex producer = graph.tensor(t).producer;
    if (graph.op(producer).recomputable && graph.RemadeOnRecompute(t)) {
      bytes_of_op[producer] += bytes;
    }
  }
  struct Item {
    double cost;
    int64_t bytes;
  };
  std::vector<Item> items;
  for (const auto& [op, bytes] : bytes_of_op) {
    if (bytes > 0) items.push_back({op_costs[op], bytes});
  }
  // Fractional knapsack, least cost per byte first (free ops first).
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.cost / static_cast<double>(a.bytes) <
           b.cost / static_cast<double>(b.bytes);
  });
  double budget = cost_budget;
  double removable = 0;
  for (const Item& item : items) {
    if (item.cost <= budget) {
      removable += static_cast<double>(item.bytes);
      budget -= item.cost;
    } else {
      removable += static_cast<double>(item.bytes) * budget / item.cost;
      break;
    }
  }
  const int64_t knapsack =
      std::max<int64_t>(0, stash - static_cast<int64_t>(removable));
  if (!with_cut) return knapsack;
  ASSIGN_OR_RETURN(
      StashCutPlans cuts,
      StashCutsWithinBudget(problem, problem.can_clone, FirstBackwardOp(graph),
                            cost_budget, interrupted));
  return std::max(knapsack, cuts.lower_bound_bytes);
}

absl::StatusOr<RecomputePlan> BuildPlanFromSchedule(
    const Graph& graph, const std::vector<double>& op_costs,
    const MemoryModelOptions& memory, int64_t baseline_peak_bytes,
    Schedule schedule, std::optional<SimulationResult> given_replay) {
  if (!given_replay.has_value()) {
    ASSIGN_OR_RETURN(given_replay, ReplaySchedule(graph, schedule, memory));
  }
  const SimulationResult& replay = *given_replay;
  RecomputePlan plan;
  plan.baseline_peak_bytes = baseline_peak_bytes;
  plan.planned_peak_bytes = replay.peak_bytes;
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    plan.baseline_compute_cost += op_costs[o];
  }
  plan.recompute_cost = RecomputeCost(op_costs, schedule);
  plan.recompute_overhead_ratio =
      plan.baseline_compute_cost > 0
          ? plan.recompute_cost / plan.baseline_compute_cost
          : 0;

  plan.stash = StashedTensors(graph, schedule);
  std::vector<uint8_t> stashed(graph.num_tensors(), 0);
  for (TensorIndex t : plan.stash) {
    stashed[t] = 1;
    plan.stash_bytes += AllocatedBytes(graph.tensor(t).size_bytes, memory);
  }
  const int32_t num_steps = static_cast<int32_t>(schedule.size());
  // Per tensor, the steps of the clones that remake it, ascending: in one
  // array (tensor t's from clone_begin[t]), not one list per tensor.
  std::vector<int32_t> clone_begin(graph.num_tensors() + 1, 0);
  auto for_each_clone_output = [&](auto&& visit) {
    for (int32_t step = 0; step < num_steps; ++step) {
      if (!schedule[step].recompute) continue;
      for (TensorIndex t : graph.op(schedule[step].op).outputs) {
        if (graph.RemadeOnRecompute(t)) visit(t, step);
      }
    }
  };
  for_each_clone_output([&](TensorIndex t, int32_t) { ++clone_begin[t + 1]; });
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    clone_begin[t + 1] += clone_begin[t];
  }
  std::vector<int32_t> clone_steps(clone_begin.back());
  std::vector<int32_t> clone_fill(clone_begin.begin(), clone_begin.end() - 1);
  for_each_clone_output([&](TensorIndex t, int32_t step) {
    clone_steps[clone_fill[t]++] = step;
  });

  std::vector<uint8_t> live_at_peak(graph.num_tensors(), 0);
  for (const LiveInstance& live : replay.live_at_peak) {
    live_at_peak[live.tensor] = 1;
  }
  const int32_t peak_step = replay.peak_step;
  std::vector<int32_t> step_of_original(graph.num_ops(), 0);
  for (int32_t step = 0; step < num_steps; ++step) {
    if (!schedule[step].recompute) step_of_original[schedule[step].op] = step;
  }

  // Per region, cleared after it (a region's size, not the graph's: a plan
  // may have tens of thousands of regions).
  std::vector<uint8_t> made_here(graph.num_tensors(), 0);
  std::vector<uint8_t> listed(graph.num_tensors(), 0);
  const RegionIndex regions = RegionSteps(graph, schedule);
  plan.regions.reserve(regions.size());
  for (int32_t r = 0; r < regions.size(); ++r) {
    const absl::Span<const int32_t> steps = regions.region(r);
    RecomputeRegionReport region;
    region.ops.reserve(steps.size());
    region.steps.reserve(steps.size());
    for (int32_t step : steps) {
      const Op& op = graph.op(schedule[step].op);
      region.ops.push_back(schedule[step].op);
      region.steps.push_back(step);
      region.recompute_cost += op_costs[schedule[step].op];
      for (TensorIndex t : op.inputs) {
        if (made_here[t] || listed[t] ||
            IsPersistentRole(graph.tensor(t).role)) {
          continue;
        }
        listed[t] = 1;
        region.source_tensors.push_back(t);
      }
      for (TensorIndex t : op.outputs) {
        if (!graph.RemadeOnRecompute(t)) continue;
        made_here[t] = 1;
        if (!IsStashCandidate(graph, t) || stashed[t]) continue;
        region.freed_tensors.push_back(t);
        // Saved at the peak: the tensor has no instance there, its original
        // was made before it, and this clone is the next instance after it.
        const int32_t created = step_of_original[graph.tensor(t).producer];
        const int32_t* first = clone_steps.data() + clone_begin[t];
        const int32_t* last = clone_steps.data() + clone_begin[t + 1];
        const int32_t* next = std::upper_bound(first, last, peak_step);
        if (!live_at_peak[t] && created <= peak_step && next != last &&
            *next == step) {
          region.bytes_saved_at_peak +=
              AllocatedBytes(graph.tensor(t).size_bytes, memory);
        }
      }
    }
    std::string& text = region.explanation;
    text.reserve(kExplanationReserve);
    absl::StrAppend(&text, "re-runs ", region.ops.size(), " op(s) (");
    AppendNameList(graph, region.ops, true, text);
    absl::StrAppend(&text, ") before ");
    int32_t before_step = steps.back() + 1;
    while (before_step < num_steps && schedule[before_step].recompute) {
      ++before_step;
    }
    if (before_step < num_steps) {
      absl::StrAppend(&text, "op '", graph.op(schedule[before_step].op).id,
                      "'");
    } else {
      absl::StrAppend(&text, "the end");
    }
    absl::StrAppend(&text, " from ", region.source_tensors.size(),
                    " stashed tensor(s)");
    if (!region.source_tensors.empty()) {
      absl::StrAppend(&text, " (");
      AppendNameList(graph, region.source_tensors, false, text);
      absl::StrAppend(&text, ")");
    }
    absl::StrAppendFormat(&text, ", cost %.6g; frees %d stashed tensor(s)",
                          region.recompute_cost, region.freed_tensors.size());
    if (!region.freed_tensors.empty()) {
      absl::StrAppend(&text, " (");
      AppendNameList(graph, region.freed_tensors, false, text);
      absl::StrAppend(&text, ")");
    }
    absl::StrAppend(&text, ", ", HumanBytes(region.bytes_saved_at_peak),
                    " at the peak");
    for (TensorIndex t : region.source_tensors) listed[t] = 0;
    for (int32_t step : steps) {
      for (TensorIndex t : graph.op(schedule[step].op).outputs)
        made_here[t] = 0;
    }
    plan.regions.push_back(std::move(region));
  }
  plan.schedule = std::move(schedule);
  return plan;
}

int64_t PeakLowerBound(const Graph& graph, const MemoryModelOptions& memory) {
  const int32_t n = graph.num_ops();
  if (n == 0) return 0;
  int64_t persistent = 0;
  // Bytes that must be live at each op: non-recomputable tensors between
  // their creation and their last reader, graph outputs after creation.
  std::vector<int64_t> delta(n + 1, 0);
  std::vector<uint8_t> counted(graph.num_tensors(), 0);
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    const Tensor& tensor = graph.tensor(t);
    const int64_t bytes = AllocatedBytes(tensor.size_bytes, memory);
    const OpIndex producer = tensor.producer;
    const OpIndex start = producer == kNoOp ? 0 : producer;
    if (IsPersistentRole(tensor.role) && producer == kNoOp) {
      persistent += bytes;
      counted[t] = 1;
      continue;
    }
    if (IsPersistentRole(tensor.role) || tensor.is_output) {
      delta[start] += bytes;
      counted[t] = 1;
      continue;
    }
    const bool fixed = producer == kNoOp || !graph.op(producer).recomputable;
    if (fixed && !tensor.readers.empty()) {
      delta[start] += bytes;
      delta[tensor.readers.back() + 1] -= bytes;
      counted[t] = 1;
    }
  }
  int64_t bound = 0;
  int64_t must_live = 0;
  for (OpIndex o = 0; o < n; ++o) {
    must_live += delta[o];
    const Op& op = graph.op(o);
    int64_t at_op = persistent + must_live + op.workspace_bytes;
    for (TensorIndex t : graph.DistinctInputs(o)) {
      if (!counted[t])
        at_op += AllocatedBytes(graph.tensor(t).size_bytes, memory);
    }
    for (TensorIndex t : op.outputs) {
      if (!counted[t])
        at_op += AllocatedBytes(graph.tensor(t).size_bytes, memory);
    }
    bound = std::max(bound, at_op);
  }
  return bound;
}

}  // namespace echo::planner
