// The built-in device catalog and device-spec resolution.
#include "planner/device_catalog.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace echo::planner {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(DeviceCatalogTest, ListsTheRequiredDevicesInOrder) {
  EXPECT_THAT(CatalogDeviceNames(),
              ElementsAre("rtx-2080-ti", "v100-16gb", "v100-32gb", "a100-40gb",
                          "a100-80gb", "h100-80gb", "h200", "l4"));
  for (const DeviceSpec& spec : DeviceCatalog()) {
    EXPECT_TRUE(ValidateDeviceSpec(spec).ok()) << spec.name;
    EXPECT_GT(spec.sm_count, 0) << spec.name;
  }
}

TEST(DeviceCatalogTest, CarriesDataSheetNumbers) {
  absl::StatusOr<DeviceSpec> rtx = FindCatalogDevice("rtx-2080-ti");
  ASSERT_TRUE(rtx.ok());
  EXPECT_EQ(rtx->memory_bytes, 11 * kGiB);
  EXPECT_EQ(rtx->memory_bandwidth_bytes_per_second, 616e9);
  EXPECT_EQ(rtx->sm_count, 68);
  EXPECT_EQ(rtx->tensor_core_flops.at(DType::kFloat16), 53.8e12);
  EXPECT_EQ(rtx->vector_flops.at(DType::kFloat32), 13.4e12);

  absl::StatusOr<DeviceSpec> a100 = FindCatalogDevice("a100-80gb");
  ASSERT_TRUE(a100.ok());
  EXPECT_EQ(a100->memory_bytes, 80 * kGiB);
  EXPECT_EQ(a100->memory_bandwidth_bytes_per_second, 2039e9);
  EXPECT_EQ(a100->tensor_core_flops.at(DType::kBFloat16), 312e12);
  EXPECT_EQ(FindCatalogDevice("a100-40gb")->memory_bandwidth_bytes_per_second,
            1555e9);

  absl::StatusOr<DeviceSpec> h200 = FindCatalogDevice("h200");
  ASSERT_TRUE(h200.ok());
  EXPECT_EQ(h200->memory_bytes, 141 * kGiB);
  EXPECT_EQ(h200->memory_bandwidth_bytes_per_second, 4.8e12);
  // Dense: half the sheet's sparse 1,979 TFLOPS.
  EXPECT_EQ(h200->tensor_core_flops.at(DType::kFloat16), 989.5e12);
  EXPECT_EQ(FindCatalogDevice("v100-32gb")->memory_bytes, 32 * kGiB);
  EXPECT_EQ(FindCatalogDevice("l4")->tensor_core_flops.at(DType::kFloat16),
            121e12);
}

TEST(DeviceCatalogTest, LookupIsCaseInsensitive) {
  absl::StatusOr<DeviceSpec> spec = FindCatalogDevice("H100-80GB");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->name, "h100-80gb");
  EXPECT_EQ(spec->memory_bandwidth_bytes_per_second, 3.35e12);
}

TEST(DeviceCatalogTest, UnknownNameListsKnownOnes) {
  absl::StatusOr<DeviceSpec> spec = FindCatalogDevice("tpu-v4");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(spec.status().message(),
            "unknown device 'tpu-v4'; known devices: rtx-2080-ti, v100-16gb, "
            "v100-32gb, a100-40gb, a100-80gb, h100-80gb, h200, l4");
}

TEST(DeviceCatalogTest, PeakFallbacks) {
  const DeviceSpec v100 = testing::CatalogDevice("v100-16gb");
  // No BF16 on Volta: the f32 vector rate.
  EXPECT_EQ(MatrixPeakFlops(v100, DType::kBFloat16, false), 15.7e12);
  EXPECT_EQ(MatrixPeakFlops(v100, DType::kFloat16, false), 125e12);
  const DeviceSpec h100 = testing::CatalogDevice("h100-80gb");
  EXPECT_EQ(MatrixPeakFlops(h100, DType::kFloat32, false), 67e12);
  EXPECT_EQ(MatrixPeakFlops(h100, DType::kFloat32, true), 494.5e12);
  EXPECT_EQ(VectorPeakFlops(h100, DType::kInt32), 67e12);
  DeviceSpec matrix_only;
  matrix_only.tensor_core_flops = {{DType::kFloat16, 100e12}};
  EXPECT_EQ(VectorPeakFlops(matrix_only, DType::kFloat16), 100e12);
}

