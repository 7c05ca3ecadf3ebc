#include "server/echo_server.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/server_builder.h"
#include "planner/status_macros.h"
#include "server/transport_security.h"
#include "spdlog/spdlog.h"

namespace echo::server {

namespace {

constexpr char kServiceName[] = "echo.v1.MemoryPlanner";

// Removes the reflection plugin, which linking grpc++_reflection registers
// for every server in the process, from one server's builder.
class WithoutReflection : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*
                         plugins) override {
    plugins->erase(
        std::remove_if(plugins->begin(), plugins->end(),
                       [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
                         return p->name() == "proto_server_reflection";
                       }),
        plugins->end());
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<EchoServer>> EchoServer::Start(
    const ServerOptions& options) {
  if (options.max_request_bytes <= 0 ||
      options.max_request_bytes > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_request_bytes must be in 1..", std::numeric_limits<int>::max()));
  }
  if (options.max_concurrent_requests <= 0) {
    return absl::InvalidArgumentError("--max_concurrent_requests must be > 0");
  }
  if (options.optimal.memory_limit_bytes <= 0) {
    return absl::InvalidArgumentError(
        "--optimal_memory_limit_bytes must be > 0");
  }
  if (options.grpc_address.empty() && options.unix_socket.empty()) {
    return absl::InvalidArgumentError(
        "nothing to listen on: set --grpc_address or --unix_socket");
  }
  std::unique_ptr<EchoServer> server(new EchoServer());
  server->options_ = options;
  server->registry_ = std::make_shared<prometheus::Registry>();
  server->metrics_ = std::make_unique<ServerMetrics>(server->registry_);
  if (!options.metrics_address.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> metrics_server =
        MetricsHttpServer::Start(options.metrics_address, server->registry_);
    if (!metrics_server.ok()) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve metrics on ", options.metrics_address,
                       ": ", metrics_server.status().message()));
    }
    server->metrics_server_ = std::move(*metrics_server);
    const std::string host =
        options.metrics_address.substr(0, options.metrics_address.rfind(':'));
    server->metrics_endpoint_ =
        absl::StrCat(host, ":", server->metrics_server_->port());
  }

  ASSIGN_OR_RETURN(
      server->profiler_,
      NodeProfiler::Create(options.profiler, server->registry_.get()));
  spdlog::info("GPU: {}; profiling {}; profile cache: {} entries in {}",
               server->profiler_->discovery().status,
               options.profiler.enable_profiling ? "enabled" : "disabled",
               server->profiler_->cache_entries(),
               options.profiler.cache_dir.empty() ? "(memory only)"
                                                  : options.profiler.cache_dir);
  ASSIGN_OR_RETURN(server->authorizer_, CallAuthorizer::Create(options.auth));
  const HostLimits host = ReadHostLimits();
  ASSIGN_OR_RETURN(const std::optional<gid_t> socket_group,
                   ResolveGroup(options.unix_socket_group));
  PlannerServiceOptions service_options{options.max_concurrent_requests,
                                        options.worker_threads,
                                        options.heavy_graph_ops,
                                        options.max_inline_request_bytes,
                                        server->authorizer_.get(),
                                        options.optimal,
                                        options.graph_cache_bytes,
                                        options.answer_cache_bytes,
                                        host,
                                        options.memory_budget_bytes,
                                        options.contain_plans,
                                        options.crash_dump_dir,
                                        options.max_request_bytes};
  if (const int64_t requests = RequestMemoryBytes(service_options);
      requests < kMinRequestMemoryBytes) {
    const std::string short_by = absl::StrCat(
        "the memory budget leaves ", requests >> 20,
        " MiB for requests after --graph_cache_bytes, --answer_cache_bytes "
        "and echod's own ",
        kServerBaseBytes >> 20, " MiB (at least ", kMinRequestMemoryBytes >> 20,
        " MiB needed)");
    if (options.memory_budget_bytes > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--memory_budget_bytes: ", short_by,
                       ": raise it or lower the caches"));
    }
    // A default from a small limit: start, and say what to set.
    spdlog::warn(
        "{}: requests get {} MiB; set --memory_budget_bytes or lower "
        "the caches",
        short_by, kMinRequestMemoryBytes >> 20);
    service_options.memory_budget_bytes =
        options.graph_cache_bytes + options.answer_cache_bytes +
        kServerBaseBytes + kMinRequestMemoryBytes;
  }
  server->service_ = std::make_unique<PlannerService>(
      service_options, server->metrics_.get(), server->profiler_.get());
  spdlog::info(
      "{} CPUs usable (cgroup CPU quota {}), cgroup memory limit {}; {} "
      "workers; {} MiB of memory for requests in flight",
      host.cpus,
      host.cpu_quota.has_value() ? absl::StrCat(*host.cpu_quota) : "none",
      host.memory_limit_bytes.has_value()
          ? absl::StrCat(*host.memory_limit_bytes, " bytes")
          : "none",
      server->service_->worker_threads(),
      server->service_->memory_budget().capacity_bytes() >> 20);
  if (absl::Status usable = server->service_->optimal_worker().CheckUsable();
      !usable.ok()) {
    // A path given explicitly must work; without the default one, only
    // OPTIMAL is refused.
    if (!options.optimal.worker_path.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--optimal_worker_path: ", options.optimal.worker_path,
                       " is missing or not executable"));
    }
    spdlog::warn("{}", std::string(usable.message()));
  }
  if (server->authorizer_->requires_token() && !options.grpc_address.empty() &&
      options.tls_cert_file.empty()) {
    spdlog::warn(
        "bearer tokens cross {} in plaintext: set --tls_cert_file and "
        "--tls_key_file",
        options.grpc_address);
  }
  if (options.profiler.enable_profiling &&
      !server->authorizer_->restricts_profiling()) {
    spdlog::warn(
        "every caller may run ProfileOps on this node's GPUs: set "
        "--profile_allowed_identities");
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // With tokens on, callers without one would still read the whole API from
  // reflection (issue 23): off by default then.
  if (options.reflection == ServerOptions::Reflection::kOff ||
      (options.reflection == ServerOptions::Reflection::kAuto &&
       server->authorizer_->requires_token())) {
    builder.SetOption(std::make_unique<WithoutReflection>());
  }
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_request_bytes));
  builder.SetMaxSendMessageSize(std::numeric_limits<int>::max());
  // The methods that carry graphs are read only once their memory is
  // reserved (gated_call.h); the rest (GetNodeInfo, health) gRPC reads
  // whole first, so its buffers also get the requests' memory as their
  // quota: past it gRPC refuses new streams (RESOURCE_EXHAUSTED, "Buffers
  // full"). One message of --max_request_bytes always fits.
  grpc::ResourceQuota quota("echod");
  quota.Resize(static_cast<size_t>(
      std::max<int64_t>(server->service_->memory_budget().capacity_bytes(),
                        2 * options.max_request_bytes)));
  builder.SetResourceQuota(quota);
  // A call waiting for memory (gated_call.h) is not read, but gRPC's
  // bandwidth-delay probe grows every stream's receive window, and the
  // transport fills it: 12 such 50 MB calls held ~70 MB more with it on.
  // Off, a waiting stream holds its 64 KiB window; a stream being read opens
  // its window to the message, and 50 MB requests took the same time with
  // the probe off as on (0.16-0.30 s over loopback TCP and the socket).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  if (!options.grpc_address.empty()) {
    ASSIGN_OR_RETURN(
        std::shared_ptr<grpc::ServerCredentials> credentials,
        TcpServerCredentials(options.tls_cert_file, options.tls_key_file,
                             options.tls_client_ca_file));
    builder.AddListeningPort(options.grpc_address, credentials,
                             &server->grpc_port_);
  }
  if (!options.unix_socket.empty()) {
    // A socket left by a killed echod would make the bind fail; a live
    // one or anything else at the path is not ours to remove.
    RETURN_IF_ERROR(ClaimUnixSocketPath(options.unix_socket));
    builder.AddListeningPort(absl::StrCat("unix:", options.unix_socket),
                             grpc::InsecureServerCredentials());
  }
  builder.RegisterService(server->service_.get());
  builder.RegisterCallbackGenericService(server->service_->gated_methods());
  {
    // The socket is bound here: never wider than 0660, not even briefly.
    ScopedUmask umask(0117);
    server->server_ = builder.BuildAndStart();
  }
  if (server->server_ == nullptr ||
      (!options.grpc_address.empty() && server->grpc_port_ == 0)) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", options.grpc_address,
        options.unix_socket.empty() ? "" : " / unix:", options.unix_socket,
        " (address in use or not permitted?)"));
  }
  if (!options.unix_socket.empty()) {
    // Framework hooks on the node reach it through its group.
    RETURN_IF_ERROR(RestrictUnixSocket(options.unix_socket, socket_group));
    server->unix_socket_identity_ = IdentityOf(options.unix_socket);
  }
  grpc::HealthCheckServiceInterface* health =
      server->server_->GetHealthCheckService();
  health->SetServingStatus(kServiceName, true);
  health->SetServingStatus(true);
  return server;
}

