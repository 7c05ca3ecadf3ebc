// echoctl: command-line client of echod, for people and schedulers.
//
//   echoctl [--server ADDR] [--timeout_seconds S] [--output text|json]
//           [--tls_ca_file F [--tls_cert_file F --tls_key_file F]]
//           [--auth_token_file F] CMD
//   echoctl health
//   echoctl register --graph G                  (prints the fingerprint)
//   echoctl estimate (--graph G | --fingerprint F) [--device NAME]
//                    [--allocator_rounding_bytes N] [--live_tensors K]
//   echoctl plan (--graph G | --fingerprint F) [--policy P]
//                [--memory_limit_bytes N | --max_overhead_ratio R]
//                [--device NAME] [--objective O]
//   echoctl fit (--graph G | --fingerprint F)
//               (--device NAME | --devices all|a,b,c)
//               [--max_overhead_ratio R] [--reserved_bytes N] [--max_batch]
//   echoctl max-batch (--graph G | --fingerprint F) --device NAME
//                     [--max_overhead_ratio R]
//                     [--reserved_bytes N] [--min_batch N] [--max_batch N]
//                     [--multiple_of N]
//   echoctl frontier (--graph G | --fingerprint F) [--device NAME]
//                    [--max_points N]
//   echoctl profile (--graph G | --fingerprint F) [--force]
//   echoctl report (--graph G | --fingerprint F) --html OUT.html [--policy P]
//                  [--memory_limit_bytes N | --max_overhead_ratio R]
//                  [--device NAME] [--live_tensors K] [--timeline_points N]
//                  [--max_points N] [--allocator_rounding_bytes N]
//
// Every --graph command takes --batch_dim auto|N for Checkmate files: the
// graph's batch size (auto: from the file name, e.g. _b256), every node's
// size proportional to it.
//   echoctl node-info
//
// Flags are parsed by CLI11 (echoctl_flags.cc): `echoctl CMD --help` lists a
// command's flags; usage errors print one line and exit 2; byte sizes accept
// 10GiB, 512MiB or 1e10; global flags may also follow the command.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "client/echoctl_commands.h"
#include "client/echoctl_flags.h"
#include "client/planner_client.h"
#include "planner/recompute/plan.h"

#ifndef ECHO_VERSION
#define ECHO_VERSION "dev"
#endif

namespace {

using echo::client::EchoctlFlags;
using echo::client::Parsed;
namespace v1 = echo::v1;

constexpr int kUsageExitCode = 2;

bool AnyGiven(const std::vector<CLI::Option*>& options) {
  for (const CLI::Option* option : options) {
    if (option->count() > 0) return true;
  }
  return false;
}

// The usage errors the parser cannot see, then what the given values set.
// Returns false (having said why) on a usage error.
bool Resolve(const Parsed& parsed, EchoctlFlags& flags) {
  for (CLI::App* command :
       {parsed.estimate, parsed.plan, parsed.fit, parsed.max_batch,
        parsed.frontier, parsed.profile, parsed.report}) {
    if (command->parsed() && flags.graph.empty() && flags.fingerprint.empty()) {
      std::cerr << "echoctl: " << command->get_name()
                << " needs --graph or --fingerprint (see echoctl --help)\n";
      return false;
    }
  }
  if (parsed.fit->parsed() && flags.device.empty() && flags.devices.empty()) {
    std::cerr << "echoctl: fit needs --device or --devices (see echoctl "
                 "--help)\n";
    return false;
  }
  if (AnyGiven(parsed.reserved_options)) {
    flags.reserved_bytes = parsed.reserved_bytes;
  }
  flags.json_output = parsed.output == "json";
  if (!parsed.policy.empty()) {
    flags.policy = static_cast<v1::RecomputePolicy>(std::stoi(parsed.policy));
  }
  if (parsed.objective == "stash_bytes") {
    flags.objective = v1::RECOMPUTE_OBJECTIVE_STASH_BYTES;
  } else if (parsed.objective == "peak_bytes") {
    flags.objective = v1::RECOMPUTE_OBJECTIVE_PEAK_BYTES;
  }
  if (AnyGiven(parsed.memory_limit_options)) {
    flags.memory_limit_bytes = parsed.memory_limit_bytes;
  }
  if (AnyGiven(parsed.overhead_options)) {
    flags.max_overhead_ratio = parsed.overhead_ratio;
  }
  return true;
}

// The RPC deadline: --timeout_seconds when given; for policy OPTIMAL at
// least its solver time limit (the planner's default when 0) plus 30 s, so
// that the default deadline does not cut the solver's default limit short.
double DeadlineSeconds(const Parsed& parsed, const EchoctlFlags& flags) {
  const double given = parsed.client_options.timeout_seconds;
  if (parsed.timeout_option->count() > 0 ||
      flags.policy != v1::RECOMPUTE_POLICY_OPTIMAL) {
    return given;
  }
  const double solver = flags.solver_time_limit_seconds > 0
                            ? flags.solver_time_limit_seconds
                            : echo::planner::kDefaultSolverTimeLimitSeconds;
  return std::max(given, solver + 30);
}

int Dispatch(const Parsed& parsed, echo::client::PlannerClient& client,
             const EchoctlFlags& flags) {
  namespace c = echo::client;
  if (parsed.health->parsed()) return c::RunHealth(client);
  if (parsed.register_graph->parsed()) return c::RunRegister(client, flags);
  if (parsed.estimate->parsed()) return c::RunEstimate(client, flags);
  if (parsed.plan->parsed()) return c::RunPlan(client, flags);
  if (parsed.fit->parsed()) return c::RunFit(client, flags);
  if (parsed.max_batch->parsed()) return c::RunMaxBatch(client, flags);
  if (parsed.frontier->parsed()) return c::RunFrontier(client, flags);
  if (parsed.profile->parsed()) return c::RunProfile(client, flags);
  if (parsed.node_info->parsed()) return c::RunNodeInfo(client, flags);
  if (parsed.report->parsed()) return c::RunReport(client, flags);
  std::cerr << "echoctl: no command given (health, register, estimate, plan, "
               "fit, max-batch, frontier, profile, node-info, report; see "
               "echoctl --help)\n";
  return kUsageExitCode;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "echoctl: command-line client of echod, the GPU memory "
      "planner",
      "echoctl");
  app.set_version_flag("--version", "echoctl " ECHO_VERSION);
  // At most one command; none is reported below, so that a misspelt one
  // reads as an unexpected argument.
  app.require_subcommand(0, 1);
  app.fallthrough();  // global flags may follow the command

  Parsed parsed;
  EchoctlFlags flags;
  echo::client::AddGlobalFlags(app, parsed);
  echo::client::AddGraphCommands(app, flags, parsed);
  echo::client::AddFitCommands(app, flags, parsed);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "echoctl: " << e.what() << " (see echoctl --help)\n";
    return kUsageExitCode;
  }
  if (!Resolve(parsed, flags)) return kUsageExitCode;
  echo::client::ClientOptions client_options = parsed.client_options;
  client_options.timeout_seconds = DeadlineSeconds(parsed, flags);
  if (absl::Status loaded = echo::client::LoadCredentialFiles(
          parsed.credential_files, &client_options);
      !loaded.ok()) {
    std::cerr << "echoctl: " << loaded.message() << "\n";
    return 1;
  }
  echo::client::PlannerClient client(client_options);
  return Dispatch(parsed, client, flags);
}
