// Devices as the cost model sees them, and a built-in catalog of common GPUs
// with numbers from the vendors' data sheets (dense rates, never sparse).
#ifndef ECHO_PLANNER_DEVICE_CATALOG_H_
#define ECHO_PLANNER_DEVICE_CATALOG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/graph.h"

namespace echo::planner {

struct DeviceSpec {
  // Catalog name ("h100-80gb") or a client's own name.
  std::string name;
  int64_t memory_bytes = 0;
  double memory_bandwidth_bytes_per_second = 0;
  // 0 when unknown.
  int32_t sm_count = 0;
  // Dense matrix-unit (tensor-core) peak per dtype. kFloat32 holds the TF32
  // rate: what f32 matrix work gets when TF32 is allowed.
  std::map<DType, double> tensor_core_flops;
  // Peak of the vector (CUDA-core) units per dtype.
  std::map<DType, double> vector_flops;
  // Seconds per byte of memory touched for the first time each step (page
  // faults of a host allocator that returns a step's memory); 0: none.
  double first_touch_seconds_per_byte = 0;
};

// Vector peak for `dtype`: its own entry, else the f32 entry, else the
// smallest rate given (a spec validated by ValidateDeviceSpec has one).
double VectorPeakFlops(const DeviceSpec& device, DType dtype);
// Matrix peak for `dtype`: the tensor-core entry (for f32 only when
// `allow_tf32`), else the vector peak.
double MatrixPeakFlops(const DeviceSpec& device, DType dtype, bool allow_tf32);

// The built-in specs, in a fixed order.
// What CheckFit reserves on a device when the request names no reserve: the
// CUDA context with cuBLAS/cuDNN handles and their workspaces (300-500 MiB
// with CUDA 11/12 on these GPUs, hence a fixed 512 MiB) plus the caching
// allocator's fragmentation and cached-but-unusable blocks, a share of the
// device's memory (5%). V100-16GB: 512 MiB + 0.8 GiB.
inline constexpr int64_t kReservedContextBytes = int64_t{512} << 20;
inline constexpr double kReservedMemoryFraction = 0.05;
int64_t DefaultReservedBytes(int64_t device_memory_bytes);

const std::vector<DeviceSpec>& DeviceCatalog();

// The device echod prices a graph on when a request names none and the
// graph carries no costs of its own (no time, no relative cost): otherwise
// every op would cost 0 and recomputation would read as free.
inline constexpr char kDefaultPricingDevice[] = "h100-80gb";
std::vector<std::string> CatalogDeviceNames();

// Case-insensitive lookup; NOT_FOUND lists the known names.
absl::StatusOr<DeviceSpec> FindCatalogDevice(absl::string_view name);

// True when the spec carries any number (else it is a bare name).
bool HasDeviceNumbers(const DeviceSpec& spec);

// A spec given with numbers must have positive memory, bandwidth and at least
// one peak rate, all positive and finite; INVALID_ARGUMENT names the field.
absl::Status ValidateDeviceSpec(const DeviceSpec& spec);

// What a request's device means: a name alone selects the catalog entry
// (NOT_FOUND when unknown); a spec with numbers is validated and used as
// given, whatever its name.
absl::StatusOr<DeviceSpec> ResolveDeviceSpec(const DeviceSpec& requested);

// The catalog entry for a GPU as CUDA names it ("NVIDIA A100-SXM4-80GB",
// "NVIDIA GeForce RTX 2080 Ti"), if one matches. `memory_bytes` tells the
// 16/32 GB and 40/80 GB variants apart. PCIe and NVL variants of H100/H200
// have other clocks and do not match.
std::optional<std::string> CatalogNameForGpu(absl::string_view gpu_name,
                                             int64_t memory_bytes);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_DEVICE_CATALOG_H_