void EchoServer::Drain() {
  if (drained_ || server_ == nullptr) return;
  drained_ = true;
  spdlog::info(
      "draining: health NOT_SERVING, finishing in-flight requests "
      "(up to {:.1f} s)",
      options_.drain_timeout_seconds);
  server_->GetHealthCheckService()->SetServingStatus(false);
  const auto timeout = std::chrono::milliseconds(
      static_cast<int64_t>(options_.drain_timeout_seconds * 1000));
  // The service interrupts its own work (killing OPTIMAL's children) at the
  // deadline, so that gRPC's Shutdown, which waits for every call to
  // finish, returns then.
  const auto abort_at = std::chrono::steady_clock::now() + timeout;
  service_->StartDraining(abort_at);
  // gRPC's Shutdown closes the listeners at once, so health would read
  // "connection refused" for the whole drain (issue 23): keep serving it,
  // NOT_SERVING, while calls are still in flight.
  while (service_->in_flight() > 0 &&
         std::chrono::steady_clock::now() < abort_at) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto left = std::max(abort_at - std::chrono::steady_clock::now(),
                             std::chrono::steady_clock::duration::zero());
  server_->Shutdown(
      std::chrono::system_clock::now() +
      std::chrono::duration_cast<std::chrono::milliseconds>(left));
  // Only while the path is still this server's socket.
  if (unix_socket_identity_.has_value() &&
      IdentityOf(options_.unix_socket) == unix_socket_identity_) {
    ::unlink(options_.unix_socket.c_str());
  }
}

void EchoServer::Wait() { server_->Wait(); }

EchoServer::~EchoServer() {
  if (server_ == nullptr) return;  // Start failed before building it
  Drain();
  server_->Wait();
}

}  // namespace echo::server
