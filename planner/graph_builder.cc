// GraphBuilder::Build: validates the collected specs (ids, shapes, sizes,
// batch dims, producers and readers, roles) and resolves them into a Graph.
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/graph.h"
#include "planner/graph_limits.h"
#include "planner/optimizer_step.h"
#include "planner/status_macros.h"

namespace echo::planner {

namespace {

absl::Status TensorError(const std::string& id, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("tensor '", id, "': ", what));
}

absl::Status OpError(const std::string& id, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("op '", id, "': ", what));
}

// Bytes of a tensor from its shape and dtype, rejecting negative dims and
// int64 overflow.
absl::StatusOr<int64_t> SizeFromShape(const std::string& id,
                                      const TensorSpec& spec) {
  const int64_t element_size = DTypeSize(spec.dtype);
  if (element_size == 0) {
    return TensorError(id,
                       "has neither size_bytes nor a dtype to size its shape");
  }
  int64_t bytes = element_size;
  for (size_t i = 0; i < spec.shape.size(); ++i) {
    const int64_t dim = spec.shape[i];
    if (dim < 0) {
      return TensorError(
          id, absl::StrCat("negative dimension ", dim, " at axis ", i,
                           " of shape [", absl::StrJoin(spec.shape, ","), "]"));
    }
    if (dim != 0 && bytes > std::numeric_limits<int64_t>::max() / dim) {
      return TensorError(id,
                         absl::StrCat("shape [", absl::StrJoin(spec.shape, ","),
                                      "] overflows int64 bytes"));
    }
    bytes *= dim;
  }
  return bytes;
}

// A tensor's batch_dim against the graph's batch_size (graph.proto).
absl::Status CheckBatchDim(const std::string& id, const TensorSpec& spec,
                           int64_t batch_size) {
  if (spec.batch_dim == -1) return absl::OkStatus();
  if (spec.batch_dim < -1) {
    return TensorError(id,
                       absl::StrCat("batch_dim ", spec.batch_dim,
                                    " is negative (-1 or absent: no batch)"));
  }
  if (batch_size == 0) {
    return TensorError(id, absl::StrCat("marks batch_dim ", spec.batch_dim,
                                        " but the graph has no batch_size"));
  }
  if (IsPersistentRole(spec.role) && spec.role_set) {
    return TensorError(id,
                       absl::StrCat("is a ", TensorRoleName(spec.role),
                                    " and marks batch_dim ", spec.batch_dim,
                                    "; parameters and optimizer state do not "
                                    "scale with the batch"));
  }
  if (spec.shape.empty()) {
    if (spec.batch_dim != 0) {
      return TensorError(
          id, absl::StrCat("has no shape; its batch_dim must be 0 (size "
                           "proportional to the batch), got ",
                           spec.batch_dim));
    }
    return absl::OkStatus();
  }
  if (static_cast<size_t>(spec.batch_dim) >= spec.shape.size()) {
    return TensorError(id, absl::StrCat("batch_dim ", spec.batch_dim,
                                        " is outside its shape [",
                                        absl::StrJoin(spec.shape, ","), "]"));
  }
  // The batch alone, or folded with other axes (a flattened [batch*seq, d]).
  const int64_t dim = spec.shape[spec.batch_dim];
  if (dim <= 0 || dim % batch_size != 0) {
    return TensorError(
        id, absl::StrCat("batch_dim ", spec.batch_dim, " of shape [",
                         absl::StrJoin(spec.shape, ","), "] is ", dim,
                         ", not a multiple of the graph's batch_size ",
                         batch_size));
  }
  return absl::OkStatus();
}

}  // namespace

void GraphBuilder::SetOptimizerStateDType(DType dtype) {
  SetMetadata(kOptimizerStateDTypeKey, std::string(DTypeName(dtype)));
}

