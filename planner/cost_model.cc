#include "planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/status_macros.h"

namespace echo::planner {
namespace {

bool Finite(double value) { return value >= 0 && std::isfinite(value); }

// Attributes that change what an op computes: part of its signature.
constexpr absl::string_view kSignatureAttributes[] = {
    "batch",
    "dilation",
    "flops_per_element",
    "groups",
    "k",
    "kernel",
    "m",
    "n",
    "output_mask",
    "output_padding",
    "padding",
    "stride",
    "transposed",
};

}  // namespace

// ---------------------------------------------------------------- roofline

CostModelOptions::CostModelOptions() {
  // Defaults until calibrated on a GPU (tests/gpu/calibrate): cuBLAS reaches
  // ~70% of peak on large GEMMs, cuDNN less; streaming kernels ~80% of the
  // bandwidth; multi-pass (norm, softmax) and gathers less.
  efficiency_by_class.fill({0.5, 0.7});
  efficiency(OpClass::kGemm) = {0.7, 0.8};
  efficiency(OpClass::kConv) = {0.55, 0.7};
  efficiency(OpClass::kElementwise) = {0.5, 0.8};
  efficiency(OpClass::kRandom) = {0.5, 0.7};
  efficiency(OpClass::kReduction) = {0.5, 0.7};
  efficiency(OpClass::kNorm) = {0.5, 0.6};
  efficiency(OpClass::kSoftmax) = {0.5, 0.6};
  efficiency(OpClass::kDataMovement) = {0.5, 0.7};
  efficiency(OpClass::kEmbedding) = {0.5, 0.4};
  efficiency(OpClass::kOther) = {0.5, 0.5};
}

std::optional<RooflineTerms> IdealTimes(const OpWork& work, OpClass op_class,
                                        const DeviceSpec& device,
                                        const CostModelOptions& options) {
  if (!work.known) return std::nullopt;
  RooflineTerms terms;
  if (work.free) return terms;
  const bool tf32 = op_class == OpClass::kConv ? options.tf32_for_f32_conv
                                               : options.tf32_for_f32_gemm;
  const double peak = work.matrix ? MatrixPeakFlops(device, work.dtype, tf32)
                                  : VectorPeakFlops(device, work.dtype);
  if (work.flops > 0 && peak > 0) terms.compute_seconds = work.flops / peak;
  if (device.memory_bandwidth_bytes_per_second > 0) {
    terms.memory_seconds =
        work.bytes_moved / device.memory_bandwidth_bytes_per_second;
  }
  return terms;
}

static std::optional<double> RooflineSeconds(const OpWork& work,
                                             OpClass op_class,
                                             const DeviceSpec& device,
                                             const CostModelOptions& options) {
  std::optional<RooflineTerms> terms =
      IdealTimes(work, op_class, device, options);
  if (!terms) return std::nullopt;
  if (work.free) return 0.0;
  const ClassEfficiency& eff = options.efficiency(op_class);
  return std::max(terms->compute_seconds / eff.compute,
                  terms->memory_seconds / eff.memory) +
         options.launch_overhead_seconds;
}

std::optional<double> AnalyticSeconds(const Graph& graph, OpIndex op,
                                      const DeviceSpec& device,
                                      const CostModelOptions& options) {
  return RooflineSeconds(EstimateOpWork(graph, op), graph.op(op).op_class,
                         device, options);
}

// ---------------------------------------------------------------- sources

absl::string_view CostSourceName(CostSource source) {
  switch (source) {
    case CostSource::kMeasured:
      return "measured";
    case CostSource::kProfiled:
      return "profiled";
    case CostSource::kAnalytic:
      return "analytic";
    case CostSource::kRelative:
      return "relative";
    case CostSource::kUnknown:
      return "unknown";
  }
  return "unknown";
}

double CostSourceSummary::total_cost() const {
  return std::accumulate(cost.begin(), cost.end(), 0.0);
}

double CostSourceSummary::fraction(CostSource s) const {
  const double total = total_cost();
  return total > 0 ? cost[static_cast<int>(s)] / total : 0;
}

std::vector<double> CostTable::Costs() const {
  std::vector<double> costs;
  costs.reserve(ops.size());
  for (const OpCostEstimate& op : ops) costs.push_back(op.cost);
  return costs;
}

double CostTable::TotalCost() const { return Summary().total_cost(); }

CostSourceSummary CostTable::Summary() const {
  std::vector<OpIndex> all(ops.size());
  std::iota(all.begin(), all.end(), 0);
  return SummaryOf(all);
}

CostSourceSummary CostTable::SummaryOf(
    const std::vector<OpIndex>& subset) const {
  CostSourceSummary summary;
  for (OpIndex o : subset) {
    const int s = static_cast<int>(ops[o].source);
    ++summary.op_count[s];
    summary.cost[s] += ops[o].cost;
  }
  return summary;
}

double BaselineCost(const Graph& graph, const std::vector<double>& op_costs) {
  double cost = 0;
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    if (!graph.op(o).attributes.count(kFirstRunAliasAttribute)) {
      cost += op_costs[o];
    }
  }
  return cost;
}

