// The planner's graph IR (docs/design.md section 4): an ordered list of ops
// over tensors, with ids resolved to dense indices. Built only through
// GraphBuilder, so every Graph in the planner is valid.
#ifndef ECHO_PLANNER_GRAPH_H_
#define ECHO_PLANNER_GRAPH_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace echo::planner {

enum class DType {
  kUnspecified,
  kFloat32,
  kFloat16,
  kBFloat16,
  kFloat64,
  kInt64,
  kInt32,
  kInt16,
  kInt8,
  kUInt8,
  kBool,
  kFloat8E4M3,
  kFloat8E5M2,
  kComplex64,
};

enum class TensorRole {
  kActivation,
  kParameter,
  kOptimizerState,
  kInput,
  kGradient,
};

enum class OpClass {
  kGemm,
  kConv,
  kElementwise,
  kReduction,
  kNorm,
  kSoftmax,
  kDataMovement,
  kRandom,
  kCollective,
  kOther,
  kEmbedding,
};

enum class Phase { kForward, kBackward, kOptimizer };

// Bytes per element; 0 for kUnspecified.
int64_t DTypeSize(DType dtype);
absl::string_view DTypeName(DType dtype);
absl::string_view TensorRoleName(TensorRole role);
absl::string_view OpClassName(OpClass op_class);

// Tensors that live the whole iteration regardless of readers.
inline bool IsPersistentRole(TensorRole role) {
  return role == TensorRole::kParameter || role == TensorRole::kOptimizerState;
}

using TensorIndex = int32_t;
using OpIndex = int32_t;
inline constexpr OpIndex kNoOp = -1;
inline constexpr TensorIndex kNoTensor = -1;

struct Tensor {
  std::string id;
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kUnspecified;
  int64_t size_bytes = 0;
  TensorRole role = TensorRole::kActivation;
  bool is_output = false;
  // The axis of `shape` that is the batch (Graph::batch_size), or -1 when
  // the tensor does not scale with the batch. A tensor without a shape
  // marks 0: its size_bytes is proportional to the batch (batch.h).
  int32_t batch_dim = -1;
  // Filled by GraphBuilder.
  OpIndex producer = kNoOp;
  std::vector<OpIndex> readers;  // ascending, each op once
  // A re-execution of the producer makes it (Graph::RemadeOnRecompute).
  bool remade_on_recompute = false;
  // For a gradient, the parameter it updates when the client names it
  // (a kParameter tensor): the optimizer's update may then run in the
  // backward (optimizer_step.h).
  TensorIndex gradient_of = kNoTensor;
};

struct Op {
  std::string id;
  std::string name;
  std::string op_type;
  OpClass op_class = OpClass::kOther;
  Phase phase = Phase::kForward;
  std::vector<TensorIndex> inputs;  // in argument order, may repeat
  // `inputs` without repeats, in first-use order (set by GraphBuilder).
  std::vector<TensorIndex> distinct_inputs;
  std::vector<TensorIndex> outputs;
  // Negative when unknown.
  double flops = -1;
  double measured_time_seconds = -1;
  // Where measured_time_seconds was measured: a catalog device name or a
  // description such as "cpu:x86_64"; empty when unknown. The cost model
  // uses the time as measured only for that device (cost_model.h).
  std::string measured_on;
  double relative_cost = -1;
  int64_t workspace_bytes = 0;
  bool recomputable = true;
  // Outputs a re-execution makes: the first recompute_outputs of `outputs`
  // (all of them unless kRecomputeOutputsAttribute says fewer). The others
  // keep the original run's instance.
  int32_t recompute_outputs = 0;
  std::map<std::string, std::string> attributes;
};

// Op attribute: a re-execution of the op makes only its first N outputs (N
// from 1 to its output count), e.g. a training batch norm re-run without its
// running statistics, which the original run updated (the PyTorch hook's).
inline constexpr char kRecomputeOutputsAttribute[] = "recompute_outputs";

// Op attribute: the op's original run hands on another op's output (the
// value is that tensor's id) and does no work, e.g. the PyTorch hook's
// dropout output, which native_dropout already made; a recomputation does
// the work. The baseline compute leaves its cost out (BaselineCost).
inline constexpr char kFirstRunAliasAttribute[] = "first_run_alias";

// Op attribute with the framework module the op belongs to (the hook's
// nn.Module path, e.g. "encoder.layers.0.attn").
inline constexpr char kModuleAttribute[] = "module";

// How plans name an op to people: its framework name (the id when it has
// none), then its op type and module when known, e.g.
// "addmm_3 (aten::addmm in encoder.layers.0.attn)".
std::string OpDisplayName(const Op& op);
// The same appended to `out` (a plan's report names ops in 10k regions).
void AppendOpDisplayName(const Op& op, std::string& out);

