#include "server/profiler/cuda_op_timer.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <optional>
#include <vector>

#include "server/profiler/cuda_internal.h"
#include "server/profiler/profiler_kernels.h"

namespace echo::server {
namespace {

using Clock = std::chrono::steady_clock;

// cuBLAS's own default workspace on Hopper; counted in the memory limit.
constexpr int64_t kCublasWorkspaceBytes = int64_t{32} << 20;

struct GemmTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
  kernels::FillType fill;
};

// Accumulation in f32 for half types, as frameworks do; TF32 off for f32,
// PyTorch's default for matmuls (and the cost model's).
std::optional<GemmTypes> GemmTypesFor(planner::DType dtype) {
  switch (dtype) {
    case planner::DType::kFloat32:
      return GemmTypes{CUDA_R_32F, CUBLAS_COMPUTE_32F,
                       kernels::FillType::kFloat32};
    case planner::DType::kFloat16:
      return GemmTypes{CUDA_R_16F, CUBLAS_COMPUTE_32F,
                       kernels::FillType::kFloat16};
    case planner::DType::kBFloat16:
      return GemmTypes{CUDA_R_16BF, CUBLAS_COMPUTE_32F,
                       kernels::FillType::kBFloat16};
    case planner::DType::kFloat64:
      return GemmTypes{CUDA_R_64F, CUBLAS_COMPUTE_64F,
                       kernels::FillType::kFloat64};
    default:
      return std::nullopt;
  }
}

}  // namespace

CudaOpTimer::CudaOpTimer(GpuDevice device, std::string device_key)
    : device_(std::move(device)), device_key_(std::move(device_key)) {}

CudaOpTimer::~CudaOpTimer() = default;

absl::Status CudaOpTimer::EnsureInitialized() {
  // The current device is per host thread, and RPCs arrive on many.
  ECHO_RETURN_IF_ERROR(
      CudaStatus(cudaSetDevice(device_.index), "cudaSetDevice"));
  if (handles_ != nullptr) return absl::OkStatus();
  auto handles = std::make_unique<Handles>();
  int lowest_priority = 0, highest_priority = 0;
  ECHO_RETURN_IF_ERROR(CudaStatus(
      cudaDeviceGetStreamPriorityRange(&lowest_priority, &highest_priority),
      "cudaDeviceGetStreamPriorityRange"));
  // The lowest priority: the node's training jobs go first.
  ECHO_RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithPriority(
                     &handles->stream, cudaStreamNonBlocking, lowest_priority),
                 "cudaStreamCreateWithPriority"));
  ECHO_RETURN_IF_ERROR(
      CudaStatus(cudaEventCreate(&handles->start), "cudaEventCreate"));
  ECHO_RETURN_IF_ERROR(
      CudaStatus(cudaEventCreate(&handles->stop), "cudaEventCreate"));
  ECHO_RETURN_IF_ERROR(
      CublasStatus(cublasCreate(&handles->cublas), "cublasCreate"));
  ECHO_RETURN_IF_ERROR(CublasStatus(
      cublasSetStream(handles->cublas, handles->stream), "cublasSetStream"));
#if ECHO_HAVE_CUDNN
  ECHO_RETURN_IF_ERROR(
      CudnnStatus(cudnnCreate(&handles->cudnn), "cudnnCreate"));
  ECHO_RETURN_IF_ERROR(CudnnStatus(
      cudnnSetStream(handles->cudnn, handles->stream), "cudnnSetStream"));