absl::StatusOr<CostTable> EstimateOpCosts(const Graph& graph,
                                          const DeviceSpec* device,
                                          const ProfiledTimes* profiled,
                                          const CostModelOptions& options) {
  if (device != nullptr) {
    RETURN_IF_ERROR(ValidateDeviceSpec(*device));
  }
  CostTable table;
  table.ops.resize(graph.num_ops());
  std::vector<std::optional<double>> seconds(graph.num_ops());
  bool any_time = false;
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    const Op& op = graph.op(o);
    const OpWork work = EstimateOpWork(graph, o);
    OpCostEstimate& estimate = table.ops[o];
    estimate.flops = work.flops;
    estimate.bytes_moved = work.bytes_moved;
    std::optional<double> time;
    if (MeasuredTimeApplies(op, device)) {
      seconds[o] = op.measured_time_seconds;
      estimate.source = CostSource::kMeasured;
    } else if (profiled != nullptr && (time = profiled->Lookup(graph, o)) &&
               Finite(*time)) {
      seconds[o] = time;
      estimate.source = CostSource::kProfiled;
    } else if (device != nullptr &&
               (time = RooflineSeconds(work, op.op_class, *device, options))) {
      seconds[o] = time;
      estimate.source = CostSource::kAnalytic;
    }
    any_time |= estimate.source == CostSource::kMeasured ||
                estimate.source == CostSource::kProfiled;
  }
  if (device == nullptr && !any_time) {
    table.unit = std::string(kRelativeUnit);
    for (OpIndex o = 0; o < graph.num_ops(); ++o) {
      const double relative = graph.op(o).relative_cost;
      table.ops[o].source =
          Finite(relative) ? CostSource::kRelative : CostSource::kUnknown;
      table.ops[o].cost = Finite(relative) ? relative : 0;
    }
    return table;
  }
  table.unit = std::string(kSecondsUnit);
  double timed_seconds = 0, timed_relative = 0;
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    const double relative = graph.op(o).relative_cost;
    if (seconds[o] && Finite(relative) && relative > 0) {
      timed_seconds += *seconds[o];
      timed_relative += relative;
    }
  }
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    const double relative = graph.op(o).relative_cost;
    OpCostEstimate& estimate = table.ops[o];
    if (seconds[o]) {
      estimate.cost = *seconds[o];
    } else if (Finite(relative) && timed_relative > 0) {
      estimate.cost = relative * timed_seconds / timed_relative;
      estimate.source = CostSource::kRelative;
    } else {
      estimate.cost = 0;
      estimate.source = CostSource::kUnknown;
    }
  }
  return table;
}

