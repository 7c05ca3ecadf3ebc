// CheckFit latency in process on captured graphs (e.g. the layer-depth
// benchmark's, tests/python/layer_depth_bench.py --cache-dir), each answer
// beside the same graph's plain simulation (NONE) timed in the same run, so
// that the ratio holds on a noisy machine. Prints a markdown table; not a
// test.
//
//   echo_fit_bench --graphs=a.pb,b.binpb [--devices=v100-32gb,a100-80gb]
//                  [--ratios=0.05,0.2] [--chunking=auto|off] [--repeats=3]
//                  [--reserved_bytes=N] [--plans]
//
// --reserved_bytes unset: each device's default reserve. --plans: also an
// AUTO plan at each ratio (GenerateRecomputePlan, lowest peak within the
// overhead budget, as the hook asks) per device, in a second table.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench_flags.h"
#include "planner/byte_size.h"
#include "planner/compose/plan_composer.h"
#include "planner/cost_model.h"
#include "planner/device_catalog.h"
#include "planner/memory_simulator.h"
#include "planner/schedule/fit_check.h"

namespace echo::bench {
namespace {

std::string Flag(const std::map<std::string, std::string>& flags,
                 const std::string& name, const std::string& fallback) {
  auto it = flags.find(name);
  return it == flags.end() ? fallback : it->second;
}

// The median of `repeats` timings of `work`, in milliseconds.
double MedianMs(int repeats, const std::function<void()>& work) {
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    work();
    ms.push_back(std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int Run(const std::map<std::string, std::string>& flags) {
  const std::vector<std::string> paths =
      absl::StrSplit(Flag(flags, "graphs", ""), ',', absl::SkipEmpty());
  if (paths.empty()) {
    std::fprintf(stderr, "usage: echo_fit_bench --graphs=a.pb,... [--flags]\n");
    return 2;
  }
  const std::vector<std::string> devices =
      absl::StrSplit(Flag(flags, "devices", "v100-32gb,a100-80gb"), ',');
  std::vector<double> ratios;
  for (absl::string_view r :
       absl::StrSplit(Flag(flags, "ratios", "0.05,0.2"), ',')) {
    double ratio = 0;
    if (!absl::SimpleAtod(r, &ratio)) {
      std::fprintf(stderr, "--ratios: not a number: %s\n",
                   std::string(r).c_str());
      return 2;
    }
    ratios.push_back(ratio);
  }
  int repeats = 3;
  if (!absl::SimpleAtoi(Flag(flags, "repeats", "3"), &repeats) || repeats < 1) {
    std::fprintf(stderr, "--repeats must be a positive integer\n");
    return 2;
  }
  std::optional<int64_t> reserved;
  if (flags.count("reserved_bytes")) {
    int64_t bytes = 0;
    if (!absl::SimpleAtoi(flags.at("reserved_bytes"), &bytes)) return 2;
    reserved = bytes;
  }
  const bool chunking = Flag(flags, "chunking", "auto") != "off";
  std::vector<std::string> plan_rows;
  std::printf(
      "| graph | ops | device | ratio | answer | plain -> planned peak | extra "
      "compute | CheckFit ms | NONE ms | ratio to NONE |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& path : paths) {
    const std::optional<planner::Graph> graph = LoadGraphOrReport(path);
    if (!graph.has_value()) return 1;
    const std::string name = path.substr(path.find_last_of('/') + 1);
    const double none_ms =
        MedianMs(repeats, [&] { planner::SimulatePlain(*graph); });
    for (const std::string& device_name : devices) {
      absl::StatusOr<planner::DeviceSpec> device =
          planner::FindCatalogDevice(device_name);
      if (!device.ok()) {
        std::fprintf(stderr, "%s\n", device.status().ToString().c_str());
        return 1;
      }
      const std::optional<std::vector<double>> priced =
          PriceOrReport(path, *graph, *device);
      if (!priced.has_value()) return 1;
      const std::vector<double>& costs = *priced;
      for (double ratio : ratios) {
        planner::FitOptions options;
        options.device_memory_bytes = device->memory_bytes;
        options.reserved_bytes = reserved;
        options.max_overhead_ratio = ratio;
        options.chunking.enabled = chunking;
        // As echod prices chunk launches.
        options.chunking.launch_cost =
            planner::CostModelOptions().launch_overhead_seconds;
        absl::StatusOr<planner::FitResult> fit;
        const double fit_ms = MedianMs(
            repeats, [&] { fit = planner::CheckFit(*graph, costs, options); });
        if (!fit.ok()) {
          std::fprintf(stderr, "%s: %s\n", path.c_str(),
                       fit.status().ToString().c_str());
          return 1;
        }
        std::printf(
            "| %s | %d | %s | %.2f | %s | %s -> %s | %.2f%% | %.0f | %.1f | "
            "%.1fx |\n",
            name.c_str(), graph->num_ops(), device_name.c_str(), ratio,
            fit->fits_without_recompute ? "fits plain"
            : fit->fits                 ? "fits"
                                        : "no",
            planner::HumanBytes(fit->baseline_peak_bytes).c_str(),
            planner::HumanBytes(fit->planned_peak_bytes).c_str(),
            100 * fit->recompute_overhead_ratio, fit_ms, none_ms,
            fit_ms / none_ms);
        std::fflush(stdout);
        if (!flags.count("plans")) continue;
        planner::RecomputePlanOptions plan_options;
        plan_options.max_overhead_ratio = ratio;
        plan_options.chunking.enabled = chunking;
        plan_options.chunking.launch_cost =
            planner::CostModelOptions().launch_overhead_seconds;
        absl::StatusOr<planner::RecomputePlan> plan;
        const double plan_ms = MedianMs(repeats, [&] {
          plan = planner::GenerateRecomputePlan(*graph, costs, plan_options);
        });
        if (!plan.ok()) {
          std::fprintf(stderr, "%s: %s\n", path.c_str(),
                       plan.status().ToString().c_str());
          return 1;
        }
        plan_rows.push_back(absl::StrFormat(
            "| %s | %d | %s | %.2f | %s -> %s | %.2f%% | %d | %.0f | %.1f | "
            "%.1fx |",
            name, graph->num_ops(), device_name, ratio,
            planner::HumanBytes(plan->baseline_peak_bytes),
            planner::HumanBytes(plan->planned_peak_bytes),
            100 * plan->recompute_overhead_ratio,
            plan->chunked_regions.empty() ? 0 : plan->chunked_regions[0].chunks,
            plan_ms, none_ms, plan_ms / none_ms));
      }
    }
  }
  if (!plan_rows.empty()) {
    std::printf(
        "\n| graph | ops | device | ratio | plain -> planned peak | extra "
        "compute | chunks | AUTO plan ms | NONE ms | ratio to NONE |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n");
    for (const std::string& row : plan_rows) std::printf("%s\n", row.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace echo::bench

int main(int argc, char** argv) {
  return echo::bench::Run(echo::bench::ParseFlags(argc, argv, 1));
}
