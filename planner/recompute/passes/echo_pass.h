// The published Echo algorithm (docs/design.md section 2, Zheng et al. ISCA
// 2020, as implemented upstream in MXNet), re-implemented faithfully as a
// baseline:
//  1. Rule list: parameters, dropout/random, embedding, convolution,
//     fully-connected/GEMM, concat and the softmax output are heavy (never
//     recomputed); every other forward op is cheap. op.recomputable = false
//     and the recompute_hint attribute override the list.
//  2. Regions: cheap ops connected through activations, closed over shared
//     inputs (all cheap readers of one activation land in one region).
//  3. Every cheap op starts recomputed. Per region, repeatedly take the
//     frontier (recomputed ops whose cheap inputs are stashed), group frontier
//     ops that share inputs, and stash a group when the bytes it releases
//     (inputs all of whose readers are in the group) are >= the bytes it
//     allocates (its outputs, plus its inputs still read elsewhere). Stop when
//     nothing flips.
//  4. The remaining recomputed ops are cloned right before their first
//     backward reader (recompute_problem.h), so gradient ops read the clones.
// No memory or runtime budget; benefit measured as a sum of stashed bytes.
#ifndef ECHO_PLANNER_RECOMPUTE_PASSES_ECHO_PASS_H_
#define ECHO_PLANNER_RECOMPUTE_PASSES_ECHO_PASS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "planner/recompute/recompute_problem.h"

namespace echo::planner {

class EchoRecompute {
 public:
  absl::StatusOr<RecomputeSet> Run(const RecomputeProblem& problem);

  // Step 1's rule: may ECHO recompute this op?
  static bool IsCheap(const RecomputeProblem& problem, OpIndex op);
};

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_PASSES_ECHO_PASS_H_
