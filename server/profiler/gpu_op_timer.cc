#include "server/profiler/gpu_op_timer.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "planner/cost_model.h"
#include "planner/status_macros.h"

namespace echo::server {
namespace {

// The dtypes the plugin's cuBLAS and cuDNN paths run.
absl::Status CheckTimedDType(absl::string_view what, planner::DType dtype) {
  switch (dtype) {
    case planner::DType::kFloat32:
    case planner::DType::kFloat16:
    case planner::DType::kBFloat16:
    case planner::DType::kFloat64:
      return absl::OkStatus();
    default:
      return absl::UnimplementedError(
          absl::StrCat(what, " timing supports f32, f16, bf16 and f64, not ",
                       planner::DTypeName(dtype)));
  }
}

}  // namespace

GpuOpTimer::GpuOpTimer(std::unique_ptr<GpuKernelTimer> kernels,
                       GpuDevice device, std::string device_key)
    : kernels_(std::move(kernels)),
      device_(std::move(device)),
      device_key_(std::move(device_key)) {}

absl::StatusOr<double> GpuOpTimer::TimeOp(const planner::Graph& graph,
                                          planner::OpIndex op,
                                          const TimingLimits& limits) {
  switch (graph.op(op).op_class) {
    case planner::OpClass::kGemm: {
      std::optional<planner::GemmShape> shape =
          planner::InferGemmShape(graph, op);
      if (!shape) {
        return absl::UnimplementedError(
            "GEMM dims cannot be inferred from the op's shapes");
      }
      RETURN_IF_ERROR(CheckTimedDType("GEMM", shape->dtype));
      return kernels_->TimeGemm(*shape, limits);
    }
    case planner::OpClass::kConv: {
      std::optional<planner::ConvShape> shape =
          planner::InferConvShape(graph, op);
      if (!shape) {
        return absl::UnimplementedError(
            "convolution dims cannot be inferred from the op's shapes");
      }
      RETURN_IF_ERROR(CheckTimedDType("convolution", shape->dtype));
      return kernels_->TimeConv(*shape, limits);
    }
    case planner::OpClass::kCollective:
      return absl::UnimplementedError("collectives are not timed on one GPU");
    default:
      return TimeMemoryBound(graph, op, limits);
  }
}

absl::StatusOr<double> GpuOpTimer::TimeMemoryBound(const planner::Graph& graph,
                                                   planner::OpIndex op,
                                                   const TimingLimits& limits) {
  const planner::OpWork work = planner::EstimateOpWork(graph, op);
  if (work.free) return 0.0;  // a view launches no kernel
  const planner::Op& node = graph.op(op);
  if (node.op_class == planner::OpClass::kSoftmax ||
      node.op_class == planner::OpClass::kNorm) {
    // Rows over the last dim of the largest input, in floats.
    const planner::Tensor* largest = nullptr;
    for (planner::TensorIndex t : node.inputs) {
      const planner::Tensor& tensor = graph.tensor(t);
      if (largest == nullptr ||
          planner::LogicalBytes(tensor) > planner::LogicalBytes(*largest)) {
        largest = &tensor;
      }
    }
    const int64_t row_bytes =
        largest != nullptr && planner::HasKnownShape(*largest) &&
                !largest->shape.empty()
            ? largest->shape.back() * planner::DTypeSize(largest->dtype)
            : 4096;
    const int64_t cols = std::max<int64_t>(row_bytes / 4, 1);
    const int64_t floats = static_cast<int64_t>(
        (largest == nullptr ? 0 : planner::LogicalBytes(*largest)) / 4);
    const int64_t rows = std::max<int64_t>(floats / cols, 1);
    return kernels_->TimeRowSoftmax(rows, cols, limits);
  }
  double out_bytes = 0;
  for (planner::TensorIndex t : node.outputs) {
    out_bytes += planner::LogicalBytes(graph.tensor(t));
  }
  // bytes_moved already counts only what the op reads (an embedding reads
  // its gathered rows, not its table).
  const double in_bytes = std::max(0.0, work.bytes_moved - out_bytes);
  return kernels_->TimeStreamBytes(static_cast<int64_t>(in_bytes),
                                   static_cast<int64_t>(out_bytes), limits);
}

std::string GpuDeviceKey(const GpuDiscovery& discovery, const GpuDevice& gpu) {
  return absl::StrCat(
      gpu.name, "|cc ", gpu.compute_capability, "|driver ",
      discovery.driver_version, "|cudart ", discovery.cuda_runtime_version,
      "|cublas ", discovery.cublas_version, "|cudnn ", discovery.cudnn_version);
}

}  // namespace echo::server
