// The op cost model: FLOPs and bytes per op from shapes, a roofline time on
// a device, and the precedence of cost sources (docs/design.md section 1).
//
// Shapes come from the op's tensors (shape, dtype; a tensor whose shape is
// unknown counts by its size_bytes) and from op.attributes. Attribute keys
// read (values are integers, lists are "3,3" or "[3, 3]"; flags accept
// 1/true/True):
//   GEMM: "m", "n", "k", "batch" (override the inferred dimensions).
//   CONV: "kernel", "stride", "padding", "dilation" (one value repeats over
//         the spatial dims), "groups", "transposed", "output_padding",
//         "output_mask" (backward: which of grad_input, grad_weight,
//         grad_bias are computed).
//   Memory-bound classes: "flops_per_element".
// GEMM dims: the output is [..., M, N] (rank 1: [M], N = 1); the left operand
// is the first input of rank >= 2 (for aten::addmm / baddbmm / addbmm /
// addmv, after the bias); K is its last dim, or its second-to-last when its
// last dim equals M and its second-to-last does not (a transposed operand).
// Leading output dims are a batch when the right operand is batched too,
// else they fold into M (aten::linear on [B, T, K] is one [B*T, K] GEMM).
// CONV: forward ops read (input [N, C, *spatial], weight, ...) and write the
// output; ops whose op_type contains "backward" follow
// aten::convolution_backward: (grad_output, input, weight) -> (grad_input,
// grad_weight, grad_bias), the outputs recognised by shape or output_mask.
#ifndef ECHO_PLANNER_COST_MODEL_H_
#define ECHO_PLANNER_COST_MODEL_H_

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/device_catalog.h"
#include "planner/graph.h"
#include "planner/op_work.h"

