// A GEMM's operand sizes, computed with overflow checks before anything is
// allocated: each dim fits cuBLAS's int, but their products need not fit
// int64. Header-only, so that the CUDA plugin (which links no echod
// library) and the unit tests share it.
#ifndef ECHO_SERVER_PROFILER_GEMM_FOOTPRINT_H_
#define ECHO_SERVER_PROFILER_GEMM_FOOTPRINT_H_

#include <climits>
#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "planner/cost_model.h"

namespace echo::server {

struct GemmFootprint {
  // Elements of A (batch x m x k), B (batch x k x n) and C (batch x m x n).
  int64_t a_count = 0;
  int64_t b_count = 0;
  int64_t c_count = 0;
  // All three, in bytes.
  int64_t data_bytes = 0;
};

// INVALID_ARGUMENT for a negative dim or element size, UNIMPLEMENTED for a
// dim beyond INT_MAX (cuBLAS's int) or a product beyond int64 (naming it).
inline absl::StatusOr<GemmFootprint> ComputeGemmFootprint(
    const planner::GemmShape& shape, int64_t element_bytes) {
  for (int64_t dim : {shape.m, shape.n, shape.k, shape.batch, element_bytes}) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("GEMM batch=", shape.batch, " m=", shape.m,
                       " n=", shape.n, " k=", shape.k, " has a negative size"));
    }
    if (dim > INT_MAX) {
      return absl::UnimplementedError(absl::StrCat(
          "GEMM batch=", shape.batch, " m=", shape.m, " n=", shape.n,
          " k=", shape.k, ": dims beyond 32 bits"));
    }
  }
  const auto too_big = [&](const char* what) {
    return absl::UnimplementedError(
        absl::StrCat("GEMM batch=", shape.batch, " m=", shape.m, " n=", shape.n,
                     " k=", shape.k, ": ", what, " overflows 64 bits"));
  };
  GemmFootprint footprint;
  int64_t product = 0;
  if (__builtin_mul_overflow(shape.m, shape.k, &product) ||
      __builtin_mul_overflow(product, shape.batch, &footprint.a_count)) {
    return too_big("batch*m*k");
  }
  if (__builtin_mul_overflow(shape.k, shape.n, &product) ||
      __builtin_mul_overflow(product, shape.batch, &footprint.b_count)) {
    return too_big("batch*k*n");
  }
  if (__builtin_mul_overflow(shape.m, shape.n, &product) ||
      __builtin_mul_overflow(product, shape.batch, &footprint.c_count)) {
    return too_big("batch*m*n");
  }
  int64_t elements = 0;
  if (__builtin_add_overflow(footprint.a_count, footprint.b_count, &elements) ||
      __builtin_add_overflow(elements, footprint.c_count, &elements) ||
      __builtin_mul_overflow(elements, element_bytes, &footprint.data_bytes)) {
    return too_big("the operands' size in bytes");
  }
  return footprint;
}

}  // namespace echo::server

#endif  // ECHO_SERVER_PROFILER_GEMM_FOOTPRINT_H_
