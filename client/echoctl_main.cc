// echoctl: command-line client of echod, for people and schedulers.
//
//   echoctl [--server ADDR] health
//   echoctl estimate --graph G [--device NAME] [--output text|json]
//   echoctl plan --graph G [--policy P] [--memory_limit_bytes N |
//                --max_overhead_ratio R] [--output text|json]
//   echoctl fit --graph G --device NAME [--max_overhead_ratio R]
//   echoctl profile --graph G [--force]
//   echoctl node-info
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "adapter/graph_file.h"
#include "client/planner_client.h"
#include "google/protobuf/util/json_util.h"
#include "planner/status_macros.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051",
          "echod address: host:port or unix:///path (env ECHO_SERVER)");
ABSL_FLAG(double, timeout_seconds, 60, "RPC deadline");
ABSL_FLAG(std::string, graph, "", "graph file (.json Checkmate or proto3 JSON, "
                                  ".pb, .pbtxt, .graph)");
ABSL_FLAG(std::string, format, "auto",
          "graph format: auto, checkmate, json, binary, textproto, text");
ABSL_FLAG(std::string, output, "text", "text | json (proto3 JSON)");
ABSL_FLAG(std::string, device, "", "device catalog name, e.g. h100-80gb");
ABSL_FLAG(std::string, policy, "auto",
          "auto | none | echo | chen_sqrt | optimal (case-insensitive)");
ABSL_FLAG(std::string, memory_limit_bytes, "",
          "plan: minimize extra compute with the peak at most this");
ABSL_FLAG(std::string, max_overhead_ratio, "",
          "plan/fit: minimize the peak with extra compute at most this ratio");
ABSL_FLAG(double, solver_time_limit_seconds, 0, "plan: OPTIMAL time limit");
ABSL_FLAG(int64_t, allocator_rounding_bytes, 0,
          "round every allocation up to this (PyTorch: 512)");
ABSL_FLAG(int32_t, live_tensors, 10, "estimate: largest live tensors shown");
ABSL_FLAG(bool, force, false, "profile: ignore cached results");

namespace {

using echo::client::PlannerClient;
namespace v1 = echo::v1;

constexpr char kUsage[] =
    "echoctl <command> [flags]\n"
    "commands:\n"
    "  health      exit 0 only when echod is SERVING\n"
    "  estimate    peak memory of one training iteration (--graph)\n"
    "  plan        recompute plan (--graph, --policy, a budget)\n"
    "  fit         does the graph fit on --device\n"
    "  profile     profile the graph's ops on the server's GPU\n"
    "  node-info   GPUs, versions, device catalog, profile cache\n"
    "Run 'echoctl --help' for the flags.";

int UsageError(const std::string& message) {
  std::cerr << "echoctl: " << message << "\n" << kUsage << "\n";
  return 2;
}

// The server's (or the client's) error: the code name and message.
int RpcError(const absl::Status& status) {
  std::string code = absl::StatusCodeToString(status.code());
  for (char& c : code) c = c == ' ' ? '_' : absl::ascii_toupper(c);
  std::cerr << "echoctl: " << code << ": " << status.message() << "\n";
  return 1;
}

std::string HumanBytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrCat(bytes, " B")
                   : absl::StrFormat("%.2f %s", value, units[unit]);
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

bool JsonOutput() { return absl::GetFlag(FLAGS_output) == "json"; }

absl::StatusOr<v1::Graph> LoadGraph() {
  const std::string path = absl::GetFlag(FLAGS_graph);
  if (path.empty()) return absl::InvalidArgumentError("--graph is required");
  ASSIGN_OR_RETURN(
      echo::adapter::GraphFormat format,
      echo::adapter::ParseGraphFormat(absl::GetFlag(FLAGS_format)));
  return echo::adapter::LoadGraphFile(path, format);
}

void SetDevice(v1::DeviceSpec* device) {
  device->set_name(absl::GetFlag(FLAGS_device));
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
                                 HumanBytes(bytes));
  }
}

