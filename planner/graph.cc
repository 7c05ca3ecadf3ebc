#include "planner/graph.h"

#include "absl/strings/str_cat.h"

namespace echo::planner {

int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kUnspecified:
      return 0;
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt16:
      return 2;
    case DType::kFloat64:
    case DType::kInt64:
    case DType::kComplex64:
      return 8;
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool:
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2:
      return 1;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kUnspecified:
      return "unspecified";
    case DType::kFloat32:
      return "f32";
    case DType::kFloat16:
      return "f16";
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat64:
      return "f64";
    case DType::kInt64:
      return "i64";
    case DType::kInt32:
      return "i32";
    case DType::kInt16:
      return "i16";
    case DType::kInt8:
      return "i8";
    case DType::kUInt8:
      return "u8";
    case DType::kBool:
      return "bool";
    case DType::kFloat8E4M3:
      return "f8e4m3";
    case DType::kFloat8E5M2:
      return "f8e5m2";
    case DType::kComplex64:
      return "c64";
  }
  return "unspecified";
}

absl::string_view TensorRoleName(TensorRole role) {
  switch (role) {
    case TensorRole::kActivation:
      return "activation";
    case TensorRole::kParameter:
      return "parameter";
    case TensorRole::kOptimizerState:
      return "optimizer_state";
    case TensorRole::kInput:
      return "input";
    case TensorRole::kGradient:
      return "gradient";
  }
  return "activation";
}

absl::string_view OpClassName(OpClass op_class) {
  switch (op_class) {
    case OpClass::kGemm:
      return "gemm";
    case OpClass::kConv:
      return "conv";
    case OpClass::kElementwise:
      return "elementwise";
    case OpClass::kReduction:
      return "reduction";
    case OpClass::kNorm:
      return "norm";
    case OpClass::kSoftmax:
      return "softmax";
    case OpClass::kDataMovement:
      return "data_movement";
    case OpClass::kRandom:
      return "random";
    case OpClass::kCollective:
      return "collective";
    case OpClass::kOther:
      return "other";
    case OpClass::kEmbedding:
      return "embedding";
  }
  return "other";
}

void AppendOpDisplayName(const Op& op, std::string& out) {
  out.append(op.name.empty() ? op.id : op.name);
  const auto module = op.attributes.find(kModuleAttribute);
  const bool in_module =
      module != op.attributes.end() && !module->second.empty();
  if (op.op_type.empty() && !in_module) return;
  absl::StrAppend(&out, " (", op.op_type);
  if (in_module) {
    absl::StrAppend(&out, op.op_type.empty() ? "" : " ", "in ", module->second);
  }
  out.push_back(')');
}

std::string OpDisplayName(const Op& op) {
  std::string name;
  AppendOpDisplayName(op, name);
  return name;
}

Graph::Graph(const Graph& other)
    : name_(other.name_),
      batch_size_(other.batch_size_),
      tensors_(other.tensors_),
      ops_(other.ops_),
      metadata_(other.metadata_) {
  tensor_index_.reserve(tensors_.size());
  for (TensorIndex t = 0; t < num_tensors(); ++t) {
    tensor_index_.emplace(tensors_[t].id, t);
  }
  op_index_.reserve(ops_.size());
  for (OpIndex o = 0; o < num_ops(); ++o) op_index_.emplace(ops_[o].id, o);
}

Graph& Graph::operator=(const Graph& other) {
  if (this != &other) *this = Graph(other);
  return *this;
}

TensorIndex Graph::FindTensor(absl::string_view id) const {
  auto it = tensor_index_.find(id);
  return it == tensor_index_.end() ? -1 : it->second;
}

OpIndex Graph::FindOp(absl::string_view id) const {
  auto it = op_index_.find(id);
  return it == op_index_.end() ? -1 : it->second;
}

TensorSpec SpecOf(const Graph& graph, const Tensor& tensor) {
  TensorSpec spec;
  spec.id = tensor.id;
  spec.name = tensor.name;
  spec.shape = tensor.shape;
  spec.dtype = tensor.dtype;
  spec.size_bytes = tensor.size_bytes;
  spec.role_set = true;
  spec.role = tensor.role;
  spec.is_output = tensor.is_output;
  spec.batch_dim = tensor.batch_dim;
  if (tensor.gradient_of != kNoTensor) {
    spec.gradient_of = graph.tensor(tensor.gradient_of).id;
  }
  return spec;
}

OpSpec SpecOf(const Graph& graph, const Op& op) {
  OpSpec spec;
  spec.id = op.id;
  spec.name = op.name;
  spec.op_type = op.op_type;
  spec.op_class = op.op_class;
  spec.phase = op.phase;
  for (TensorIndex t : op.inputs) spec.input_ids.push_back(graph.tensor(t).id);
  for (TensorIndex t : op.outputs) {
    spec.output_ids.push_back(graph.tensor(t).id);
  }
  spec.flops = op.flops;
  spec.measured_time_seconds = op.measured_time_seconds;
  spec.measured_on = op.measured_on;
  spec.relative_cost = op.relative_cost;
  spec.workspace_bytes = op.workspace_bytes;
  spec.recomputable_set = true;
  spec.recomputable = op.recomputable;
  spec.attributes = op.attributes;
  return spec;
}

}  // namespace echo::planner
