#include "server/profiler/cuda_kernel_timer.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <vector>

#include "server/profiler/cuda_internal.h"
#include "server/profiler/gemm_footprint.h"
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
  int64_t element_bytes;
};

// Accumulation in f32 for half types, as frameworks do; TF32 off for f32,
// PyTorch's default for matmuls (and the cost model's).
std::optional<GemmTypes> GemmTypesFor(planner::DType dtype) {
  switch (dtype) {
    case planner::DType::kFloat32:
      return GemmTypes{CUDA_R_32F, CUBLAS_COMPUTE_32F,
                       kernels::FillType::kFloat32, 4};
    case planner::DType::kFloat16:
      return GemmTypes{CUDA_R_16F, CUBLAS_COMPUTE_32F,
                       kernels::FillType::kFloat16, 2};
    case planner::DType::kBFloat16:
      return GemmTypes{CUDA_R_16BF, CUBLAS_COMPUTE_32F,
                       kernels::FillType::kBFloat16, 2};
    case planner::DType::kFloat64:
      return GemmTypes{CUDA_R_64F, CUBLAS_COMPUTE_64F,
                       kernels::FillType::kFloat64, 8};
    default:
      return std::nullopt;
  }
}

}  // namespace

CudaKernelTimer::CudaKernelTimer(int device_index)
    : device_index_(device_index) {}

CudaKernelTimer::~CudaKernelTimer() = default;

absl::Status CudaKernelTimer::EnsureInitialized() {
  // The current device is per host thread, and RPCs arrive on many.
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_index_), "cudaSetDevice"));
  if (handles_ != nullptr) return absl::OkStatus();
  auto handles = std::make_unique<Handles>();
  int lowest_priority = 0, highest_priority = 0;
  RETURN_IF_ERROR(CudaStatus(
      cudaDeviceGetStreamPriorityRange(&lowest_priority, &highest_priority),
      "cudaDeviceGetStreamPriorityRange"));
  // The lowest priority: the node's training jobs go first.
  RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithPriority(
                     &handles->stream, cudaStreamNonBlocking, lowest_priority),
                 "cudaStreamCreateWithPriority"));
  RETURN_IF_ERROR(
      CudaStatus(cudaEventCreate(&handles->start), "cudaEventCreate"));
  RETURN_IF_ERROR(
      CudaStatus(cudaEventCreate(&handles->stop), "cudaEventCreate"));
  RETURN_IF_ERROR(CublasStatus(cublasCreate(&handles->cublas), "cublasCreate"));
  RETURN_IF_ERROR(CublasStatus(
      cublasSetStream(handles->cublas, handles->stream), "cublasSetStream"));
#if ECHO_HAVE_CUDNN
  RETURN_IF_ERROR(CudnnStatus(cudnnCreate(&handles->cudnn), "cudnnCreate"));
  RETURN_IF_ERROR(CudnnStatus(cudnnSetStream(handles->cudnn, handles->stream),
                              "cudnnSetStream"));
#endif
  handles_ = std::move(handles);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CudaKernelTimer::FreeMemoryBytes() {
  // Needs the context only, not the handles: GetNodeInfo calls this from
  // any thread, while a profile may be running.
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_index_), "cudaSetDevice"));
  size_t free_bytes = 0, total_bytes = 0;
  RETURN_IF_ERROR(
      CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
  return static_cast<int64_t>(free_bytes);
}

absl::StatusOr<double> CudaKernelTimer::Timed(
    const std::function<absl::StatusOr<double>()>& time) {
  // An OK Status must not construct a StatusOr (Abseil aborts on a GPU).
  absl::Status initialized = EnsureInitialized();
  if (!initialized.ok()) {
    cudaGetLastError();
    return initialized;
  }
  absl::StatusOr<double> seconds = time();
  if (!seconds.ok()) cudaGetLastError();
  return seconds;
}

absl::StatusOr<double> CudaKernelTimer::Measure(
    const std::function<absl::Status()>& run, const TimingLimits& limits) {
  cudaStream_t stream = handles_->stream;
  for (int i = 0; i < limits.warmup_runs; ++i) RETURN_IF_ERROR(run());
  RETURN_IF_ERROR(
      CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
  std::vector<float> milliseconds;
  for (int i = 0; i < std::max(limits.timed_runs, 1); ++i) {
    if (i > 0 && Clock::now() >= limits.deadline) break;
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(handles_->start, stream),
                               "cudaEventRecord"));
    RETURN_IF_ERROR(run());
    RETURN_IF_ERROR(
        CudaStatus(cudaEventRecord(handles_->stop, stream), "cudaEventRecord"));
    RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(handles_->stop),
                               "cudaEventSynchronize"));
    float elapsed = 0;
    RETURN_IF_ERROR(CudaStatus(
        cudaEventElapsedTime(&elapsed, handles_->start, handles_->stop),
        "cudaEventElapsedTime"));
    milliseconds.push_back(elapsed);
  }
  auto middle = milliseconds.begin() + milliseconds.size() / 2;
  std::nth_element(milliseconds.begin(), middle, milliseconds.end());
  return *middle * 1e-3;
}