absl::StatusOr<Graph> GraphBuilder::Build() && {
  RETURN_IF_ERROR(
      CheckGraphLimits(name_, metadata_, tensors_.size(), ops_.size()));
  Graph graph;
  graph.name_ = std::move(name_);
  graph.metadata_ = std::move(metadata_);
  if (ops_.empty()) {
    return absl::InvalidArgumentError("graph has no ops");
  }
  if (batch_size_ < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph batch_size is negative: ", batch_size_));
  }
  graph.batch_size_ = batch_size_;

  graph.tensors_.reserve(tensors_.size());
  graph.tensor_index_.reserve(tensors_.size());
  std::vector<bool> role_set;
  role_set.reserve(tensors_.size());
  std::vector<std::string> gradient_of;
  gradient_of.reserve(tensors_.size());
  for (TensorSpec& spec : tensors_) {
    RETURN_IF_ERROR(CheckTensorLimits(spec, graph.tensors_.size()));
    if (spec.id.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor #", graph.tensors_.size(), " has an empty id"));
    }
    const TensorIndex index = static_cast<TensorIndex>(graph.tensors_.size());
    // In place first (tensors_ is reserved: it never moves), so that the
    // index can view its id.
    Tensor& tensor = graph.tensors_.emplace_back();
    tensor.id = std::move(spec.id);
    if (!graph.tensor_index_.emplace(tensor.id, index).second) {
      return TensorError(tensor.id, "duplicate tensor id");
    }
    for (size_t i = 0; i < spec.shape.size(); ++i) {
      if (spec.shape[i] < 0) {
        return TensorError(
            tensor.id,
            absl::StrCat("negative dimension ", spec.shape[i], " at axis ", i));
      }
    }
    RETURN_IF_ERROR(CheckBatchDim(tensor.id, spec, batch_size_));
    int64_t size_bytes = spec.size_bytes;
    if (size_bytes < 0) {
      if (spec.size_bytes != -1) {
        return TensorError(
            tensor.id, absl::StrCat("negative size_bytes ", spec.size_bytes));
      }
      ASSIGN_OR_RETURN(size_bytes, SizeFromShape(tensor.id, spec));
    }
    tensor.name = std::move(spec.name);
    tensor.shape = std::move(spec.shape);
    tensor.dtype = spec.dtype;
    tensor.size_bytes = size_bytes;
    tensor.role = spec.role;
    tensor.is_output = spec.is_output;
    tensor.batch_dim = spec.batch_dim;
    role_set.push_back(spec.role_set);
    gradient_of.push_back(std::move(spec.gradient_of));
  }

  graph.ops_.reserve(ops_.size());
  graph.op_index_.reserve(ops_.size());
  // The last op that read each tensor: distinct inputs and the in-place
  // check in linear time (an op may list 200k inputs).
  std::vector<OpIndex> last_reader(graph.num_tensors(), kNoOp);
  for (OpSpec& spec : ops_) {
    RETURN_IF_ERROR(CheckOpLimits(spec, graph.ops_.size()));
    if (spec.id.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("op #", graph.ops_.size(), " has an empty id"));
    }
    const OpIndex index = static_cast<OpIndex>(graph.ops_.size());
    // In place first (ops_ is reserved), so that the index can view its id.
    Op& op = graph.ops_.emplace_back();
    op.id = std::move(spec.id);
    if (!graph.op_index_.emplace(op.id, index).second) {
      return OpError(op.id, "duplicate op id");
    }
    if (spec.workspace_bytes < 0 ||
        spec.workspace_bytes > std::numeric_limits<int64_t>::max() / 4) {
      return OpError(op.id, absl::StrCat("workspace_bytes out of range: ",
                                         spec.workspace_bytes));
    }
    for (double value :
         {spec.flops, spec.measured_time_seconds, spec.relative_cost}) {
      if (!(value >= 0 || value == -1)) {
        return OpError(op.id,
                       "flops, measured time and relative cost must be >= 0");
      }
    }
    op.inputs.reserve(spec.input_ids.size());
    op.distinct_inputs.reserve(spec.input_ids.size());
    for (const std::string& input_id : spec.input_ids) {
      const TensorIndex t = graph.FindTensor(input_id);
      if (t < 0) {
        return OpError(op.id,
                       absl::StrCat("reads unknown tensor '", input_id, "'"));
      }
      op.inputs.push_back(t);
      if (last_reader[t] != index) {
        last_reader[t] = index;
        op.distinct_inputs.push_back(t);
      }
    }
    op.outputs.reserve(spec.output_ids.size());
    for (const std::string& output_id : spec.output_ids) {
      const TensorIndex t = graph.FindTensor(output_id);
      if (t < 0) {
        return OpError(op.id,
                       absl::StrCat("writes unknown tensor '", output_id, "'"));
      }
      Tensor& tensor = graph.tensors_[t];
      // Checked apart: the message below would name this op twice.
      if (tensor.producer == index) {
        return OpError(op.id,
                       absl::StrCat("writes tensor '", output_id, "' twice"));
      }
      if (tensor.producer != kNoOp) {
        return TensorError(output_id,
                           absl::StrCat("produced twice, by op '",
                                        graph.ops_[tensor.producer].id,
                                        "' and op '", op.id, "'"));
      }
      if (last_reader[t] == index) {
        return OpError(op.id,
                       absl::StrCat("reads and writes tensor '", output_id,
                                    "' (model in-place updates as a "
                                    "new tensor)"));
      }
      tensor.producer = index;
      op.outputs.push_back(t);
    }
    op.name = std::move(spec.name);
    op.op_type = std::move(spec.op_type);
    op.op_class = spec.op_class;
    op.phase = spec.phase;
    op.flops = spec.flops;
    op.measured_time_seconds = spec.measured_time_seconds;
    op.measured_on = std::move(spec.measured_on);
    op.relative_cost = spec.relative_cost;
    op.workspace_bytes = spec.workspace_bytes;
    op.recomputable = spec.recomputable_set
                          ? spec.recomputable
                          : (op.op_class != OpClass::kRandom &&
                             op.op_class != OpClass::kCollective);
    op.attributes = std::move(spec.attributes);
    op.recompute_outputs = static_cast<int32_t>(op.outputs.size());
    if (auto it = op.attributes.find(kRecomputeOutputsAttribute);
        it != op.attributes.end()) {
      int32_t count = 0;
      if (!absl::SimpleAtoi(it->second, &count) || count < 1 ||
          count > op.recompute_outputs) {
        return absl::InvalidArgumentError(absl::StrCat(
            "op '", ShortId(op.id), "': attribute ", kRecomputeOutputsAttribute,
            " '", ShortId(it->second), "' must be an integer from 1 to ",
            op.recompute_outputs, " (its outputs)"));
      }
      op.recompute_outputs = count;
    }
  }
  for (const Op& op : graph.ops_) {
    for (int32_t i = 0; i < op.recompute_outputs; ++i) {
      graph.tensors_[op.outputs[i]].remade_on_recompute = true;
    }
  }

  for (const std::string& id : output_ids_) {
    const TensorIndex t = graph.FindTensor(id);
    if (t < 0) {
      return TensorError(id, "marked as output but not declared");
    }
    graph.tensors_[t].is_output = true;
  }

  // Readers, and the order check: an op may only read a tensor whose producer
  // ran before it (inputs without a producer exist from the start). Counted
  // first, so that each list is allocated once.
  std::vector<int32_t> reader_count(graph.num_tensors(), 0);
  for (const Op& op : graph.ops_) {
    for (TensorIndex t : op.distinct_inputs) ++reader_count[t];
  }
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    graph.tensors_[t].readers.reserve(reader_count[t]);
  }
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    for (TensorIndex t : graph.DistinctInputs(o)) {
      Tensor& tensor = graph.tensors_[t];
      if (tensor.producer != kNoOp && tensor.producer >= o) {
        return OpError(
            graph.ops_[o].id,
            absl::StrCat("reads tensor '", tensor.id, "' before its producer '",
                         graph.ops_[tensor.producer].id, "' runs"));
      }
      tensor.readers.push_back(o);
    }
  }

  // Roles, and a total that fits int64 so that every simulated sum does.
  int64_t total_bytes = 0;
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    Tensor& tensor = graph.tensors_[t];
    if (!role_set[t]) {
      tensor.role = tensor.producer == kNoOp ? TensorRole::kInput
                                             : TensorRole::kActivation;
    }
    if (tensor.size_bytes >
        std::numeric_limits<int64_t>::max() / 4 - total_bytes) {
      return TensorError(tensor.id,
                         "sizes of the graph's tensors overflow int64");
    }
    total_bytes += tensor.size_bytes;
  }
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    if (gradient_of[t].empty()) continue;
    Tensor& tensor = graph.tensors_[t];
    const TensorIndex parameter = graph.FindTensor(gradient_of[t]);
    if (parameter < 0 ||
        graph.tensors_[parameter].role != TensorRole::kParameter) {
      return TensorError(
          tensor.id, absl::StrCat("gradient_of names '",
                                  ShortId(gradient_of[t]), "', which is not ",
                                  parameter < 0 ? "a tensor of the graph"
                                                : "a PARAMETER tensor"));
    }
    if (tensor.role != TensorRole::kGradient) {
      return TensorError(tensor.id,
                         "has gradient_of but its role is not GRADIENT");
    }
    tensor.gradient_of = parameter;
  }
  return graph;
}

}  // namespace echo::planner
