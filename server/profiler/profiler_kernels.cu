#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "server/profiler/profiler_kernels.h"

namespace echo::server::kernels {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU; grid-stride loops do the rest.
constexpr int64_t kMaxBlocks = 8192;

int Blocks(int64_t work_items) {
  return static_cast<int>(std::clamp<int64_t>(
      (work_items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

__device__ float HashUniform(uint64_t index, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(index) * 2654435761u ^
               static_cast<uint32_t>(index >> 32) ^ seed;
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return static_cast<float>(h & 0xFFFFFFu) / 8388608.0f - 1.0f;
}

template <typename T>
__device__ T FromFloat(float value);
template <>
__device__ float FromFloat<float>(float value) {
  return value;
}
template <>
__device__ double FromFloat<double>(float value) {
  return value;
}
template <>
__device__ __half FromFloat<__half>(float value) {
  return __float2half(value);
}
template <>
__device__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float value) {
  return __float2bfloat16(value);
}

template <typename T>
__global__ void FillKernel(T* data, int64_t count, uint32_t seed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < count; i += stride) {
    data[i] = FromFloat<T>(HashUniform(static_cast<uint64_t>(i), seed));
  }
}

template <typename T>
cudaError_t LaunchFill(void* data, int64_t count, uint32_t seed,
                       cudaStream_t stream) {
  FillKernel<T><<<Blocks(count), kThreads, 0, stream>>>(static_cast<T*>(data),
                                                        count, seed);
  return cudaGetLastError();
}

__global__ void StreamKernel(const float4* __restrict__ in, int64_t in_n,
                             float4* __restrict__ out, int64_t out_n) {
  const int64_t total = in_n > out_n ? in_n : out_n;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  float surplus = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < total; i += stride) {
    const float4 v = i < in_n ? in[i] : make_float4(1.f, 1.f, 1.f, 1.f);
    if (i < out_n) {
      out[i] = make_float4(v.x * 0.5f + 1.f, v.y * 0.5f + 1.f, v.z * 0.5f + 1.f,
                           v.w * 0.5f + 1.f);
    } else {
      surplus += v.x + v.y + v.z + v.w;
    }
  }
  // Keeps the reads beyond the output alive; never true for the fill data.
  if (surplus == 1234567.0f && out_n > 0) out[0].x = surplus;
}

__device__ float BlockReduce(float value, bool take_max) {
  __shared__ float partial[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_down_sync(0xffffffffu, value, offset);
    value = take_max ? fmaxf(value, other) : value + other;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < kThreads / 32 ? partial[lane] : (take_max ? -INFINITY : 0.f);
    for (int offset = 16; offset > 0; offset /= 2) {
      const float other = __shfl_down_sync(0xffffffffu, value, offset);
      value = take_max ? fmaxf(value, other) : value + other;
    }
    if (lane == 0) partial[0] = value;
  }
  __syncthreads();
  const float result = partial[0];
  __syncthreads();
  return result;
}

__global__ void RowSoftmaxKernel(const float* __restrict__ in,
                                 float* __restrict__ out, int64_t rows,
                                 int64_t cols) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* x = in + row * cols;
    float* y = out + row * cols;
    float row_max = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      row_max = fmaxf(row_max, x[c]);
    }
    row_max = BlockReduce(row_max, true);
    float sum = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      sum += __expf(x[c] - row_max);
    }
    sum = BlockReduce(sum, false);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      y[c] = __expf(x[c] - row_max) / sum;
    }
  }
}

}  // namespace

cudaError_t FillUniform(void* data, int64_t count, FillType type, uint32_t seed,
                        cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  switch (type) {
    case FillType::kFloat32:
      return LaunchFill<float>(data, count, seed, stream);
    case FillType::kFloat16:
      return LaunchFill<__half>(data, count, seed, stream);
    case FillType::kBFloat16:
      return LaunchFill<__nv_bfloat16>(data, count, seed, stream);
    case FillType::kFloat64:
      return LaunchFill<double>(data, count, seed, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t StreamBytes(const void* in, int64_t in_bytes, void* out,
                        int64_t out_bytes, cudaStream_t stream) {
  const int64_t in_n = (in_bytes + 15) / 16, out_n = (out_bytes + 15) / 16;
  StreamKernel<<<Blocks(std::max(in_n, out_n)), kThreads, 0, stream>>>(
      static_cast<const float4*>(in), in_n, static_cast<float4*>(out), out_n);
  return cudaGetLastError();
}

cudaError_t RowSoftmax(const float* in, float* out, int64_t rows, int64_t cols,
                       cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const int blocks = static_cast<int>(std::min<int64_t>(rows, kMaxBlocks * 8));
  RowSoftmaxKernel<<<blocks, kThreads, 0, stream>>>(in, out, rows, cols);
  return cudaGetLastError();
}

}  // namespace echo::server::kernels
