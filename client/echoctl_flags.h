// echoctl's parser (echoctl_flags.cc): the global flags and the commands,
// and what they fill besides EchoctlFlags, for echoctl_main.cc to resolve.
#ifndef ECHO_CLIENT_ECHOCTL_FLAGS_H_
#define ECHO_CLIENT_ECHOCTL_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "client/echoctl_commands.h"
#include "client/planner_client.h"

namespace echo::client {

// What the parser fills besides EchoctlFlags: the client's options, values
// that are set only when given, and the commands.
struct Parsed {
  echo::client::ClientOptions client_options;
  echo::client::ClientCredentialFiles credential_files;
  std::string output = "text";
  std::string policy;
  std::string objective;
  int64_t memory_limit_bytes = 0;
  int64_t reserved_bytes = 0;
  double overhead_ratio = 0;
  std::vector<CLI::Option*> memory_limit_options;
  std::vector<CLI::Option*> overhead_options;
  std::vector<CLI::Option*> reserved_options;
  CLI::Option* timeout_option = nullptr;
  CLI::App* health = nullptr;
  CLI::App* register_graph = nullptr;
  CLI::App* estimate = nullptr;
  CLI::App* plan = nullptr;
  CLI::App* fit = nullptr;
  CLI::App* max_batch = nullptr;
  CLI::App* frontier = nullptr;
  CLI::App* report = nullptr;
  CLI::App* profile = nullptr;
  CLI::App* node_info = nullptr;
};

// --server, --timeout_seconds, the TLS and token files, --output.
void AddGlobalFlags(CLI::App& app, Parsed& parsed);
// The commands, each with its flags.
void AddGraphCommands(CLI::App& app, EchoctlFlags& flags, Parsed& parsed);
void AddFitCommands(CLI::App& app, EchoctlFlags& flags, Parsed& parsed);

}  // namespace echo::client

#endif  // ECHO_CLIENT_ECHOCTL_FLAGS_H_
