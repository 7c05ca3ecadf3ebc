// Ops that are copies of one another: the same op in each of a model's
// identical layers (transformer blocks, decoder steps, ResNet bottlenecks).
// AUTO's greedy on large graphs weighs one copy of a class exactly and tries
// its move on the others, each still checked on the whole graph.
#ifndef ECHO_PLANNER_RECOMPUTE_SEARCH_COPY_CLASSES_H_
#define ECHO_PLANNER_RECOMPUTE_SEARCH_COPY_CLASSES_H_

#include <cstdint>
#include <vector>

#include "planner/recompute/recompute_problem.h"

namespace echo::planner {

// Per op, a class id (dense, from 0): two ops share one when they look
// alike to the planner (op type, phase, cost, what may be recomputed,
// output bytes) and so do their neighbourhoods out to `rounds` edges: each
// round adds the classes of an op's inputs' producers, in argument order,
// and of its outputs' readers. Iterated refinement (Weisfeiler-Lehman
// hashing), so classes are an over-approximation of isomorphism: a caller
// checks what it relies on.
std::vector<int32_t> CopyClasses(const RecomputeProblem& problem,
                                 int32_t rounds = 4);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_SEARCH_COPY_CLASSES_H_
