// echod's /metrics server (metrics_http.h): the answers, and the slow and
// idle clients that held civetweb's threads (issue 23, item 9).
#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "http_get.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "tests/unit/test_util.h"

namespace echo::server {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;

int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  EXPECT_EQ(
      ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  timeval five{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &five, sizeof(five));
  return fd;
}

// Sends `request` and reads until the server closes (or 5 s pass).
std::string Exchange(int port, const std::string& request) {
  const int fd = Connect(port);
  EXPECT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string response;
  char buffer[4096];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) {
    response.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return response;
}

class MetricsHttpTest : public ::testing::Test {
 protected:
  MetricsHttpTest() : registry_(std::make_shared<prometheus::Registry>()) {
    prometheus::BuildCounter()
        .Name("echo_test_total")
        .Help("a counter")
        .Register(*registry_)
        .Add({})
        .Increment(3);
    server_ = testing::ValueOrFail(
        MetricsHttpServer::Start("127.0.0.1:0", registry_));
  }
  std::string endpoint() const {
    return "127.0.0.1:" + std::to_string(server_->port());
  }
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<MetricsHttpServer> server_;
};

TEST_F(MetricsHttpTest, AnswersMetricsAndRefusesTheRest) {
  EXPECT_THAT(testing::HttpGet(endpoint(), "/metrics"),
              HasSubstr("echo_test_total 3"));
  const int port = server_->port();
  EXPECT_THAT(Exchange(port, "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"),
              StartsWith("HTTP/1.1 200 OK\r\nContent-Type: text/plain; "
                         "version=0.0.4"));
  const std::string head = Exchange(port, "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_THAT(head, StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(head, ::testing::EndsWith("\r\n\r\n"));  // no body
  EXPECT_THAT(Exchange(port, "GET / HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 404 Not Found"));
  EXPECT_THAT(Exchange(port, "POST /metrics HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 405 Method Not Allowed"));
  EXPECT_THAT(Exchange(port, "garbage\r\n\r\n"),
              StartsWith("HTTP/1.1 400 Bad Request"));
  EXPECT_THAT(Exchange(port, "GET /metrics HTTP/1.1\r\nX: " +
                                 std::string(kMaxMetricsRequestBytes, 'a')),
              StartsWith("HTTP/1.1 431"));
}

// 300 idle connections, half with a partial request, more than the server
// keeps open: a scrape is still answered at once. civetweb took 29.5 s with
// two; a server that waited for them would take the 2 s request timeout.
TEST_F(MetricsHttpTest, IdleConnectionsDoNotDelayAScrape) {
  std::vector<int> idle;
  for (int i = 0; i < 300; ++i) {
    idle.push_back(Connect(server_->port()));
    if (i % 2 == 0) {
      ::send(idle.back(), "GET /metrics HTTP/1.1\r\n", 23, MSG_NOSIGNAL);
    }
  }
  const Clock::time_point start = Clock::now();
  EXPECT_THAT(testing::HttpGet(endpoint(), "/metrics"),
              HasSubstr("echo_test_total 3"));
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(seconds, 1.5);  // margin for a loaded machine
  for (int fd : idle) ::close(fd);
}

// A connection that never finishes its request is closed after the request
// timeout.
TEST_F(MetricsHttpTest, AnUnfinishedRequestIsDroppedAfterItsTimeout) {
  const int fd = Connect(server_->port());
  ::send(fd, "GET /metr", 9, MSG_NOSIGNAL);
  const Clock::time_point start = Clock::now();
  char byte;
  EXPECT_EQ(::recv(fd, &byte, 1, 0), 0);  // closed, not timed out (-1)
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  const double timeout =
      std::chrono::duration<double>(kMetricsRequestTimeout).count();
  EXPECT_GT(seconds, timeout - 0.2);
  EXPECT_LT(seconds, timeout + 2.0);
  ::close(fd);
}

TEST(MetricsHttpStartTest, BadAddressesAreRefused) {
  auto registry = std::make_shared<prometheus::Registry>();
  EXPECT_EQ(MetricsHttpServer::Start("no-port", registry).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto first =
      testing::ValueOrFail(MetricsHttpServer::Start("127.0.0.1:0", registry));
  const absl::StatusOr<std::unique_ptr<MetricsHttpServer>> taken =
      MetricsHttpServer::Start("127.0.0.1:" + std::to_string(first->port()),
                               registry);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(taken.status().message()),
              HasSubstr("Address already in use"));
}

}  // namespace
}  // namespace echo::server
