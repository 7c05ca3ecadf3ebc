#include "planner/optimizer_step.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/memory_simulator.h"
#include "planner/status_macros.h"
#include "planner/text_format.h"

namespace echo::planner {
namespace {

struct KindRule {
  OptimizerKind kind;
  const char* name;
  int32_t states;       // tensors of the parameter's size
  bool step_counter;    // a 0-dim float32 tensor per parameter
  bool sqrt_temporary;  // foreach and for-loop make sqrt of a state
};

constexpr KindRule kKinds[] = {
    {OptimizerKind::kSgd, "sgd", 0, false, false},
    {OptimizerKind::kSgdMomentum, "sgd_momentum", 1, false, false},
    {OptimizerKind::kAdam, "adam", 2, true, true},
    {OptimizerKind::kAdamW, "adamw", 2, true, true},
    {OptimizerKind::kAdagrad, "adagrad", 1, true, true},
    {OptimizerKind::kRmsprop, "rmsprop", 1, true, true},
};

constexpr std::pair<OptimizerImplementation, const char*> kImplementations[] = {
    {OptimizerImplementation::kForeach, "foreach"},
    {OptimizerImplementation::kForLoop, "for_loop"},
    {OptimizerImplementation::kFused, "fused"}};

const KindRule& RuleOf(OptimizerKind kind) {
  return *std::find_if(std::begin(kKinds), std::end(kKinds),
                       [&](const KindRule& rule) { return rule.kind == kind; });
}

std::optional<std::string> Metadata(const Graph& graph, const char* key) {
  auto it = graph.metadata().find(key);
  if (it == graph.metadata().end() || it->second.empty()) return std::nullopt;
  return it->second;
}

int64_t Elements(const Tensor& tensor) {
  int64_t elements = 1;
  for (int64_t d : tensor.shape) elements *= d;
  return elements;
}

// A fresh id: `base`, or base#2, base#3, ...
std::string FreshId(const Graph& graph, const std::string& base) {
  std::string id = base;
  for (int i = 2; graph.FindTensor(id) >= 0 || graph.FindOp(id) >= 0; ++i) {
    id = absl::StrCat(base, "#", i);
  }
  return id;
}

// Under holds_gradients, each gradient the graph outputs is held: it gets a
// held tensor of its size that the step reads (live all iteration), stops
// being an output, and is read by an op right after its producer that adds
// it into the held one, so that it is freed there, as torch's
// AccumulateGrad frees it.
bool IsHeld(const Tensor& tensor, const OptimizerSpec& optimizer) {
  return optimizer.holds_gradients && tensor.role == TensorRole::kGradient &&
         tensor.is_output && tensor.producer != kNoOp;
}

// Adds `gradient`'s held tensor and its accumulate op; returns the held
// tensor's bytes.
int64_t AddHeldGradient(const Graph& graph, const Tensor& gradient,
                        GraphBuilder& builder, OpSpec& step) {
  TensorSpec held;
  held.id = FreshId(graph, absl::StrCat(gradient.id, ".held"));
  held.shape = gradient.shape;
  held.dtype = gradient.dtype;
  // A view's own size is 0: the held gradient has the elements it views.
  held.size_bytes =
      gradient.size_bytes > 0 || gradient.dtype == DType::kUnspecified
          ? gradient.size_bytes
          : Elements(gradient) * DTypeSize(gradient.dtype);
  held.role_set = true;
  held.role = TensorRole::kGradient;
  const int64_t bytes = held.size_bytes;
  OpSpec add;
  add.id =
      FreshId(graph, absl::StrCat(kAccumulateGradientOpType, ":", gradient.id));
  add.name = absl::StrCat("add ", gradient.id, " into its held gradient");
  add.op_type = kAccumulateGradientOpType;
  add.op_class = OpClass::kElementwise;
  add.phase = Phase::kBackward;
  add.recomputable_set = true;
  add.recomputable = false;
  add.input_ids = {gradient.id, held.id};
  TensorSpec done;  // zero bytes: the add is in place
  done.id = FreshId(graph, absl::StrCat(add.id, ":done"));
  done.size_bytes = 0;
  add.output_ids = {done.id};
  step.input_ids.push_back(held.id);
  builder.AddTensor(std::move(held));
  builder.AddTensor(std::move(done));
  builder.AddOp(std::move(add));
  return bytes;
}

// Where each gradient's update runs under update_in_backward: after the
// last reader of the gradient and of its parameter (an op that reads the
// parameter, or one of its views, which read their base too, must see it
// unchanged), or kNoOp for one updated by the step: a gradient the graph
// does not output or make, that names no parameter, or whose parameter has
// more than one gradient.
std::vector<OpIndex> UpdatePlaces(const Graph& graph,
                                  const OptimizerSpec& optimizer) {
  std::vector<OpIndex> place(graph.num_tensors(), kNoOp);
  if (!optimizer.update_in_backward) return place;
  auto names_parameter = [&](const Tensor& tensor) {
    return tensor.role == TensorRole::kGradient && tensor.is_output &&
           tensor.producer != kNoOp && tensor.gradient_of != kNoTensor;
  };
  std::vector<int32_t> gradients_of(graph.num_tensors(), 0);
  for (const Tensor& tensor : graph.tensors()) {
    if (names_parameter(tensor)) ++gradients_of[tensor.gradient_of];
  }
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    const Tensor& tensor = graph.tensor(t);
    if (!names_parameter(tensor) || gradients_of[tensor.gradient_of] != 1) {
      continue;
    }
    OpIndex last = tensor.producer;
    for (const Tensor* read : {&tensor, &graph.tensor(tensor.gradient_of)}) {
      if (!read->readers.empty()) last = std::max(last, read->readers.back());
    }
    place[t] = last;
  }
  return place;
}

// The parameters the optimizer holds state for: when every gradient the
// graph outputs (with bytes of its own) names its parameter
// (Tensor::gradient_of), the client has said which train, and those no
// gradient names (frozen weights, buffers) have none, as torch's optimizers
// make state only for parameters that get a gradient; else (no gradient
// names one, or one that does not may be any parameter's) every PARAMETER
// tensor.
std::vector<bool> Trained(const Graph& graph) {
  std::vector<bool> named(graph.num_tensors(), false);
  bool any = false, unnamed = false;
  for (const Tensor& tensor : graph.tensors()) {
    if (tensor.gradient_of != kNoTensor) {
      named[tensor.gradient_of] = true;
      any = true;
    } else if (tensor.role == TensorRole::kGradient && tensor.is_output &&
               tensor.size_bytes > 0) {
      unnamed = true;
    }
  }
  if (!any || unnamed) named.assign(graph.num_tensors(), true);
  return named;
}

// A parameter's optimizer state, as added to the graph.
struct ParameterState {
  std::vector<std::string> state_ids;
  int64_t temporary_bytes = 0;  // its share of the step's temporaries
};

// The op that applies `gradient`'s update to its parameter in the backward.
OpSpec UpdateInBackward(const Graph& graph, const Tensor& gradient,
                        const ParameterState& state,
                        const OptimizerSpec& optimizer, GraphBuilder& builder) {
  OpSpec update;
  update.id =
      FreshId(graph, absl::StrCat(kUpdateInBackwardOpType, ":", gradient.id));
  update.name = absl::StrCat("update ", graph.tensor(gradient.gradient_of).id,
                             " with ", gradient.id);
  update.op_type = kUpdateInBackwardOpType;
  update.op_class = OpClass::kElementwise;
  update.phase = Phase::kBackward;
  update.recomputable_set = true;
  update.recomputable = false;
  update.input_ids = {gradient.id, graph.tensor(gradient.gradient_of).id};
  update.input_ids.insert(update.input_ids.end(), state.state_ids.begin(),
                          state.state_ids.end());
  update.workspace_bytes =
      optimizer.implementation == OptimizerImplementation::kFused
          ? 0
          : state.temporary_bytes;
  TensorSpec done;  // zero bytes: the update is in place
  done.id = FreshId(graph, absl::StrCat(update.id, ":done"));
  done.size_bytes = 0;
  update.output_ids = {done.id};
  builder.AddTensor(std::move(done));
  return update;
}

// `graph` with the optimizer's state and step, and with update_in_backward
// and `in_backward`, each update at its UpdatePlaces place.
absl::StatusOr<Graph> BuildIteration(const Graph& graph,
                                     const OptimizerSpec& optimizer,
                                     bool in_backward,
                                     OptimizerStepSummary& added) {
  const KindRule& rule = RuleOf(optimizer.kind);
  const std::vector<OpIndex> place =
      UpdatePlaces(graph, optimizer);  // kNoOp everywhere without it
  GraphBuilder builder(graph.name());
  builder.SetBatchSize(graph.batch_size());
  for (const auto& [key, value] : graph.metadata()) {
    builder.SetMetadata(key, value);
  }
  OpSpec step;
  step.id = FreshId(graph, kOptimizerStepOpId);
  step.name =
      absl::StrCat(OptimizerKindName(optimizer.kind), " step (",
                   OptimizerImplementationName(optimizer.implementation), ")");
  step.op_type = kOptimizerStepOpId;
  step.op_class = OpClass::kElementwise;
  step.phase = Phase::kOptimizer;
  step.recomputable_set = true;
  step.recomputable = false;
  std::vector<ParameterState> states(graph.num_tensors());
  std::vector<bool> updated(graph.num_tensors(), false);  // by parameter
  const std::vector<bool> trains = Trained(graph);
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    const Tensor& tensor = graph.tensor(t);
    TensorSpec copy = SpecOf(graph, tensor);
    if (IsHeld(tensor, optimizer)) copy.is_output = false;
    if (place[t] != kNoOp) {
      ++added.gradients;
      if (in_backward) {
        copy.is_output = false;  // freed after its update
        updated[tensor.gradient_of] = true;
        ++added.updated_in_backward;
      }
    } else if (tensor.role == TensorRole::kGradient && tensor.is_output &&
               tensor.size_bytes > 0) {
      ++added.gradients;  // a view (0 bytes) counts with its storage
    }
    builder.AddTensor(std::move(copy));
    if (tensor.role != TensorRole::kParameter || !trains[t]) continue;
    step.input_ids.push_back(tensor.id);
    const DType dtype = optimizer.state_dtype == DType::kUnspecified
                            ? tensor.dtype
                            : optimizer.state_dtype;
    // A parameter of unknown dtype keeps its size per state.
    const int64_t state_size = dtype == DType::kUnspecified
                                   ? tensor.size_bytes
                                   : Elements(tensor) * DTypeSize(dtype);
    auto add_state = [&](const std::string& what, int64_t bytes,
                         std::vector<int64_t> shape, DType state_dtype) {
      TensorSpec spec;
      spec.id = FreshId(graph, absl::StrCat(tensor.id, ".", what));
      spec.shape = std::move(shape);
      spec.dtype = state_dtype;
      spec.size_bytes = bytes;
      spec.role_set = true;
      spec.role = TensorRole::kOptimizerState;
      step.input_ids.push_back(spec.id);
      states[t].state_ids.push_back(spec.id);
      builder.AddTensor(std::move(spec));
      added.state_bytes += bytes;
      ++added.state_tensors;
    };
    for (int32_t s = 0; s < rule.states; ++s) {
      add_state(rule.states == 1 ? "state" : absl::StrCat("state", s),
                state_size, tensor.shape, dtype);
    }
    if (rule.step_counter) add_state("step", 4, {}, DType::kFloat32);
    if (rule.sqrt_temporary) states[t].temporary_bytes = state_size;
  }
  // The step's temporaries, over the parameters it still updates.
  int64_t all_temporaries = 0, largest_temporary = 0;
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    if (updated[t]) continue;
    all_temporaries += states[t].temporary_bytes;
    largest_temporary = std::max(largest_temporary, states[t].temporary_bytes);
  }
  switch (optimizer.implementation) {
    case OptimizerImplementation::kForeach:
      added.temporary_bytes = all_temporaries;
      break;
    case OptimizerImplementation::kForLoop:
      added.temporary_bytes = largest_temporary;
      break;
    case OptimizerImplementation::kFused:
      added.temporary_bytes = 0;
      break;
  }
  step.workspace_bytes = added.temporary_bytes;
  std::vector<std::vector<TensorIndex>> updates_after(graph.num_ops());
  if (in_backward) {
    for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
      if (place[t] != kNoOp) updates_after[place[t]].push_back(t);
    }
  }
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    builder.AddOp(SpecOf(graph, graph.op(o)));
    for (TensorIndex t : graph.op(o).outputs) {
      if (!IsHeld(graph.tensor(t), optimizer)) continue;
      added.held_gradient_bytes +=
          AddHeldGradient(graph, graph.tensor(t), builder, step);
    }
    for (TensorIndex t : updates_after[o]) {
      const Tensor& gradient = graph.tensor(t);
      builder.AddOp(UpdateInBackward(
          graph, gradient, states[gradient.gradient_of], optimizer, builder));
    }
  }
  // A zero-byte token: an op makes something.
  TensorSpec done;
  done.id = FreshId(graph, absl::StrCat(step.id, ":done"));
  done.size_bytes = 0;
  step.output_ids.push_back(done.id);
  builder.AddTensor(std::move(done));
  if (step.input_ids.empty()) {
    return absl::InvalidArgumentError(
        "the graph names an optimizer but has no parameter tensors");
  }
  builder.AddOp(std::move(step));
  return std::move(builder).Build();
}

}  // namespace

