// Generated training graphs for the speed benchmark: forward + mirrored
// backward + optimizer ops with realistic sizes and FLOP-based costs.
#ifndef ECHO_TESTS_BENCH_MODEL_GRAPHS_H_
#define ECHO_TESTS_BENCH_MODEL_GRAPHS_H_

#include <cstdint>
#include <vector>

#include "echo/v1/graph.pb.h"
#include "planner/graph.h"

namespace echo::bench {

struct ModelGraph {
  planner::Graph graph;
  std::vector<double> op_costs;  // seconds on a ~100 TFLOP/s, 2 TB/s device
};

// Deep LSTM encoder-decoder with MLP attention over all encoder states
// (NMT-like): `layers` LSTM layers, `steps` source and target steps, per-step
// cells (gate GEMM, sigmoid/tanh gates, cell update) and, per decoder step,
// tanh(W_s S + W_q q_t) over every source position, scores, softmax and
// context.
ModelGraph MakeLstmAttentionGraph(int layers, int steps, int64_t batch,
                                  int64_t hidden);

// Transformer-like stack: per layer, layer norm, QKV projection, attention
// scores, softmax, dropout, context, output projection, residual, layer
// norm, MLP (GEMM, GELU, GEMM), residual.
ModelGraph MakeTransformerGraph(int layers, int64_t batch, int64_t sequence,
                                int64_t hidden, int heads);

// The graph with every input and activation marked as proportional to
// `batch` (the generators size them by batch and give no shapes): a batch
// dimension for the scheduler benchmarks.
planner::Graph WithBatchMarks(const planner::Graph& graph, int64_t batch);
// The same as the echo.v1.Graph a client sends.
v1::Graph BatchMarkedProto(const planner::Graph& graph, int64_t batch);

}  // namespace echo::bench

#endif  // ECHO_TESTS_BENCH_MODEL_GRAPHS_H_
