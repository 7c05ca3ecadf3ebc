// echod's /metrics endpoint: a small HTTP/1.x server on one thread that
// polls every connection, so idle or slow clients cannot hold it. civetweb
// (prometheus-cpp's Exposer) holds a thread per connection: two idle
// connections blocked /metrics for 29.5 s, and with 8 threads and a 1 s
// timeout 100 idle connections still delayed it by 11.8 s (issue 23).
//
// Each connection gets kMetricsRequestTimeout to send its request and
// kMetricsResponseTimeout to take the answer; then it is closed. At most
// kMaxMetricsConnections are open: a new one closes the oldest that has not
// sent its request yet. GET (or HEAD) /metrics answers the registry in
// Prometheus' text format; any other path is 404, any other method 405; every
// answer closes the connection.
#ifndef ECHO_SERVER_METRICS_HTTP_H_
#define ECHO_SERVER_METRICS_HTTP_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"

namespace echo::server {

inline constexpr std::chrono::milliseconds kMetricsRequestTimeout{2000};
inline constexpr std::chrono::milliseconds kMetricsResponseTimeout{10000};
inline constexpr int kMaxMetricsConnections = 256;
// A request head longer than this is refused (431).
inline constexpr size_t kMaxMetricsRequestBytes = 8192;

class MetricsHttpServer {
 public:
  // Listens on "host:port" (port 0: any free one; "[::1]:port" for IPv6).
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& address,
      std::shared_ptr<prometheus::Registry> registry);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

 private:
  MetricsHttpServer() = default;
  void Serve();
  std::string Answer(const std::string& head) const;

  std::shared_ptr<prometheus::Registry> registry_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: the destructor's stop signal
  int port_ = 0;
  std::thread thread_;
};

}  // namespace echo::server

#endif  // ECHO_SERVER_METRICS_HTTP_H_
