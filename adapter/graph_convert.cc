#include "adapter/graph_convert.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "planner/optimizer_step.h"
#include "planner/status_macros.h"
#include "planner/text_format.h"

namespace echo::adapter {

planner::DType DTypeFromProto(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32:
      return planner::DType::kFloat32;
    case v1::DTYPE_FLOAT16:
      return planner::DType::kFloat16;
    case v1::DTYPE_BFLOAT16:
      return planner::DType::kBFloat16;
    case v1::DTYPE_FLOAT64:
      return planner::DType::kFloat64;
    case v1::DTYPE_INT64:
      return planner::DType::kInt64;
    case v1::DTYPE_INT32:
      return planner::DType::kInt32;
    case v1::DTYPE_INT16:
      return planner::DType::kInt16;
    case v1::DTYPE_INT8:
      return planner::DType::kInt8;
    case v1::DTYPE_UINT8:
      return planner::DType::kUInt8;
    case v1::DTYPE_BOOL:
      return planner::DType::kBool;
    case v1::DTYPE_FLOAT8_E4M3:
      return planner::DType::kFloat8E4M3;
    case v1::DTYPE_FLOAT8_E5M2:
      return planner::DType::kFloat8E5M2;
    case v1::DTYPE_COMPLEX64:
      return planner::DType::kComplex64;
    default:
      return planner::DType::kUnspecified;
  }
}

v1::DType DTypeToProto(planner::DType dtype) {
  for (int value = v1::DType_MIN; value <= v1::DType_MAX; ++value) {
    if (v1::DType_IsValid(value) &&
        DTypeFromProto(static_cast<v1::DType>(value)) == dtype) {
      return static_cast<v1::DType>(value);
    }
  }
  return v1::DTYPE_UNSPECIFIED;
}

namespace {

planner::OpClass OpClassFromProto(v1::OpClass op_class) {
  switch (op_class) {
    case v1::OP_CLASS_GEMM:
      return planner::OpClass::kGemm;
    case v1::OP_CLASS_CONV:
      return planner::OpClass::kConv;
    case v1::OP_CLASS_ELEMENTWISE:
      return planner::OpClass::kElementwise;
    case v1::OP_CLASS_REDUCTION:
      return planner::OpClass::kReduction;
    case v1::OP_CLASS_NORM:
      return planner::OpClass::kNorm;
    case v1::OP_CLASS_SOFTMAX:
      return planner::OpClass::kSoftmax;
    case v1::OP_CLASS_DATA_MOVEMENT:
      return planner::OpClass::kDataMovement;
    case v1::OP_CLASS_RANDOM:
      return planner::OpClass::kRandom;
    case v1::OP_CLASS_COLLECTIVE:
      return planner::OpClass::kCollective;
    case v1::OP_CLASS_EMBEDDING:
      return planner::OpClass::kEmbedding;
    default:
      return planner::OpClass::kOther;
  }
}

v1::OpClass OpClassToProto(planner::OpClass op_class) {
  for (int value = v1::OpClass_MIN + 1; value <= v1::OpClass_MAX; ++value) {
    if (v1::OpClass_IsValid(value) &&
        OpClassFromProto(static_cast<v1::OpClass>(value)) == op_class) {
      return static_cast<v1::OpClass>(value);
    }
  }
  return v1::OP_CLASS_OTHER;
}

planner::Phase PhaseFromProto(v1::Phase phase) {
  switch (phase) {
    case v1::PHASE_BACKWARD:
      return planner::Phase::kBackward;
    case v1::PHASE_OPTIMIZER:
      return planner::Phase::kOptimizer;
    default:
      return planner::Phase::kForward;
  }
}

v1::Phase PhaseToProto(planner::Phase phase) {
  switch (phase) {
    case planner::Phase::kBackward:
      return v1::PHASE_BACKWARD;
    case planner::Phase::kOptimizer:
      return v1::PHASE_OPTIMIZER;
    case planner::Phase::kForward:
      return v1::PHASE_FORWARD;
  }
  return v1::PHASE_FORWARD;
}

planner::TensorRole RoleFromProto(v1::TensorRole role) {
  switch (role) {
    case v1::TENSOR_ROLE_PARAMETER:
      return planner::TensorRole::kParameter;
    case v1::TENSOR_ROLE_OPTIMIZER_STATE:
      return planner::TensorRole::kOptimizerState;
    case v1::TENSOR_ROLE_INPUT:
      return planner::TensorRole::kInput;
    case v1::TENSOR_ROLE_GRADIENT:
      return planner::TensorRole::kGradient;
    default:
      return planner::TensorRole::kActivation;
  }
}

}  // namespace

