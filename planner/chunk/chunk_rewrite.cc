#include "planner/chunk/chunk_rewrite.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "planner/chunk/row_layout.h"
#include "planner/status_macros.h"

namespace echo::planner {
namespace {

// A fresh op or tensor id: `base`, or base#2, base#3, ...
template <typename Exists>
std::string FreshId(const std::string& base, const Exists& exists) {
  std::string id = base;
  for (int i = 2; exists(id); ++i) id = absl::StrCat(base, "#", i);
  return id;
}

// The size of one chunk's slice of an inner tensor.
int64_t ChunkBytes(const RowLayout& layout, const Tensor& tensor, TensorIndex t,
                   int64_t chunk_rows) {
  if (layout.Prefix(t) == 0 && !layout.RowsLast(t)) return tensor.size_bytes;
  const int64_t rows = layout.rows();
  // size * chunk_rows / rows, rounded up, without overflow.
  return tensor.size_bytes / rows * chunk_rows +
         (tensor.size_bytes % rows * chunk_rows + rows - 1) / rows;
}

// What one chunk of a summed tensor or a gradient takes before it joins
// the step's output: a matmul writes (or adds) into it directly, a sum over
// the rows makes a partial of its size to add, the views and adds between
// sums and a block's ops make nothing of their own (the block's result is
// handed on as it is), any other op a slice that is then copied in.
int64_t OutputChunkBytes(const Graph& graph, const ChunkRegion& region,
                         const RowLayout& layout, TensorIndex t,
                         int64_t chunk_rows) {
  const OpIndex producer = graph.tensor(t).producer;
  const Op& op = graph.op(producer);
  if (op.op_type == "aten::mm") return 0;
  if (op.op_type == "aten::sum") return graph.tensor(t).size_bytes;
  if (std::binary_search(region.summed.begin(), region.summed.end(), t) ||
      region.BlockOf(producer) >= 0) {
    return 0;
  }
  return ChunkBytes(layout, graph.tensor(t), t, chunk_rows);
}

// The size of one chunk's share of an inner tensor: a slice of the rows,
// a block whole, nothing of a sum (OutputChunkBytes).
int64_t InnerChunkBytes(const Graph& graph, const ChunkRegion& region,
                        const RowLayout& layout, TensorIndex t,
                        int64_t chunk_rows) {
  if (std::binary_search(region.summed.begin(), region.summed.end(), t)) {
    return OutputChunkBytes(graph, region, layout, t, chunk_rows);
  }
  if (region.BlockOf(graph.tensor(t).producer) >= 0) {
    return graph.tensor(t).size_bytes;
  }
  return ChunkBytes(layout, graph.tensor(t), t, chunk_rows);
}

// A region's forward or backward step: never re-run, tagged with its region.
OpSpec StepSpec(std::string id, const char* op_type, OpClass op_class,
                Phase phase, int32_t region) {
  OpSpec spec;
  spec.name = id;
  spec.id = std::move(id);
  spec.op_type = op_type;
  spec.op_class = op_class;
  spec.phase = phase;
  spec.recomputable_set = true;
  spec.recomputable = false;
  spec.attributes[kChunkedRegionAttribute] = absl::StrCat(region);
  return spec;
}

// The region's cost, and its kernels that every chunk launches (a block's
// ops run once, in their chunk; the views and adds between sums never run,
// the sums add into their gradient instead).
double RegionCost(const Graph& graph, const ChunkRegion& region,
                  const std::vector<double>& op_costs, int32_t* kernels) {
  double cost = 0;
  *kernels = 0;
  for (OpIndex o : region.ops()) {
    cost += op_costs[o];
    const std::vector<TensorIndex>& outputs = graph.op(o).outputs;
    const bool between_sums =
        !outputs.empty() &&
        std::binary_search(region.summed.begin(), region.summed.end(),
                           outputs[0]) &&
        graph.op(o).op_type != "aten::mm" && graph.op(o).op_type != "aten::sum";
    if (op_costs[o] > 0 && region.BlockOf(o) < 0 && !between_sums) {
      ++*kernels;
    }
  }
  return cost;
}

double SummedFlops(const Graph& graph, const ChunkRegion& region) {
  double flops = 0;
  for (OpIndex o : region.ops()) {
    if (graph.op(o).flops < 0) return -1;
    flops += graph.op(o).flops;
  }
  return flops;
}

}  // namespace

absl::StatusOr<int64_t> ChunkWorkspaceBytes(const Graph& graph,
                                            const ChunkRegion& region,
                                            int64_t chunk_rows,
                                            const MemoryModelOptions& memory) {
  const RowLayout layout(graph, region.rows, region.rows_last);
  const std::set<TensorIndex> inner(region.inner.begin(), region.inner.end());
  const std::set<TensorIndex> gradients(region.gradients.begin(),
                                        region.gradients.end());
  GraphBuilder chunk(absl::StrCat(graph.name(), ".chunk"));
  // The first chunk's: its blocks, not the others'.
  std::vector<OpIndex> ops;
  std::set<TensorIndex> declared, made, elsewhere;
  for (OpIndex o : region.ops()) {
    const int64_t block = region.BlockOf(o);
    std::set<TensorIndex>& into = block >= chunk_rows ? elsewhere : made;
    into.insert(graph.op(o).outputs.begin(), graph.op(o).outputs.end());
    if (block < chunk_rows) ops.push_back(o);
  }
  auto declare = [&](TensorIndex t) {
    if (!declared.insert(t).second) return;
    const Tensor& tensor = graph.tensor(t);
    TensorSpec spec;
    spec.id = tensor.id;
    spec.role_set = true;
    spec.role = TensorRole::kActivation;
    // Inputs are slices or wholes of live tensors, the loss outputs the
    // step's own: they take no bytes here.
    spec.size_bytes =
        inner.count(t) ? InnerChunkBytes(graph, region, layout, t, chunk_rows)
        : gradients.count(t)
            ? OutputChunkBytes(graph, region, layout, t, chunk_rows)
            : 0;
    if (!made.count(t)) spec.role = TensorRole::kInput;
    chunk.AddTensor(std::move(spec));
  };
  for (OpIndex o : ops) {
    const Op& op = graph.op(o);
    OpSpec spec;
    spec.id = op.id;
    spec.op_class = op.op_class;
    spec.workspace_bytes = region.BlockOf(o) >= 0
                               ? op.workspace_bytes
                               : op.workspace_bytes / region.rows * chunk_rows;
    for (TensorIndex t : op.inputs) {
      if (elsewhere.count(t)) continue;  // another chunk's block
      declare(t);
      spec.input_ids.push_back(graph.tensor(t).id);
    }
    for (TensorIndex t : op.outputs) {
      declare(t);
      spec.output_ids.push_back(graph.tensor(t).id);
    }
    chunk.AddOp(std::move(spec));
  }
  absl::StatusOr<Graph> built = std::move(chunk).Build();
  if (!built.ok()) {
    return absl::InternalError(
        absl::StrCat("the chunk of region at '", graph.op(region.loss_op).id,
                     "' is not a graph: ", built.status().message()));
  }
  return SimulatePlain(*built, memory).peak_bytes;
}

namespace {

// One region's step at `chunks` chunks, and the costs of its forward and
// backward steps.
struct RegionStep {
  ChunkedStep step;
  double forward_cost = 0;
  double backward_cost = 0;
};

absl::StatusOr<RegionStep> PlanRegionStep(const Graph& graph,
                                          const ChunkRegion& region,
                                          const std::vector<double>& op_costs,
                                          int32_t chunks,
                                          const MemoryModelOptions& memory,
                                          double launch_cost) {
  RegionStep planned;
  ChunkedStep& step = planned.step;
  step.chunks = static_cast<int32_t>(std::min<int64_t>(chunks, region.rows));
  step.chunk_rows = (region.rows + step.chunks - 1) / step.chunks;
  if (region.block_rows > 0) {
    // Whole blocks per chunk.
    step.chunk_rows = (step.chunk_rows + region.block_rows - 1) /
                      region.block_rows * region.block_rows;
    step.chunks = static_cast<int32_t>((region.rows + step.chunk_rows - 1) /
                                       step.chunk_rows);
  }
  ASSIGN_OR_RETURN(step.chunk_workspace_bytes,
                   ChunkWorkspaceBytes(graph, region, step.chunk_rows, memory));
  for (TensorIndex t : region.inner) {
    if (!std::binary_search(region.summed.begin(), region.summed.end(), t)) {
      step.inner_bytes += AllocatedBytes(graph.tensor(t).size_bytes, memory);
    }
  }
  int32_t kernels = 0;
  const double cost = RegionCost(graph, region, op_costs, &kernels);
  const double per_launch =
      launch_cost >= 0 ? launch_cost
                       : kUnknownLaunchShare * cost / std::max(kernels, 1);
  step.extra_cost = (step.chunks - 1) * per_launch * kernels;
  // The backward step scales each gradient the region hands on.
  if (!region.backward_ops.empty()) {
    planned.backward_cost =
        (launch_cost >= 0 ? launch_cost : 0) * region.gradients.size();
  }
  planned.forward_cost = cost + step.extra_cost;
  step.extra_cost += planned.backward_cost;
  return planned;
}

void SetChunkAttributes(const ChunkedStep& step,
                        std::map<std::string, std::string>& attributes) {
  attributes["chunks"] = absl::StrCat(step.chunks);
  attributes["chunk_rows"] = absl::StrCat(step.chunk_rows);
}

}  // namespace

// The chunked graph's steps, edited in place (Graph's friend).
class ChunkStepEditor {
 public:
  static Op& MutableOp(Graph& graph, OpIndex o) { return graph.ops_[o]; }
};

absl::Status Rechunk(const Graph& graph, const std::vector<double>& op_costs,
                     const std::vector<ChunkRegion>& regions, int32_t chunks,
                     const MemoryModelOptions& memory, double launch_cost,
                     ChunkedGraph& chunked) {
  if (chunks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunks must be positive, got ", chunks));
  }
  if (chunked.steps.size() != regions.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the chunked graph has ", chunked.steps.size(),
                     " steps for ", regions.size(), " regions"));
  }
  chunked.extra_cost = 0;
  for (size_t r = 0; r < regions.size(); ++r) {
    ASSIGN_OR_RETURN(RegionStep planned,
                     PlanRegionStep(graph, regions[r], op_costs, chunks, memory,
                                    launch_cost));
    ChunkedStep& step = chunked.steps[r];
    planned.step.forward_op = step.forward_op;
    planned.step.backward_op = step.backward_op;
    step = planned.step;
    Op& forward = ChunkStepEditor::MutableOp(chunked.graph, step.forward_op);
    forward.workspace_bytes = step.chunk_workspace_bytes;
    SetChunkAttributes(step, forward.attributes);
    chunked.op_costs[step.forward_op] = planned.forward_cost;
    if (step.backward_op != kNoOp) {
      chunked.op_costs[step.backward_op] = planned.backward_cost;
    }
    chunked.extra_cost += step.extra_cost;
  }
  return absl::OkStatus();
}

