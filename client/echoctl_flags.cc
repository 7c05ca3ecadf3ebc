// echoctl's flags: each command's CLI11 options and their checks, filling
// EchoctlFlags and Parsed (echoctl_flags.h).
#include "client/echoctl_flags.h"

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "planner/byte_size.h"

namespace echo::client {
namespace {

// A byte-size option: the text becomes its byte count, or the option fails
// with the parser's message.
const CLI::Validator kByteSize(
    [](std::string& text) -> std::string {
      absl::StatusOr<int64_t> bytes = echo::planner::ParseByteSize(text);
      if (!bytes.ok()) return std::string(bytes.status().message());
      text = std::to_string(*bytes);
      return "";
    },
    "SIZE", "byte size");

// auto, none, echo, chen_sqrt (or chen-sqrt), optimal; any case.
const CLI::Validator kPolicy(
    [](std::string& text) -> std::string {
      std::string name = absl::AsciiStrToUpper(text);
      for (char& c : name) c = c == '-' ? '_' : c;
      v1::RecomputePolicy policy;
      if (name == "UNSPECIFIED" ||
          !v1::RecomputePolicy_Parse("RECOMPUTE_POLICY_" + name, &policy)) {
        return "unknown policy '" + text +
               "' (auto, none, echo, chen_sqrt, optimal)";
      }
      text = std::to_string(static_cast<int>(policy));
      return "";
    },
    "POLICY", "recompute policy");

// --graph and --format; with `fingerprint`, --fingerprint as the other
// way to name the graph (exactly one: checked after parsing).
void AddGraphFlags(CLI::App* command, EchoctlFlags& flags,
                   bool fingerprint = true) {
  CLI::Option* graph = command->add_option(
      "--graph", flags.graph,
      "graph file: .json (Checkmate or proto3 JSON), .pb, .pbtxt, .graph");
  if (fingerprint) {
    graph->excludes(command->add_option(
        "--fingerprint", flags.fingerprint,
        "a fingerprint from `echoctl register` instead of --graph"));
  } else {
    graph->required();
  }
  command
      ->add_option("--format", flags.format,
                   "graph format: auto, checkmate, json, binary, textproto, "
                   "text")
      ->capture_default_str();
  command
      ->add_option("--batch_dim", flags.checkmate_batch_size,
                   "Checkmate files: mark the batch dimension at this batch "
                   "size (auto: from the file name, e.g. _b256)")
      ->transform(CLI::Transformer({{"auto", "-1"}}))
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 40));
  command->add_option(
      "--optimizer", flags.optimizer,
      "the optimizer the iteration runs, whose state and step the answer "
      "counts: sgd, sgd_momentum, adam, adamw, adagrad, rmsprop (unset: the "
      "graph's own, else forward+backward only)");
  command->add_option("--optimizer_state_dtype", flags.optimizer_state_dtype,
                      "dtype of the optimizer state, e.g. f32 beside bf16 "
                      "weights (unset: each parameter's)");
  command->add_option("--optimizer_implementation",
                      flags.optimizer_implementation,
                      "foreach (default), for_loop or fused: sets the step's "
                      "temporaries");
  command
      ->add_option("--accumulation_steps", flags.accumulation_steps,
                   "micro-batches per optimizer step (with --optimizer): "
                   "from 2 on, the gradients of earlier micro-batches are "
                   "held while the next one runs")
      ->check(CLI::Range(1, 1 << 20));
  command->add_flag("--update_in_backward", flags.update_in_backward,
                    "(with --optimizer) each parameter's update may run as "
                    "soon as its gradient is complete, freeing it; needs "
                    "gradients that name their parameter (Tensor.gradient_of)");
}

void AddRoundingFlag(CLI::App* command, EchoctlFlags& flags) {
  command
      ->add_option("--allocator_rounding_bytes", flags.allocator_rounding_bytes,
                   "round every allocation up to this (PyTorch: 512)")
      ->transform(kByteSize)
      ->capture_default_str();
}

CLI::Option* AddOverheadFlag(CLI::App* command, double& ratio) {
  return command
      ->add_option("--max_overhead_ratio", ratio,
                   "extra compute at most this ratio of the baseline "
                   "(unset: 0.05; 0: none)")
      ->check(CLI::NonNegativeNumber);
}

// plan, report, fit, max-batch, frontier: the same chunking as the plan.
void AddChunkingFlag(CLI::App* command, EchoctlFlags& flags) {
  command
      ->add_option("--chunking", flags.chunking,
                   "auto: AUTO may run a loss and its backward in chunks; "
                   "off: recompute only")
      ->check(CLI::IsMember({"auto", "off"}))
      ->capture_default_str();
}