v1::TensorRole RoleToProto(planner::TensorRole role) {
  switch (role) {
    case planner::TensorRole::kParameter:
      return v1::TENSOR_ROLE_PARAMETER;
    case planner::TensorRole::kOptimizerState:
      return v1::TENSOR_ROLE_OPTIMIZER_STATE;
    case planner::TensorRole::kInput:
      return v1::TENSOR_ROLE_INPUT;
    case planner::TensorRole::kGradient:
      return v1::TENSOR_ROLE_GRADIENT;
    case planner::TensorRole::kActivation:
      return v1::TENSOR_ROLE_ACTIVATION;
  }
  return v1::TENSOR_ROLE_ACTIVATION;
}

namespace {

constexpr std::pair<v1::OptimizerKind, planner::OptimizerKind>
    kOptimizerKinds[] = {
        {v1::OPTIMIZER_KIND_SGD, planner::OptimizerKind::kSgd},
        {v1::OPTIMIZER_KIND_SGD_MOMENTUM, planner::OptimizerKind::kSgdMomentum},
        {v1::OPTIMIZER_KIND_ADAM, planner::OptimizerKind::kAdam},
        {v1::OPTIMIZER_KIND_ADAMW, planner::OptimizerKind::kAdamW},
        {v1::OPTIMIZER_KIND_ADAGRAD, planner::OptimizerKind::kAdagrad},
        {v1::OPTIMIZER_KIND_RMSPROP, planner::OptimizerKind::kRmsprop}};
constexpr std::pair<v1::OptimizerImplementation,
                    planner::OptimizerImplementation>
    kOptimizerImplementations[] = {{v1::OPTIMIZER_IMPLEMENTATION_FOREACH,
                                    planner::OptimizerImplementation::kForeach},
                                   {v1::OPTIMIZER_IMPLEMENTATION_FOR_LOOP,
                                    planner::OptimizerImplementation::kForLoop},
                                   {v1::OPTIMIZER_IMPLEMENTATION_FUSED,
                                    planner::OptimizerImplementation::kFused}};

// Graph.optimizer as the planner's metadata keys (optimizer_step.h).
absl::Status SetOptimizer(const v1::OptimizerSpec& optimizer,
                          planner::GraphBuilder& builder) {
  if (optimizer.kind() == v1::OPTIMIZER_KIND_UNSPECIFIED) {
    // Held gradients are read by the step, and an update in the backward
    // is the step's: without one there is neither.
    for (const auto& [set, field] :
         {std::pair{optimizer.holds_gradients(), "holds_gradients"},
          std::pair{optimizer.update_in_backward(), "update_in_backward"}}) {
      if (!set) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "graph.optimizer.", field,
          " is set but graph.optimizer.kind is not: name the optimizer "
          "whose step it concerns"));
    }
    return absl::OkStatus();
  }
  const auto* kind = std::find_if(
      std::begin(kOptimizerKinds), std::end(kOptimizerKinds),
      [&](const auto& entry) { return entry.first == optimizer.kind(); });
  const v1::OptimizerImplementation wanted =
      optimizer.implementation() == v1::OPTIMIZER_IMPLEMENTATION_UNSPECIFIED
          ? v1::OPTIMIZER_IMPLEMENTATION_FOREACH
          : optimizer.implementation();
  const auto* implementation =
      std::find_if(std::begin(kOptimizerImplementations),
                   std::end(kOptimizerImplementations),
                   [&](const auto& entry) { return entry.first == wanted; });
  if (kind == std::end(kOptimizerKinds) ||
      implementation == std::end(kOptimizerImplementations)) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph.optimizer: unknown kind ", optimizer.kind(),
                     " or implementation ", optimizer.implementation()));
  }
  builder.SetMetadata(planner::kOptimizerKey,
                      planner::OptimizerKindName(kind->second));
  builder.SetMetadata(
      planner::kOptimizerImplementationKey,
      planner::OptimizerImplementationName(implementation->second));
  if (optimizer.state_dtype() != v1::DTYPE_UNSPECIFIED) {
    builder.SetOptimizerStateDType(DTypeFromProto(optimizer.state_dtype()));
  }
  if (optimizer.holds_gradients()) {
    builder.SetMetadata(planner::kOptimizerHoldsGradientsKey, "true");
  }
  if (optimizer.update_in_backward()) {
    builder.SetMetadata(planner::kOptimizerUpdateInBackwardKey, "true");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::OptimizerSpec> OptimizerSpecFromNames(
    const std::string& kind, const std::string& state_dtype,
    const std::string& implementation) {
  v1::OptimizerSpec spec;
  for (const auto& [proto, planner_kind] : kOptimizerKinds) {
    if (kind == planner::OptimizerKindName(planner_kind)) spec.set_kind(proto);
  }
  if (spec.kind() == v1::OPTIMIZER_KIND_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown optimizer '", kind,
                     "' (sgd, sgd_momentum, adam, adamw, adagrad, rmsprop)"));
  }
  for (const auto& [proto, planner_impl] : kOptimizerImplementations) {
    if (implementation == planner::OptimizerImplementationName(planner_impl)) {
      spec.set_implementation(proto);
    }
  }
  if (!implementation.empty() &&
      spec.implementation() == v1::OPTIMIZER_IMPLEMENTATION_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown optimizer implementation '", implementation,
                     "' (foreach, for_loop, fused)"));
  }
  if (!state_dtype.empty()) {
    ASSIGN_OR_RETURN(const planner::DType dtype,
                     planner::ParseDType(state_dtype));
    spec.set_state_dtype(DTypeToProto(dtype));
  }
  return spec;
}