TEST(DeviceCatalogTest, NameAloneSelectsCatalogEntry) {
  DeviceSpec request;
  request.name = "L4";
  absl::StatusOr<DeviceSpec> spec = ResolveDeviceSpec(request);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->name, "l4");
  EXPECT_EQ(spec->memory_bandwidth_bytes_per_second, 300e9);
  request.name = "nope";
  EXPECT_EQ(ResolveDeviceSpec(request).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ResolveDeviceSpec(DeviceSpec{}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DeviceCatalogTest, SpecWithNumbersIsUsedAsGiven) {
  DeviceSpec request;
  request.name = "h100-80gb";  // a catalog name does not override numbers
  request.memory_bytes = 40 * kGiB;
  request.memory_bandwidth_bytes_per_second = 1e12;
  request.vector_flops = {{DType::kFloat32, 10e12}};
  absl::StatusOr<DeviceSpec> spec = ResolveDeviceSpec(request);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->memory_bytes, 40 * kGiB);
  EXPECT_EQ(spec->memory_bandwidth_bytes_per_second, 1e12);
  EXPECT_TRUE(spec->tensor_core_flops.empty());
}

TEST(DeviceCatalogTest, RejectsNonPositiveNumbers) {
  DeviceSpec good;
  good.name = "custom";
  good.memory_bytes = kGiB;
  good.memory_bandwidth_bytes_per_second = 1e11;
  good.vector_flops = {{DType::kFloat32, 1e12}};
  ASSERT_TRUE(ResolveDeviceSpec(good).ok());

  auto expect_invalid = [](const DeviceSpec& spec, absl::string_view fragment) {
    absl::StatusOr<DeviceSpec> resolved = ResolveDeviceSpec(spec);
    ASSERT_FALSE(resolved.ok());
    EXPECT_EQ(resolved.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(resolved.status().message()), HasSubstr(fragment));
  };
  DeviceSpec spec = good;
  spec.memory_bytes = -1;
  expect_invalid(spec, "device 'custom': memory_bytes must be positive");
  spec = good;
  spec.memory_bandwidth_bytes_per_second = 0;
  expect_invalid(spec, "memory_bandwidth_bytes_per_second must be positive");
  spec = good;
  spec.vector_flops.clear();
  expect_invalid(spec, "needs at least one peak_flops entry");
  spec = good;
  spec.tensor_core_flops[DType::kFloat16] = -5;
  expect_invalid(spec, "tensor-core peak for f16 must be positive");
  spec = good;
  spec.vector_flops[DType::kUnspecified] = 1e12;
  expect_invalid(spec, "a vector peak rate has no dtype");
  spec = good;
  spec.sm_count = -2;
  expect_invalid(spec, "sm_count must not be negative");
  spec = good;
  spec.first_touch_seconds_per_byte = -1e-9;
  expect_invalid(spec, "first_touch_seconds_per_byte must be a number >= 0");
  spec.first_touch_seconds_per_byte = std::nan("");
  expect_invalid(spec, "first_touch_seconds_per_byte must be a number >= 0");
  // A first-touch cost alone is a number: the spec must then be whole.
  DeviceSpec named;
  named.name = "h100-80gb";
  named.first_touch_seconds_per_byte = 1e-9;
  expect_invalid(named, "memory_bytes must be positive");
}

TEST(DeviceCatalogTest, MatchesCudaDeviceNames) {
  EXPECT_EQ(CatalogNameForGpu("NVIDIA GeForce RTX 2080 Ti", 11 * kGiB),
            "rtx-2080-ti");
  EXPECT_EQ(CatalogNameForGpu("Tesla V100-SXM2-16GB", 16 * kGiB), "v100-16gb");
  EXPECT_EQ(CatalogNameForGpu("Tesla V100-SXM2-32GB", 32 * kGiB), "v100-32gb");
  EXPECT_EQ(CatalogNameForGpu("NVIDIA A100-SXM4-40GB", 40 * kGiB), "a100-40gb");
  EXPECT_EQ(CatalogNameForGpu("NVIDIA A100-SXM4-80GB", 80 * kGiB), "a100-80gb");
  EXPECT_EQ(CatalogNameForGpu("NVIDIA H100 80GB HBM3", 80 * kGiB), "h100-80gb");
  EXPECT_EQ(CatalogNameForGpu("NVIDIA H200", 140 * kGiB), "h200");
  EXPECT_EQ(CatalogNameForGpu("NVIDIA L4", 22 * kGiB), "l4");
  EXPECT_EQ(CatalogNameForGpu("NVIDIA H100 PCIe", 80 * kGiB), std::nullopt);
  EXPECT_EQ(CatalogNameForGpu("NVIDIA L40S", 48 * kGiB), std::nullopt);
  EXPECT_EQ(CatalogNameForGpu("NVIDIA GeForce RTX 2080", 8 * kGiB),
            std::nullopt);
}

}  // namespace
}  // namespace echo::planner
