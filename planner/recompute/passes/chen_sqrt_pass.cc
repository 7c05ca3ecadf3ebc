#include "planner/recompute/passes/chen_sqrt_pass.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "planner/recompute/passes/passes.h"
#include "planner/status_macros.h"

namespace echo::planner {

absl::StatusOr<RecomputeSet> ChenSqrtRecompute::Run(
    const RecomputeProblem& problem) {
  const Graph& graph = problem.graph;
  // Position of each forward op among the forward ops.
  std::vector<int32_t> position(graph.num_ops(), -1);
  std::vector<OpIndex> forward;
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    if (graph.op(o).phase == Phase::kForward) {
      position[o] = static_cast<int32_t>(forward.size());
      forward.push_back(o);
    }
  }
  const int32_t num_forward = static_cast<int32_t>(forward.size());
  RecomputeSet recompute(graph.num_ops(), 0);
  if (num_forward == 0) return recompute;
  const int32_t segment =
      options_.segment_ops > 0
          ? options_.segment_ops
          : std::max<int32_t>(1, std::lround(std::sqrt(num_forward)));

  // Activations crossing the cut after forward position i: made at or before
  // i, read by a forward op after i. Count them and sum their ids, so a cut
  // crossed by one activation names it.
  struct Crossing {
    TensorIndex tensor;
    int32_t from, to;  // crosses the cuts from..to-1
  };
  std::vector<Crossing> crossings;
  std::vector<int64_t> count(num_forward + 1, 0), id_sum(num_forward + 1, 0);
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    const Tensor& tensor = graph.tensor(t);
    if (tensor.producer == kNoOp || position[tensor.producer] < 0 ||
        IsPersistentRole(tensor.role)) {
      continue;
    }
    int32_t last = -1;
    for (OpIndex r : tensor.readers) {
      if (position[r] >= 0) last = std::max(last, position[r]);
    }
    const int32_t from = position[tensor.producer];
    if (last <= from) continue;
    crossings.push_back({t, from, last});
    count[from] += 1;
    count[last] -= 1;
    id_sum[from] += t;
    id_sum[last] -= t;
  }
  std::vector<uint8_t> articulation(num_forward, 0);
  int64_t running_count = 0, running_sum = 0;
  for (int32_t i = 0; i < num_forward; ++i) {
    running_count += count[i];
    running_sum += id_sum[i];
    articulation[i] =
        running_count == 1 && graph.tensor(running_sum).producer == forward[i];
  }

  std::vector<uint8_t> keep(graph.num_ops(), 0);
  std::vector<int32_t> cuts;
  int32_t since_checkpoint = 0;
  for (int32_t i = 0; i < num_forward; ++i) {
    if (++since_checkpoint >= segment && articulation[i]) {
      keep[forward[i]] = 1;
      cuts.push_back(i);
      since_checkpoint = 0;
    }
  }
  const int32_t wanted = num_forward / segment;
  if (static_cast<int32_t>(cuts.size()) * 2 < wanted) {
    // Too few articulation points: cut every `segment` ops and keep every
    // activation crossing a cut.
    std::fill(keep.begin(), keep.end(), 0);
    cuts.clear();
    for (int32_t i = segment - 1; i < num_forward - 1; i += segment) {
      cuts.push_back(i);
    }
    for (const Crossing& c : crossings) {
      // Crosses cut i when from <= i < to.
      auto it = std::lower_bound(cuts.begin(), cuts.end(), c.from);
      if (it != cuts.end() && *it < c.to) {
        keep[graph.tensor(c.tensor).producer] = 1;
      }
    }
  }
  for (OpIndex o : forward) recompute[o] = problem.eligible[o] && !keep[o];
  return recompute;
}

namespace {

// CHEN_SQRT: the algorithm's recompute set; ignores the budgets.
class ChenSqrtPass final : public RecomputePass {
 public:
  RecomputePolicy policy() const override { return RecomputePolicy::kChenSqrt; }
  absl::StatusOr<PassOutput> Run(const PassInput& input) const override {
    ASSIGN_OR_RETURN(RecomputeSet recompute,
                     ChenSqrtRecompute().Run(input.problem));
    return OutputFromRecomputeSet(input.problem, recompute);
  }
};

}  // namespace

std::unique_ptr<RecomputePass> MakeChenSqrtPass() {
  return std::make_unique<ChenSqrtPass>();
}

}  // namespace echo::planner