absl::StatusOr<planner::Graph> GraphFromProto(const v1::Graph& proto) {
  planner::GraphBuilder builder(proto.name());
  builder.SetBatchSize(proto.batch_size());
  builder.Reserve(proto.tensors_size(), proto.ops_size());
  for (const auto& [key, value] : proto.metadata()) {
    builder.SetMetadata(key, value);
  }
  // No status macro on the request's way (server/planner_service.cc).
  if (absl::Status optimizer = SetOptimizer(proto.optimizer(), builder);
      !optimizer.ok()) {
    return optimizer;
  }
  for (const v1::Tensor& tensor : proto.tensors()) {
    planner::TensorSpec spec;
    spec.id = tensor.id();
    spec.name = tensor.name();
    spec.shape.assign(tensor.shape().begin(), tensor.shape().end());
    if (!v1::DType_IsValid(tensor.dtype())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", tensor.id(), "': unknown dtype ", tensor.dtype()));
    }
    spec.dtype = DTypeFromProto(tensor.dtype());
    if (tensor.has_size_bytes()) {
      if (tensor.size_bytes() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", tensor.id(), "': negative size_bytes ",
                         tensor.size_bytes()));
      }
      spec.size_bytes = tensor.size_bytes();
    }
    spec.role_set = tensor.role() != v1::TENSOR_ROLE_UNSPECIFIED;
    spec.role = RoleFromProto(tensor.role());
    spec.is_output = tensor.is_output();
    spec.batch_dim = tensor.has_batch_dim() ? tensor.batch_dim() : -1;
    spec.gradient_of = tensor.gradient_of();
    builder.AddTensor(std::move(spec));
  }
  for (const v1::Op& op : proto.ops()) {
    planner::OpSpec spec;
    spec.id = op.id();
    spec.name = op.name();
    spec.op_type = op.op_type();
    spec.op_class = OpClassFromProto(op.op_class());
    spec.phase = PhaseFromProto(op.phase());
    spec.input_ids.assign(op.input_ids().begin(), op.input_ids().end());
    spec.output_ids.assign(op.output_ids().begin(), op.output_ids().end());
    // Absent optional numbers stay -1 ("unknown") in the IR.
    const auto optional_number = [&](bool present, double value,
                                     absl::string_view field,
                                     double& out) -> absl::Status {
      if (!present) return absl::OkStatus();
      if (!(value >= 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("op '", op.id(), "': ", field,
                         " must be a non-negative number, got ", value));
      }
      out = value;
      return absl::OkStatus();
    };
    for (absl::Status status :
         {optional_number(op.has_flops(), op.flops(), "flops", spec.flops),
          optional_number(op.has_measured_time_seconds(),
                          op.measured_time_seconds(), "measured_time_seconds",
                          spec.measured_time_seconds),
          optional_number(op.has_relative_cost(), op.relative_cost(),
                          "relative_cost", spec.relative_cost)}) {
      if (!status.ok()) return status;
    }
    spec.measured_on = op.measured_on();
    spec.workspace_bytes = op.workspace_bytes();
    spec.recomputable_set = op.has_recomputable();
    spec.recomputable = op.recomputable();
    spec.attributes.insert(op.attributes().begin(), op.attributes().end());
    builder.AddOp(std::move(spec));
  }
  return std::move(builder).Build();
}

