#include "adapter/plan_convert.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "adapter/graph_convert.h"
#include "planner/status_macros.h"

namespace echo::adapter {

namespace {

absl::StatusOr<planner::RecomputePolicy> PolicyFromProto(int policy) {
  switch (policy) {
    case v1::RECOMPUTE_POLICY_UNSPECIFIED:
    case v1::RECOMPUTE_POLICY_AUTO:
      return planner::RecomputePolicy::kAuto;
    case v1::RECOMPUTE_POLICY_NONE:
      return planner::RecomputePolicy::kNone;
    case v1::RECOMPUTE_POLICY_ECHO:
      return planner::RecomputePolicy::kEcho;
    case v1::RECOMPUTE_POLICY_CHEN_SQRT:
      return planner::RecomputePolicy::kChenSqrt;
    case v1::RECOMPUTE_POLICY_OPTIMAL:
      return planner::RecomputePolicy::kOptimal;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown policy ", policy,
                       " (AUTO, NONE, ECHO, CHEN_SQRT, OPTIMAL)"));
  }
}

}  // namespace

v1::RecomputePolicy PolicyToProto(planner::RecomputePolicy policy) {
  switch (policy) {
    case planner::RecomputePolicy::kAuto:
      return v1::RECOMPUTE_POLICY_AUTO;
    case planner::RecomputePolicy::kNone:
      return v1::RECOMPUTE_POLICY_NONE;
    case planner::RecomputePolicy::kEcho:
      return v1::RECOMPUTE_POLICY_ECHO;
    case planner::RecomputePolicy::kChenSqrt:
      return v1::RECOMPUTE_POLICY_CHEN_SQRT;
    case planner::RecomputePolicy::kOptimal:
      return v1::RECOMPUTE_POLICY_OPTIMAL;
  }
  return v1::RECOMPUTE_POLICY_AUTO;
}

namespace {

// The allocator and chunking fields that plan and fit requests share; no
// status macros (the request's way through the layers visits the adapter
// once, server/planner_service.cc).
template <typename Request, typename Options>
absl::Status MemoryAndChunkingFromProto(const Request& request,
                                        Options* options) {
  const absl::StatusOr<planner::MemoryModelOptions> memory =
      MemoryModelFromProto(request.allocator());
  if (!memory.ok()) return memory.status();
  options->memory = *memory;
  const absl::StatusOr<bool> chunking = ChunkingFromProto(request.chunking());
  if (!chunking.ok()) return chunking.status();
  options->chunking.enabled = *chunking;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<planner::RecomputePlanOptions> PlanOptionsFromProto(
    const v1::GenerateRecomputePlanRequest& request) {
  // No status macros here: the request's way through the layers
  // (server/planner_service.cc) visits the adapter once.
  planner::RecomputePlanOptions options;
  const absl::StatusOr<planner::RecomputePolicy> policy =
      PolicyFromProto(request.policy());
  if (!policy.ok()) return policy.status();
  options.policy = *policy;
  if (request.has_memory_limit_bytes() && request.has_max_overhead_ratio()) {
    return absl::InvalidArgumentError(
        "give at most one budget: memory_limit_bytes or max_overhead_ratio");
  }
  if (request.has_memory_limit_bytes()) {
    if (request.memory_limit_bytes() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("memory_limit_bytes must be > 0, got ",
                       request.memory_limit_bytes()));
    }
    options.memory_limit_bytes = request.memory_limit_bytes();
  }
  if (request.has_max_overhead_ratio()) {
    const double ratio = request.max_overhead_ratio();
    if (!std::isfinite(ratio) || ratio < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "max_overhead_ratio must be a finite number >= 0, got ", ratio));
    }
    options.max_overhead_ratio = ratio;
  }
  const double time_limit = request.solver_time_limit_seconds();
  if (!std::isfinite(time_limit) || time_limit < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "solver_time_limit_seconds must be >= 0, got ", time_limit));
  }
  if (time_limit > 0) options.solver_time_limit_seconds = time_limit;
  options.max_recompute_depth = request.max_recompute_depth();
  switch (request.objective()) {
    case v1::RECOMPUTE_OBJECTIVE_UNSPECIFIED:
    case v1::RECOMPUTE_OBJECTIVE_PEAK_BYTES:
      options.objective = planner::RecomputeObjective::kPeakBytes;
      break;
    case v1::RECOMPUTE_OBJECTIVE_STASH_BYTES:
      options.objective = planner::RecomputeObjective::kStashBytes;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown objective ", request.objective(),
                       "; expected PEAK_BYTES or STASH_BYTES"));
  }
  if (absl::Status shared = MemoryAndChunkingFromProto(request, &options);
      !shared.ok()) {
    return shared;
  }
  return options;
}

