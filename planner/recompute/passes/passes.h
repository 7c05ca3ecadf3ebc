// The registered recompute passes, one per policy and file: each file defines
// its pass and the factory declared here; registry.cc lists them for
// RecomputePassFor (recompute_pass.h).
#ifndef ECHO_PLANNER_RECOMPUTE_PASSES_PASSES_H_
#define ECHO_PLANNER_RECOMPUTE_PASSES_PASSES_H_

#include <memory>

#include "planner/recompute/recompute_pass.h"
#include "planner/recompute/recompute_problem.h"

namespace echo::planner {

std::unique_ptr<RecomputePass> MakeNonePass();
std::unique_ptr<RecomputePass> MakeEchoPass();
std::unique_ptr<RecomputePass> MakeChenSqrtPass();
std::unique_ptr<RecomputePass> MakeAutoPass();
std::unique_ptr<RecomputePass> MakeOptimalPass();

// ECHO and CHEN_SQRT: a published algorithm's recompute set, placed by
// recompute_problem.h; both ignore the budgets.
PassOutput OutputFromRecomputeSet(const RecomputeProblem& problem,
                                  const RecomputeSet& recompute);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_PASSES_PASSES_H_
