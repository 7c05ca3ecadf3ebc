// A whole echod (server::EchoServer) on loopback ports the OS picks, and
// clients of it: the setup the integration fixtures share.
#ifndef ECHO_TESTS_INTEGRATION_LOOPBACK_SERVER_H_
#define ECHO_TESTS_INTEGRATION_LOOPBACK_SERVER_H_

#include <memory>

#include "absl/strings/str_cat.h"
#include "client/planner_client.h"
#include "server/echo_server.h"

namespace echo::testing {

// `options` with gRPC and metrics on 127.0.0.1:0 and a 1 s drain, so that
// tests run side by side and stop quickly.
inline server::ServerOptions Loopback(server::ServerOptions options = {}) {
  options.grpc_address = "127.0.0.1:0";
  options.metrics_address = "127.0.0.1:0";
  options.drain_timeout_seconds = 1;
  return options;
}

inline std::unique_ptr<client::PlannerClient> ClientOf(
    const server::EchoServer& server, double timeout_seconds) {
  client::ClientOptions options;
  options.server = absl::StrCat("127.0.0.1:", server.grpc_port());
  options.timeout_seconds = timeout_seconds;
  return std::make_unique<client::PlannerClient>(options);
}

}  // namespace echo::testing

#endif  // ECHO_TESTS_INTEGRATION_LOOPBACK_SERVER_H_