struct PlanFlags {
  CLI::Option* memory_limit;
  CLI::Option* overhead_ratio;
};

// --policy, the two exclusive budgets, --device, --solver_time_limit_seconds.
PlanFlags AddPlanFlags(CLI::App* command, EchoctlFlags& flags,
                       std::string& policy, int64_t& memory_limit_bytes,
                       double& overhead_ratio) {
  command
      ->add_option("--policy", policy,
                   "auto, none, echo, chen_sqrt or optimal (any case)")
      ->transform(kPolicy)
      ->default_str("auto");
  PlanFlags added;
  added.memory_limit =
      command
          ->add_option("--memory_limit_bytes", memory_limit_bytes,
                       "minimize extra compute with the peak at most this "
                       "(e.g. 10GiB, 1e10)")
          ->transform(kByteSize);
  added.overhead_ratio = AddOverheadFlag(command, overhead_ratio);
  added.memory_limit->excludes(added.overhead_ratio);
  command->add_option("--device", flags.device,
                      "device catalog name: plan in seconds on it");
  command
      ->add_option("--solver_time_limit_seconds",
                   flags.solver_time_limit_seconds,
                   "OPTIMAL's time limit (0: the server's default)")
      ->check(CLI::NonNegativeNumber);
  AddChunkingFlag(command, flags);
  return added;
}

const char* const kReservedHelp =
    "bytes kept for the CUDA context, handles and fragmentation on each "
    "device (unset: 512MiB + 5% of the device's memory)";

// --policy, the budgets and the rest of AddPlanFlags, with the budgets'
// options recorded so that only given ones are set.
void AddBudgetedPlanFlags(CLI::App* command, EchoctlFlags& flags,
                          Parsed& parsed) {
  PlanFlags added =
      AddPlanFlags(command, flags, parsed.policy, parsed.memory_limit_bytes,
                   parsed.overhead_ratio);
  parsed.memory_limit_options.push_back(added.memory_limit);
  parsed.overhead_options.push_back(added.overhead_ratio);
}

// --live_tensors: the largest tensors live at `where` to list.
void AddLiveTensorsFlag(CLI::App* command, EchoctlFlags& flags,
                        const std::string& where) {
  command
      ->add_option("--live_tensors", flags.live_tensors,
                   "largest tensors live at " + where + " to list")
      ->check(CLI::Range(-1, 1 << 30))
      ->capture_default_str();
}

// --max_points: memory limits to sweep.
void AddMaxPointsFlag(CLI::App* command, EchoctlFlags& flags,
                      const std::string& prefix) {
  command
      ->add_option("--max_points", flags.max_points,
                   prefix + "memory limits to sweep (default 12, at most 64)")
      ->check(CLI::Range(2, 64));
}

}  // namespace

