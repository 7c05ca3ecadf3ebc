// echod: the Echo memory planner service. Every flag can also be set by an
// environment variable ECHO_<FLAG NAME IN UPPER CASE>; a flag on the command
// line wins over the environment.
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/echo_server.h"
#include "server/log_limiter.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, grpc_address, "127.0.0.1:50051",
          "host:port for gRPC (empty: TCP off)");
ABSL_FLAG(std::string, unix_socket, "",
          "path of a Unix socket for node-local clients (empty: off)");
ABSL_FLAG(std::string, metrics_address, "127.0.0.1:9464",
          "host:port for Prometheus /metrics (empty: off)");
ABSL_FLAG(int64_t, max_request_bytes, echo::server::kDefaultMaxRequestBytes,
          "largest request accepted; larger ones get RESOURCE_EXHAUSTED");
ABSL_FLAG(int32_t, max_concurrent_requests,
          echo::server::kDefaultMaxConcurrentRequests,
          "requests in flight beyond this get RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, graph_cache_bytes, echo::server::kDefaultGraphCacheBytes,
          "bound of the graph registry (RegisterGraph), least recently used "
          "graphs evicted first; default 512 MiB");
ABSL_FLAG(int64_t, answer_cache_bytes, echo::server::kDefaultAnswerCacheBytes,
          "bound of the cache of answers to fingerprint requests; default "
          "64 MiB");
ABSL_FLAG(int64_t, memory_budget_bytes, 0,
          "memory echod may use in all: the caches' bounds, its base and the "
          "requests in flight, each reserved from its wire size before it is "
          "parsed (RESOURCE_EXHAUSTED when it does not fit); 0: 3/4 of the "
          "cgroup's memory limit, or of the machine's memory");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate for TLS on the TCP port (with --tls_key_file)");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key for TLS");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA bundle: TCP clients must present a certificate it signed "
          "(mTLS; needs --tls_cert_file)");
ABSL_FLAG(std::string, unix_socket_group, "",
          "group (name or gid) of the Unix socket, which is created 0660 "
          "(empty: echod's group)");
ABSL_FLAG(std::string, auth_token_file, "",
          "file of bearer tokens, one 'TOKEN' or 'IDENTITY TOKEN' per line; "
          "set, every MemoryPlanner call needs 'authorization: Bearer TOKEN'");
ABSL_FLAG(std::vector<std::string>, profile_allowed_identities, {},
          "comma-separated identities (token identities, client certificate "
          "CNs or SANs) allowed to call ProfileOps (empty: any caller)");
ABSL_FLAG(double, drain_timeout_seconds, 10,
          "on SIGTERM, how long in-flight requests may finish");
ABSL_FLAG(std::string, log_level, "info", "debug | info | warn | error");
ABSL_FLAG(std::string, reflection, "auto",
          "gRPC server reflection, which describes the API to any caller: "
          "auto (on unless --auth_token_file is set) | on | off");
ABSL_FLAG(std::string, optimal_worker_path, "",
          "the echo_milp_worker executable that runs policy OPTIMAL in a "
          "child process (empty: the one next to echod)");
ABSL_FLAG(int64_t, optimal_memory_limit_bytes,
          echo::server::kDefaultOptimalMemoryLimitBytes,
          "address-space limit (RLIMIT_AS) of each OPTIMAL child process; "
          "beyond it the request gets RESOURCE_EXHAUSTED");
ABSL_FLAG(bool, contain_plans, true,
          "plan, fit-check, batch-search and frontier requests run in a fork "
          "of echod, so that a planner crash answers that request with "
          "INTERNAL and a request id while echod serves on, and a cancelled "
          "call's work is killed at once; false: in echod's own process");
ABSL_FLAG(std::string, crash_dump_dir, "",
          "directory where the request of a contained planner crash is "
          "written (<request id>.<method>.pb), to reproduce it; empty: not "
          "written");
ABSL_FLAG(bool, enable_profiling, false,
          "profile ops on this node's GPU (ProfileOps, and plans that use it)");
ABSL_FLAG(std::string, profile_cache_dir, "",
          "directory of the persistent profile cache (default "
          "$HOME/.cache/echo; 'none': memory only)");
ABSL_FLAG(double, profile_memory_fraction, 0.1,
          "largest share of the GPU's free memory a profile may allocate");

namespace {

// Flags this binary reads from ECHO_* variables.
constexpr const char* kEnvFlags[] = {
    "grpc_address",
    "unix_socket",
    "metrics_address",
    "max_request_bytes",
    "max_concurrent_requests",
    "graph_cache_bytes",
    "memory_budget_bytes",
    "answer_cache_bytes",
    "tls_cert_file",
    "tls_key_file",
    "tls_client_ca_file",
    "unix_socket_group",
    "auth_token_file",
    "profile_allowed_identities",
    "drain_timeout_seconds",
    "log_level",
    "reflection",
    "optimal_worker_path",
    "contain_plans",
    "crash_dump_dir",
    "optimal_memory_limit_bytes",
    "enable_profiling",
    "profile_cache_dir",
    "profile_memory_fraction",
};

// Applies ECHO_* variables before the command line is parsed, so that the
// command line overrides them.
bool ApplyEnvironment() {
  bool ok = true;
  for (const char* name : kEnvFlags) {
    const std::string variable = "ECHO_" + absl::AsciiStrToUpper(name);
    const char* value = std::getenv(variable.c_str());
    if (value == nullptr) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      std::cerr << "echod: bad " << variable << "='" << value << "': " << error
                << "\n";
      ok = false;
    }
  }
  return ok;
}