#endif
  handles_ = std::move(handles);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CudaOpTimer::FreeMemoryBytes() {
  // Needs the context only, not the handles: GetNodeInfo calls this from
  // any thread, while a profile may be running.
  ECHO_RETURN_IF_ERROR(
      CudaStatus(cudaSetDevice(device_.index), "cudaSetDevice"));
  size_t free_bytes = 0, total_bytes = 0;
  ECHO_RETURN_IF_ERROR(
      CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
  return static_cast<int64_t>(free_bytes);
}

absl::StatusOr<double> CudaOpTimer::Measure(
    const std::function<absl::Status()>& run, const TimingLimits& limits) {
  cudaStream_t stream = handles_->stream;
  for (int i = 0; i < limits.warmup_runs; ++i) ECHO_RETURN_IF_ERROR(run());
  ECHO_RETURN_IF_ERROR(
      CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
  std::vector<float> milliseconds;
  for (int i = 0; i < std::max(limits.timed_runs, 1); ++i) {
    if (i > 0 && Clock::now() >= limits.deadline) break;
    ECHO_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(handles_->start, stream),
                                    "cudaEventRecord"));
    ECHO_RETURN_IF_ERROR(run());
    ECHO_RETURN_IF_ERROR(
        CudaStatus(cudaEventRecord(handles_->stop, stream), "cudaEventRecord"));
    ECHO_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(handles_->stop),
                                    "cudaEventSynchronize"));
    float elapsed = 0;
    ECHO_RETURN_IF_ERROR(CudaStatus(
        cudaEventElapsedTime(&elapsed, handles_->start, handles_->stop),
        "cudaEventElapsedTime"));
    milliseconds.push_back(elapsed);
  }
  auto middle = milliseconds.begin() + milliseconds.size() / 2;
  std::nth_element(milliseconds.begin(), middle, milliseconds.end());
  return *middle * 1e-3;
}

