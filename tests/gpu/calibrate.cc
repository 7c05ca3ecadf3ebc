// Calibration of the cost model on the local GPU: times a set of GEMMs,
// convolutions and memory-bound ops with the profiler, prints profiled vs
// analytic times, then the per-class efficiencies fitted from them and the
// error of the model before and after the fit.
//
//   echo_calibrate [--device=<catalog name>] [--csv=<path>]
//
// --device picks the spec for the analytic side when the GPU's name does not
// match a catalog entry. Without a GPU it says so and exits 0.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "planner/cost_model.h"
#include "planner/device_catalog.h"
#include "planner/text_format.h"
#include "server/profiler/gpu_backend.h"
#include "server/profiler/node_profiler.h"

namespace {

using echo::planner::OpClass;

struct Case {
  std::string label;
  std::string graph;  // planner text format; op 0 is measured
};

std::string Gemm(const char* dtype, int64_t m, int64_t n, int64_t k) {
  return absl::StrFormat(
      "tensor a %s[%d,%d] input\ntensor b %s[%d,%d] input\n"
      "op mm fwd gemm a b -> c:%s[%d,%d] type=aten::mm\n",
      dtype, m, k, dtype, k, n, dtype, m, n);
}

std::string Conv(const char* dtype, int64_t n, int64_t c, int64_t hw, int64_t k,
                 int64_t kernel, bool backward) {
  const int64_t out = hw - kernel + 1;
  std::string text = absl::StrFormat(
      "tensor x %s[%d,%d,%d,%d] input\ntensor w %s[%d,%d,%d,%d] parameter\n",
      dtype, n, c, hw, hw, dtype, k, c, kernel, kernel);
  if (!backward) {
    return text + absl::StrFormat(
                      "op conv fwd conv x w -> y:%s[%d,%d,%d,%d] "
                      "type=aten::convolution\n",
                      dtype, n, k, out, out);
  }
  return text + absl::StrFormat(
                    "tensor dy %s[%d,%d,%d,%d] input\n"
                    "op conv_bw bwd conv dy x w -> dx:%s[%d,%d,%d,%d] "
                    "dw:%s[%d,%d,%d,%d] type=aten::convolution_backward\n",
                    dtype, n, k, out, out, dtype, n, c, hw, hw, dtype, k, c,
                    kernel, kernel);
}

std::string Unary(const char* op_class, const char* type, const char* dtype,
                  int64_t rows, int64_t cols, bool reduce = false) {
  return absl::StrFormat(
      "tensor x %s[%d,%d] input\nop o fwd %s x -> y:%s[%d] type=%s\n", dtype,
      rows, cols, op_class, dtype, reduce ? cols : rows * cols, type);
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const char* dtype : {"f16", "bf16", "f32"}) {
    for (int64_t size : {256, 1024, 2048, 4096, 8192}) {
      cases.push_back({absl::StrFormat("gemm %s %d^3", dtype, size),
                       Gemm(dtype, size, size, size)});
    }
    cases.push_back({absl::StrFormat("gemm %s 16x4096x4096", dtype),
                     Gemm(dtype, 16, 4096, 4096)});
    cases.push_back({absl::StrFormat("gemm %s 8192x1024x4096", dtype),
                     Gemm(dtype, 8192, 1024, 4096)});
  }
  cases.push_back(
      {"bmm bf16 64x(512x64x512)",
       "tensor q bf16[64,512,64] input\ntensor k bf16[64,64,512] input\n"
       "op bmm fwd gemm q k -> s:bf16[64,512,512] type=aten::bmm\n"});
  for (const char* dtype : {"f16", "f32"}) {
    cases.push_back({absl::StrFormat("conv %s 3x3 64->64 @56 b32", dtype),
                     Conv(dtype, 32, 64, 56, 64, 3, false)});
    cases.push_back({absl::StrFormat("conv %s 3x3 256->256 @14 b32", dtype),
                     Conv(dtype, 32, 256, 14, 256, 3, false)});
    cases.push_back({absl::StrFormat("conv %s 1x1 256->64 @56 b32", dtype),
                     Conv(dtype, 32, 256, 56, 64, 1, false)});
    cases.push_back({absl::StrFormat("conv_bw %s 3x3 64->64 @56 b32", dtype),
                     Conv(dtype, 32, 64, 56, 64, 3, true)});
  }
  for (int shift : {10, 16, 20, 24, 26}) {
    const int64_t n = int64_t{1} << shift;
    cases.push_back(
        {absl::StrFormat("add f32 2^%d", shift),
         absl::StrFormat(
             "tensor a f32[%d] input\ntensor b f32[%d] input\n"
             "op add fwd elementwise a b -> c:f32[%d] type=aten::add\n",
             n, n, n)});
  }
  cases.push_back(
      {"relu f16 2^24", Unary("elementwise", "aten::relu", "f16", 4096, 4096)});
  cases.push_back({"softmax f32 4096x1024",
                   Unary("softmax", "aten::_softmax", "f32", 4096, 1024)});
  cases.push_back({"softmax f16 256x32000",
                   Unary("softmax", "aten::_softmax", "f16", 256, 32000)});
  cases.push_back({"layer_norm f32 8192x1024",
                   Unary("norm", "aten::layer_norm", "f32", 8192, 1024)});
  cases.push_back({"sum f32 8192x4096 -> 4096",
                   Unary("reduction", "aten::sum", "f32", 8192, 4096, true)});
  return cases;
}

