// CudaKernelTimer::DoTimeConv: convolutions with cuDNN's (legacy) convolution
// API, the algorithms cuDNN's heuristics rank first within the memory limit, as
// frameworks pick them without benchmarking.
#include <algorithm>
#include <vector>

#include "server/profiler/cuda_internal.h"
#include "server/profiler/profiler_kernels.h"

namespace echo::server {

#if !ECHO_HAVE_CUDNN

absl::StatusOr<double> CudaKernelTimer::DoTimeConv(const planner::ConvShape&,
                                                   const TimingLimits&) {
  return absl::UnimplementedError(
      "built without cuDNN: convolutions are not timed");
}

#else

namespace {

enum class ConvPass { kForward, kBackwardData, kBackwardFilter };

// The descriptors of one convolution, destroyed on scope exit.
struct ConvDescriptors {
  cudnnTensorDescriptor_t x = nullptr;
  cudnnTensorDescriptor_t y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ~ConvDescriptors() {
    if (x != nullptr) cudnnDestroyTensorDescriptor(x);
    if (y != nullptr) cudnnDestroyTensorDescriptor(y);
    if (w != nullptr) cudnnDestroyFilterDescriptor(w);
    if (conv != nullptr) cudnnDestroyConvolutionDescriptor(conv);
  }
};

int64_t Count(const std::vector<int>& dims) {
  int64_t count = 1;
  for (int d : dims) count *= d;
  return count;
}

// A "regular" convolution x -> y with filter w. A transposed convolution is
// the backward-data pass of the regular convolution from its output to its
// input, so every case maps to passes of one regular convolution.
struct RegularConv {
  std::vector<int> x, w, y, padding, stride, dilation;
  int groups = 1;
  std::vector<ConvPass> passes;
};

RegularConv ToRegular(const planner::ConvShape& c) {
  RegularConv r;
  const auto ints = [](const std::vector<int64_t>& v) {
    return std::vector<int>(v.begin(), v.end());
  };
  const int batch = static_cast<int>(c.batch);
  const int in_c = static_cast<int>(c.in_channels);
  const int out_c = static_cast<int>(c.out_channels);
  const int groups = static_cast<int>(c.groups);
  std::vector<int> in_spatial = ints(c.in_spatial),
                   out_spatial = ints(c.out_spatial);
  std::vector<int> kernel = ints(c.kernel);
  r.padding = ints(c.padding);
  r.stride = ints(c.stride);
  r.dilation = ints(c.dilation);
  r.groups = groups;
  // cuDNN wants at least two spatial dims: a 1-D convolution gets a unit one.
  if (in_spatial.size() == 1) {
    for (auto* v :
         {&in_spatial, &out_spatial, &kernel, &r.stride, &r.dilation}) {
      v->push_back(1);
    }
    r.padding.push_back(0);
  }
  auto shape = [](int n, int channels, const std::vector<int>& spatial) {
    std::vector<int> dims = {n, channels};
    dims.insert(dims.end(), spatial.begin(), spatial.end());
    return dims;
  };
  if (!c.transposed) {
    r.x = shape(batch, in_c, in_spatial);
    r.y = shape(batch, out_c, out_spatial);
    r.w = shape(out_c, in_c / groups, kernel);
    if (!c.backward) r.passes.push_back(ConvPass::kForward);
    if (c.grad_input) r.passes.push_back(ConvPass::kBackwardData);
  } else {
    r.x = shape(batch, out_c, out_spatial);
    r.y = shape(batch, in_c, in_spatial);
    r.w = shape(in_c, out_c / groups, kernel);
    if (!c.backward) r.passes.push_back(ConvPass::kBackwardData);
    if (c.grad_input) r.passes.push_back(ConvPass::kForward);
  }
  if (c.grad_weight) r.passes.push_back(ConvPass::kBackwardFilter);
  return r;
}

struct CudnnTypes {
  cudnnDataType_t data;
  cudnnDataType_t compute;
  cudnnMathType_t math;
  kernels::FillType fill;
  int64_t element_bytes;
};

// f32 with cuDNN's default math allows TF32, as PyTorch does for convs.
std::optional<CudnnTypes> CudnnTypesFor(planner::DType dtype) {
  switch (dtype) {
    case planner::DType::kFloat32:
      return CudnnTypes{CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH,
                        kernels::FillType::kFloat32, 4};
    case planner::DType::kFloat16:
      return CudnnTypes{CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH,
                        kernels::FillType::kFloat16, 2};
    case planner::DType::kBFloat16:
      return CudnnTypes{CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT,
                        CUDNN_TENSOR_OP_MATH, kernels::FillType::kBFloat16, 2};
    case planner::DType::kFloat64:
      return CudnnTypes{CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE,
                        CUDNN_DEFAULT_MATH, kernels::FillType::kFloat64, 8};
    default:
      return std::nullopt;
  }
}

// The first algorithm of cuDNN's heuristic ranking that fits `max_workspace`.
template <typename Perf, typename Algo>
absl::StatusOr<std::pair<Algo, size_t> > PickAlgorithm(
    const std::vector<Perf>& ranked, int returned, int64_t max_workspace,
    absl::string_view pass) {
  for (int i = 0; i < returned; ++i) {
    if (ranked[i].status == CUDNN_STATUS_SUCCESS &&
        static_cast<int64_t>(ranked[i].memory) <= max_workspace) {
      return std::make_pair(static_cast<Algo>(ranked[i].algo),
                            ranked[i].memory);
    }
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("no cuDNN ", pass, " algorithm fits ", max_workspace,
                   " bytes of workspace"));
}

}  // namespace

absl::StatusOr<double> CudaKernelTimer::DoTimeConv(
    const planner::ConvShape& shape, const TimingLimits& limits) {
  std::optional<CudnnTypes> types = CudnnTypesFor(shape.dtype);
  if (!types) return UnsupportedDType(shape.dtype);
  const RegularConv r = ToRegular(shape);
  if (r.passes.empty()) {
    return absl::UnimplementedError("only the bias gradient: not timed");
  }
  cudnnHandle_t cudnn = handles_->cudnn;
  ConvDescriptors d;
  const int rank = static_cast<int>(r.x.size());
  const int spatial = rank - 2;
  RETURN_IF_ERROR(CudnnStatus(cudnnCreateTensorDescriptor(&d.x), "create"));
  RETURN_IF_ERROR(CudnnStatus(cudnnCreateTensorDescriptor(&d.y), "create"));
  RETURN_IF_ERROR(CudnnStatus(cudnnCreateFilterDescriptor(&d.w), "create"));
  RETURN_IF_ERROR(
      CudnnStatus(cudnnCreateConvolutionDescriptor(&d.conv), "create"));
  RETURN_IF_ERROR(
      CudnnStatus(cudnnSetTensorNdDescriptorEx(d.x, CUDNN_TENSOR_NCHW,
                                               types->data, rank, r.x.data()),
                  "cudnnSetTensorNdDescriptorEx(x)"));
  RETURN_IF_ERROR(
      CudnnStatus(cudnnSetTensorNdDescriptorEx(d.y, CUDNN_TENSOR_NCHW,
                                               types->data, rank, r.y.data()),
                  "cudnnSetTensorNdDescriptorEx(y)"));
  RETURN_IF_ERROR(
      CudnnStatus(cudnnSetFilterNdDescriptor(
                      d.w, types->data, CUDNN_TENSOR_NCHW, rank, r.w.data()),
                  "cudnnSetFilterNdDescriptor"));
  RETURN_IF_ERROR(CudnnStatus(
      cudnnSetConvolutionNdDescriptor(d.conv, spatial, r.padding.data(),
                                      r.stride.data(), r.dilation.data(),
                                      CUDNN_CROSS_CORRELATION, types->compute),
      "cudnnSetConvolutionNdDescriptor"));
  RETURN_IF_ERROR(CudnnStatus(cudnnSetConvolutionGroupCount(d.conv, r.groups),
                              "cudnnSetConvolutionGroupCount"));
  RETURN_IF_ERROR(CudnnStatus(cudnnSetConvolutionMathType(d.conv, types->math),
                              "cudnnSetConvolutionMathType"));
  std::vector<int> computed(rank);
  RETURN_IF_ERROR(CudnnStatus(cudnnGetConvolutionNdForwardOutputDim(
                                  d.conv, d.x, d.w, rank, computed.data()),
                              "cudnnGetConvolutionNdForwardOutputDim"));
  if (computed != r.y) {
    return absl::UnimplementedError(
        "cuDNN derives other output dims from these shapes (output_padding?)");
  }

  const int64_t element = types->element_bytes;
  const int64_t data_bytes = (Count(r.x) + Count(r.w) + Count(r.y)) * element;
  RETURN_IF_ERROR(CheckMemoryLimit(data_bytes, limits.max_memory_bytes));
  const int64_t max_workspace = limits.max_memory_bytes - data_bytes;

  cudnnConvolutionFwdAlgo_t fwd_algo{};
  cudnnConvolutionBwdDataAlgo_t data_algo{};
  cudnnConvolutionBwdFilterAlgo_t filter_algo{};
  size_t workspace_bytes = 0;
  for (ConvPass pass : r.passes) {
    int returned = 0;
    if (pass == ConvPass::kForward) {
      std::vector<cudnnConvolutionFwdAlgoPerf_t> ranked(
          CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
      RETURN_IF_ERROR(CudnnStatus(cudnnGetConvolutionForwardAlgorithm_v7(
                                      cudnn, d.x, d.w, d.conv, d.y,
                                      ranked.size(), &returned, ranked.data()),
                                  "cudnnGetConvolutionForwardAlgorithm_v7"));
      ASSIGN_OR_RETURN(auto picked,
                       (PickAlgorithm<cudnnConvolutionFwdAlgoPerf_t,
                                      cudnnConvolutionFwdAlgo_t>(
                           ranked, returned, max_workspace, "forward")));
      fwd_algo = picked.first;
      workspace_bytes = std::max(workspace_bytes, picked.second);
    } else if (pass == ConvPass::kBackwardData) {
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> ranked(
          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
      RETURN_IF_ERROR(CudnnStatus(
          cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnn, d.w, d.y, d.conv,
                                                      d.x, ranked.size(),
                                                      &returned, ranked.data()),
          "cudnnGetConvolutionBackwardDataAlgorithm_v7"));
      ASSIGN_OR_RETURN(auto picked,
                       (PickAlgorithm<cudnnConvolutionBwdDataAlgoPerf_t,
                                      cudnnConvolutionBwdDataAlgo_t>(
                           ranked, returned, max_workspace, "backward-data")));
      data_algo = picked.first;
      workspace_bytes = std::max(workspace_bytes, picked.second);
    } else {
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> ranked(
          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
      RETURN_IF_ERROR(
          CudnnStatus(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                          cudnn, d.x, d.y, d.conv, d.w, ranked.size(),
                          &returned, ranked.data()),
                      "cudnnGetConvolutionBackwardFilterAlgorithm_v7"));
      ASSIGN_OR_RETURN(
          auto picked,
          (PickAlgorithm<cudnnConvolutionBwdFilterAlgoPerf_t,
                         cudnnConvolutionBwdFilterAlgo_t>(
              ranked, returned, max_workspace, "backward-filter")));
      filter_algo = picked.first;
      workspace_bytes = std::max(workspace_bytes, picked.second);
    }
  }

  DeviceBuffer x, w, y, workspace;
  RETURN_IF_ERROR(x.Allocate(Count(r.x) * element));
  RETURN_IF_ERROR(w.Allocate(Count(r.w) * element));
  RETURN_IF_ERROR(y.Allocate(Count(r.y) * element));
  RETURN_IF_ERROR(workspace.Allocate(static_cast<int64_t>(workspace_bytes)));
  cudaStream_t stream = handles_->stream;
  uint32_t seed = 10;
  for (auto [buffer, count] :
       {std::pair{&x, Count(r.x)}, std::pair{&w, Count(r.w)},
        std::pair{&y, Count(r.y)}}) {
    RETURN_IF_ERROR(CudaStatus(
        kernels::FillUniform(buffer->get(), count, types->fill, ++seed, stream),
        "fill"));
  }
  const float one_f = 1, zero_f = 0;
  const double one_d = 1, zero_d = 0;
  const bool f64 = shape.dtype == planner::DType::kFloat64;
  const void* alpha = f64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = f64 ? static_cast<const void*>(&zero_d) : &zero_f;
  auto run = [&]() -> absl::Status {
    for (ConvPass pass : r.passes) {
      cudnnStatus_t status;
      switch (pass) {
        case ConvPass::kForward:
          status = cudnnConvolutionForward(
              cudnn, alpha, d.x, x.get(), d.w, w.get(), d.conv, fwd_algo,
              workspace.get(), workspace_bytes, beta, d.y, y.get());
          break;
        case ConvPass::kBackwardData:
          status = cudnnConvolutionBackwardData(
              cudnn, alpha, d.w, w.get(), d.y, y.get(), d.conv, data_algo,
              workspace.get(), workspace_bytes, beta, d.x, x.get());
          break;
        default:
          status = cudnnConvolutionBackwardFilter(
              cudnn, alpha, d.x, x.get(), d.y, y.get(), d.conv, filter_algo,
              workspace.get(), workspace_bytes, beta, d.w, w.get());
          break;
      }
      RETURN_IF_ERROR(CudnnStatus(status, "cudnn convolution"));
    }
    return absl::OkStatus();
  };
  return Measure(run, limits);
}

#endif  // ECHO_HAVE_CUDNN

}  // namespace echo::server