std::string OpSignature(const Graph& graph, OpIndex o) {
  const Op& op = graph.op(o);
  auto describe = [&graph](std::string* out, TensorIndex t) {
    const Tensor& tensor = graph.tensor(t);
    if (HasKnownShape(tensor)) {
      absl::StrAppend(out, DTypeName(tensor.dtype), "[",
                      absl::StrJoin(tensor.shape, ","), "]");
    } else {
      absl::StrAppend(out, "bytes:", tensor.size_bytes);
    }
  };
  std::string signature =
      absl::StrCat(OpClassName(op.op_class), "|", op.op_type,
                   "|in=", absl::StrJoin(op.inputs, ";", describe),
                   "|out=", absl::StrJoin(op.outputs, ";", describe), "|");
  const char* separator = "";
  for (const auto& [key, value] : op.attributes) {  // sorted by key
    if (std::find(std::begin(kSignatureAttributes),
                  std::end(kSignatureAttributes),
                  key) != std::end(kSignatureAttributes)) {
      absl::StrAppend(&signature, separator, key, "=", value);
      separator = ";";
    }
  }
  return signature;
}

bool MeasuredTimeApplies(const Op& op, const DeviceSpec* device) {
  if (!Finite(op.measured_time_seconds)) return false;
  return device == nullptr ||
         (!op.measured_on.empty() &&
          absl::EqualsIgnoreCase(op.measured_on, device->name));
}

bool NeedsProfiling(const Graph& graph, OpIndex o, const DeviceSpec* device) {
  const Op& op = graph.op(o);
  if (MeasuredTimeApplies(op, device)) return false;
  switch (op.op_class) {
    case OpClass::kGemm:
      return InferGemmShape(graph, o).has_value();
    case OpClass::kConv:
      return InferConvShape(graph, o).has_value();
    case OpClass::kOther: {
      auto shaped = [&graph](TensorIndex t) {
        return HasKnownShape(graph.tensor(t));
      };
      return !(op.inputs.empty() && op.outputs.empty()) &&
             std::all_of(op.inputs.begin(), op.inputs.end(), shaped) &&
             std::all_of(op.outputs.begin(), op.outputs.end(), shaped);
    }
    default:
      return false;
  }
}

// ---------------------------------------------------------------- calibration

std::optional<CalibrationSample> MakeCalibrationSample(
    const Graph& graph, OpIndex op, const DeviceSpec& device,
    const CostModelOptions& options, double measured_seconds) {
  const OpWork work = EstimateOpWork(graph, op);
  const OpClass op_class = graph.op(op).op_class;
  std::optional<RooflineTerms> ideal =
      IdealTimes(work, op_class, device, options);
  if (!ideal || work.free || !Finite(measured_seconds)) return std::nullopt;
  return CalibrationSample{op_class, *ideal, measured_seconds};
}

EfficiencyFit FitEfficiencies(const std::vector<CalibrationSample>& samples,
                              const CostModelOptions& start) {
  std::array<std::vector<double>, kNumOpClasses> compute, memory;
  for (const CalibrationSample& sample : samples) {
    const double busy = sample.measured_seconds - start.launch_overhead_seconds;
    if (busy <= 0) continue;
    const ClassEfficiency& eff = start.efficiency(sample.op_class);
    const int c = static_cast<int>(sample.op_class);
    if (sample.ideal.compute_seconds / eff.compute >=
        sample.ideal.memory_seconds / eff.memory) {
      if (sample.ideal.compute_seconds > 0) {
        compute[c].push_back(sample.ideal.compute_seconds / busy);
      }
    } else if (sample.ideal.memory_seconds > 0) {
      memory[c].push_back(sample.ideal.memory_seconds / busy);
    }
  }
  auto median = [](std::vector<double>& values) {
    std::sort(values.begin(), values.end());
    const size_t mid = values.size() / 2;
    const double m = values.size() % 2 == 1
                         ? values[mid]
                         : (values[mid - 1] + values[mid]) / 2;
    return std::clamp(m, 0.01, 1.0);
  };
  EfficiencyFit fit{start, {}, {}};
  for (int c = 0; c < kNumOpClasses; ++c) {
    fit.compute_samples[c] = static_cast<int32_t>(compute[c].size());
    fit.memory_samples[c] = static_cast<int32_t>(memory[c].size());
    if (!compute[c].empty()) {
      fit.options.efficiency_by_class[c].compute = median(compute[c]);
    }
    if (!memory[c].empty()) {
      fit.options.efficiency_by_class[c].memory = median(memory[c]);
    }
  }
  return fit;
}

}  // namespace echo::planner
