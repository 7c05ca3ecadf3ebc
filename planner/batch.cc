#include "planner/batch.h"

#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "planner/status_macros.h"

namespace echo::planner {
namespace {

// The same cap as GraphBuilder::Build: every simulated sum fits int64.
constexpr int64_t kMaxTotalBytes = std::numeric_limits<int64_t>::max() / 4;

// ceil(value * num / den), or -1 when it exceeds kMaxTotalBytes.
int64_t ScaleBytes(int64_t value, int64_t num, int64_t den) {
  const __int128 scaled = (static_cast<__int128>(value) * num + den - 1) /
                          static_cast<__int128>(den);
  return scaled > kMaxTotalBytes ? -1 : static_cast<int64_t>(scaled);
}

double ScaleNumber(double value, double factor) {
  return value < 0 ? value : value * factor;
}

}  // namespace

bool HasBatchDimension(const Graph& graph) {
  if (graph.batch_size() <= 0) return false;
  for (const Tensor& tensor : graph.tensors()) {
    if (tensor.batch_dim >= 0) return true;
  }
  return false;
}

BatchScaler::BatchScaler(const Graph& graph)
    : graph_(graph), base_batch_(graph.batch_size()) {
  std::vector<bool> op_scaled(graph.num_ops(), false);
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    const Tensor& tensor = graph.tensor(t);
    if (tensor.batch_dim < 0) {
      unscaled_bytes_ += tensor.size_bytes;
      continue;
    }
    scaled_tensors_.push_back(t);
    base_tensor_bytes_.push_back(tensor.size_bytes);
    batch_multiples_.push_back(
        tensor.shape.empty() ? 0
                             : tensor.shape[tensor.batch_dim] / base_batch_);
    if (tensor.producer != kNoOp) op_scaled[tensor.producer] = true;
    for (OpIndex reader : tensor.readers) op_scaled[reader] = true;
  }
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    if (!op_scaled[o]) continue;
    scaled_ops_.push_back(o);
    const Op& op = graph.op(o);
    base_ops_.push_back({op.flops, op.measured_time_seconds, op.relative_cost,
                         op.workspace_bytes});
  }
}

absl::StatusOr<BatchScaler> BatchScaler::Create(const Graph& graph) {
  if (!HasBatchDimension(graph)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "graph '", graph.name(),
        "' has no batch dimension: set Graph.batch_size and Tensor.batch_dim "
        "(echoctl --batch_dim for Checkmate files, or the PyTorch hook's "
        "export)"));
  }
  return BatchScaler(graph);
}

absl::StatusOr<const Graph*> BatchScaler::At(int64_t batch) {
  if (batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch size must be >= 1, got ", batch));
  }
  int64_t total = unscaled_bytes_;
  for (size_t i = 0; i < scaled_tensors_.size(); ++i) {
    Tensor& tensor = graph_.tensors_[scaled_tensors_[i]];
    const int64_t bytes = ScaleBytes(base_tensor_bytes_[i], batch, base_batch_);
    if (bytes < 0 || bytes > kMaxTotalBytes - total) {
      return absl::ResourceExhaustedError(
          absl::StrCat("at batch ", batch, " tensor '", tensor.id,
                       "' and the graph's other batch-scaled tensors overflow "
                       "int64 bytes"));
    }
    total += bytes;
    tensor.size_bytes = bytes;
    // k * batch <= the tensor's element count, which its bytes bound.
    if (!tensor.shape.empty()) {
      tensor.shape[tensor.batch_dim] = batch_multiples_[i] * batch;
    }
  }
  const double factor =
      static_cast<double>(batch) / static_cast<double>(base_batch_);
  for (size_t i = 0; i < scaled_ops_.size(); ++i) {
    Op& op = graph_.ops_[scaled_ops_[i]];
    const OpNumbers& base = base_ops_[i];
    op.flops = ScaleNumber(base.flops, factor);
    op.measured_time_seconds = ScaleNumber(base.measured_time_seconds, factor);
    op.relative_cost = ScaleNumber(base.relative_cost, factor);
    op.workspace_bytes = ScaleBytes(base.workspace_bytes, batch, base_batch_);
    if (op.workspace_bytes < 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "at batch ", batch, " op '", op.id, "' workspace overflows int64"));
    }
  }
  graph_.batch_size_ = batch;
  return &graph_;
}

absl::StatusOr<Graph> WithBatchSize(const Graph& graph, int64_t batch) {
  ASSIGN_OR_RETURN(BatchScaler scaler, BatchScaler::Create(graph));
  ASSIGN_OR_RETURN(const Graph* scaled, scaler.At(batch));
  return *scaled;
}

}  // namespace echo::planner
