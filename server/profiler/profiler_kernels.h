// Kernels the CUDA op timer runs for memory-bound op classes and to fill
// buffers (compiled by nvcc from profiler_kernels.cu).
#ifndef ECHO_SERVER_PROFILER_PROFILER_KERNELS_H_
#define ECHO_SERVER_PROFILER_PROFILER_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace echo::server::kernels {

enum class FillType { kFloat32, kFloat16, kBFloat16, kFloat64 };

// Uniform values in [-1, 1) from a hash of the index: finite, and not zeros
// (zeros would understate tensor-core power and overstate throughput).
cudaError_t FillUniform(void* data, int64_t count, FillType type, uint32_t seed,
                        cudaStream_t stream);

// Reads `in_bytes` and writes `out_bytes` (both rounded up to 16 bytes) in
// one streaming pass: the traffic of element-wise, broadcast, reduction,
// copy and gather ops.
cudaError_t StreamBytes(const void* in, int64_t in_bytes, void* out,
                        int64_t out_bytes, cudaStream_t stream);

// Softmax over rows of `cols` floats: a max pass, a sum pass and a write
// pass per row, the traffic of unfused softmax and normalization kernels.
cudaError_t RowSoftmax(const float* in, float* out, int64_t rows, int64_t cols,
                       cudaStream_t stream);

}  // namespace echo::server::kernels

#endif  // ECHO_SERVER_PROFILER_PROFILER_KERNELS_H_
