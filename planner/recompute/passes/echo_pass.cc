#include "planner/recompute/passes/echo_pass.h"

#include <algorithm>
#include <memory>

#include "absl/container/inlined_vector.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "planner/recompute/passes/passes.h"
#include "planner/recompute/plan.h"
#include "planner/recompute/search/union_find.h"
#include "planner/status_macros.h"

namespace echo::planner {
namespace {

bool IsConcat(const Op& op) {
  const std::string type = absl::AsciiStrToLower(op.op_type);
  const std::string name = absl::AsciiStrToLower(op.name);
  return absl::StrContains(type, "concat") || type == "aten::cat" ||
         absl::StrContains(name, "concat");
}

}  // namespace

bool EchoRecompute::IsCheap(const RecomputeProblem& problem, OpIndex o) {
  const Op& op = problem.graph.op(o);
  if (!problem.can_clone[o] || op.phase != Phase::kForward) return false;
  auto hint = op.attributes.find(kRecomputeHintAttribute);
  if (hint != op.attributes.end()) {
    if (hint->second == "stash") return false;
    if (hint->second == "recompute") return true;
  }
  switch (op.op_class) {
    case OpClass::kGemm:
    case OpClass::kConv:
    case OpClass::kRandom:
    case OpClass::kEmbedding:
    case OpClass::kSoftmax:
      return false;
    default:
      return !IsConcat(op);
  }
}

absl::StatusOr<RecomputeSet> EchoRecompute::Run(
    const RecomputeProblem& problem) {
  const Graph& graph = problem.graph;
  const int32_t n = graph.num_ops();
  RecomputeSet cheap(n, 0);
  for (OpIndex o = 0; o < n; ++o) cheap[o] = IsCheap(problem, o);
  auto is_activation = [&graph](TensorIndex t) {
    const Tensor& tensor = graph.tensor(t);
    return tensor.producer != kNoOp && !IsPersistentRole(tensor.role);
  };

  // Step 2: regions, closed over shared activations.
  UnionFind regions(n);
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    if (!is_activation(t)) continue;
    const Tensor& tensor = graph.tensor(t);
    OpIndex anchor = cheap[tensor.producer] ? tensor.producer : kNoOp;
    for (OpIndex r : tensor.readers) {
      if (!cheap[r]) continue;
      if (anchor == kNoOp) {
        anchor = r;
      } else {
        regions.Union(r, anchor);
      }
    }
  }

  // Step 3: everything cheap starts recomputed; the frontier greedy stashes.
  // Incremental form of the pass loop: frontier groups only grow (an op joins
  // when its last recomputed cheap input is stashed) or leave whole (when
  // stashed), so each pass re-evaluates only the groups that gained members.
  // Groups never span regions (shared activations are closed in step 2).
  RecomputeSet recompute = cheap;
  std::vector<int32_t> pending(n, 0);  // recomputed cheap producers of inputs
  for (OpIndex o = 0; o < n; ++o) {
    if (!cheap[o]) continue;
    for (TensorIndex t : graph.DistinctInputs(o)) {
      const OpIndex p = graph.tensor(t).producer;
      if (p != kNoOp && cheap[p]) ++pending[o];
    }
  }
  UnionFind groups(n);
  // Mostly one op each: held inline (one heap list per op otherwise).
  std::vector<absl::InlinedVector<OpIndex, 2>> group_members(n);
  std::vector<OpIndex> frontier_reader(graph.num_tensors(), kNoOp);
  std::vector<uint8_t> in_frontier(n, 0);
  std::vector<OpIndex> joining;
  for (OpIndex o = 0; o < n; ++o) {
    if (cheap[o] && pending[o] == 0) joining.push_back(o);
  }
  std::vector<uint32_t> seen(graph.num_tensors(), 0);
  uint32_t stamp = 0;
  while (!joining.empty()) {
    std::vector<OpIndex> dirty;
    for (OpIndex o : joining) {
      in_frontier[o] = 1;
      group_members[o] = {o};
      for (TensorIndex t : graph.DistinctInputs(o)) {
        if (!is_activation(t)) continue;
        const OpIndex other = frontier_reader[t];
        if (other == kNoOp || !in_frontier[other]) {
          frontier_reader[t] = o;
          continue;
        }
        int32_t a = groups.Find(o), b = groups.Find(other);
        if (a == b) continue;
        if (group_members[a].size() > group_members[b].size()) std::swap(a, b);
        groups.Union(a, b);
        group_members[b].insert(group_members[b].end(),
                                group_members[a].begin(),
                                group_members[a].end());
        group_members[a].clear();
      }
    }
    for (OpIndex o : joining) dirty.push_back(groups.Find(o));
    std::sort(dirty.begin(), dirty.end());
    dirty.erase(std::unique(dirty.begin(), dirty.end()), dirty.end());
    joining.clear();
    for (OpIndex root : dirty) {
      const absl::InlinedVector<OpIndex, 2>& group = group_members[root];
      int64_t released = 0, allocated = 0;
      ++stamp;
      for (OpIndex o : group) {
        for (TensorIndex t : graph.op(o).outputs) {
          // A clone makes only the outputs it re-makes (recompute_outputs).
          if (graph.RemadeOnRecompute(t)) allocated += problem.tensor_bytes[t];
        }
        for (TensorIndex t : graph.DistinctInputs(o)) {
          if (!is_activation(t) || seen[t] == stamp) continue;
          seen[t] = stamp;
          const std::vector<OpIndex>& readers = graph.tensor(t).readers;
          const bool only_group =
              std::all_of(readers.begin(), readers.end(), [&](OpIndex r) {
                return in_frontier[r] && groups.Find(r) == root;
              });
          (only_group ? released : allocated) += problem.tensor_bytes[t];
        }
      }
      if (released < allocated) continue;
      for (OpIndex o : group) {
        recompute[o] = 0;
        in_frontier[o] = 0;
      }
      for (OpIndex o : group) {
        for (TensorIndex t : graph.op(o).outputs) {
          for (OpIndex r : graph.tensor(t).readers) {
            if (cheap[r] && recompute[r] && --pending[r] == 0) {
              joining.push_back(r);
            }
          }
        }
      }
    }
  }
  return recompute;
}

namespace {

// ECHO: the algorithm's recompute set; ignores the budgets.
class EchoPass final : public RecomputePass {
 public:
  RecomputePolicy policy() const override { return RecomputePolicy::kEcho; }
  absl::StatusOr<PassOutput> Run(const PassInput& input) const override {
    ASSIGN_OR_RETURN(RecomputeSet recompute,
                     EchoRecompute().Run(input.problem));
    return OutputFromRecomputeSet(input.problem, recompute);
  }
};

}  // namespace

std::unique_ptr<RecomputePass> MakeEchoPass() {
  return std::make_unique<EchoPass>();
}

}  // namespace echo::planner