absl::StatusOr<double> CudaKernelTimer::TimeGemm(
    const planner::GemmShape& shape, const TimingLimits& limits) {
  return Timed([&] { return DoTimeGemm(shape, limits); });
}

absl::StatusOr<double> CudaKernelTimer::TimeConv(
    const planner::ConvShape& shape, const TimingLimits& limits) {
  return Timed([&] { return DoTimeConv(shape, limits); });
}

absl::StatusOr<double> CudaKernelTimer::DoTimeGemm(
    const planner::GemmShape& shape, const TimingLimits& limits) {
  std::optional<GemmTypes> types = GemmTypesFor(shape.dtype);
  if (!types) return UnsupportedDType(shape.dtype);
  ASSIGN_OR_RETURN(const GemmFootprint footprint,
                   ComputeGemmFootprint(shape, types->element_bytes));
  const int64_t element = types->element_bytes;
  const int64_t a_count = footprint.a_count;
  const int64_t b_count = footprint.b_count;
  const int64_t c_count = footprint.c_count;
  const int64_t data_bytes = footprint.data_bytes;
  RETURN_IF_ERROR(CheckMemoryLimit(data_bytes, limits.max_memory_bytes));
  const int64_t workspace_bytes =
      std::min(kCublasWorkspaceBytes, limits.max_memory_bytes - data_bytes);
  DeviceBuffer a, b, c, workspace;
  RETURN_IF_ERROR(a.Allocate(a_count * element));
  RETURN_IF_ERROR(b.Allocate(b_count * element));
  RETURN_IF_ERROR(c.Allocate(c_count * element));
  if (workspace_bytes > 0) RETURN_IF_ERROR(workspace.Allocate(workspace_bytes));
  cudaStream_t stream = handles_->stream;
  RETURN_IF_ERROR(CudaStatus(
      kernels::FillUniform(a.get(), a_count, types->fill, 1, stream), "fill"));
  RETURN_IF_ERROR(CudaStatus(
      kernels::FillUniform(b.get(), b_count, types->fill, 2, stream), "fill"));
  RETURN_IF_ERROR(CudaStatus(
      kernels::FillUniform(c.get(), c_count, types->fill, 3, stream), "fill"));
  cublasHandle_t cublas = handles_->cublas;
  RETURN_IF_ERROR(CublasStatus(
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

absl::StatusOr<double> CudaKernelTimer::TimeRowSoftmax(
    int64_t rows, int64_t cols, const TimingLimits& limits) {
  return Timed([&]() -> absl::StatusOr<double> {
    const int64_t bytes = rows * cols * 4;
    RETURN_IF_ERROR(CheckMemoryLimit(2 * bytes, limits.max_memory_bytes));
    cudaStream_t stream = handles_->stream;
    DeviceBuffer in, out;
    RETURN_IF_ERROR(in.Allocate(bytes));
    RETURN_IF_ERROR(out.Allocate(bytes));
    RETURN_IF_ERROR(
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
  });
}

absl::StatusOr<double> CudaKernelTimer::TimeStreamBytes(
    int64_t in_bytes, int64_t out_bytes, const TimingLimits& limits) {
  return Timed([&]() -> absl::StatusOr<double> {
    RETURN_IF_ERROR(
        CheckMemoryLimit(in_bytes + out_bytes + 32, limits.max_memory_bytes));
    cudaStream_t stream = handles_->stream;
    DeviceBuffer in, out;
    RETURN_IF_ERROR(in.Allocate(in_bytes + 16));
    RETURN_IF_ERROR(out.Allocate(out_bytes + 16));
    RETURN_IF_ERROR(
        CudaStatus(kernels::FillUniform(in.get(), (in_bytes + 16) / 4,
                                        kernels::FillType::kFloat32, 5, stream),
                   "fill"));
    return Measure(
        [&]() {
          return CudaStatus(kernels::StreamBytes(in.get(), in_bytes, out.get(),
                                                 out_bytes, stream),
                            "stream kernel");
        },
        limits);
  });
}

}  // namespace echo::server
