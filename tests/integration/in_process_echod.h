// echod's PlannerService in-process on 127.0.0.1:0, with health, metrics on
// their own endpoint, and an optional fake GPU (any OpTimer), for tests that
// need to control the GPU or send raw request bytes.
#ifndef ECHO_TESTS_INTEGRATION_IN_PROCESS_ECHOD_H_
#define ECHO_TESTS_INTEGRATION_IN_PROCESS_ECHOD_H_

#include <chrono>
#include <fstream>
#include <future>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/planner_client.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "http_get.h"
#include "server/metrics.h"
#include "server/metrics_http.h"
#include "server/planner_service.h"
#include "server/profiler/node_profiler.h"
#include "tests/unit/test_util.h"

namespace echo::testing {

// This process's peak resident set (VmHWM), in bytes.
inline int64_t PeakResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) << 10;
  }
  return 0;
}

// Sends `bytes` to `target` (a gRPC address) as the request of
// echo.v1.MemoryPlanner's `method` (e.g. "EstimateMemory"), on a channel of
// its own, bypassing the client's serialization.
inline grpc::Status RawUnaryCall(const std::string& target,
                                 const std::string& method,
                                 const std::string& bytes,
                                 int deadline_seconds) {
  grpc::GenericStub stub(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(deadline_seconds));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, absl::StrCat("/echo.v1.MemoryPlanner/", method),
                 grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status status) { done.set_value(status); });
  return done.get_future().get();
}

class Echod {
 public:
  // timer nullptr: no GPU.
  Echod(server::PlannerServiceOptions options,
        std::unique_ptr<server::OpTimer> timer = nullptr)
      : registry_(std::make_shared<prometheus::Registry>()),
        metrics_(registry_),
        metrics_server_(ValueOrFail(
            server::MetricsHttpServer::Start("127.0.0.1:0", registry_))) {
    server::NodeProfilerOptions profiler_options;
    profiler_options.enable_profiling = timer != nullptr;
    profiler_ = ValueOrFail(server::NodeProfiler::Create(
        profiler_options, registry_.get(), std::move(timer)));
    service_ = std::make_unique<server::PlannerService>(options, &metrics_,
                                                        profiler_.get());
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.SetMaxReceiveMessageSize(64 << 20);
    builder.RegisterService(service_.get());
    builder.RegisterCallbackGenericService(service_->gated_methods());
    server_ = builder.BuildAndStart();
    server_->GetHealthCheckService()->SetServingStatus(true);
  }
  ~Echod() {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(5));
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  const server::PlannerService& service() const { return *service_; }
  client::PlannerClient Client(double timeout_seconds = 60) const {
    client::ClientOptions options;
    options.server = address();
    options.timeout_seconds = timeout_seconds;
    return client::PlannerClient(options);
  }
  std::string Metrics() const {
    return HttpGet(absl::StrCat("127.0.0.1:", metrics_server_->port()),
                   "/metrics");
  }

  // Sends `bytes` as the request of `method` (e.g. "EstimateMemory"),
  // bypassing the client's serialization.
  grpc::Status RawCall(const std::string& method,
                       const std::string& bytes) const {
    return RawUnaryCall(address(), method, bytes, /*deadline_seconds=*/30);
  }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  server::ServerMetrics metrics_;
  std::unique_ptr<server::MetricsHttpServer> metrics_server_;
  std::unique_ptr<server::NodeProfiler> profiler_;
  std::unique_ptr<server::PlannerService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace echo::testing

#endif  // ECHO_TESTS_INTEGRATION_IN_PROCESS_ECHOD_H_
