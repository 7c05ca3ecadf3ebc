// Proto <-> planner for the scheduler searches: FindMaxBatchSize and
// GetMemoryFrontier (planner/schedule/search_types.h). CheckFit's are in
// plan_convert.h.
#ifndef ECHO_ADAPTER_SCHEDULE_CONVERT_H_
#define ECHO_ADAPTER_SCHEDULE_CONVERT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "echo/v1/planner.pb.h"
#include "planner/device_catalog.h"
#include "planner/schedule/search_types.h"

namespace echo::adapter {

// The request's range, budget, allocator and chunking, on `device` (the
// resolved request device): its memory, and the request's reserve or, when
// unset, the device's default (DefaultReservedBytes, as CheckFit). The
// search validates the numbers; INVALID_ARGUMENT here for a bad allocator
// or chunking mode. The chunks' launch cost is the caller's (it knows the
// costs' unit).
absl::StatusOr<planner::MaxBatchOptions> BatchSearchOptionsFromProto(
    const v1::FindMaxBatchSizeRequest& request,
    const planner::DeviceSpec& device);

// Everything but solve_time_seconds, which the caller measures.
void FillBatchSearchResponse(const planner::MaxBatchResult& result,
                             int64_t device_memory_bytes,
                             v1::FindMaxBatchSizeResponse* response);

// The sweep's size, time budget, depth, allocator and chunking (0s: the
// planner's defaults); the chunks' launch cost is the caller's.
absl::StatusOr<planner::FrontierOptions> FrontierOptionsFromProto(
    const v1::GetMemoryFrontierRequest& request);

// Everything but solve_time_seconds; `cost_unit` is the costs' (the
// caller's cost table).
void FillFrontierResponse(const planner::MemoryFrontier& frontier,
                          const std::string& cost_unit,
                          v1::GetMemoryFrontierResponse* response);

}  // namespace echo::adapter

#endif  // ECHO_ADAPTER_SCHEDULE_CONVERT_H_