absl::StatusOr<bool> ChunkingFromProto(int mode) {
  switch (mode) {
    case v1::CHUNKING_MODE_UNSPECIFIED:
    case v1::CHUNKING_MODE_OFF:
      return false;
    case v1::CHUNKING_MODE_AUTO:
      return true;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown chunking mode ", mode, "; expected OFF or AUTO"));
  }
}

absl::StatusOr<planner::Schedule> ScheduleFromProto(
    const planner::Graph& graph,
    const google::protobuf::RepeatedPtrField<v1::Execution>& executions) {
  planner::Schedule schedule;
  schedule.reserve(executions.size());
  for (const v1::Execution& e : executions) {
    const planner::OpIndex op = graph.FindOp(e.op_id());
    if (op < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the plan's schedule names unknown op '", e.op_id(), "'"));
    }
    schedule.push_back(planner::Execution{op, e.recompute()});
  }
  return schedule;
}

void ScheduleToProto(
    const planner::Graph& graph, const planner::Schedule& schedule,
    google::protobuf::RepeatedPtrField<v1::Execution>* executions) {
  executions->Reserve(executions->size() + static_cast<int>(schedule.size()));
  for (const planner::Execution& e : schedule) {
    v1::Execution* out = executions->Add();
    out->set_op_id(graph.op(e.op).id);
    out->set_recompute(e.recompute);
  }
}

namespace {

std::vector<std::string> TensorIds(
    const planner::Graph& graph, const std::vector<planner::TensorIndex>& ts) {
  std::vector<std::string> ids;
  for (planner::TensorIndex t : ts) ids.push_back(graph.tensor(t).id);
  return ids;
}

// A chunked region as the proto says it: its steps' inputs and outputs are
// in the chunked graph, its own ops in the request's.
void ChunkedRegionToProto(const planner::Graph& request_graph,
                          const planner::Graph& chunked_graph,
                          const planner::ChunkedRegionReport& region,
                          v1::ChunkedRegion* out) {
  const planner::Op& forward = chunked_graph.op(region.forward_step);
  out->set_forward_step_op_id(forward.id);
  for (planner::OpIndex o : region.forward_ops) {
    out->add_forward_op_ids(request_graph.op(o).id);
  }
  for (planner::OpIndex o : region.backward_ops) {
    out->add_backward_op_ids(request_graph.op(o).id);
  }
  out->set_chunks(region.chunks);
  out->set_rows(region.rows);
  out->set_chunk_rows(region.chunk_rows);
  out->set_inner_bytes(region.inner_bytes);
  out->set_chunk_workspace_bytes(region.chunk_workspace_bytes);
  out->set_extra_cost(region.extra_cost);
  out->set_explanation(region.explanation);
  for (const std::string& id : TensorIds(chunked_graph, forward.inputs)) {
    out->add_input_tensor_ids(id);
  }
  for (const std::string& id : TensorIds(request_graph, region.sliced_inputs)) {
    out->add_sliced_input_tensor_ids(id);
  }
  for (const std::string& id : TensorIds(request_graph, region.zero_inputs)) {
    out->add_zero_input_tensor_ids(id);
  }
  out->set_block_rows(region.block_rows);
  for (const planner::ChunkedRegionReport::BlockOp& block : region.block_ops) {
    v1::ChunkedRegion::BlockOp* op = out->add_block_ops();
    op->set_op_id(request_graph.op(block.op).id);
    op->set_first_row(block.first_row);
  }
  for (const std::string& id : TensorIds(request_graph, region.summed)) {
    out->add_summed_tensor_ids(id);
  }
  for (const std::string& id : TensorIds(request_graph, region.rows_last)) {
    out->add_rows_last_tensor_ids(id);
  }
  if (region.backward_step == planner::kNoOp) {
    for (const std::string& id : TensorIds(chunked_graph, forward.outputs)) {
      out->add_loss_output_tensor_ids(id);
    }
    return;
  }
  const planner::Op& backward = chunked_graph.op(region.backward_step);
  out->set_backward_step_op_id(backward.id);
  // The backward step reads the loss's gradient, then the gradients, which
  // close the forward step's outputs.
  const size_t gradients = backward.inputs.size() - 1;
  const size_t losses = forward.outputs.size() - gradients;
  for (const std::string& id : TensorIds(chunked_graph, forward.outputs)) {
    if (out->loss_output_tensor_ids_size() < static_cast<int>(losses)) {
      out->add_loss_output_tensor_ids(id);
    } else {
      out->add_gradient_tensor_ids(id);
    }
  }
  out->set_loss_gradient_tensor_id(chunked_graph.tensor(backward.inputs[0]).id);
}

}  // namespace

