// Proto <-> planner for devices and cost-source summaries.
#ifndef ECHO_ADAPTER_DEVICE_CONVERT_H_
#define ECHO_ADAPTER_DEVICE_CONVERT_H_

#include "absl/status/statusor.h"
#include "echo/v1/device.pb.h"
#include "echo/v1/planner.pb.h"
#include "planner/cost_model.h"
#include "planner/device_catalog.h"

namespace echo::adapter {

// Field by field; INVALID_ARGUMENT for a peak_flops entry without a dtype or
// given twice (same dtype and tensor_core).
absl::StatusOr<planner::DeviceSpec> DeviceSpecFromProto(
    const v1::DeviceSpec& proto);

// What a request's device means (planner::ResolveDeviceSpec): a name alone
// selects the catalog entry (NOT_FOUND listing the known names), a spec
// with numbers is validated (INVALID_ARGUMENT) and used as given.
absl::StatusOr<planner::DeviceSpec> ResolveDevice(const v1::DeviceSpec& proto);

void DeviceSpecToProto(const planner::DeviceSpec& spec, v1::DeviceSpec* proto);

void CostSourceSummaryToProto(const planner::CostSourceSummary& summary,
                              v1::CostSourceSummary* proto);

}  // namespace echo::adapter

#endif  // ECHO_ADAPTER_DEVICE_CONVERT_H_
