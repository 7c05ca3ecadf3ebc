// RecomputePassFor: every policy's pass, made once.
#include <memory>
#include <vector>

#include "planner/recompute/passes/passes.h"
#include "planner/recompute/recompute_pass.h"

namespace echo::planner {

PassOutput OutputFromRecomputeSet(const RecomputeProblem& problem,
                                  const RecomputeSet& recompute) {
  PassOutput output;
  output.schedule = ScheduleFromRecomputeSet(problem, recompute);
  return output;
}

const RecomputePass& RecomputePassFor(RecomputePolicy policy) {
  static const auto* const kRegistry = [] {
    auto* passes = new std::vector<std::unique_ptr<RecomputePass>>();
    passes->push_back(MakeAutoPass());
    passes->push_back(MakeNonePass());
    passes->push_back(MakeEchoPass());
    passes->push_back(MakeChenSqrtPass());
    passes->push_back(MakeOptimalPass());
    return passes;
  }();
  for (const std::unique_ptr<RecomputePass>& pass : *kRegistry) {
    if (pass->policy() == policy) return *pass;
  }
  // Every enumerator is registered above; an out-of-range value plans as
  // AUTO rather than crash.
  return *kRegistry->front();
}

}  // namespace echo::planner
