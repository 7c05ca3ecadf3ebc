#include "planner/device_catalog.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "planner/status_macros.h"

namespace echo::planner {
namespace {

constexpr double kTera = 1e12;
constexpr double kGiga = 1e9;
constexpr int64_t kGiB = int64_t{1} << 30;

// Memory sizes are the data sheets' "GB", which for these parts are GiB.
std::vector<DeviceSpec> BuildCatalog() {
  std::vector<DeviceSpec> catalog;

  // NVIDIA Turing architecture whitepaper (2018), Table 1, GeForce RTX 2080
  // Ti reference card: 68 SMs, 11 GB GDDR6 at 616 GB/s; FP32 13.4 TFLOPS,
  // FP16 26.9 TFLOPS, FP16 tensor 53.8 TFLOPS with FP32 accumulate (107.6
  // with FP16 accumulate; training accumulates in FP32), INT8 tensor 215.2
  // TOPS. FP64 runs at 1/32 of FP32.
  DeviceSpec rtx2080ti;
  rtx2080ti.name = "rtx-2080-ti";
  rtx2080ti.memory_bytes = 11 * kGiB;
  rtx2080ti.memory_bandwidth_bytes_per_second = 616 * kGiga;
  rtx2080ti.sm_count = 68;
  rtx2080ti.tensor_core_flops = {{DType::kFloat16, 53.8 * kTera},
                                 {DType::kInt8, 215.2 * kTera}};
  rtx2080ti.vector_flops = {{DType::kFloat32, 13.4 * kTera},
                            {DType::kFloat16, 26.9 * kTera},
                            {DType::kFloat64, 13.4 * kTera / 32}};
  catalog.push_back(rtx2080ti);

  // NVIDIA Tesla V100 data sheet, SXM2: 80 SMs, HBM2 at 900 GB/s; double
  // 7.8, single 15.7, tensor 125 TFLOPS; FP16 on CUDA cores is 2x FP32.
  // No BF16 support.
  DeviceSpec v100;
  v100.memory_bandwidth_bytes_per_second = 900 * kGiga;
  v100.sm_count = 80;
  v100.tensor_core_flops = {{DType::kFloat16, 125 * kTera}};
  v100.vector_flops = {{DType::kFloat32, 15.7 * kTera},
                       {DType::kFloat16, 31.4 * kTera},
                       {DType::kFloat64, 7.8 * kTera}};
  v100.name = "v100-16gb";
  v100.memory_bytes = 16 * kGiB;
  catalog.push_back(v100);
  v100.name = "v100-32gb";
  v100.memory_bytes = 32 * kGiB;
  catalog.push_back(v100);

  // NVIDIA A100 Tensor Core GPU data sheet, SXM: 108 SMs; FP64 9.7, FP64
  // tensor 19.5, FP32 19.5, TF32 tensor 156, BF16/FP16 tensor 312, INT8
  // tensor 624 TOPS (dense; the sheet's larger figures are with sparsity).
  // Bandwidth 1,555 GB/s (40 GB) and 2,039 GB/s (80 GB). A100 whitepaper
  // Table 1: FP16 78 and BF16 39 TFLOPS on CUDA cores.
  DeviceSpec a100;
  a100.sm_count = 108;
  a100.tensor_core_flops = {{DType::kFloat64, 19.5 * kTera},
                            {DType::kFloat32, 156 * kTera},
                            {DType::kFloat16, 312 * kTera},
                            {DType::kBFloat16, 312 * kTera},
                            {DType::kInt8, 624 * kTera}};
  a100.vector_flops = {{DType::kFloat32, 19.5 * kTera},
                       {DType::kFloat16, 78 * kTera},
                       {DType::kBFloat16, 39 * kTera},
                       {DType::kFloat64, 9.7 * kTera}};
  a100.name = "a100-40gb";
  a100.memory_bytes = 40 * kGiB;
  a100.memory_bandwidth_bytes_per_second = 1555 * kGiga;
  catalog.push_back(a100);
  a100.name = "a100-80gb";
  a100.memory_bytes = 80 * kGiB;
  a100.memory_bandwidth_bytes_per_second = 2039 * kGiga;
  catalog.push_back(a100);

  // NVIDIA H100 Tensor Core GPU data sheet, SXM: 132 SMs, 80 GB HBM3 at
  // 3.35 TB/s; FP64 34, FP64 tensor 67, FP32 67 TFLOPS; TF32 989, BF16/FP16
  // 1,979, FP8/INT8 3,958 with sparsity, so half that dense. H100 whitepaper:
  // FP16 and BF16 on CUDA cores 133.8 TFLOPS.
  DeviceSpec hopper;
  hopper.sm_count = 132;
  hopper.tensor_core_flops = {
      {DType::kFloat64, 67 * kTera},      {DType::kFloat32, 494.5 * kTera},
      {DType::kFloat16, 989.5 * kTera},   {DType::kBFloat16, 989.5 * kTera},
      {DType::kFloat8E4M3, 1979 * kTera}, {DType::kFloat8E5M2, 1979 * kTera},
      {DType::kInt8, 1979 * kTera}};
  hopper.vector_flops = {{DType::kFloat32, 67 * kTera},
                         {DType::kFloat16, 133.8 * kTera},
                         {DType::kBFloat16, 133.8 * kTera},
                         {DType::kFloat64, 34 * kTera}};
  hopper.name = "h100-80gb";
  hopper.memory_bytes = 80 * kGiB;
  hopper.memory_bandwidth_bytes_per_second = 3.35 * kTera;
  catalog.push_back(hopper);
  // NVIDIA H200 Tensor Core GPU data sheet, SXM: the same compute figures
  // as H100 SXM (FP64 34, FP32 67, sparse TF32 989 / FP16 1,979 / FP8 3,958),
  // 141 GB HBM3e at 4.8 TB/s.
  hopper.name = "h200";
  hopper.memory_bytes = 141 * kGiB;
  hopper.memory_bandwidth_bytes_per_second = 4.8 * kTera;
  catalog.push_back(hopper);

  // NVIDIA L4 data sheet: 24 GB GDDR6 at 300 GB/s; FP32 30.3 TFLOPS; TF32
  // 120, BF16/FP16 242, FP8/INT8 485 with sparsity, so half that dense.
  // 58 SMs; Ada runs FP16 on CUDA cores at the FP32 rate, FP64 at 1/64.
  DeviceSpec l4;
  l4.name = "l4";
  l4.memory_bytes = 24 * kGiB;
  l4.memory_bandwidth_bytes_per_second = 300 * kGiga;
  l4.sm_count = 58;
  l4.tensor_core_flops = {
      {DType::kFloat32, 60 * kTera},       {DType::kFloat16, 121 * kTera},
      {DType::kBFloat16, 121 * kTera},     {DType::kFloat8E4M3, 242.5 * kTera},
      {DType::kFloat8E5M2, 242.5 * kTera}, {DType::kInt8, 242.5 * kTera}};
  l4.vector_flops = {{DType::kFloat32, 30.3 * kTera},
                     {DType::kFloat16, 30.3 * kTera},
                     {DType::kBFloat16, 30.3 * kTera},
                     {DType::kFloat64, 30.3 * kTera / 64}};
  catalog.push_back(l4);
  return catalog;
}

bool PositiveFinite(double value) { return value > 0 && std::isfinite(value); }

absl::Status CheckRates(const DeviceSpec& spec,
                        const std::map<DType, double>& rates,
                        absl::string_view kind) {
  for (const auto& [dtype, rate] : rates) {
    if (dtype == DType::kUnspecified) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device '", spec.name, "': a ", kind, " peak rate has no dtype"));
    }
    if (!PositiveFinite(rate)) {
      return absl::InvalidArgumentError(
          absl::StrCat("device '", spec.name, "': ", kind, " peak for ",
                       DTypeName(dtype), " must be positive, got ", rate));
    }
  }
  return absl::OkStatus();
}

}  // namespace