class Graph {
 public:
  Graph() = default;
  // The id indices view the graph's own ids: a copy indexes its copies, and
  // a move keeps the ids where they are (the vectors' buffers move whole).
  Graph(const Graph& other);
  Graph& operator=(const Graph& other);
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  const std::string& name() const { return name_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const std::vector<Op>& ops() const { return ops_; }
  const Tensor& tensor(TensorIndex t) const { return tensors_[t]; }
  const Op& op(OpIndex o) const { return ops_[o]; }
  // Whether a re-execution of t's producer makes t (Op::recompute_outputs);
  // false for graph inputs. Inline: the recompute search's inner loops ask.
  bool RemadeOnRecompute(TensorIndex t) const {
    return tensors_[t].remade_on_recompute;
  }
  int32_t num_tensors() const { return static_cast<int32_t>(tensors_.size()); }
  int32_t num_ops() const { return static_cast<int32_t>(ops_.size()); }
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }
  // The batch the graph's sizes are given at; 0 when it has no batch
  // dimension (no tensor marks batch_dim).
  int64_t batch_size() const { return batch_size_; }

  // -1 when absent.
  TensorIndex FindTensor(absl::string_view id) const;
  OpIndex FindOp(absl::string_view id) const;

  // Distinct inputs of an op, in first-use order.
  const std::vector<TensorIndex>& DistinctInputs(OpIndex o) const {
    return ops_[o].distinct_inputs;
  }

 private:
  friend class GraphBuilder;
  friend class BatchScaler;      // batch.h: rewrites sizes in place
  friend class ChunkStepEditor;  // chunk_rewrite.cc: re-chunks its steps
  std::string name_;
  int64_t batch_size_ = 0;
  std::vector<Tensor> tensors_;
  std::vector<Op> ops_;
  std::map<std::string, std::string> metadata_;
  // Keys view tensors_[i].id and ops_[i].id: no second copy of every id.
  absl::flat_hash_map<absl::string_view, TensorIndex> tensor_index_;
  absl::flat_hash_map<absl::string_view, OpIndex> op_index_;
};

// Declarations as the importers see them: ids, not indices.
struct TensorSpec {
  std::string id;
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kUnspecified;
  // Negative: compute from shape and dtype.
  int64_t size_bytes = -1;
  // Unset: kInput without a producer, kActivation otherwise.
  bool role_set = false;
  TensorRole role = TensorRole::kActivation;
  bool is_output = false;
  // As Tensor::batch_dim.
  int32_t batch_dim = -1;
  // As Tensor::gradient_of: the parameter's id, or empty.
  std::string gradient_of;
};

struct OpSpec {
  std::string id;
  std::string name;
  std::string op_type;
  OpClass op_class = OpClass::kOther;
  Phase phase = Phase::kForward;
  std::vector<std::string> input_ids;
  std::vector<std::string> output_ids;
  double flops = -1;
  double measured_time_seconds = -1;
  std::string measured_on;  // as Op::measured_on
  double relative_cost = -1;
  int64_t workspace_bytes = 0;
  // Unset: false for RANDOM and COLLECTIVE ops, true otherwise.
  bool recomputable_set = false;
  bool recomputable = true;
  std::map<std::string, std::string> attributes;
};

// The declarations a built tensor or op came from (ids, not indices), for
// passes that build a new graph from an old one (chunk_rewrite.h).
TensorSpec SpecOf(const Graph& graph, const Tensor& tensor);
OpSpec SpecOf(const Graph& graph, const Op& op);

// Collects specs, then validates and resolves them into a Graph. Errors name
// the offending op or tensor id.
class GraphBuilder {
 public:
  explicit GraphBuilder(std::string name = "") : name_(std::move(name)) {}
  void SetName(std::string name) { name_ = std::move(name); }
  void AddTensor(TensorSpec spec) { tensors_.push_back(std::move(spec)); }
  void AddOp(OpSpec spec) { ops_.push_back(std::move(spec)); }
  // Room for this many declarations, when the count is known up front (a
  // 1M-op graph otherwise moves its specs ~20 times as they grow).
  void Reserve(size_t tensors, size_t ops) {
    tensors_.reserve(tensors);
    ops_.reserve(ops);
  }
  // 0: no batch dimension. Build checks every tensor's batch_dim against it.
  void SetBatchSize(int64_t batch_size) { batch_size_ = batch_size; }
  int64_t batch_size() const { return batch_size_; }
  void SetMetadata(std::string key, std::string value) {
    metadata_[std::move(key)] = std::move(value);
  }
  // The optimizer state's dtype, in the metadata (kOptimizerStateDTypeKey).
  void SetOptimizerStateDType(DType dtype);
  // Marks tensors declared elsewhere (e.g. produced by an op) as outputs.
  void MarkOutputs(std::vector<std::string> tensor_ids) {
    for (std::string& id : tensor_ids) output_ids_.push_back(std::move(id));
  }
  absl::StatusOr<Graph> Build() &&;

  // The declarations as collected, unvalidated (the adapter turns them into
  // a proto without building a Graph).
  const std::string& name() const { return name_; }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  const std::vector<OpSpec>& ops() const { return ops_; }
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }
  const std::vector<std::string>& output_ids() const { return output_ids_; }

 private:
  std::vector<std::string> output_ids_;
  std::string name_;
  int64_t batch_size_ = 0;
  std::vector<TensorSpec> tensors_;
  std::vector<OpSpec> ops_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace echo::planner

#endif  // ECHO_PLANNER_GRAPH_H_