namespace {

// The declarations as the proto: what GraphSpecsToProto sends and what
// GraphToProto gives back (a Graph's specs). Output marks are the caller's.
v1::Graph SpecsProto(const planner::GraphBuilder& specs) {
  v1::Graph proto;
  proto.set_name(specs.name());
  proto.set_batch_size(specs.batch_size());
  for (const auto& [key, value] : specs.metadata()) {
    (*proto.mutable_metadata())[key] = value;
  }
  for (const planner::TensorSpec& tensor : specs.tensors()) {
    v1::Tensor* out = proto.add_tensors();
    out->set_id(tensor.id);
    out->set_name(tensor.name);
    for (int64_t dim : tensor.shape) out->add_shape(dim);
    out->set_dtype(DTypeToProto(tensor.dtype));
    if (tensor.size_bytes >= 0) {
      out->set_size_bytes(tensor.size_bytes);
    }
    if (tensor.role_set) out->set_role(RoleToProto(tensor.role));
    out->set_is_output(tensor.is_output);
    if (tensor.batch_dim >= 0) out->set_batch_dim(tensor.batch_dim);
    out->set_gradient_of(tensor.gradient_of);
  }
  for (const planner::OpSpec& op : specs.ops()) {
    v1::Op* out = proto.add_ops();
    out->set_id(op.id);
    out->set_name(op.name);
    out->set_op_type(op.op_type);
    out->set_op_class(OpClassToProto(op.op_class));
    out->set_phase(PhaseToProto(op.phase));
    for (const std::string& id : op.input_ids) out->add_input_ids(id);
    for (const std::string& id : op.output_ids) out->add_output_ids(id);
    // -1 means "unknown" in the specs, as in the IR; any other value is
    // sent, so that the server rejects what Build rejects (cost=-0.5 was
    // dropped and the graph accepted).
    if (op.flops != -1) out->set_flops(op.flops);
    if (op.measured_time_seconds != -1) {
      out->set_measured_time_seconds(op.measured_time_seconds);
    }
    out->set_measured_on(op.measured_on);
    if (op.relative_cost != -1) out->set_relative_cost(op.relative_cost);
    out->set_workspace_bytes(op.workspace_bytes);
    if (op.recomputable_set) out->set_recomputable(op.recomputable);
    out->mutable_attributes()->insert(op.attributes.begin(),
                                      op.attributes.end());
  }
  return proto;
}

// A valid graph's declarations, every default resolved: sizes, roles and
// recomputable flags explicit, ids for indices.
planner::GraphBuilder SpecsOf(const planner::Graph& graph) {
  planner::GraphBuilder specs(graph.name());
  specs.SetBatchSize(graph.batch_size());
  for (const auto& [key, value] : graph.metadata()) {
    specs.SetMetadata(key, value);
  }
  for (const planner::Tensor& tensor : graph.tensors()) {
    specs.AddTensor(planner::SpecOf(graph, tensor));
  }
  for (const planner::Op& op : graph.ops()) {
    specs.AddOp(planner::SpecOf(graph, op));
  }
  return specs;
}

}  // namespace