void FillPlanResponse(const planner::Graph& request_graph,
                      const planner::RecomputePlan& plan,
                      planner::RecomputePolicy policy,
                      v1::GenerateRecomputePlanResponse* response) {
  // The schedule, stash and regions index the chunked graph when there is
  // one; its ops and tensors keep the request's ids.
  const planner::Graph& graph = planner::PlanGraph(request_graph, plan);
  for (const planner::ChunkedRegionReport& region : plan.chunked_regions) {
    ChunkedRegionToProto(request_graph, graph, region,
                         response->add_chunked_regions());
  }
  for (const std::string& note : plan.chunking_notes) {
    response->add_chunking_notes(note);
  }
  response->set_feasible(plan.feasible);
  response->set_policy(PolicyToProto(policy));
  response->set_baseline_peak_bytes(plan.baseline_peak_bytes);
  response->set_planned_peak_bytes(plan.planned_peak_bytes);
  response->set_baseline_compute_cost(plan.baseline_compute_cost);
  response->set_recompute_cost(plan.recompute_cost);
  response->set_recompute_overhead_ratio(plan.recompute_overhead_ratio);
  response->set_step_overhead_ratio(plan.step_overhead_ratio);
  ScheduleToProto(graph, plan.schedule, response->mutable_schedule());
  for (planner::TensorIndex t : plan.stash) {
    response->add_stash_tensor_ids(graph.tensor(t).id);
  }
  response->set_stash_bytes(plan.stash_bytes);
  response->set_plan_fingerprint(
      planner::PlanFingerprint(graph, plan.schedule));
  response->set_stash_lower_bound_bytes(plan.stash_lower_bound_bytes);
  for (const planner::RecomputeRegionReport& region : plan.regions) {
    v1::RecomputeRegion* out = response->add_regions();
    for (planner::OpIndex o : region.ops) {
      out->add_op_ids(graph.op(o).id);
      out->add_op_names(planner::OpDisplayName(graph.op(o)));
    }
    for (planner::TensorIndex t : region.source_tensors) {
      out->add_source_tensor_ids(graph.tensor(t).id);
    }
    for (planner::TensorIndex t : region.freed_tensors) {
      out->add_freed_tensor_ids(graph.tensor(t).id);
    }
    out->set_bytes_saved_at_peak(region.bytes_saved_at_peak);
    out->set_peak_rise_if_dropped_bytes(region.peak_rise_if_dropped_bytes);
    out->set_recompute_cost(region.recompute_cost);
    out->set_explanation(region.explanation);
  }
  response->set_peak_lower_bound_bytes(plan.peak_lower_bound_bytes);
  response->set_solve_time_seconds(plan.solve_time_seconds);
  response->set_solver_status(plan.solver_status);
  response->set_solver_bound_cost(plan.solver_bound_cost);
  response->set_message(plan.message);
}

absl::StatusOr<planner::FitOptions> FitOptionsFromProto(
    const v1::CheckFitRequest& request) {
  planner::FitOptions options;
  if (request.has_max_overhead_ratio()) {
    options.max_overhead_ratio = request.max_overhead_ratio();
  }
  if (request.has_reserved_bytes()) {
    options.reserved_bytes = request.reserved_bytes();
  }
  if (absl::Status shared = MemoryAndChunkingFromProto(request, &options);
      !shared.ok()) {
    return shared;
  }
  return options;
}

void FillDeviceFit(const std::string& device_name, int64_t device_memory_bytes,
                   const planner::FitResult& result, v1::DeviceFit* fit) {
  fit->set_device_name(device_name);
  fit->set_device_memory_bytes(device_memory_bytes);
  fit->set_reserved_bytes(result.reserved_bytes);
  fit->set_fits(result.fits);
  fit->set_fits_without_recompute(result.fits_without_recompute);
  fit->set_baseline_peak_bytes(result.baseline_peak_bytes);
  fit->set_planned_peak_bytes(result.planned_peak_bytes);
  fit->set_recompute_overhead_ratio(result.recompute_overhead_ratio);
  fit->set_message(result.message);
}

void FillSingleFitResponse(const v1::DeviceFit& fit,
                           v1::CheckFitResponse* response) {
  response->set_device_memory_bytes(fit.device_memory_bytes());
  response->set_reserved_bytes(fit.reserved_bytes());
  response->set_fits(fit.fits());
  response->set_fits_without_recompute(fit.fits_without_recompute());
  response->set_baseline_peak_bytes(fit.baseline_peak_bytes());
  response->set_planned_peak_bytes(fit.planned_peak_bytes());
  response->set_recompute_overhead_ratio(fit.recompute_overhead_ratio());
  response->set_message(fit.message());
}

}  // namespace echo::adapter