// The profile cache survives restarts; by default it lives in the user's
// cache directory.
std::string DefaultCacheDir(const std::string& flag) {
  if (flag == "none") return "";
  if (!flag.empty()) return flag;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return absl::StrCat(xdg, "/echo");
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return absl::StrCat(home, "/.cache/echo");
  }
  return "";
}

// --help names flag files by their path in the repository, not the build
// machine's ("Flags from server/echod_main.cc").
std::string RepositoryPath(absl::string_view file) {
  for (absl::string_view top : {"server/", "planner/", "adapter/", "client/"}) {
    const size_t at = file.rfind(top);
    if (at != absl::string_view::npos) return std::string(file.substr(at));
  }
  return std::string(file);
}

}  // namespace

int main(int argc, char** argv) {
  absl::FlagsUsageConfig usage;
  usage.normalize_filename = RepositoryPath;
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "echod [flags]: the Echo GPU memory planner service. Each flag can also "
      "be set by ECHO_<FLAG_NAME> in the environment.");
  if (!ApplyEnvironment()) return 2;
  absl::ParseCommandLine(argc, argv);

  const spdlog::level::level_enum level =
      spdlog::level::from_str(absl::GetFlag(FLAGS_log_level));
  if (level == spdlog::level::off) {
    std::cerr << "echod: bad --log_level '" << absl::GetFlag(FLAGS_log_level)
              << "' (debug | info | warn | error)\n";
    return 2;
  }
  spdlog::set_level(level);
  const std::string reflection = absl::GetFlag(FLAGS_reflection);
  if (reflection != "auto" && reflection != "on" && reflection != "off") {
    std::cerr << "echod: bad --reflection '" << reflection
              << "' (auto | on | off)\n";
    return 2;
  }
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ echod: %v");
  echo::server::RouteProtobufLogs();

  // SIGTERM/SIGINT go to a waiting thread, not to arbitrary threads.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  echo::server::ServerOptions options;
  options.grpc_address = absl::GetFlag(FLAGS_grpc_address);
  options.unix_socket = absl::GetFlag(FLAGS_unix_socket);
  options.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  options.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  options.max_concurrent_requests =
      absl::GetFlag(FLAGS_max_concurrent_requests);
  options.graph_cache_bytes = absl::GetFlag(FLAGS_graph_cache_bytes);
  options.memory_budget_bytes = absl::GetFlag(FLAGS_memory_budget_bytes);
  if (options.memory_budget_bytes < 0) {
    std::cerr << "echod: --memory_budget_bytes must be >= 0 (0: default)\n";
    return 2;
  }
  options.answer_cache_bytes = absl::GetFlag(FLAGS_answer_cache_bytes);
  if (options.graph_cache_bytes < 0 || options.answer_cache_bytes < 0) {
    std::cerr << "echod: --graph_cache_bytes and --answer_cache_bytes must "
                 "be >= 0\n";
    return 2;
  }
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  options.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  options.unix_socket_group = absl::GetFlag(FLAGS_unix_socket_group);
  options.auth.token_file = absl::GetFlag(FLAGS_auth_token_file);
  options.reflection =
      reflection == "on"    ? echo::server::ServerOptions::Reflection::kOn
      : reflection == "off" ? echo::server::ServerOptions::Reflection::kOff
                            : echo::server::ServerOptions::Reflection::kAuto;
  options.auth.profile_allowed_identities =
      absl::GetFlag(FLAGS_profile_allowed_identities);
  options.drain_timeout_seconds = absl::GetFlag(FLAGS_drain_timeout_seconds);
  options.optimal.worker_path = absl::GetFlag(FLAGS_optimal_worker_path);
  options.contain_plans = absl::GetFlag(FLAGS_contain_plans);
  options.crash_dump_dir = absl::GetFlag(FLAGS_crash_dump_dir);
  options.optimal.memory_limit_bytes =
      absl::GetFlag(FLAGS_optimal_memory_limit_bytes);
  options.profiler.enable_profiling = absl::GetFlag(FLAGS_enable_profiling);
  options.profiler.memory_fraction =
      absl::GetFlag(FLAGS_profile_memory_fraction);
  options.profiler.cache_dir =
      DefaultCacheDir(absl::GetFlag(FLAGS_profile_cache_dir));

  absl::StatusOr<std::unique_ptr<echo::server::EchoServer>> server =
      echo::server::EchoServer::Start(options);
  if (!server.ok()) {
    spdlog::error("cannot start: {}", server.status().ToString());
    return 1;
  }
  spdlog::info(
      "serving echo.v1.MemoryPlanner on {}{}{} (TLS {}); tokens {}; "
      "metrics {}",
      options.grpc_address.empty()
          ? std::string("(no TCP)")
          : absl::StrCat(
                options.grpc_address.substr(0, options.grpc_address.rfind(':')),
                ":", (*server)->grpc_port()),
      options.unix_socket.empty() ? "" : " and unix:", options.unix_socket,
      options.tls_cert_file.empty()
          ? "off"
          : (options.tls_client_ca_file.empty() ? "on" : "on, mTLS"),
      options.auth.token_file.empty() ? "off" : "required",
      (*server)->metrics_endpoint().empty()
          ? std::string("off")
          : absl::StrCat("http://", (*server)->metrics_endpoint(), "/metrics"));

  std::thread signal_thread([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    spdlog::info("received {}", signal == SIGTERM ? "SIGTERM" : "SIGINT");
    (*server)->Drain();
  });
  (*server)->Wait();
  signal_thread.join();
  spdlog::info("stopped");
  return 0;
}
