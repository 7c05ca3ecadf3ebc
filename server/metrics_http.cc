#include "server/metrics_http.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "prometheus/text_serializer.h"

namespace echo::server {
namespace {

using Clock = std::chrono::steady_clock;

struct Connection {
  int fd = -1;
  std::string in;
  std::string out;
  size_t sent = 0;
  bool answering = false;  // the request is read; `out` is being sent
  Clock::time_point deadline;
};

std::string Response(const std::string& status, const std::string& type,
                     const std::string& body, bool head_only) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", type,
                      "\r\nContent-Length: ", body.size(),
                      "\r\nConnection: close\r\n\r\n", head_only ? "" : body);
}

std::string Plain(const std::string& status) {
  return Response(status, "text/plain", status + "\n", false);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address,
    std::shared_ptr<prometheus::Registry> registry) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "' is not host:port"));
  }
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int error = ::getaddrinfo(host.empty() ? nullptr : host.c_str(),
                                      port.c_str(), &hints, &found);
      error != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics address '", address, "': ", ::gai_strerror(error)));
  }
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && server->listen_fd_ < 0;
       a = a->ai_next) {
    const int fd = ::socket(a->ai_family,
                            a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::listen(fd, SOMAXCONN) == 0) {
      server->listen_fd_ = fd;
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (server->listen_fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, ": ", why));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  ::getsockname(server->listen_fd_, reinterpret_cast<sockaddr*>(&bound),
                &length);
  server->port_ =
      bound.ss_family == AF_INET6
          ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
          : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  server->wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (server->wake_fd_ < 0) {
    return absl::InternalError(
        absl::StrCat("metrics: eventfd: ", std::strerror(errno)));
  }
  server->registry_ = std::move(registry);
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

std::string MetricsHttpServer::Answer(const std::string& head) const {
  const std::string line = head.substr(0, head.find("\r\n"));
  std::vector<std::string> words = absl::StrSplit(line, ' ');
  if (words.size() != 3 || !absl::StartsWith(words[2], "HTTP/1.")) {
    return Plain("400 Bad Request");
  }
  const bool head_only = words[0] == "HEAD";
  if (words[0] != "GET" && !head_only) return Plain("405 Method Not Allowed");
  const std::string path = words[1].substr(0, words[1].find('?'));
  if (path != "/metrics") return Plain("404 Not Found");
  const std::string body =
      prometheus::TextSerializer().Serialize(registry_->Collect());
  return Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body,
                  head_only);
}

void MetricsHttpServer::Serve() {
  std::vector<Connection> connections;
  std::vector<pollfd> fds;
  auto close_at = [&](size_t i) {
    ::close(connections[i].fd);
    connections.erase(connections.begin() + static_cast<std::ptrdiff_t>(i));
  };
  char buffer[4096];
  while (true) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    Clock::time_point next = Clock::now() + std::chrono::seconds(1);
    for (const Connection& c : connections) {
      fds.push_back(
          {c.fd, static_cast<short>(c.answering ? POLLOUT : POLLIN), 0});
      next = std::min(next, c.deadline);
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
        next - Clock::now());
    const int ready =
        ::poll(fds.data(), fds.size(),
               static_cast<int>(std::max<int64_t>(0, wait.count())) + 1);
    if ((ready < 0 && errno != EINTR) || fds[0].revents != 0) break;
    // Serve the connections polled (indices shift as they close: walk back).
    for (size_t i = connections.size(); i-- > 0;) {
      const short events = fds[i + 2].revents;
      if (events == 0) continue;
      Connection& c = connections[i];
      if (!c.answering) {
        const ssize_t n = ::recv(c.fd, buffer, sizeof(buffer), 0);
        if (n <= 0) {
          if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
          close_at(i);
          continue;
        }
        c.in.append(buffer, static_cast<size_t>(n));
        const size_t end = c.in.find("\r\n\r\n");
        if (end != std::string::npos) {
          c.out = Answer(c.in.substr(0, end));
        } else if (c.in.size() > kMaxMetricsRequestBytes) {
          c.out = Plain("431 Request Header Fields Too Large");
        } else {
          continue;
        }
        c.answering = true;
        c.deadline = Clock::now() + kMetricsResponseTimeout;
      }
      const ssize_t n = ::send(c.fd, c.out.data() + c.sent,
                               c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) {
        close_at(i);
        continue;
      }
      c.sent += static_cast<size_t>(n);
      if (c.sent == c.out.size()) close_at(i);
    }
    const Clock::time_point now = Clock::now();
    for (size_t i = connections.size(); i-- > 0;) {
      if (now >= connections[i].deadline) close_at(i);
    }
    if (fds[1].revents != 0) {
      while (true) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr,
                                 SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        if (static_cast<int>(connections.size()) >= kMaxMetricsConnections) {
          // Full: the oldest one still to send its request makes room.
          auto oldest =
              std::find_if(connections.begin(), connections.end(),
                           [](const Connection& c) { return !c.answering; });
          if (oldest == connections.end()) {
            ::close(fd);
            continue;
          }
          close_at(static_cast<size_t>(oldest - connections.begin()));
        }
        Connection c;
        c.fd = fd;
        c.deadline = Clock::now() + kMetricsRequestTimeout;
        connections.push_back(std::move(c));
      }
    }
  }
  for (const Connection& c : connections) ::close(c.fd);
}

}  // namespace echo::server