void AddGlobalFlags(CLI::App& app, Parsed& parsed) {
  parsed.client_options.timeout_seconds = 60;
  app.add_option("--server", parsed.client_options.server,
                 "echod address: host:port or unix:///path")
      ->envname("ECHO_SERVER")
      ->capture_default_str();
  parsed.timeout_option =
      app.add_option("--timeout_seconds", parsed.client_options.timeout_seconds,
                     "RPC deadline (policy optimal: at least its solver time "
                     "limit plus 30 s unless given)")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
  echo::client::ClientCredentialFiles& files = parsed.credential_files;
  app.add_option("--tls_ca_file", files.tls_ca_file,
                 "PEM CA of echod's certificate: speak TLS")
      ->envname("ECHOCTL_TLS_CA_FILE");
  app.add_option("--tls_cert_file", files.tls_cert_file,
                 "PEM client certificate, for echod with --tls_client_ca_file")
      ->envname("ECHOCTL_TLS_CERT_FILE");
  app.add_option("--tls_key_file", files.tls_key_file,
                 "PEM private key of --tls_cert_file")
      ->envname("ECHOCTL_TLS_KEY_FILE");
  app.add_option("--auth_token_file", files.auth_token_file,
                 "file holding the bearer token to send (echod's "
                 "--auth_token_file)")
      ->envname("ECHOCTL_AUTH_TOKEN_FILE");
  app.add_option("--output", parsed.output, "text, or json (proto3 JSON)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
}

// health, register, estimate, plan, report, profile, node-info.
void AddGraphCommands(CLI::App& app, EchoctlFlags& flags, Parsed& parsed) {
  parsed.health = app.add_subcommand("health", "exit 0 only when SERVING");
  parsed.register_graph = app.add_subcommand(
      "register",
      "store the graph in echod's registry; prints its fingerprint");
  AddGraphFlags(parsed.register_graph, flags, /*fingerprint=*/false);

  CLI::App* estimate = parsed.estimate = app.add_subcommand(
      "estimate", "peak memory of one training iteration, and its breakdown");
  AddGraphFlags(estimate, flags);
  estimate->add_option("--device", flags.device,
                       "device catalog name, e.g. h100-80gb: adds the "
                       "iteration's compute time");
  AddRoundingFlag(estimate, flags);
  AddLiveTensorsFlag(estimate, flags, "the peak");

  CLI::App* plan = parsed.plan = app.add_subcommand(
      "plan", "a recompute plan under a policy and a budget");
  AddGraphFlags(plan, flags);
  AddBudgetedPlanFlags(plan, flags, parsed);
  plan->add_option("--objective", parsed.objective,
                   "what AUTO minimizes within its overhead budget: "
                   "peak_bytes (default) or stash_bytes (with --policy "
                   "optimal: exactly)")
      ->check(CLI::IsMember({"peak_bytes", "stash_bytes"}));
  AddRoundingFlag(plan, flags);

  CLI::App* report = parsed.report = app.add_subcommand(
      "report",
      "one self-contained HTML page: memory over the schedule by role before "
      "and after a plan, the peak, the plan's regions, the frontier");
  AddGraphFlags(report, flags);
  report->add_option("--html", flags.html_path, "the page to write")
      ->required();
  AddBudgetedPlanFlags(report, flags, parsed);
  AddLiveTensorsFlag(report, flags, "each peak");
  report
      ->add_option("--timeline_points", flags.timeline_points,
                   "most points per timeline (default 2000): longer schedules "
                   "keep each bucket's largest step")
      ->check(CLI::Range(1, 100000));
  AddMaxPointsFlag(report, flags, "frontier: ");
  AddRoundingFlag(report, flags);

  parsed.profile =
      app.add_subcommand("profile", "time the graph's ops on the server's GPU");
  AddGraphFlags(parsed.profile, flags);
  parsed.profile->add_flag("--force", flags.force, "ignore cached results");
  parsed.node_info = app.add_subcommand(
      "node-info", "GPUs, versions, device catalog, profile cache");
}

// fit, max-batch, frontier: the scheduler's questions.
void AddFitCommands(CLI::App& app, EchoctlFlags& flags, Parsed& parsed) {
  CLI::App* fit = parsed.fit = app.add_subcommand(
      "fit",
      "does the graph fit on a device, or on each of several (exit 3 when "
      "it fits on none)");
  AddGraphFlags(fit, flags);
  fit->add_option("--device", flags.device, "device catalog name")
      ->excludes(fit->add_option(
          "--devices", flags.devices,
          "comma-separated catalog names, or all: one answer per device"));
  parsed.reserved_options.push_back(
      fit->add_option("--reserved_bytes", parsed.reserved_bytes, kReservedHelp)
          ->transform(kByteSize));
  parsed.overhead_options.push_back(
      AddOverheadFlag(fit, parsed.overhead_ratio));
  fit->add_flag("--max_batch", flags.include_max_batch,
                "also each device's largest batch (graphs with a batch "
                "dimension, e.g. --batch_dim auto)");
  AddChunkingFlag(fit, flags);
  AddRoundingFlag(fit, flags);

  CLI::App* max_batch = parsed.max_batch = app.add_subcommand(
      "max-batch",
      "the largest batch that fits a device, without and with recomputation "
      "(exit 3 when none fits)");
  AddGraphFlags(max_batch, flags);
  max_batch->add_option("--device", flags.device, "device catalog name")
      ->required();
  parsed.overhead_options.push_back(
      AddOverheadFlag(max_batch, parsed.overhead_ratio));
  parsed.reserved_options.push_back(
      max_batch
          ->add_option("--reserved_bytes", parsed.reserved_bytes, kReservedHelp)
          ->transform(kByteSize));
  max_batch->add_option("--min_batch", flags.min_batch, "smallest batch (1)")
      ->check(CLI::PositiveNumber);
  max_batch
      ->add_option("--max_batch", flags.max_batch,
                   "largest batch to consider (default: no bound)")
      ->check(CLI::PositiveNumber);
  max_batch
      ->add_option("--multiple_of", flags.multiple_of,
                   "only batches that are multiples of this")
      ->check(CLI::PositiveNumber);
  AddChunkingFlag(max_batch, flags);
  AddRoundingFlag(max_batch, flags);

  CLI::App* frontier = parsed.frontier = app.add_subcommand(
      "frontier", "the Pareto set of (peak, extra compute) of AUTO plans");
  AddGraphFlags(frontier, flags);
  frontier->add_option("--device", flags.device,
                       "device catalog name: costs in seconds on it");
  AddMaxPointsFlag(frontier, flags, "");
  AddChunkingFlag(frontier, flags);
  AddRoundingFlag(frontier, flags);
}

}  // namespace echo::client
