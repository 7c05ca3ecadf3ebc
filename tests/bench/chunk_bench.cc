// Chunked loss regions on graph files: for each graph, AUTO's plan without
// and with chunking at a few overhead budgets on a catalog device, with the
// peak, where it sits, the chunks chosen and the extra compute. Prints a
// markdown table; not a test.
//
//   echo_chunk_bench [--device h100-80gb] [--live N] GRAPH...
//
// --live N also lists the N largest tensors live at each chunked plan's
// peak; --regions lists each region found (ops, blocks, gradients, one
// chunk's workspace at a few chunk counts) before planning.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "adapter/graph_convert.h"
#include "adapter/graph_file.h"
#include "planner/byte_size.h"
#include "planner/chunk/chunk_rewrite.h"
#include "planner/chunk/chunk_search.h"
#include "planner/compose/plan_composer.h"
#include "planner/cost_model.h"
#include "planner/device_catalog.h"
#include "planner/memory_simulator.h"

namespace echo {
namespace {

std::string PeakOp(const planner::Graph& graph,
                   const planner::RecomputePlan& plan,
                   const planner::MemoryModelOptions& memory, int live = 0) {
  const planner::Graph& g = planner::PlanGraph(graph, plan);
  absl::StatusOr<planner::SimulationResult> replay =
      planner::ReplaySchedule(g, plan.schedule, memory);
  if (!replay.ok()) return "(invalid)";
  for (int i = 0; i < live && i < static_cast<int>(replay->live_at_peak.size());
       ++i) {
    const planner::LiveInstance& instance = replay->live_at_peak[i];
    absl::PrintF("    live at the peak: %s %s\n", g.tensor(instance.tensor).id,
                 planner::HumanBytes(instance.bytes));
  }
  return g.op(replay->peak_op).op_type;
}

void DescribeRegions(const planner::Graph& graph,
                     const planner::MemoryModelOptions& memory) {
  const planner::ChunkRegionSearch found = planner::FindChunkRegions(graph);
  for (const std::string& why : found.rejected) absl::PrintF("%s\n", why);
  for (const planner::ChunkRegion& region : found.regions) {
    absl::PrintF(
        "region at '%s': %d rows, %d forward + %d backward ops, %d block ops "
        "of %d rows, %d inputs (%d sliced), %d gradients, %d summed, inner "
        "%s\n",
        graph.op(region.loss_op).id, region.rows, region.forward_ops.size(),
        region.backward_ops.size(), region.block_ops.size(), region.block_rows,
        region.inputs.size(), region.sliced_inputs.size(),
        region.gradients.size(), region.summed.size(),
        planner::HumanBytes(region.inner_bytes));
    for (planner::TensorIndex g : region.gradients) {
      absl::PrintF("  gradient %s %s\n", graph.tensor(g).id,
                   planner::HumanBytes(graph.tensor(g).size_bytes));
    }
    for (int64_t rows : {region.rows, region.rows / 8, region.rows / 32}) {
      absl::StatusOr<int64_t> bytes =
          planner::ChunkWorkspaceBytes(graph, region, rows, memory);
      absl::PrintF("  workspace at %d rows: %s\n", rows,
                   bytes.ok() ? planner::HumanBytes(*bytes)
                              : std::string(bytes.status().message()));
    }
  }
}

int Run(int argc, char** argv) {
  std::string device_name = "h100-80gb";
  int live = 0;
  bool regions = false;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--device" && i + 1 < argc) {
      device_name = argv[++i];
    } else if (arg == "--regions") {
      regions = true;
    } else if (arg == "--live" && i + 1 < argc) {
      live = std::atoi(argv[++i]);
    } else {
      paths.push_back(arg);
    }
  }
  absl::StatusOr<planner::DeviceSpec> device =
      planner::FindCatalogDevice(device_name);
  if (!device.ok()) {
    absl::FPrintF(stderr, "%s\n", device.status().message());
    return 2;
  }
  absl::PrintF(
      "| graph | budget | plain peak | AUTO | peak at | AUTO + chunks | peak "
      "at | chunks | extra compute | plan time |\n|---|---|---|---|---|---|---"
      "|---|---|---|\n");
  const planner::MemoryModelOptions memory;
  for (const std::string& path : paths) {
    absl::StatusOr<v1::Graph> proto = adapter::LoadGraphFile(path);
    if (!proto.ok()) {
      absl::FPrintF(stderr, "%s\n", proto.status().message());
      return 1;
    }
    absl::StatusOr<planner::Graph> graph = adapter::GraphFromProto(*proto);
    if (!graph.ok()) {
      absl::FPrintF(stderr, "%s\n", graph.status().message());
      return 1;
    }
    absl::StatusOr<planner::CostTable> costs =
        planner::EstimateOpCosts(*graph, &*device, nullptr);
    if (!costs.ok()) return 1;
    if (regions) DescribeRegions(*graph, memory);
    for (double ratio : {0.05, 0.2}) {
      planner::RecomputePlanOptions options;
      options.max_overhead_ratio = ratio;
      absl::StatusOr<planner::RecomputePlan> plain =
          planner::GenerateRecomputePlan(*graph, costs->Costs(), options);
      options.chunking.enabled = true;
      options.chunking.launch_cost =
          planner::CostModelOptions().launch_overhead_seconds;
      absl::StatusOr<planner::RecomputePlan> chunked =
          planner::GenerateRecomputePlan(*graph, costs->Costs(), options);
      if (!plain.ok() || !chunked.ok()) {
        absl::FPrintF(stderr, "%s: planning failed\n", path);
        return 1;
      }
      std::string chunks = "-";
      for (const planner::ChunkedRegionReport& r : chunked->chunked_regions) {
        chunks = absl::StrFormat("%d x %d rows", r.chunks, r.chunk_rows);
      }
      absl::PrintF(
          "| %s | %.0f%% | %s | %s (%.2fx) | %s | %s (%.2fx) | %s | %s "
          "| %.2f%% | %.1f ms |\n",
          graph->name(), 100 * ratio,
          planner::HumanBytes(plain->baseline_peak_bytes),
          planner::HumanBytes(plain->planned_peak_bytes),
          1.0 * plain->baseline_peak_bytes / plain->planned_peak_bytes,
          PeakOp(*graph, *plain, memory),
          planner::HumanBytes(chunked->planned_peak_bytes),
          1.0 * chunked->baseline_peak_bytes / chunked->planned_peak_bytes,
          PeakOp(*graph, *chunked, memory, live), chunks,
          100 * chunked->recompute_overhead_ratio,
          1e3 * chunked->solve_time_seconds);
      for (const std::string& note : chunked->chunking_notes) {
        absl::PrintF("|  | note: %s |\n", note);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace echo

int main(int argc, char** argv) { return echo::Run(argc, argv); }
