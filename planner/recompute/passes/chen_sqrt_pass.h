// sqrt(n) segment checkpointing (Chen et al. 2016, "Training Deep Nets with
// Sublinear Memory Cost"), as a baseline: over the forward ops in graph
// order, keep the output of about every sqrt(n)-th articulation point (an op
// whose output is the only activation crossing the cut after it) and
// recompute every other recomputable forward op, one segment at a time in
// the backward pass (recompute_problem.h places a segment's clones together,
// before the first backward op that needs them). Graphs with too few
// articulation points (long skips, recurrent state) fall back to cuts every
// sqrt(n) forward ops, keeping every activation that crosses them.
#ifndef ECHO_PLANNER_RECOMPUTE_PASSES_CHEN_SQRT_PASS_H_
#define ECHO_PLANNER_RECOMPUTE_PASSES_CHEN_SQRT_PASS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "planner/recompute/recompute_problem.h"

namespace echo::planner {

class ChenSqrtRecompute {
 public:
  struct Options {
    // Forward ops per segment; 0: round(sqrt(number of forward ops)).
    int32_t segment_ops = 0;
  };

  ChenSqrtRecompute() = default;
  explicit ChenSqrtRecompute(Options options) : options_(options) {}
  absl::StatusOr<RecomputeSet> Run(const RecomputeProblem& problem);

 private:
  Options options_;
};

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_PASSES_CHEN_SQRT_PASS_H_
