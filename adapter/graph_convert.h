// Proto <-> planner IR for graphs and memory results. The only place that
// knows both representations; the planner never sees a proto.
#ifndef ECHO_ADAPTER_GRAPH_CONVERT_H_
#define ECHO_ADAPTER_GRAPH_CONVERT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "echo/v1/graph.pb.h"
#include "echo/v1/planner.pb.h"
#include "planner/graph.h"
#include "planner/memory_simulator.h"

namespace echo::adapter {

// Validates while converting (through planner::GraphBuilder): errors are
// InvalidArgument naming the op or tensor.
absl::StatusOr<planner::Graph> GraphFromProto(const v1::Graph& proto);

// Graph.optimizer from names (echoctl --optimizer): a kind ("adamw"), a
// state dtype ("f32"; empty: the parameters') and an implementation
// ("foreach", "for_loop", "fused"; empty: foreach).
absl::StatusOr<v1::OptimizerSpec> OptimizerSpecFromNames(
    const std::string& kind, const std::string& state_dtype,
    const std::string& implementation);

// Declarations an importer collected (planner/text_format.h,
// planner/checkmate_import.h), unvalidated, as a proto: a client sends them
// without building a Graph, and the server validates the graph once.
// INVALID_ARGUMENT only for an output mark naming no declared tensor.
absl::StatusOr<v1::Graph> GraphSpecsToProto(const planner::GraphBuilder& specs);

// A validated graph back as a proto that GraphFromProto turns into the same
// graph: names, batch size, metadata, every tensor (shape, dtype, size, role,
// batch_dim, output mark) and op (inputs and outputs in order, phase, class,
// costs, workspace, recomputable, attributes with recompute_outputs), with
// the defaults Build resolved written out (so its fingerprint is not the
// original proto's). For echod's OPTIMAL child process, which reads the
// graph proto, when the request named a registered graph.
v1::Graph GraphToProto(const planner::Graph& graph);

absl::StatusOr<planner::MemoryModelOptions> MemoryModelFromProto(
    const v1::AllocatorModel& allocator);

// Fills peak, step, breakdown and the largest `max_live_tensors` instances
// live at the peak (-1: all).
void FillEstimate(const planner::Graph& graph,
                  const planner::SimulationResult& result, int max_live_tensors,
                  v1::EstimateMemoryResponse* response);

// The `max_live_tensors` largest instances of `live` (-1: all), appended.
void FillLiveTensors(const planner::Graph& graph,
                     const std::vector<planner::LiveInstance>& live,
                     int max_live_tensors,
                     google::protobuf::RepeatedPtrField<v1::LiveTensor>* out);

// The timeline of `schedule` (each point named by its op and whether it is
// a recomputation).
void FillTimeline(const planner::Graph& graph,
                  const planner::Schedule& schedule,
                  const planner::MemoryTimeline& timeline,
                  v1::MemoryTimeline* proto);

// The two enums list the same types; a proto value this build does not
// know reads as kUnspecified, and kUnspecified as DTYPE_UNSPECIFIED.
planner::DType DTypeFromProto(v1::DType dtype);
v1::DType DTypeToProto(planner::DType dtype);

v1::TensorRole RoleToProto(planner::TensorRole role);

void FillBreakdown(const planner::MemoryBreakdown& breakdown,
                   v1::MemoryBreakdown* proto);

}  // namespace echo::adapter

#endif  // ECHO_ADAPTER_GRAPH_CONVERT_H_
