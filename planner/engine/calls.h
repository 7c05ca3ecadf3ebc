// The engine's calls and answers (engine.h): what a request asks and what
// echod answers, in the planner's types. Types only, so that the adapter
// decodes into them and encodes from them without linking the passes.
#ifndef ECHO_PLANNER_ENGINE_CALLS_H_
#define ECHO_PLANNER_ENGINE_CALLS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "planner/cost_model.h"
#include "planner/device_catalog.h"
#include "planner/graph.h"
#include "planner/memory_simulator.h"
#include "planner/recompute/plan.h"

namespace echo::engine {

// A request's graph, priced for the device it names: every question about
// a graph starts here (PriceGraph).
struct PricedGraph {
  std::shared_ptr<const planner::Graph> graph;
  // When the request names one.
  std::optional<planner::DeviceSpec> device;
  planner::CostTable costs;
  // Set when the graph was priced on the default device because the
  // request named none and the graph has no costs: said in every answer.
  std::string pricing_note;
  // What the answers cover: forward+backward, and the optimizer's state
  // and step when the graph names its optimizer (optimizer_step.h).
  std::string iteration;
};

// Memory over time, on request (EstimateMemory and GenerateRecomputePlan).
struct TimelineOptions {
  bool include = false;
  // Checked before any work (engine::CheckTimeline), whether or not a
  // timeline is asked for.
  int32_t max_points = 0;
  // Tensors listed live at the peak.
  int32_t max_live_tensors = 20;
};

struct EstimateCall {
  planner::MemoryModelOptions memory;
  TimelineOptions timeline;
  // The device the request names, or none (PriceGraph).
  std::optional<planner::DeviceSpec> device;
};

struct EstimateAnswer {
  planner::SimulationResult result;
  std::optional<planner::MemoryTimeline> timeline;  // with timeline.include
};

struct PlanCall {
  planner::RecomputePlanOptions options;
  TimelineOptions timeline;
  // The device the request names, or none (PriceGraph).
  std::optional<planner::DeviceSpec> device;
};

struct PlanAnswer {
  planner::RecomputePlan plan;
  // With timeline.include: the plan's replay (what is live at its peak) and
  // its timeline, both over the graph the schedule names (PlanGraph).
  std::optional<planner::SimulationResult> replay;
  std::optional<planner::MemoryTimeline> timeline;
};

}  // namespace echo::engine

#endif  // ECHO_PLANNER_ENGINE_CALLS_H_
