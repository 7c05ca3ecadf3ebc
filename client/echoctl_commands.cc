// The commands' shared helpers, and health, register, estimate, plan, profile
// and node-info (fit, max-batch, frontier: echoctl_fit_commands.cc).
#include "client/echoctl_commands.h"

#include <algorithm>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "adapter/graph_convert.h"
#include "adapter/graph_file.h"
#include "client/echoctl_commands_internal.h"
#include "google/protobuf/util/json_util.h"
#include "planner/byte_size.h"

namespace echo::client {

int RpcError(const absl::Status& status) {
  std::string code = absl::StatusCodeToString(status.code());
  for (char& c : code) c = c == ' ' ? '_' : absl::ascii_toupper(c);
  std::cerr << "echoctl: " << code << ": " << status.message() << "\n";
  return 1;
}

bool LoadGraph(const EchoctlFlags& flags, v1::Graph* graph) {
  absl::StatusOr<adapter::GraphFormat> format =
      adapter::ParseGraphFormat(flags.format);
  absl::StatusOr<v1::Graph> loaded =
      format.ok() ? adapter::LoadGraphFile(flags.graph, *format,
                                           flags.checkmate_batch_size)
                  : absl::StatusOr<v1::Graph>(format.status());
  if (!loaded.ok()) {
    std::cerr << "echoctl: " << loaded.status().message() << "\n";
    return false;
  }
  *graph = *std::move(loaded);
  if (!flags.optimizer.empty()) {
    absl::StatusOr<v1::OptimizerSpec> optimizer =
        adapter::OptimizerSpecFromNames(flags.optimizer,
                                        flags.optimizer_state_dtype,
                                        flags.optimizer_implementation);
    if (!optimizer.ok()) {
      std::cerr << "echoctl: --optimizer: " << optimizer.status().message()
                << "\n";
      return false;
    }
    optimizer->set_holds_gradients(flags.accumulation_steps > 1);
    optimizer->set_update_in_backward(flags.update_in_backward);
    *graph->mutable_optimizer() = *std::move(optimizer);
  } else if (flags.accumulation_steps > 1 || flags.update_in_backward) {
    std::cerr << "echoctl: --accumulation_steps and --update_in_backward need "
                 "--optimizer (the step they concern)\n";
    return false;
  }
  return true;
}

void PrintJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  std::cout << json;
}

namespace {

template <typename Request>
std::string GraphLabel(const Request& request) {
  return request.graph_fingerprint().empty()
             ? request.graph().name()
             : "fingerprint " + request.graph_fingerprint();
}

// A cost in its unit: seconds scaled to s/ms/us, other units as numbers.
std::string FormatCost(double cost, const std::string& unit) {
  if (unit != "seconds") return absl::StrFormat("%.4g %s", cost, unit);
  if (cost >= 1 || cost == 0) return absl::StrFormat("%.3f s", cost);
  if (cost >= 1e-3) return absl::StrFormat("%.3f ms", cost * 1e3);
  return absl::StrFormat("%.3f us", cost * 1e6);
}

// The first few names of a list, then how many more.
std::string FirstNames(
    const google::protobuf::RepeatedPtrField<std::string>& names) {
  constexpr int kShown = 6;
  std::vector<std::string> shown(
      names.begin(), names.begin() + std::min(kShown, names.size()));
  std::string list = absl::StrJoin(shown, ", ");
  if (names.size() > kShown) {
    absl::StrAppend(&list, " and ", names.size() - kShown, " more");
  }
  return list;
}

std::string Percent(double part, double whole) {
  return whole > 0 ? absl::StrFormat("%.2f%%", 100 * part / whole) : "n/a";
}

void PrintBreakdown(const v1::MemoryBreakdown& b) {
  const std::pair<const char*, int64_t> rows[] = {
      {"parameters", b.parameter_bytes()},
      {"optimizer state", b.optimizer_state_bytes()},
      {"gradients", b.gradient_bytes()},
      {"inputs", b.input_bytes()},
      {"stashed activations", b.stashed_activation_bytes()},
      {"transient", b.transient_bytes()},
      {"workspace", b.workspace_bytes()},
  };
  for (const auto& [name, bytes] : rows) {
    std::cout << absl::StrFormat("  %-20s %16d bytes  %12s\n", name, bytes,
                                 planner::HumanBytes(bytes));
  }
}

}  // namespace

