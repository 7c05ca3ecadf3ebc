// Random training graphs for property tests: a forward DAG (a chain with
// random skip connections, random op classes, sizes and costs, some ops that
// may not be recomputed, some with workspace or two outputs), a loss, the
// mirrored backward (each op's gradient reads a random subset of the op's
// inputs and output, gradients of shared activations are accumulated) and
// optimizer updates of the parameters.
#ifndef ECHO_TESTS_UNIT_RANDOM_GRAPHS_H_
#define ECHO_TESTS_UNIT_RANDOM_GRAPHS_H_

#include <cstdint>
#include <vector>

#include "planner/graph.h"

namespace echo::testing {

struct RandomGraphOptions {
  int forward_ops = 16;
  // Chance that an op also reads a random earlier activation.
  double skip_probability = 0.3;
  // Chance that an op may not be recomputed (besides RANDOM ops).
  double non_recomputable_probability = 0.05;
  double workspace_probability = 0.1;
  double two_outputs_probability = 0.1;
  int64_t min_bytes = 1;
  int64_t max_bytes = 1000;
};

struct RandomGraph {
  planner::Graph graph;
  std::vector<double> op_costs;
};

RandomGraph MakeRandomTrainingGraph(uint64_t seed,
                                    const RandomGraphOptions& options = {});

}  // namespace echo::testing

#endif  // ECHO_TESTS_UNIT_RANDOM_GRAPHS_H_