double VectorPeakFlops(const DeviceSpec& device, DType dtype) {
  if (auto it = device.vector_flops.find(dtype);
      it != device.vector_flops.end()) {
    return it->second;
  }
  if (auto it = device.vector_flops.find(DType::kFloat32);
      it != device.vector_flops.end()) {
    return it->second;
  }
  double smallest = 0;
  for (const auto* rates : {&device.vector_flops, &device.tensor_core_flops}) {
    for (const auto& [unused, rate] : *rates) {
      if (smallest == 0 || rate < smallest) smallest = rate;
    }
  }
  return smallest;
}

double MatrixPeakFlops(const DeviceSpec& device, DType dtype, bool allow_tf32) {
  if (dtype != DType::kFloat32 || allow_tf32) {
    if (auto it = device.tensor_core_flops.find(dtype);
        it != device.tensor_core_flops.end()) {
      return it->second;
    }
  }
  return VectorPeakFlops(device, dtype);
}

const std::vector<DeviceSpec>& DeviceCatalog() {
  static const std::vector<DeviceSpec>* const catalog =
      new std::vector<DeviceSpec>(BuildCatalog());
  return *catalog;
}

std::vector<std::string> CatalogDeviceNames() {
  std::vector<std::string> names;
  for (const DeviceSpec& spec : DeviceCatalog()) names.push_back(spec.name);
  return names;
}

