// echoctl fit, max-batch and frontier: the scheduler's questions (exit 3
// when the graph fits on no device, or no batch fits).
#include <iostream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/echoctl_commands.h"
#include "client/echoctl_commands_internal.h"
#include "planner/byte_size.h"

namespace echo::client {

int RunFit(PlannerClient& client, const EchoctlFlags& flags) {
  v1::CheckFitRequest& request = KeptUntilExit<v1::CheckFitRequest>();
  if (!SetGraph(flags, &request)) return 1;
  request.set_include_max_batch(flags.include_max_batch);
  request.set_chunking(ChunkingModeOf(flags));
  if (flags.devices.empty()) {
    request.mutable_device()->set_name(flags.device);
  } else {
    for (absl::string_view name : absl::StrSplit(flags.devices, ',')) {
      request.add_device_names(std::string(absl::StripAsciiWhitespace(name)));
    }
  }
  if (flags.reserved_bytes) request.set_reserved_bytes(*flags.reserved_bytes);
  request.mutable_allocator()->set_rounding_bytes(
      flags.allocator_rounding_bytes);
  if (flags.max_overhead_ratio) {
    request.set_max_overhead_ratio(*flags.max_overhead_ratio);
  }
  absl::StatusOr<v1::CheckFitResponse> response = client.CheckFit(request);
  if (!response.ok()) return RpcError(response.status());
  if (flags.json_output) {
    PrintJson(*response);
  } else if (flags.devices.empty()) {
    std::cout << (response->fits() ? "fits" : "does not fit") << ": "
              << response->message() << "\n";
    if (response->devices_size() == 1 &&
        response->devices(0).has_max_batch_size()) {
      std::cout << "largest batch: " << response->devices(0).max_batch_size()
                << "\n";
    }
  } else {
    std::cout << absl::StrFormat("%-14s %10s %10s %-22s %10s %10s %9s %9s\n",
                                 "device", "memory", "reserved", "answer",
                                 "peak", "planned", "overhead", "max_batch");
    for (const v1::DeviceFit& fit : response->devices()) {
      const char* answer = fit.fits_without_recompute() ? "fits"
                           : fit.fits()                 ? "fits with recompute"
                                                        : "does not fit";
      std::cout << absl::StrFormat(
          "%-14s %10s %10s %-22s %10s %10s %8.2f%% %9s\n", fit.device_name(),
          planner::HumanBytes(fit.device_memory_bytes()),
          planner::HumanBytes(fit.reserved_bytes()), answer,
          planner::HumanBytes(fit.baseline_peak_bytes()),
          planner::HumanBytes(fit.planned_peak_bytes()),
          100 * fit.recompute_overhead_ratio(),
          fit.has_max_batch_size() ? std::to_string(fit.max_batch_size())
                                   : "-");
    }
    std::cout << response->message() << "\n";
  }
  if (!flags.json_output) {
    std::cout << "iteration: " << response->iteration() << "\n";
  }
  return response->fits() ? 0 : 3;
}

namespace {

std::string DescribeBatchFit(const v1::BatchSizeFit& fit) {
  if (!fit.found()) return "none fits";
  return absl::StrFormat("batch %d, peak %s, %.2f%% extra compute",
                         fit.batch_size(),
                         planner::HumanBytes(fit.peak_bytes()),
                         100 * fit.recompute_overhead_ratio());
}

}  // namespace

int RunMaxBatch(PlannerClient& client, const EchoctlFlags& flags) {
  v1::FindMaxBatchSizeRequest& request =
      KeptUntilExit<v1::FindMaxBatchSizeRequest>();
  if (!SetGraph(flags, &request)) return 1;
  request.mutable_device()->set_name(flags.device);
  request.mutable_allocator()->set_rounding_bytes(
      flags.allocator_rounding_bytes);
  if (flags.max_overhead_ratio) {
    request.set_max_overhead_ratio(*flags.max_overhead_ratio);
  }
  if (flags.reserved_bytes) request.set_reserved_bytes(*flags.reserved_bytes);
  request.set_min_batch_size(flags.min_batch);
  request.set_max_batch_size(flags.max_batch);
  request.set_multiple_of(flags.multiple_of);
  request.set_chunking(ChunkingModeOf(flags));
  absl::StatusOr<v1::FindMaxBatchSizeResponse> response =
      client.FindMaxBatchSize(request);
  if (!response.ok()) return RpcError(response.status());
  if (flags.json_output) {
    PrintJson(*response);
  } else {
    std::cout << absl::StrFormat(
        "graph at batch %d on %s (%s usable):\n"
        "  without recomputation: %s\n"
        "  with recomputation:    %s\n"
        "  (%d plans in %.1f ms)\n"
        "iteration: %s\n",
        response->graph_batch_size(), flags.device,
        planner::HumanBytes(response->usable_bytes()),
        DescribeBatchFit(response->without_recompute()),
        DescribeBatchFit(response->with_recompute()),
        response->plans_evaluated(), 1e3 * response->solve_time_seconds(),
        response->iteration());
  }
  return response->with_recompute().found() ? 0 : 3;
}

int RunFrontier(PlannerClient& client, const EchoctlFlags& flags) {
  v1::GetMemoryFrontierRequest& request =
      KeptUntilExit<v1::GetMemoryFrontierRequest>();
  if (!SetGraph(flags, &request)) return 1;
  FillFrontierRequest(flags, &request);
  absl::StatusOr<v1::GetMemoryFrontierResponse> response =
      client.GetMemoryFrontier(request);
  if (!response.ok()) return RpcError(response.status());
  if (flags.json_output) {
    PrintJson(*response);
    return 0;
  }
  std::cout << absl::StrFormat(
      "plain peak %s, lower bound %s; %d Pareto points from %d plans in "
      "%.1f ms%s\n",
      planner::HumanBytes(response->baseline_peak_bytes()),
      planner::HumanBytes(response->peak_lower_bound_bytes()),
      response->points_size(), response->plans_evaluated(),
      1e3 * response->solve_time_seconds(),
      response->truncated() ? " (time budget reached: sweep cut short)" : "");
  std::cout << absl::StrFormat("  %12s %14s %10s %20s  %s\n", "peak",
                               "extra compute", "recomputes",
                               "memory_limit_bytes", "plan");
  for (const v1::FrontierPoint& point : response->points()) {
    std::cout << absl::StrFormat(
        "  %12s %13.2f%% %10d %20d  %s\n",
        planner::HumanBytes(point.peak_bytes()),
        100 * point.recompute_overhead_ratio(), point.recompute_count(),
        point.memory_limit_bytes(), point.plan_fingerprint());
  }
  return 0;
}

}  // namespace echo::client