namespace echo::planner {

inline constexpr int kNumOpClasses = static_cast<int>(OpClass::kEmbedding) + 1;

// ---------------------------------------------------------------- roofline

struct ClassEfficiency {
  // Fractions of the peak FLOP/s and of the memory bandwidth reached.
  double compute = 1;
  double memory = 1;
};

struct CostModelOptions {
  CostModelOptions();
  ClassEfficiency& efficiency(OpClass c) {
    return efficiency_by_class[static_cast<int>(c)];
  }
  const ClassEfficiency& efficiency(OpClass c) const {
    return efficiency_by_class[static_cast<int>(c)];
  }
  std::array<ClassEfficiency, kNumOpClasses> efficiency_by_class;
  // Added to every op that runs a kernel.
  double launch_overhead_seconds = 5e-6;
  // PyTorch's defaults: TF32 off for matmuls, on for cuDNN convolutions.
  bool tf32_for_f32_gemm = false;
  bool tf32_for_f32_conv = true;
};

// Ideal times at 100% efficiency, and the roofline time:
// max(flops / (peak * eff.compute), bytes / (bandwidth * eff.memory)) +
// launch overhead; 0 for free ops. Nullopt when the work is unknown.
struct RooflineTerms {
  double compute_seconds = 0;  // flops / peak
  double memory_seconds = 0;   // bytes / bandwidth
};
std::optional<RooflineTerms> IdealTimes(const OpWork& work, OpClass op_class,
                                        const DeviceSpec& device,
                                        const CostModelOptions& options);
std::optional<double> AnalyticSeconds(const Graph& graph, OpIndex op,
                                      const DeviceSpec& device,
                                      const CostModelOptions& options);

// ---------------------------------------------------------------- sources

enum class CostSource { kMeasured, kProfiled, kAnalytic, kRelative, kUnknown };
inline constexpr int kNumCostSources = 5;
absl::string_view CostSourceName(CostSource source);

struct OpCostEstimate {
  // In the table's unit.
  double cost = 0;
  CostSource source = CostSource::kUnknown;
  double flops = 0;
  double bytes_moved = 0;
};

// How much of a cost rests on each source.
struct CostSourceSummary {
  std::array<int32_t, kNumCostSources> op_count{};
  std::array<double, kNumCostSources> cost{};
  int32_t count(CostSource s) const { return op_count[static_cast<int>(s)]; }
  double total_cost() const;
  // Share of the total cost, 0..1 (0 when the total is 0).
  double fraction(CostSource s) const;
};

// Times profiled on this node, looked up by the cost model.
class ProfiledTimes {
 public:
  virtual ~ProfiledTimes() = default;
  virtual std::optional<double> Lookup(const Graph& graph,
                                       OpIndex op) const = 0;
};

inline constexpr absl::string_view kSecondsUnit = "seconds";
inline constexpr absl::string_view kRelativeUnit = "relative";

struct CostTable {
  std::vector<OpCostEstimate> ops;  // indexed by OpIndex
  std::string unit;                 // kSecondsUnit or kRelativeUnit
  std::vector<double> Costs() const;
  double TotalCost() const;
  CostSourceSummary Summary() const;
  // Over a subset, e.g. the recomputed ops of a plan (an op may repeat).
  CostSourceSummary SummaryOf(const std::vector<OpIndex>& ops) const;
};

// Whether the op's measured_time_seconds prices it on `device`: the op has a
// time, and either no device is asked for (the capture machine's times are
// all there is) or op.measured_on names that device (case-insensitive). A
// time measured elsewhere, or with measured_on empty, does not price a
// named device: a CPU-captured time says little about an H100.
bool MeasuredTimeApplies(const Op& op, const DeviceSpec* device);

// The compute of one plain iteration: every op's cost, save the ops whose
// original run does no work (kFirstRunAliasAttribute).
double BaselineCost(const Graph& graph, const std::vector<double>& op_costs);

// Per op, the first that applies: the client's measured time when
// MeasuredTimeApplies > a time profiled on this node > the analytic
// roofline on `device` > the client's relative cost > unknown (cost 0).
//
// Units: the table is in seconds when a device is given or any op has a
// measured or profiled time; else in the graph's relative units. In seconds,
// an op with only a relative cost is converted by the ratio
// sum(seconds) / sum(relative) over the ops that have both a relative cost
// and a time (its source stays kRelative); without such ops it is unknown.
// INVALID_ARGUMENT when the device fails ValidateDeviceSpec.
absl::StatusOr<CostTable> EstimateOpCosts(const Graph& graph,
                                          const DeviceSpec* device,
                                          const ProfiledTimes* profiled,
                                          const CostModelOptions& options = {});

// A stable key for an op's computation, independent of ids and names: op
// class, op_type, input and output dtypes and shapes (size in bytes when the
// shape is unknown), and the attributes listed at the top of this file.
std::string OpSignature(const Graph& graph, OpIndex op);

// Ops worth timing on a GPU: GEMMs and convolutions with inferable shapes,
// and ops of class OTHER whose tensors all have shapes; never an op whose
// measured time applies to `device`, the profiling GPU's catalog spec
// (nullptr when unknown: then any measured op is left alone).
bool NeedsProfiling(const Graph& graph, OpIndex op,
                    const DeviceSpec* device = nullptr);

// ---------------------------------------------------------------- calibration

struct CalibrationSample {
  OpClass op_class = OpClass::kOther;
  RooflineTerms ideal;
  double measured_seconds = 0;
};
std::optional<CalibrationSample> MakeCalibrationSample(
    const Graph& graph, OpIndex op, const DeviceSpec& device,
    const CostModelOptions& options, double measured_seconds);

struct EfficiencyFit {
  CostModelOptions options;
  std::array<int32_t, kNumOpClasses> compute_samples{};
  std::array<int32_t, kNumOpClasses> memory_samples{};
};
// Refits the efficiencies of `start` from measured times: each sample counts
// for the bound (compute or memory) that dominates under `start`; its
// efficiency is ideal / (measured - launch overhead); a class takes the
// median, clamped to [0.01, 1]. Classes without samples keep their values.
EfficiencyFit FitEfficiencies(const std::vector<CalibrationSample>& samples,
                              const CostModelOptions& start);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_COST_MODEL_H_