int64_t DefaultReservedBytes(int64_t device_memory_bytes) {
  return kReservedContextBytes +
         static_cast<int64_t>(kReservedMemoryFraction *
                              static_cast<double>(device_memory_bytes));
}

absl::StatusOr<DeviceSpec> FindCatalogDevice(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const DeviceSpec& spec : DeviceCatalog()) {
    if (spec.name == lower) return spec;
  }
  return absl::NotFoundError(absl::StrCat(
      "unknown device '", name,
      "'; known devices: ", absl::StrJoin(CatalogDeviceNames(), ", ")));
}

bool HasDeviceNumbers(const DeviceSpec& spec) {
  return spec.memory_bytes != 0 ||
         spec.memory_bandwidth_bytes_per_second != 0 || spec.sm_count != 0 ||
         !spec.tensor_core_flops.empty() || !spec.vector_flops.empty() ||
         spec.first_touch_seconds_per_byte != 0;
}

absl::Status ValidateDeviceSpec(const DeviceSpec& spec) {
  auto invalid = [&spec](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", spec.name, "': ", what));
  };
  if (spec.memory_bytes <= 0) {
    return invalid(
        absl::StrCat("memory_bytes must be positive, got ", spec.memory_bytes));
  }
  if (!PositiveFinite(spec.memory_bandwidth_bytes_per_second)) {
    return invalid(
        absl::StrCat("memory_bandwidth_bytes_per_second must be positive, got ",
                     spec.memory_bandwidth_bytes_per_second));
  }
  if (spec.sm_count < 0) {
    return invalid(
        absl::StrCat("sm_count must not be negative, got ", spec.sm_count));
  }
  if (!std::isfinite(spec.first_touch_seconds_per_byte) ||
      spec.first_touch_seconds_per_byte < 0) {
    return invalid(
        absl::StrCat("first_touch_seconds_per_byte must be a number >= 0, got ",
                     spec.first_touch_seconds_per_byte));
  }
  if (spec.tensor_core_flops.empty() && spec.vector_flops.empty()) {
    return invalid("needs at least one peak_flops entry");
  }
  RETURN_IF_ERROR(CheckRates(spec, spec.tensor_core_flops, "tensor-core"));
  return CheckRates(spec, spec.vector_flops, "vector");
}

absl::StatusOr<DeviceSpec> ResolveDeviceSpec(const DeviceSpec& requested) {
  if (!HasDeviceNumbers(requested)) {
    if (requested.name.empty()) {
      return absl::InvalidArgumentError(
          "device has neither a name nor numbers");
    }
    return FindCatalogDevice(requested.name);
  }
  RETURN_IF_ERROR(ValidateDeviceSpec(requested));
  return requested;
}

std::optional<std::string> CatalogNameForGpu(absl::string_view gpu_name,
                                             int64_t memory_bytes) {
  const std::string lower = absl::AsciiStrToLower(gpu_name);
  std::vector<absl::string_view> tokens =
      absl::StrSplit(lower, absl::ByAnyChar(" -_"), absl::SkipEmpty());
  auto has = [&tokens](absl::string_view token) {
    return std::find(tokens.begin(), tokens.end(), token) != tokens.end();
  };
  const bool other_board = has("pcie") || has("nvl");
  for (size_t i = 0; i + 1 < tokens.size(); ++i) {
    if (tokens[i] == "2080" && tokens[i + 1] == "ti") return "rtx-2080-ti";
  }
  if (has("v100") || has("v100s")) {
    return memory_bytes > 24 * kGiB ? "v100-32gb" : "v100-16gb";
  }
  if (has("a100")) return memory_bytes > 60 * kGiB ? "a100-80gb" : "a100-40gb";
  if (has("h100") && !other_board) return "h100-80gb";
  if (has("h200") && !other_board) return "h200";
  if (has("l4")) return "l4";
  return std::nullopt;
}

}  // namespace echo::planner
