// What an op computes, for the cost model (cost_model.h): GEMM and
// convolution shapes inferred from the graph, FLOPs and bytes moved per op
// class. Defined in op_work.cc.
#ifndef ECHO_PLANNER_OP_WORK_H_
#define ECHO_PLANNER_OP_WORK_H_

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "planner/graph.h"

namespace echo::planner {

// ---------------------------------------------------------------- shapes

struct GemmShape {
  int64_t batch = 1;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  DType dtype = DType::kFloat32;
  double Flops() const { return 2.0 * batch * m * n * k; }
};
// Nullopt when the op is not a GEMM or its dims cannot be inferred.
std::optional<GemmShape> InferGemmShape(const Graph& graph, OpIndex op);

struct ConvShape {
  int64_t batch = 0;
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  std::vector<int64_t> in_spatial;   // of the forward input
  std::vector<int64_t> out_spatial;  // of the forward output
  std::vector<int64_t> kernel;
  std::vector<int64_t> stride;
  std::vector<int64_t> padding;
  std::vector<int64_t> dilation;
  int64_t groups = 1;
  bool transposed = false;
  DType dtype = DType::kFloat32;
  // Which passes the op runs: forward, or any of the backward products.
  bool backward = false;
  bool grad_input = false;
  bool grad_weight = false;
  bool grad_bias = false;
  // FLOPs of the forward convolution: 2 * MACs.
  double ForwardFlops() const;
  double Flops() const;
};
std::optional<ConvShape> InferConvShape(const Graph& graph, OpIndex op);

// ---------------------------------------------------------------- work

// A tensor's shape is usable when it has a dtype and dims (or the size of a
// scalar); otherwise only its size_bytes is known.
bool HasKnownShape(const Tensor& tensor);
// Bytes an op touches in the tensor: from shape and dtype (a view's
// size_bytes is 0, yet its reader reads the viewed data), else size_bytes.
double LogicalBytes(const Tensor& tensor);

struct OpWork {
  // False when the model cannot say (GEMM/conv without shapes, collectives).
  bool known = false;
  // Views and reshapes: no kernel runs, cost 0.
  bool free = false;
  double flops = 0;
  double bytes_moved = 0;
  DType dtype = DType::kFloat32;
  // GEMM and conv run on the matrix units.
  bool matrix = false;
};
// FLOPs (op.flops when the client gives it) and bytes read plus written.
OpWork EstimateOpWork(const Graph& graph, OpIndex op);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_OP_WORK_H_
