// Proto <-> planner for recompute plans.
#ifndef ECHO_ADAPTER_PLAN_CONVERT_H_
#define ECHO_ADAPTER_PLAN_CONVERT_H_

#include <string>

#include "absl/status/statusor.h"
#include "echo/v1/planner.pb.h"
#include "planner/graph.h"
#include "planner/recompute/plan.h"

namespace echo::adapter {

// Policy and budgets; INVALID_ARGUMENT for an unknown policy or a malformed
// budget (negative, NaN, both budgets at once).
absl::StatusOr<planner::RecomputePlanOptions> PlanOptionsFromProto(
    const v1::GenerateRecomputePlanRequest& request);

v1::RecomputePolicy PolicyToProto(planner::RecomputePolicy policy);

// A request's ChunkingMode: whether AUTO may chunk (INVALID_ARGUMENT for an
// unknown value). Every planning request's chunking field goes through it.
absl::StatusOr<bool> ChunkingFromProto(int mode);

// A schedule (a response's, or OPTIMAL's child process's) in the IR;
// INVALID_ARGUMENT naming an op the graph does not have.
absl::StatusOr<planner::Schedule> ScheduleFromProto(
    const planner::Graph& graph,
    const google::protobuf::RepeatedPtrField<v1::Execution>& executions);
// The other way, appended to `executions`.
void ScheduleToProto(
    const planner::Graph& graph, const planner::Schedule& schedule,
    google::protobuf::RepeatedPtrField<v1::Execution>* executions);

// Everything but the cost unit and sources, which the caller knows.
void FillPlanResponse(const planner::Graph& graph,
                      const planner::RecomputePlan& plan,
                      planner::RecomputePolicy policy,
                      v1::GenerateRecomputePlanResponse* response);

// The request's budget, allocator and chunking; device_memory_bytes and the
// chunks' launch cost are the caller's (from the resolved device and its
// costs). An unset max_overhead_ratio stays unset (the planner's default
// applies); 0 means no extra compute.
absl::StatusOr<planner::FitOptions> FitOptionsFromProto(
    const v1::CheckFitRequest& request);

// One device's answer.
void FillDeviceFit(const std::string& device_name, int64_t device_memory_bytes,
                   const planner::FitResult& result, v1::DeviceFit* fit);
// The single-device form: the top-level fields repeat the device's answer.
void FillSingleFitResponse(const v1::DeviceFit& fit,
                           v1::CheckFitResponse* response);

}  // namespace echo::adapter

#endif  // ECHO_ADAPTER_PLAN_CONVERT_H_