const char* OptimizerKindName(OptimizerKind kind) { return RuleOf(kind).name; }

const char* OptimizerImplementationName(OptimizerImplementation impl) {
  for (const auto& [value, name] : kImplementations) {
    if (value == impl) return name;
  }
  return "?";
}

absl::StatusOr<std::optional<OptimizerSpec>> OptimizerOf(const Graph& graph) {
  const std::optional<std::string> kind = Metadata(graph, kOptimizerKey);
  if (!kind.has_value()) return std::optional<OptimizerSpec>();
  OptimizerSpec spec;
  const KindRule* rule = std::find_if(
      std::begin(kKinds), std::end(kKinds),
      [&](const KindRule& candidate) { return *kind == candidate.name; });
  if (rule == std::end(kKinds)) {
    std::vector<std::string> names;
    for (const KindRule& candidate : kKinds) names.push_back(candidate.name);
    return absl::InvalidArgumentError(
        absl::StrCat("graph metadata ", kOptimizerKey, " names optimizer '",
                     *kind, "'; known: ", absl::StrJoin(names, ", ")));
  }
  spec.kind = rule->kind;
  if (std::optional<std::string> impl =
          Metadata(graph, kOptimizerImplementationKey)) {
    auto found = std::find_if(
        std::begin(kImplementations), std::end(kImplementations),
        [&](const auto& candidate) { return *impl == candidate.second; });
    if (found == std::end(kImplementations)) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph metadata ", kOptimizerImplementationKey, " is '",
                       *impl, "'; known: foreach, for_loop, fused"));
    }
    spec.implementation = found->first;
  }
  if (std::optional<std::string> dtype =
          Metadata(graph, kOptimizerStateDTypeKey)) {
    absl::StatusOr<DType> parsed = ParseDType(*dtype);
    if (!parsed.ok() || *parsed == DType::kUnspecified) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph metadata ", kOptimizerStateDTypeKey, " is '",
                       *dtype, "', not a dtype (e.g. f32, bf16)"));
    }
    spec.state_dtype = *parsed;
  }
  if (std::optional<std::string> held =
          Metadata(graph, kOptimizerHoldsGradientsKey)) {
    if (*held != "true" && *held != "false") {
      return absl::InvalidArgumentError(
          absl::StrCat("graph metadata ", kOptimizerHoldsGradientsKey, " is '",
                       *held, "'; known: true, false"));
    }
    spec.holds_gradients = *held == "true";
  }
  if (std::optional<std::string> update =
          Metadata(graph, kOptimizerUpdateInBackwardKey)) {
    if (*update != "true" && *update != "false") {
      return absl::InvalidArgumentError(
          absl::StrCat("graph metadata ", kOptimizerUpdateInBackwardKey,
                       " is '", *update, "'; known: true, false"));
    }
    spec.update_in_backward = *update == "true";
  }
  if (spec.holds_gradients && spec.update_in_backward) {
    // Each micro-batch's backward would update the parameters.
    return absl::InvalidArgumentError(
        "the optimizer holds gradients across micro-batches (accumulation) "
        "and updates in the backward: an update in the backward needs one "
        "backward per step; drop one of the two");
  }
  return std::optional<OptimizerSpec>(spec);
}