absl::StatusOr<ChunkedGraph> ChunkGraph(const Graph& graph,
                                        const std::vector<double>& op_costs,
                                        const std::vector<ChunkRegion>& regions,
                                        int32_t chunks,
                                        const MemoryModelOptions& memory,
                                        double launch_cost) {
  if (chunks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunks must be positive, got ", chunks));
  }
  GraphBuilder builder(graph.name());
  builder.SetBatchSize(graph.batch_size());
  for (const auto& [key, value] : graph.metadata()) {
    builder.SetMetadata(key, value);
  }
  auto op_exists = [&graph](const std::string& id) {
    return graph.FindOp(id) >= 0;
  };
  auto tensor_exists = [&graph](const std::string& id) {
    return graph.FindTensor(id) >= 0;
  };
  std::set<TensorIndex> dropped;
  std::set<OpIndex> removed;
  std::map<OpIndex, int32_t> forward_at, backward_at;
  ChunkedGraph result;
  std::vector<OpSpec> forward_steps, backward_steps;
  std::vector<double> forward_costs, backward_costs;
  for (int32_t r = 0; r < static_cast<int32_t>(regions.size()); ++r) {
    const ChunkRegion& region = regions[r];
    ASSIGN_OR_RETURN(
        const RegionStep planned,
        PlanRegionStep(graph, region, op_costs, chunks, memory, launch_cost));
    ChunkedStep step = planned.step;
    for (TensorIndex t : region.inner) dropped.insert(t);
    for (OpIndex o : region.ops()) removed.insert(o);
    const std::string name =
        absl::StrCat("chunked_", graph.op(region.loss_op).id);
    OpSpec forward =
        StepSpec(FreshId(name + ".forward", op_exists), kChunkedForwardOpType,
                 OpClass::kOther, Phase::kForward, r);
    forward.workspace_bytes = step.chunk_workspace_bytes;
    forward.flops = SummedFlops(graph, region);
    SetChunkAttributes(step, forward.attributes);
    for (TensorIndex t : region.inputs) {
      forward.input_ids.push_back(graph.tensor(t).id);
    }
    for (TensorIndex t : region.loss_outputs) {
      forward.output_ids.push_back(graph.tensor(t).id);
    }
    // The forward step makes the gradients at the loss's gradient 1; the
    // backward step scales them in place (a zero-byte token says it ran).
    for (TensorIndex g : region.gradients) {
      forward.output_ids.push_back(graph.tensor(g).id);
    }
    OpSpec backward;
    if (!region.backward_ops.empty()) {
      backward = StepSpec(FreshId(name + ".backward", op_exists),
                          kChunkedBackwardOpType, OpClass::kElementwise,
                          Phase::kBackward, r);
      backward.input_ids.push_back(graph.tensor(region.loss_gradient).id);
      for (TensorIndex g : region.gradients) {
        backward.input_ids.push_back(graph.tensor(g).id);
      }
      TensorSpec token;
      token.id = FreshId(backward.id + kScaledSuffix, tensor_exists);
      token.size_bytes = 0;
      backward.output_ids.push_back(token.id);
      builder.AddTensor(std::move(token));
      backward_at[region.backward_ops.front()] = r;
    }
    backward_steps.push_back(std::move(backward));
    backward_costs.push_back(planned.backward_cost);
    forward_at[region.forward_ops.back()] = r;
    forward_steps.push_back(std::move(forward));
    forward_costs.push_back(planned.forward_cost);
    result.extra_cost += step.extra_cost;
    result.steps.push_back(step);
  }
  for (TensorIndex t = 0; t < graph.num_tensors(); ++t) {
    if (!dropped.count(t)) builder.AddTensor(SpecOf(graph, graph.tensor(t)));
  }
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    if (auto it = forward_at.find(o); it != forward_at.end()) {
      result.steps[it->second].forward_op =
          static_cast<OpIndex>(result.op_costs.size());
      builder.AddOp(forward_steps[it->second]);
      result.op_costs.push_back(forward_costs[it->second]);
    }
    if (auto it = backward_at.find(o); it != backward_at.end()) {
      result.steps[it->second].backward_op =
          static_cast<OpIndex>(result.op_costs.size());
      builder.AddOp(backward_steps[it->second]);
      result.op_costs.push_back(backward_costs[it->second]);
    }
    if (removed.count(o)) continue;
    builder.AddOp(SpecOf(graph, graph.op(o)));
    result.op_costs.push_back(op_costs[o]);
  }
  absl::StatusOr<Graph> built = std::move(builder).Build();
  if (!built.ok()) {
    return absl::InternalError(absl::StrCat(
        "the chunked graph is not a graph: ", built.status().message()));
  }
  result.graph = *std::move(built);
  return result;
}

}  // namespace echo::planner
