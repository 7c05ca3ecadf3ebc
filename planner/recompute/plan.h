// Recompute plans: the policy and budget a caller asks for, and the plan a
// pass returns (docs/design.md section 4, "Plan semantics"). Plain data, no
// solver: the adapter and clients use these types without linking the
// passes. Every default of recompute planning is here.
#ifndef ECHO_PLANNER_RECOMPUTE_PLAN_H_
#define ECHO_PLANNER_RECOMPUTE_PLAN_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/graph.h"
#include "planner/memory_simulator.h"

namespace echo::planner {

enum class RecomputePolicy { kAuto, kNone, kEcho, kChenSqrt, kOptimal };

// What AUTO minimizes within an overhead budget. kPeakBytes: the step's peak
// (what decides whether a step fits). kStashBytes: the bytes the forward
// leaves for the backward (the stash), never raising the plain peak: what
// torch's activation_memory_budget partitioner minimizes, and what frees
// memory for work that overlaps the boundary between the passes.
enum class RecomputeObjective { kPeakBytes, kStashBytes };

// The overhead budget when a request gives neither budget (plans) or no
// overhead budget (fit checks): extra compute <= 5% of the baseline.
inline constexpr double kDefaultMaxOverheadRatio = 0.05;
// Relative slack of every overhead budget check: a plan that spends the
// budget exactly, up to rounding, is within it.
inline constexpr double kBudgetSlack = 1e-9;
inline bool WithinOverheadRatio(double ratio, double budget) {
  return ratio <= budget * (1 + kBudgetSlack);
}
// AUTO's default bound on the ops one recomputation re-runs.
inline constexpr int kDefaultMaxRecomputeDepth = 16;
// Deeper chains than any graph has ops; larger values overflowed the chain
// walk's cap + 1 (INT32_MAX).
inline constexpr int kMaxRecomputeDepth = 1 << 24;
// OPTIMAL: CBC's time limit, and the model size beyond which the MILP is
// refused (its root LP is not interruptible; VGG16 has 34k nonzeros, FCN8
// 94k, MobileNet 600k, whose root takes minutes).
inline constexpr double kDefaultSolverTimeLimitSeconds = 60;
inline constexpr int64_t kDefaultSolverMaxNonzeros = 250000;

// Op attribute that overrides the policies' rules: "stash" never recomputes
// the op (e.g. the LSTM cell state), "recompute" makes a rule-heavy op cheap
// for ECHO. op.recomputable = false always wins.
inline constexpr char kRecomputeHintAttribute[] = "recompute_hint";

// Cooperative cancellation: returns OK while the work may go on.
using Interrupt = std::function<absl::Status()>;

struct PassInput;
struct PassOutput;
// Runs a pass whose isolated() is true elsewhere (recompute_pass.h).
using PassRunner = std::function<absl::StatusOr<PassOutput>(const PassInput&)>;

// Chunked execution (planner/chunk/): AUTO weighs running each loss region
// in chunks together with its recompute decisions.
inline constexpr int64_t kDefaultMinChunkRows = 128;
inline constexpr int32_t kDefaultMaxChunks = 256;
struct ChunkingOptions {
  bool enabled = false;
  // One kernel launch in the costs' unit (each extra chunk launches every
  // kernel of the region again); negative: unknown, priced at 1% of each
  // kernel's cost (chunk_rewrite.h).
  double launch_cost = -1;
  // Chunks stay at least this many rows (smaller matmuls run slower than
  // the roofline says), and at most this many chunks.
  int64_t min_chunk_rows = kDefaultMinChunkRows;
  int32_t max_chunks = kDefaultMaxChunks;
};

struct RecomputePlanOptions {
  RecomputePolicy policy = RecomputePolicy::kAuto;
  // Minimize extra cost subject to peak <= limit.
  std::optional<int64_t> memory_limit_bytes;
  // Minimize peak subject to recompute_cost <= ratio * baseline_cost; 0
  // means no recomputation at all. Neither budget set: minimize the peak
  // with ratio kDefaultMaxOverheadRatio. Both set: InvalidArgument.
  std::optional<double> max_overhead_ratio;
  // With memory_limit_bytes (AUTO): the first plan that meets the limit at
  // no more than this extra compute is the answer, and the chunk counts
  // after it are not tried (the plan's peak_lower_bound_bytes covers them
  // all unless the search stopped before the first count: the unchunked
  // plan accepted, or the counts ruled out while it meets the limit).
  // CheckFit and
  // FindMaxBatchSize set their budget: they ask whether a plan fits within
  // it, not for the cheapest. Unset: the cheapest plan found.
  std::optional<double> accept_overhead_ratio;
  // OPTIMAL only: bounds CBC's search and the model size
  // (FAILED_PRECONDITION beyond it).
  double solver_time_limit_seconds = kDefaultSolverTimeLimitSeconds;
  int64_t solver_max_nonzeros = kDefaultSolverMaxNonzeros;
  // Longest chain of ops one recomputation may re-run (AUTO). 0: the
  // default, kDefaultMaxRecomputeDepth or the chain depth of the ECHO and
  // CHEN_SQRT plans of the graph if deeper (AUTO falls back on them). ECHO
  // and CHEN_SQRT follow their papers and ignore it; OPTIMAL's chains are
  // unbounded.
  int max_recompute_depth = 0;
  // AUTO's search effort: 0 greedy + cleanup; 1 (default) + re-insertion
  // local search on graphs up to 600 ops; 2 local search on every graph and
  // op, and greedy restarts at tighter targets (slower, rarely better).
  int auto_effort = 1;
  // AUTO with an overhead budget only (no memory_limit_bytes).
  RecomputeObjective objective = RecomputeObjective::kPeakBytes;
  MemoryModelOptions memory;
  // Plans people can read (PruneIdleRegions): AUTO's regions that save
  // nothing at the peak are dropped when the peak does not rise; enabled by
  // default. ECHO and CHEN_SQRT keep their published plans, OPTIMAL the
  // MILP's.
  struct PruneOptions {
    bool enabled = true;
    // Bound on the work: schedule steps replayed in all (one replay per
    // region tried), at most ~0.2 s on a 1M-step schedule.
    int64_t max_replayed_steps = 4'000'000;
  };
  PruneOptions prune;
  // AUTO only; the other policies never chunk.
  ChunkingOptions chunking;
  // Non-OK once the caller gave up (cancelled, past its deadline): checked
  // between passes and inside AUTO's search, whose work then stops and
  // whose status the plan returns. Empty: never.
  Interrupt interrupted;
  // Where a pass that must not run in the caller's process runs (OPTIMAL:
  // its solver has crashed and run away before). echod runs it in a child
  // process (server/optimal_worker.h); empty: here, like every other pass.
  PassRunner run_isolated_pass;
};

// A region's ops, steps or tensors. Most regions re-run one to four ops, so
// their lists are held inline: a 100k-op plan has ~10k regions, and a heap
// list each cost more than the rest of its report.
template <typename T>
using RegionList = absl::InlinedVector<T, 4>;

// A region: clones that run together (consecutive in the schedule) and are
// connected by data or by a shared stashed source.
struct RecomputeRegionReport {
  RegionList<OpIndex> ops;                 // re-executed ops, schedule order
  RegionList<int32_t> steps;               // their positions in the schedule
  RegionList<TensorIndex> source_tensors;  // stashed tensors it reads
  RegionList<TensorIndex> freed_tensors;   // no longer stashed thanks to it
  int64_t bytes_saved_at_peak = 0;
  // AUTO, for a region that saves nothing at the peak step: how much the
  // peak would rise without it (it keeps another step below the peak); 0
  // otherwise or when not measured.
  int64_t peak_rise_if_dropped_bytes = 0;
  double recompute_cost = 0;
  std::string explanation;
};

// A region the plan runs in chunks (chunk_rewrite.h).
struct ChunkedRegionReport {
  // The region's ops in the request's graph, forward and backward.
  std::vector<OpIndex> forward_ops;
  std::vector<OpIndex> backward_ops;
  // Its steps in RecomputePlan::chunked_graph (backward kNoOp: none).
  OpIndex forward_step = kNoOp;
  OpIndex backward_step = kNoOp;
  int32_t chunks = 0;
  int64_t rows = 0;
  int64_t chunk_rows = 0;
  // Its inner tensors whole, and one chunk's at once.
  int64_t inner_bytes = 0;
  int64_t chunk_workspace_bytes = 0;
  double extra_cost = 0;
  // The region's inputs split by rows (the others are read whole), and the
  // never-sent gradients it takes as zero (chunk_region.h).
  std::vector<TensorIndex> sliced_inputs;
  std::vector<TensorIndex> zero_inputs;
  // Steps' blocks and the summed tensors (chunk_region.h).
  struct BlockOp {
    OpIndex op = kNoOp;
    int64_t first_row = 0;
  };
  int64_t block_rows = 0;
  std::vector<BlockOp> block_ops;
  std::vector<TensorIndex> summed;
  // Tensors inside held rows last though [rows, rows] (chunk_region.h).
  std::vector<TensorIndex> rows_last;
  std::string explanation;
};

struct RecomputePlan {
  // False: the memory limit cannot be met (not an error).
  bool feasible = true;
  // Always a valid schedule (the best found, or the plain one).
  Schedule schedule;
  // Forward-produced tensors kept for the backward, ascending.
  std::vector<TensorIndex> stash;
  // Their allocated bytes.
  int64_t stash_bytes = 0;
  // With an overhead budget: no plan within it can stash fewer bytes
  // (StashLowerBound); 0 with a memory limit.
  int64_t stash_lower_bound_bytes = 0;
  std::vector<RecomputeRegionReport> regions;
  int64_t baseline_peak_bytes = 0;
  int64_t planned_peak_bytes = 0;
  // No valid schedule of this graph can have a lower peak.
  int64_t peak_lower_bound_bytes = 0;
  double baseline_compute_cost = 0;
  double recompute_cost = 0;
  double recompute_overhead_ratio = 0;
  // Step time against the plain step's, minus 1 (engine::StepOverheadRatio):
  // recompute_overhead_ratio unless the device counts first touches.
  double step_overhead_ratio = 0;
  double solve_time_seconds = 0;
  // OPTIMAL: "optimal" | "time_limit_feasible" | "time_limit_no_solution" |
  // "infeasible"; the other policies: "heuristic".
  std::string solver_status;
  // OPTIMAL: the MILP's best bound on the recompute cost.
  double solver_bound_cost = 0;
  std::string message;
  // Set when the plan runs regions in chunks: the graph its schedule,
  // stash and regions index (the request's graph with each chunked region
  // as two steps). Null: the request's graph.
  std::shared_ptr<const Graph> chunked_graph;
  std::vector<ChunkedRegionReport> chunked_regions;
  // Loss regions AUTO could not chunk, and why.
  std::vector<std::string> chunking_notes;
};

// The graph a plan's schedule indexes.
inline const Graph& PlanGraph(const Graph& request_graph,
                              const RecomputePlan& plan) {
  return plan.chunked_graph != nullptr ? *plan.chunked_graph : request_graph;
}

// A fit check (fit_check.h): the device's memory and the overhead budget.
struct FitOptions {
  int64_t device_memory_bytes = 0;
  // Bytes the framework keeps for itself (CUDA context, library handles,
  // allocator fragmentation); unset: DefaultReservedBytes of the device
  // (device_catalog.h).
  std::optional<int64_t> reserved_bytes;
  // Largest acceptable recompute overhead, as in RecomputePlanOptions: unset
  // means kDefaultMaxOverheadRatio, 0 means no extra compute at all.
  std::optional<double> max_overhead_ratio;
  MemoryModelOptions memory;
  // AUTO's chunked loss regions, as in RecomputePlanOptions.
  ChunkingOptions chunking;
  Interrupt interrupted;  // as in RecomputePlanOptions
};

struct FitResult {
  // The reserve applied (the option's or the device default).
  int64_t reserved_bytes = 0;
  bool fits = false;
  bool fits_without_recompute = false;
  int64_t baseline_peak_bytes = 0;
  int64_t planned_peak_bytes = 0;
  double recompute_overhead_ratio = 0;
  std::string message;
};

// 16 hex digits: FNV-1a (64 bit) over the schedule's op ids and recompute
// flags. Identical schedules of the same graph have the same fingerprint
// (GetMemoryFrontier's points, GenerateRecomputePlan's plan_fingerprint).
std::string PlanFingerprint(const Graph& graph, const Schedule& schedule);

// Case-insensitive: auto none echo chen_sqrt optimal.
absl::StatusOr<RecomputePolicy> ParseRecomputePolicy(absl::string_view name);
// Lower case.
absl::string_view RecomputePolicyName(RecomputePolicy policy);
// Case-insensitive: peak_bytes (or peak), stash_bytes (or stash).
absl::StatusOr<RecomputeObjective> ParseRecomputeObjective(
    absl::string_view name);
absl::string_view RecomputeObjectiveName(RecomputeObjective objective);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_PLAN_H_
