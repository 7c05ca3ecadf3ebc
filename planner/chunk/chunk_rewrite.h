// A graph with its chunkable regions (chunk_region.h) run in chunks: each
// region's ops give way to two steps, which is how the memory model sees a
// chunked region (docs/design.md, "Plan actions"):
//  - its forward step, where the region's last forward op ran: reads the
//    region's inputs, makes the loss op's outputs and, at the loss's
//    gradient 1, every gradient the region hands on (summed or written
//    slice by slice over the chunks), holding as workspace what one chunk
//    of the region's inner tensors needs at once;
//  - its backward step, where the region's first backward op ran: scales
//    those gradients by the loss's gradient, in place (its one output is a
//    zero-byte token).
// The inner tensors never exist whole. Every other op and tensor is the
// graph's own, so recompute plans of the new graph are plans of the old one
// with the region chunked.
#ifndef ECHO_PLANNER_CHUNK_CHUNK_REWRITE_H_
#define ECHO_PLANNER_CHUNK_CHUNK_REWRITE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "planner/chunk/chunk_region.h"
#include "planner/graph.h"
#include "planner/memory_simulator.h"

namespace echo::planner {

// Op attribute of a region's steps: the index of its region.
inline constexpr char kChunkedRegionAttribute[] = "chunked_region";
inline constexpr char kChunkedForwardOpType[] = "echo::chunked_forward";
inline constexpr char kChunkedBackwardOpType[] = "echo::chunked_backward";
// The id suffix of the backward step's token.
inline constexpr char kScaledSuffix[] = ".scaled";

struct ChunkedStep {
  int32_t chunks = 0;
  int64_t chunk_rows = 0;
  // The region's steps in the chunked graph; backward kNoOp when the
  // region has no backward.
  OpIndex forward_op = kNoOp;
  OpIndex backward_op = kNoOp;
  // One chunk's inner tensors at their most at once (the forward step's
  // workspace), and all of them whole (what the unchunked region makes).
  int64_t chunk_workspace_bytes = 0;
  int64_t inner_bytes = 0;
  // Cost beyond the region's own ops: the launches of the extra chunks and
  // the backward step's scaling.
  double extra_cost = 0;
};

struct ChunkedGraph {
  Graph graph;
  std::vector<double> op_costs;    // per op of `graph`
  std::vector<ChunkedStep> steps;  // per region, in the regions' order
  double extra_cost = 0;           // summed over the regions
};

// How extra chunks are priced: `launch_cost` per kernel of the region for
// each chunk beyond the first (and per gradient the backward step scales).
// Negative: unknown (relative costs), priced at kUnknownLaunchShare of the
// kernel's own cost.
inline constexpr double kUnknownLaunchShare = 0.01;

// The graph with every region run in `chunks` chunks (rows split as evenly
// as `chunks` allows: ceil(rows / chunks) rows each).
absl::StatusOr<ChunkedGraph> ChunkGraph(const Graph& graph,
                                        const std::vector<double>& op_costs,
                                        const std::vector<ChunkRegion>& regions,
                                        int32_t chunks,
                                        const MemoryModelOptions& memory,
                                        double launch_cost);

// `chunked`, ChunkGraph's graph of the same graph, costs and regions, set
// to `chunks` chunks in place: the counts differ only in the forward steps'
// workspace and attributes, the steps' costs and `steps`, so AUTO plans
// every count on one rewrite (a rewrite of a 100k-op graph takes ~0.3 s).
// Op indices, and so schedules, are the same for every count.
absl::Status Rechunk(const Graph& graph, const std::vector<double>& op_costs,
                     const std::vector<ChunkRegion>& regions, int32_t chunks,
                     const MemoryModelOptions& memory, double launch_cost,
                     ChunkedGraph& chunked);

// Bytes one chunk of `chunk_rows` rows holds at once while the region's
// ops run on it, forward then backward: its inner tensors, and of each
// gradient what the chunk makes before adding it in (inputs and loss
// outputs excluded: they are the step's own).
absl::StatusOr<int64_t> ChunkWorkspaceBytes(const Graph& graph,
                                            const ChunkRegion& region,
                                            int64_t chunk_rows,
                                            const MemoryModelOptions& memory);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_CHUNK_CHUNK_REWRITE_H_