bool HasOptimizerStep(const Graph& graph) {
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    if (graph.tensor(t).role == TensorRole::kOptimizerState) return true;
  }
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    if (graph.op(o).phase == Phase::kOptimizer) return true;
  }
  return false;
}

absl::StatusOr<Graph> AddOptimizerStep(const Graph& graph,
                                       const OptimizerSpec& optimizer,
                                       OptimizerStepSummary* summary) {
  OptimizerStepSummary at_end;
  ASSIGN_OR_RETURN(
      Graph iteration,
      BuildIteration(graph, optimizer, /*in_backward=*/false, at_end));
  if (optimizer.update_in_backward) {
    OptimizerStepSummary moved;
    ASSIGN_OR_RETURN(
        Graph in_backward,
        BuildIteration(graph, optimizer, /*in_backward=*/true, moved));
    if (moved.updated_in_backward > 0) {  // else both peaks stay 0
      moved.at_end_peak_bytes = SimulatePlain(iteration).peak_bytes;
      moved.in_backward_peak_bytes = SimulatePlain(in_backward).peak_bytes;
    }
    // Worth it where it does not raise the peak: it only frees gradients
    // earlier, but each update's temporary lands inside the backward.
    if (moved.updated_in_backward > 0 &&
        moved.in_backward_peak_bytes <= moved.at_end_peak_bytes) {
      if (summary != nullptr) *summary = moved;
      return in_backward;
    }
    at_end.gradients = moved.gradients;
    at_end.in_backward_peak_bytes = moved.in_backward_peak_bytes;
    at_end.at_end_peak_bytes = moved.at_end_peak_bytes;
  }
  if (summary != nullptr) *summary = at_end;
  return iteration;
}

}  // namespace echo::planner