double MedianAbsLogError(const std::vector<double>& predicted,
                         const std::vector<double>& measured) {
  std::vector<double> errors;
  for (size_t i = 0; i < predicted.size(); ++i) {
    errors.push_back(std::fabs(std::log(predicted[i] / measured[i])));
  }
  if (errors.empty()) return 0;
  std::nth_element(errors.begin(), errors.begin() + errors.size() / 2,
                   errors.end());
  return std::exp(errors[errors.size() / 2]) - 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_name, csv_path;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--device=")) device_name = std::string(arg);
    if (absl::ConsumePrefix(&arg, "--csv=")) csv_path = std::string(arg);
  }
  echo::server::NodeProfilerOptions options;
  options.enable_profiling = true;
  options.memory_fraction = 0.5;
  options.max_seconds_per_request = 120;
  auto profiler = echo::server::NodeProfiler::Create(options, nullptr);
  if (!profiler.ok()) {
    std::fprintf(stderr, "%s\n", profiler.status().ToString().c_str());
    return 1;
  }
  const echo::server::GpuDiscovery& discovery = (*profiler)->discovery();
  if (discovery.gpus.empty()) {
    std::printf("%s: nothing to calibrate\n", discovery.status.c_str());
    return 0;
  }
  std::optional<echo::planner::DeviceSpec> device = (*profiler)->local_device();
  if (!device_name.empty()) {
    auto found = echo::planner::FindCatalogDevice(device_name);
    if (!found.ok()) {
      std::fprintf(stderr, "%s\n", found.status().ToString().c_str());
      return 1;
    }
    device = *found;
  }
  if (!device) {
    std::fprintf(stderr, "GPU '%s' is not in the catalog; pass --device=\n",
                 discovery.gpus[0].name.c_str());
    return 1;
  }
  std::printf(
      "GPU %s (cc %s), driver %s, cudart %s, cublas %s, cudnn %s; "
      "analytic device %s\n\n",
      discovery.gpus[0].name.c_str(),
      discovery.gpus[0].compute_capability.c_str(),
      discovery.driver_version.c_str(), discovery.cuda_runtime_version.c_str(),
      discovery.cublas_version.c_str(), discovery.cudnn_version.c_str(),
      device->name.c_str());
  std::ofstream csv;
  if (!csv_path.empty()) {
    csv.open(csv_path);
    csv << "case,class,flops,bytes,profiled_seconds,analytic_seconds\n";
  }
  const echo::planner::CostModelOptions defaults;
  std::printf("%-32s %-12s %12s %12s %8s %10s %10s\n", "case", "class",
              "profiled_us", "analytic_us", "a/p", "TFLOP/s", "GB/s");
  std::vector<echo::planner::CalibrationSample> samples;
  std::vector<std::pair<echo::planner::Graph, double>> measured;
  for (const Case& c : Cases()) {
    auto graph = echo::planner::ParseTextGraph(c.graph);
    if (!graph.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.label.c_str(),
                   graph.status().ToString().c_str());
      return 1;
    }
    const echo::planner::OpIndex op = graph->num_ops() - 1;
    absl::StatusOr<echo::planner::ProfileReport> report =
        (*profiler)->ProfileOps(*graph, {op}, true);
    if (!report.ok() || !report->profiles[0].measured) {
      std::printf("%-32s not measured: %s\n", c.label.c_str(),
                  report.ok() ? report->profiles[0].reason.c_str()
                              : report.status().ToString().c_str());
      continue;
    }
    const double profiled = report->profiles[0].time_seconds;
    const double analytic =
        echo::planner::AnalyticSeconds(*graph, op, *device, defaults)
            .value_or(0);
    const echo::planner::OpWork work =
        echo::planner::EstimateOpWork(*graph, op);
    const OpClass op_class = graph->op(op).op_class;
    std::printf(
        "%-32s %-12s %12.2f %12.2f %8.2f %10.1f %10.0f\n", c.label.c_str(),
        std::string(echo::planner::OpClassName(op_class)).c_str(),
        profiled * 1e6, analytic * 1e6, analytic / profiled,
        work.flops / profiled / 1e12, work.bytes_moved / profiled / 1e9);
    if (csv.is_open()) {
      csv << c.label << "," << echo::planner::OpClassName(op_class) << ","
          << work.flops << "," << work.bytes_moved << "," << profiled << ","
          << analytic << "\n";
    }
    if (auto sample = echo::planner::MakeCalibrationSample(
            *graph, op, *device, defaults, profiled)) {
      samples.push_back(*sample);
    }
    measured.emplace_back(*std::move(graph), profiled);
  }
  const echo::planner::EfficiencyFit fit =
      echo::planner::FitEfficiencies(samples, defaults);
  std::printf("\n%-14s %22s %22s\n", "class", "compute eff (n)",
              "memory eff (n)");
  for (int c = 0; c < echo::planner::kNumOpClasses; ++c) {
    if (fit.compute_samples[c] + fit.memory_samples[c] == 0) continue;
    const auto& before = defaults.efficiency_by_class[c];
    const auto& after = fit.options.efficiency_by_class[c];
    std::printf("%-14s %8.3f -> %6.3f (%2d) %8.3f -> %6.3f (%2d)\n",
                std::string(echo::planner::OpClassName(static_cast<OpClass>(c)))
                    .c_str(),
                before.compute, after.compute, fit.compute_samples[c],
                before.memory, after.memory, fit.memory_samples[c]);
  }
  std::vector<double> before, after, truth;
  for (const auto& [graph, seconds] : measured) {
    const echo::planner::OpIndex op = graph.num_ops() - 1;
    before.push_back(
        echo::planner::AnalyticSeconds(graph, op, *device, defaults)
            .value_or(seconds));
    after.push_back(
        echo::planner::AnalyticSeconds(graph, op, *device, fit.options)
            .value_or(seconds));
    truth.push_back(seconds);
  }
  std::printf(
      "\nmedian |analytic/profiled - 1|: %.1f%% with defaults, %.1f%% "
      "after the fit (%zu ops)\n",
      100 * MedianAbsLogError(before, truth),
      100 * MedianAbsLogError(after, truth), truth.size());
  return 0;
}