int Health(PlannerClient& client) {
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> status =
      client.Health("");
  if (!status.ok()) return RpcError(status.status());
  const std::string name =
      grpc::health::v1::HealthCheckResponse::ServingStatus_Name(*status);
  std::cout << name << "\n";
  return *status == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

int Estimate(PlannerClient& client) {
  absl::StatusOr<v1::Graph> graph = LoadGraph();
  if (!graph.ok()) return RpcError(graph.status());
  v1::EstimateMemoryRequest request;
  *request.mutable_graph() = *std::move(graph);
  if (!absl::GetFlag(FLAGS_device).empty()) SetDevice(request.mutable_device());
  request.mutable_allocator()->set_rounding_bytes(
      absl::GetFlag(FLAGS_allocator_rounding_bytes));
  request.set_max_live_tensors(absl::GetFlag(FLAGS_live_tensors));
  absl::StatusOr<v1::EstimateMemoryResponse> response =
      client.EstimateMemory(request);
  if (!response.ok()) return RpcError(response.status());
  if (JsonOutput()) {
    PrintJson(*response);
    return 0;
  }
  std::cout << "graph: " << request.graph().name() << " ("
            << response->op_count() << " ops, " << response->tensor_count()
            << " tensors)\n";
  std::cout << "peak: " << response->peak_bytes() << " bytes ("
            << HumanBytes(response->peak_bytes()) << ") at step "
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

absl::StatusOr<v1::RecomputePolicy> ParsePolicy(const std::string& name) {
  std::string lower = absl::AsciiStrToLower(name);
  for (char& c : lower) c = c == '-' ? '_' : c;
  v1::RecomputePolicy policy;
  if (lower == "unspecified" ||
      !v1::RecomputePolicy_Parse("RECOMPUTE_POLICY_" + absl::AsciiStrToUpper(lower),
                                 &policy)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown policy '", name, "' (auto, none, echo, chen_sqrt, optimal)"));
  }
  return policy;
}

// Budget flags are strings so that a malformed value is reported, not
// silently read as 0.
absl::Status SetBudgets(v1::GenerateRecomputePlanRequest& request) {
  const std::string limit = absl::GetFlag(FLAGS_memory_limit_bytes);
  const std::string ratio = absl::GetFlag(FLAGS_max_overhead_ratio);
  if (!limit.empty()) {
    int64_t value;
    if (!absl::SimpleAtoi(limit, &value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--memory_limit_bytes '", limit, "' is not an integer"));
    }
    request.set_memory_limit_bytes(value);
  }
  if (!ratio.empty()) {
    double value;
    if (!absl::SimpleAtod(ratio, &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--max_overhead_ratio '", ratio, "' is not a number"));
    }
    request.set_max_overhead_ratio(value);
  }
  return absl::OkStatus();
}

int Plan(PlannerClient& client) {
  absl::StatusOr<v1::Graph> graph = LoadGraph();
  if (!graph.ok()) return RpcError(graph.status());
  v1::GenerateRecomputePlanRequest request;
  *request.mutable_graph() = *std::move(graph);
  absl::StatusOr<v1::RecomputePolicy> policy =
      ParsePolicy(absl::GetFlag(FLAGS_policy));
  if (!policy.ok()) return RpcError(policy.status());
  request.set_policy(*policy);
  if (absl::Status status = SetBudgets(request); !status.ok()) {
    return RpcError(status);
  }
  if (!absl::GetFlag(FLAGS_device).empty()) SetDevice(request.mutable_device());
  request.mutable_allocator()->set_rounding_bytes(
      absl::GetFlag(FLAGS_allocator_rounding_bytes));
  request.set_solver_time_limit_seconds(
      absl::GetFlag(FLAGS_solver_time_limit_seconds));
  absl::StatusOr<v1::GenerateRecomputePlanResponse> response =
      client.GenerateRecomputePlan(request);
  if (!response.ok()) return RpcError(response.status());
  if (JsonOutput()) {
    PrintJson(*response);
    return 0;
  }
  const v1::GenerateRecomputePlanResponse& plan = *response;
  int recomputes = 0;
  for (const v1::Execution& e : plan.schedule()) recomputes += e.recompute();
  std::cout << "policy: "
            << absl::AsciiStrToLower(
                   v1::RecomputePolicy_Name(plan.policy()).substr(17))
            << (plan.feasible() ? "" : "  (INFEASIBLE: budget not met)")
            << "\n";
  std::cout << absl::StrFormat(
      "peak: %d -> %d bytes (%s -> %s, %.2fx smaller)\n",
      plan.baseline_peak_bytes(), plan.planned_peak_bytes(),
      HumanBytes(plan.baseline_peak_bytes()),
      HumanBytes(plan.planned_peak_bytes()),
      plan.planned_peak_bytes() > 0
          ? static_cast<double>(plan.baseline_peak_bytes()) /
                plan.planned_peak_bytes()
          : 0.0);
  std::cout << absl::StrFormat(
      "extra compute: %.6g of %.6g %s (overhead %.2f%%), %d recomputations\n",
      plan.recompute_cost(), plan.baseline_compute_cost(), plan.cost_unit(),
      100 * plan.recompute_overhead_ratio(), recomputes);
  std::cout << "lower bound on any plan's peak: "
            << plan.peak_lower_bound_bytes() << " bytes\n";
  std::cout << absl::StrFormat("stashed tensors: %d, regions: %d, solved in "
                               "%.3f ms",
                               plan.stash_tensor_ids_size(),
                               plan.regions_size(),
                               plan.solve_time_seconds() * 1e3);
  if (!plan.solver_status().empty()) {
    std::cout << " (" << plan.solver_status() << ")";
  }
  std::cout << "\n";
  for (const v1::RecomputeRegion& region : plan.regions()) {
    std::cout << "  recompute [" << absl::StrJoin(region.op_ids(), " ")
              << "] from [" << absl::StrJoin(region.source_tensor_ids(), " ")
              << "]: " << region.explanation() << "\n";
  }
  if (!plan.message().empty()) std::cout << plan.message() << "\n";
  return 0;
}

int Fit(PlannerClient& client) {
  absl::StatusOr<v1::Graph> graph = LoadGraph();
  if (!graph.ok()) return RpcError(graph.status());
  if (absl::GetFlag(FLAGS_device).empty()) {
    return UsageError("fit needs --device");
  }
  v1::CheckFitRequest request;
  *request.mutable_graph() = *std::move(graph);
  SetDevice(request.mutable_device());
  request.mutable_allocator()->set_rounding_bytes(
      absl::GetFlag(FLAGS_allocator_rounding_bytes));
  const std::string ratio = absl::GetFlag(FLAGS_max_overhead_ratio);
  if (!ratio.empty()) {
    double value;
    if (!absl::SimpleAtod(ratio, &value)) {
      return RpcError(absl::InvalidArgumentError(
          absl::StrCat("--max_overhead_ratio '", ratio, "' is not a number")));
    }
    request.set_max_overhead_ratio(value);
  }
  absl::StatusOr<v1::CheckFitResponse> response = client.CheckFit(request);
  if (!response.ok()) return RpcError(response.status());
  if (JsonOutput()) {
    PrintJson(*response);
  } else {
    std::cout << (response->fits() ? "fits" : "does not fit") << ": "
              << response->message() << "\n";
  }
  return response->fits() ? 0 : 3;
}

int Profile(PlannerClient& client) {
  absl::StatusOr<v1::Graph> graph = LoadGraph();
  if (!graph.ok()) return RpcError(graph.status());
  v1::ProfileOpsRequest request;
  *request.mutable_graph() = *std::move(graph);
  request.set_force(absl::GetFlag(FLAGS_force));
  absl::StatusOr<v1::ProfileOpsResponse> response = client.ProfileOps(request);
  if (!response.ok()) return RpcError(response.status());
  if (JsonOutput()) {
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

int NodeInfo(PlannerClient& client) {
  absl::StatusOr<v1::GetNodeInfoResponse> response = client.GetNodeInfo();
  if (!response.ok()) return RpcError(response.status());
  if (JsonOutput()) {
    PrintJson(*response);
    return 0;
  }
  const v1::GetNodeInfoResponse& info = *response;
  std::cout << "host: " << info.hostname() << "\n";
  std::cout << "echod: " << info.server_version() << "\n";
  std::cout << "GPUs: " << info.gpu_status() << "\n";
  for (const v1::GpuInfo& gpu : info.gpus()) {
    std::cout << absl::StrFormat("  [%d] %s, %s, %d SMs, sm_%s\n", gpu.index(),
                                 gpu.name(), HumanBytes(gpu.memory_bytes()),
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
  std::cout << "device catalog:";
  for (const v1::DeviceSpec& device : info.device_catalog()) {
    std::cout << " " << device.name();
  }
  std::cout << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  if (const char* server = std::getenv("ECHO_SERVER"); server != nullptr) {
    absl::SetFlag(&FLAGS_server, server);
  }
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() != 2) {
    return UsageError(positional.size() < 2 ? "no command given"
                                            : "one command at a time");
  }
  const std::string output = absl::GetFlag(FLAGS_output);
  if (output != "text" && output != "json") {
    return UsageError("--output must be text or json");
  }
  echo::client::ClientOptions options;
  options.server = absl::GetFlag(FLAGS_server);
  options.timeout_seconds = absl::GetFlag(FLAGS_timeout_seconds);
  PlannerClient client(options);
  const std::string command = positional[1];
  if (command == "health") return Health(client);
  if (command == "estimate") return Estimate(client);
  if (command == "plan") return Plan(client);
  if (command == "fit") return Fit(client);
  if (command == "profile") return Profile(client);
  if (command == "node-info") return NodeInfo(client);
  return UsageError(absl::StrCat("unknown command '", command, "'"));
}
