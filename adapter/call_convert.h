// Requests to the engine's calls, and its answers to responses
// (planner/engine/calls.h), for the methods the engine serves: a handler
// decodes with these, asks the engine, and encodes with these.
#ifndef ECHO_ADAPTER_CALL_CONVERT_H_
#define ECHO_ADAPTER_CALL_CONVERT_H_

#include <optional>

#include "absl/status/statusor.h"
#include "echo/v1/planner.pb.h"
#include "planner/engine/calls.h"

namespace echo::adapter {

// Whether a request's device field names a device at all.
bool NamesDevice(const v1::DeviceSpec& device);
// The device a request names (a catalog name or a full spec), or none.
absl::StatusOr<std::optional<planner::DeviceSpec>> DeviceOf(
    const v1::DeviceSpec& device);

absl::StatusOr<engine::EstimateCall> EstimateCallFromProto(
    const v1::EstimateMemoryRequest& request);
absl::StatusOr<engine::PlanCall> PlanCallFromProto(
    const v1::GenerateRecomputePlanRequest& request);

// The answers, with the costs' unit and sources and the pricing note.
void FillEstimateAnswer(const engine::PricedGraph& priced,
                        const engine::EstimateCall& call,
                        const engine::EstimateAnswer& answer,
                        v1::EstimateMemoryResponse* response);
void FillPlanAnswer(const engine::PricedGraph& priced,
                    const engine::PlanCall& call,
                    const engine::PlanAnswer& answer,
                    v1::GenerateRecomputePlanResponse* response);

}  // namespace echo::adapter

#endif  // ECHO_ADAPTER_CALL_CONVERT_H_