int RunHealth(PlannerClient& client) {
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> status =
      client.Health("");
  if (!status.ok()) return RpcError(status.status());
  const std::string name =
      grpc::health::v1::HealthCheckResponse::ServingStatus_Name(*status);
  std::cout << name << "\n";
  return *status == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

int RunRegister(PlannerClient& client, const EchoctlFlags& flags) {
  v1::RegisterGraphRequest& request = KeptUntilExit<v1::RegisterGraphRequest>();
  if (!LoadGraph(flags, request.mutable_graph())) return 1;
  absl::StatusOr<v1::RegisterGraphResponse> response =
      client.RegisterGraph(request);
  if (!response.ok()) return RpcError(response.status());
  if (flags.json_output) {
    PrintJson(*response);
    return 0;
  }
  // The fingerprint alone on stdout, for scripts: FP=$(echoctl register ...).
  std::cout << response->graph_fingerprint() << "\n";
  std::cerr << absl::StrFormat(
      "%s graph '%s': %d ops, %d tensors, %s in the registry\n",
      response->newly_registered() ? "registered" : "already registered",
      request.graph().name(), response->op_count(), response->tensor_count(),
      planner::HumanBytes(response->charged_bytes()));
  return 0;
}

void FillEstimateRequest(const EchoctlFlags& flags,
                         v1::EstimateMemoryRequest* request) {
  if (!flags.device.empty()) request->mutable_device()->set_name(flags.device);
  request->mutable_allocator()->set_rounding_bytes(
      flags.allocator_rounding_bytes);
  request->set_max_live_tensors(flags.live_tensors);
}

v1::ChunkingMode ChunkingModeOf(const EchoctlFlags& flags) {
  return flags.chunking == "off" ? v1::CHUNKING_MODE_OFF
                                 : v1::CHUNKING_MODE_AUTO;
}

void FillPlanRequest(const EchoctlFlags& flags,
                     v1::GenerateRecomputePlanRequest* request) {
  request->set_policy(flags.policy);
  request->set_objective(flags.objective);
  if (flags.memory_limit_bytes) {
    request->set_memory_limit_bytes(*flags.memory_limit_bytes);
  }
  if (flags.max_overhead_ratio) {
    request->set_max_overhead_ratio(*flags.max_overhead_ratio);
  }
  if (!flags.device.empty()) request->mutable_device()->set_name(flags.device);
  request->mutable_allocator()->set_rounding_bytes(
      flags.allocator_rounding_bytes);
  request->set_solver_time_limit_seconds(flags.solver_time_limit_seconds);
  request->set_chunking(ChunkingModeOf(flags));
}

void FillFrontierRequest(const EchoctlFlags& flags,
                         v1::GetMemoryFrontierRequest* request) {
  if (!flags.device.empty()) request->mutable_device()->set_name(flags.device);
  request->mutable_allocator()->set_rounding_bytes(
      flags.allocator_rounding_bytes);
  request->set_max_points(flags.max_points);
  request->set_chunking(ChunkingModeOf(flags));
}

int RunEstimate(PlannerClient& client, const EchoctlFlags& flags) {
  v1::EstimateMemoryRequest& request =
      KeptUntilExit<v1::EstimateMemoryRequest>();
  if (!SetGraph(flags, &request)) return 1;
  FillEstimateRequest(flags, &request);
  absl::StatusOr<v1::EstimateMemoryResponse> response =
      client.EstimateMemory(request);
  if (!response.ok()) return RpcError(response.status());
  if (flags.json_output) {
    PrintJson(*response);
    return 0;
  }
  std::cout << "graph: " << GraphLabel(request) << " (" << response->op_count()
            << " ops, " << response->tensor_count() << " tensors)\n";
  std::cout << "iteration: " << response->iteration() << "\n";
  std::cout << "peak: " << response->peak_bytes() << " bytes ("
            << planner::HumanBytes(response->peak_bytes()) << ") at step "
            << response->peak_step() << " (op '" << response->peak_op_id()
            << "')\n";
  if (response->compute_time_seconds() > 0) {
    std::cout << absl::StrFormat("compute time on %s: %.6f s\n",
                                 request.device().name(),
                                 response->compute_time_seconds());
  }
  std::cout << "breakdown at the peak:\n";
  PrintBreakdown(response->breakdown());
  if (response->live_at_peak_size() > 0) {
    std::cout << "largest tensors live at the peak:\n";
    for (const v1::LiveTensor& live : response->live_at_peak()) {
      std::cout << absl::StrFormat(
          "  %-24s %16d bytes  %-16s from op '%s'\n", live.tensor_id(),
          live.size_bytes(),
          absl::AsciiStrToLower(v1::TensorRole_Name(live.role()).substr(12)),
          live.producer_op_id());
    }
  }
  return 0;
}

int RunPlan(PlannerClient& client, const EchoctlFlags& flags) {
  v1::GenerateRecomputePlanRequest& request =
      KeptUntilExit<v1::GenerateRecomputePlanRequest>();
  if (!SetGraph(flags, &request)) return 1;
  FillPlanRequest(flags, &request);
  absl::StatusOr<v1::GenerateRecomputePlanResponse> response =
      client.GenerateRecomputePlan(request);
  if (!response.ok()) return RpcError(response.status());
  const v1::GenerateRecomputePlanResponse& plan =
      KeptUntilExit(*std::move(response));
  if (flags.json_output) {
    PrintJson(plan);
    return 0;
  }
  int recomputes = 0;
  for (const v1::Execution& e : plan.schedule()) recomputes += e.recompute();
  std::cout << "policy: "
            << absl::AsciiStrToLower(
                   v1::RecomputePolicy_Name(plan.policy()).substr(17))
            << (plan.feasible() ? "" : "  (INFEASIBLE: budget not met)")
            << "\n";
  std::cout << "iteration: " << plan.iteration() << "\n";
  std::cout << absl::StrFormat(
      "peak: %d -> %d bytes (%s -> %s, %.2fx smaller)\n",
      plan.baseline_peak_bytes(), plan.planned_peak_bytes(),
      planner::HumanBytes(plan.baseline_peak_bytes()),
      planner::HumanBytes(plan.planned_peak_bytes()),
      plan.planned_peak_bytes() > 0
          ? static_cast<double>(plan.baseline_peak_bytes()) /
                plan.planned_peak_bytes()
          : 0.0);
  std::cout << absl::StrFormat(
      "extra compute: %s of %s (%s), %d recomputations\n",
      FormatCost(plan.recompute_cost(), plan.cost_unit()),
      FormatCost(plan.baseline_compute_cost(), plan.cost_unit()),
      Percent(plan.recompute_cost(), plan.baseline_compute_cost()), recomputes);
  std::cout << "lower bound on any plan's peak: "
            << plan.peak_lower_bound_bytes() << " bytes\n";
  if (plan.stash_lower_bound_bytes() > 0) {
    std::cout << "lower bound on the stash of any plan within the budget: "
              << plan.stash_lower_bound_bytes() << " bytes\n";
  }
  std::cout << absl::StrFormat(
      "stashed tensors: %d (%s), regions: %d, solved in %.3f ms",
      plan.stash_tensor_ids_size(), planner::HumanBytes(plan.stash_bytes()),
      plan.regions_size(), plan.solve_time_seconds() * 1e3);
  if (!plan.solver_status().empty()) {
    std::cout << " (" << plan.solver_status() << ")";
  }
  std::cout << "\n";
  // Regions come largest saving first.
  for (const v1::RecomputeRegion& region : plan.regions()) {
    const std::string saving =
        region.bytes_saved_at_peak() == 0 &&
                region.peak_rise_if_dropped_bytes() > 0
            ? absl::StrCat(
                  "keeps the peak ",
                  planner::HumanBytes(region.peak_rise_if_dropped_bytes()),
                  " lower")
            : absl::StrCat("saves ",
                           planner::HumanBytes(region.bytes_saved_at_peak()),
                           " at the peak");
    std::cout << absl::StrFormat(
        "  %s for %s (%s): recompute %s from [%s]\n", saving,
        FormatCost(region.recompute_cost(), plan.cost_unit()),
        Percent(region.recompute_cost(), plan.baseline_compute_cost()),
        FirstNames(region.op_names().empty() ? region.op_ids()
                                             : region.op_names()),
        FirstNames(region.source_tensor_ids()));
  }
  for (const v1::ChunkedRegion& region : plan.chunked_regions()) {
    std::cout << absl::StrFormat(
        "  chunked: %s (%d ops) for %s (%s)\n", region.explanation(),
        region.forward_op_ids_size() + region.backward_op_ids_size(),
        FormatCost(region.extra_cost(), plan.cost_unit()),
        Percent(region.extra_cost(), plan.baseline_compute_cost()));
  }
  for (const std::string& note : plan.chunking_notes()) {
    std::cout << "  not chunked: " << note << "\n";
  }
  if (!plan.message().empty()) std::cout << plan.message() << "\n";
  return 0;
}

int RunProfile(PlannerClient& client, const EchoctlFlags& flags) {
  v1::ProfileOpsRequest request;
  if (!SetGraph(flags, &request)) return 1;
  request.set_force(flags.force);
  absl::StatusOr<v1::ProfileOpsResponse> response = client.ProfileOps(request);
  if (!response.ok()) return RpcError(response.status());
  if (flags.json_output) {
    PrintJson(*response);
    return 0;
  }
  std::cout << "GPU: " << response->gpu_name() << "\n";
  for (const v1::OpProfile& p : response->profiles()) {
    if (p.measured()) {
      std::cout << absl::StrFormat("  %-24s %12.3f us%s (analytic %.3f us)\n",
                                   p.op_id(), p.time_seconds() * 1e6,
                                   p.from_cache() ? " (cached)" : "",
                                   p.analytic_time_seconds() * 1e6);
    } else {
      std::cout << absl::StrFormat("  %-24s not measured: %s\n", p.op_id(),
                                   p.reason());
    }
  }
  return 0;
}

int RunNodeInfo(PlannerClient& client, const EchoctlFlags& flags) {
  absl::StatusOr<v1::GetNodeInfoResponse> response = client.GetNodeInfo();
  if (!response.ok()) return RpcError(response.status());
  if (flags.json_output) {
    PrintJson(*response);
    return 0;
  }
  const v1::GetNodeInfoResponse& info = *response;
  std::cout << "host: " << info.hostname() << "\n";
  std::cout << "echod: " << info.server_version() << "\n";
  std::cout << "GPUs: " << info.gpu_status() << "\n";
  for (const v1::GpuInfo& gpu : info.gpus()) {
    std::cout << absl::StrFormat("  [%d] %s, %s, %d SMs, sm_%s\n", gpu.index(),
                                 gpu.name(),
                                 planner::HumanBytes(gpu.memory_bytes()),
                                 gpu.sm_count(), gpu.compute_capability());
  }
  if (!info.driver_version().empty()) {
    std::cout << "driver " << info.driver_version() << ", CUDA runtime "
              << info.cuda_runtime_version() << ", cuBLAS "
              << info.cublas_version() << ", cuDNN " << info.cudnn_version()
              << "\n";
  }
  std::cout << "profiling: "
            << (info.profiling_enabled() ? "enabled" : "disabled")
            << ", profile cache entries: " << info.profile_cache_entries()
            << "\n";
  std::cout << "workers: " << info.worker_threads() << ", memory limit: "
            << (info.memory_limit_bytes() > 0
                    ? planner::HumanBytes(info.memory_limit_bytes())
                    : std::string("none"))
            << ", for requests: "
            << planner::HumanBytes(info.request_memory_bytes()) << "\n";
  std::cout << "policy OPTIMAL: "
            << (info.optimal_unavailable_reason().empty()
                    ? std::string("available")
                    : "unavailable: " + info.optimal_unavailable_reason())
            << "\n";
  std::cout << "device catalog:";
  for (const v1::DeviceSpec& device : info.device_catalog()) {
    std::cout << " " << device.name();
  }
  std::cout << "\n";
  return 0;
}

}  // namespace echo::client