absl::StatusOr<double> CudaOpTimer::TimeGemm(const planner::GemmShape& shape,
                                             const TimingLimits& limits) {
  std::optional<GemmTypes> types = GemmTypesFor(shape.dtype);
  if (!types) {
    return absl::UnimplementedError(
        absl::StrCat("GEMM timing supports f32, f16, bf16 and f64, not ",
                     planner::DTypeName(shape.dtype)));
  }
  if (std::max({shape.m, shape.n, shape.k, shape.batch}) > INT_MAX) {
    return absl::UnimplementedError("GEMM dims beyond 32 bits");
  }
  const int64_t element = planner::DTypeSize(shape.dtype);
  const int64_t a_count = shape.batch * shape.m * shape.k;
  const int64_t b_count = shape.batch * shape.k * shape.n;
  const int64_t c_count = shape.batch * shape.m * shape.n;
  const int64_t data_bytes = (a_count + b_count + c_count) * element;
  ECHO_RETURN_IF_ERROR(CheckMemoryLimit(data_bytes, limits.max_memory_bytes));
  const int64_t workspace_bytes =
      std::min(kCublasWorkspaceBytes, limits.max_memory_bytes - data_bytes);
  DeviceBuffer a, b, c, workspace;
  ECHO_RETURN_IF_ERROR(a.Allocate(a_count * element));
  ECHO_RETURN_IF_ERROR(b.Allocate(b_count * element));
  ECHO_RETURN_IF_ERROR(c.Allocate(c_count * element));
  if (workspace_bytes > 0)
    ECHO_RETURN_IF_ERROR(workspace.Allocate(workspace_bytes));
  cudaStream_t stream = handles_->stream;
  ECHO_RETURN_IF_ERROR(CudaStatus(
      kernels::FillUniform(a.get(), a_count, types->fill, 1, stream), "fill"));
  ECHO_RETURN_IF_ERROR(CudaStatus(
      kernels::FillUniform(b.get(), b_count, types->fill, 2, stream), "fill"));
  ECHO_RETURN_IF_ERROR(CudaStatus(
      kernels::FillUniform(c.get(), c_count, types->fill, 3, stream), "fill"));
  cublasHandle_t cublas = handles_->cublas;
  ECHO_RETURN_IF_ERROR(CublasStatus(
      cublasSetWorkspace(
          cublas, workspace.get(),
          static_cast<size_t>(std::max<int64_t>(workspace_bytes, 0))),
      "cublasSetWorkspace"));
  const float one_f = 1, zero_f = 0;
  const double one_d = 1, zero_d = 0;
  const bool f64 = shape.dtype == planner::DType::kFloat64;
  const void* alpha = f64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = f64 ? static_cast<const void*>(&zero_d) : &zero_f;
  const int m = static_cast<int>(shape.m), n = static_cast<int>(shape.n),
            k = static_cast<int>(shape.k);
  // Row-major C[m,n] = A[m,k] B[k,n] is column-major C^T = B^T A^T.
  auto run = [&]() {
    return CublasStatus(
        cublasGemmStridedBatchedEx(
            cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, alpha, b.get(),
            types->data, n, static_cast<long long>(k) * n, a.get(), types->data,
            k, static_cast<long long>(m) * k, beta, c.get(), types->data, n,
            static_cast<long long>(m) * n, static_cast<int>(shape.batch),
            types->compute, CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx");
  };
  absl::StatusOr<double> seconds = Measure(run, limits);
  // The workspace is freed on return; the handle must not keep it.
  cublasSetWorkspace(cublas, nullptr, 0);
  return seconds;
}

absl::StatusOr<double> CudaOpTimer::TimeMemoryBound(
    const planner::Graph& graph, planner::OpIndex op,
    const TimingLimits& limits) {
  const planner::OpWork work = planner::EstimateOpWork(graph, op);
  if (work.free) return 0.0;  // a view launches no kernel
  const planner::Op& node = graph.op(op);
  double out_bytes = 0;
  for (planner::TensorIndex t : node.outputs) {
    out_bytes += planner::LogicalBytes(graph.tensor(t));
  }
  // bytes_moved already counts only what the op reads (an embedding reads
  // its gathered rows, not its table).
  const double in_bytes = std::max(0.0, work.bytes_moved - out_bytes);
  cudaStream_t stream = handles_->stream;
  DeviceBuffer in, out;
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
    const int64_t bytes = rows * cols * 4;
    ECHO_RETURN_IF_ERROR(CheckMemoryLimit(2 * bytes, limits.max_memory_bytes));
    ECHO_RETURN_IF_ERROR(in.Allocate(bytes));
    ECHO_RETURN_IF_ERROR(out.Allocate(bytes));
    ECHO_RETURN_IF_ERROR(
        CudaStatus(kernels::FillUniform(in.get(), rows * cols,
                                        kernels::FillType::kFloat32, 4, stream),
                   "fill"));
    return Measure(
        [&]() {
          return CudaStatus(
              kernels::RowSoftmax(static_cast<const float*>(in.get()),
                                  static_cast<float*>(out.get()), rows, cols,
                                  stream),
              "row softmax kernel");
        },
        limits);
  }
  const int64_t in_size = static_cast<int64_t>(in_bytes);
  const int64_t out_size = static_cast<int64_t>(out_bytes);
  ECHO_RETURN_IF_ERROR(
      CheckMemoryLimit(in_size + out_size + 32, limits.max_memory_bytes));
  ECHO_RETURN_IF_ERROR(in.Allocate(in_size + 16));
  ECHO_RETURN_IF_ERROR(out.Allocate(out_size + 16));
  ECHO_RETURN_IF_ERROR(
      CudaStatus(kernels::FillUniform(in.get(), (in_size + 16) / 4,
                                      kernels::FillType::kFloat32, 5, stream),
                 "fill"));
  return Measure(
      [&]() {
        return CudaStatus(kernels::StreamBytes(in.get(), in_size, out.get(),
                                               out_size, stream),
                          "stream kernel");
      },
      limits);
}

absl::StatusOr<double> CudaOpTimer::TimeOp(const planner::Graph& graph,
                                           planner::OpIndex op,
                                           const TimingLimits& limits) {
  ECHO_RETURN_IF_ERROR(EnsureInitialized());
  absl::StatusOr<double> seconds;
  switch (graph.op(op).op_class) {
    case planner::OpClass::kGemm:
      if (std::optional<planner::GemmShape> shape =
              planner::InferGemmShape(graph, op)) {
        seconds = TimeGemm(*shape, limits);
      } else {
        return absl::UnimplementedError(
            "GEMM dims cannot be inferred from the op's shapes");
      }
      break;
    case planner::OpClass::kConv:
      if (std::optional<planner::ConvShape> shape =
              planner::InferConvShape(graph, op)) {
        seconds = TimeConv(*shape, limits);
      } else {
        return absl::UnimplementedError(
            "convolution dims cannot be inferred from the op's shapes");
      }
      break;
    case planner::OpClass::kCollective:
      return absl::UnimplementedError("collectives are not timed on one GPU");
    default:
      seconds = TimeMemoryBound(graph, op, limits);
      break;
  }
  // Clears a non-sticky error so that it does not fail the next op.
  if (!seconds.ok()) cudaGetLastError();
  return seconds;
}

}  // namespace echo::server