absl::StatusOr<v1::Graph> GraphSpecsToProto(
    const planner::GraphBuilder& specs) {
  v1::Graph proto = SpecsProto(specs);
  absl::flat_hash_map<std::string, v1::Tensor*> by_id;
  for (v1::Tensor& tensor : *proto.mutable_tensors()) {
    by_id.emplace(tensor.id(), &tensor);
  }
  for (const std::string& id : specs.output_ids()) {
    auto it = by_id.find(id);
    if (it == by_id.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", id, "': marked as output but not declared"));
    }
    it->second->set_is_output(true);
  }
  return proto;
}

v1::Graph GraphToProto(const planner::Graph& graph) {
  return SpecsProto(SpecsOf(graph));
}

absl::StatusOr<planner::MemoryModelOptions> MemoryModelFromProto(
    const v1::AllocatorModel& allocator) {
  planner::MemoryModelOptions options;
  options.rounding_bytes = allocator.rounding_bytes();
  RETURN_IF_ERROR(planner::ValidateMemoryModelOptions(options));
  return options;
}

void FillBreakdown(const planner::MemoryBreakdown& breakdown,
                   v1::MemoryBreakdown* proto) {
  proto->set_parameter_bytes(breakdown.parameter_bytes);
  proto->set_optimizer_state_bytes(breakdown.optimizer_state_bytes);
  proto->set_gradient_bytes(breakdown.gradient_bytes);
  proto->set_input_bytes(breakdown.input_bytes);
  proto->set_stashed_activation_bytes(breakdown.stashed_activation_bytes);
  proto->set_transient_bytes(breakdown.transient_bytes);
  proto->set_workspace_bytes(breakdown.workspace_bytes);
}

void FillEstimate(const planner::Graph& graph,
                  const planner::SimulationResult& result, int max_live_tensors,
                  v1::EstimateMemoryResponse* response) {
  response->set_peak_bytes(result.peak_bytes);
  response->set_peak_step(result.peak_step);
  response->set_peak_op_id(graph.op(result.peak_op).id);
  FillBreakdown(result.breakdown, response->mutable_breakdown());
  response->set_op_count(graph.num_ops());
  response->set_tensor_count(graph.num_tensors());
  response->set_persistent_bytes(result.persistent_bytes);
  FillLiveTensors(graph, result.live_at_peak, max_live_tensors,
                  response->mutable_live_at_peak());
}

void FillLiveTensors(const planner::Graph& graph,
                     const std::vector<planner::LiveInstance>& live,
                     int max_live_tensors,
                     google::protobuf::RepeatedPtrField<v1::LiveTensor>* out) {
  const size_t limit = max_live_tensors < 0
                           ? live.size()
                           : static_cast<size_t>(max_live_tensors);
  for (size_t i = 0; i < live.size() && i < limit; ++i) {
    const planner::Tensor& tensor = graph.tensor(live[i].tensor);
    v1::LiveTensor* tensor_proto = out->Add();
    tensor_proto->set_tensor_id(tensor.id);
    tensor_proto->set_size_bytes(live[i].bytes);
    tensor_proto->set_role(RoleToProto(tensor.role));
    if (tensor.producer != planner::kNoOp) {
      tensor_proto->set_producer_op_id(graph.op(tensor.producer).id);
    }
  }
}

void FillTimeline(const planner::Graph& graph,
                  const planner::Schedule& schedule,
                  const planner::MemoryTimeline& timeline,
                  v1::MemoryTimeline* proto) {
  proto->set_num_steps(timeline.num_steps);
  proto->set_peak_bytes(timeline.peak_bytes);
  proto->set_peak_step(timeline.peak_step);
  proto->set_downsampled(timeline.downsampled);
  proto->mutable_points()->Reserve(static_cast<int>(timeline.points.size()));
  for (const planner::TimelinePoint& point : timeline.points) {
    v1::TimelinePoint* out = proto->add_points();
    const planner::Execution& execution = schedule[point.step];
    out->set_step(point.step);
    out->set_op_id(graph.op(execution.op).id);
    out->set_recompute(execution.recompute);
    FillBreakdown(point.bytes, out->mutable_bytes());
  }
}

}  // namespace echo::adapter
