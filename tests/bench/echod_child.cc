#include "echod_child.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace echo::bench {
namespace {

int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace

absl::StatusOr<EchodChild> EchodChild::Start(
    std::string echod, const std::string& argv0,
    const std::vector<std::string>& flags, const std::string& name) {
  if (echod.empty()) echod = argv0.substr(0, argv0.rfind('/') + 1) + "echod";
  const int port = FreeLoopbackPort();
  const std::string log = absl::StrCat("/tmp/", name, ".", ::getpid(), ".log");
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<std::string> argv = {
        echod, absl::StrCat("--grpc_address=127.0.0.1:", port)};
    argv.insert(argv.end(), flags.begin(), flags.end());
    std::vector<char*> raw;
    for (std::string& arg : argv) raw.push_back(arg.data());
    raw.push_back(nullptr);
    if (std::freopen(log.c_str(), "w", stderr) == nullptr) _exit(126);
    ::execv(raw[0], raw.data());
    _exit(127);
  }
  if (pid < 0) return absl::InternalError("fork failed");
  EchodChild child(pid, port, log);
  client::PlannerClient probe(child.ClientOptions(5));
  const auto start = std::chrono::steady_clock::now();
  while (!probe.Health("").ok()) {
    int status = 0;
    const bool exited = ::waitpid(pid, &status, WNOHANG) == pid;
    if (exited ||
        std::chrono::steady_clock::now() - start > std::chrono::seconds(20)) {
      if (exited) {
        child.pid_ = 0;  // already reaped
      } else {
        ::kill(pid, SIGKILL);  // stuck: no graceful drain to wait for
      }
      return absl::UnavailableError(absl::StrCat("echod did not start (", echod,
                                                 exited ? ", exited" : "",
                                                 "; log ", log, ")"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return child;
}

EchodChild::EchodChild(EchodChild&& other) noexcept
    : pid_(std::exchange(other.pid_, 0)),
      port_(other.port_),
      log_(std::move(other.log_)) {}

EchodChild::~EchodChild() { Stop(); }

int EchodChild::Stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int status = 0;
  if (::waitpid(std::exchange(pid_, 0), &status, 0) < 0) return -1;
  return status;
}

client::ClientOptions EchodChild::ClientOptions(double timeout_seconds) const {
  client::ClientOptions options;
  options.server = absl::StrCat("127.0.0.1:", port_);
  options.timeout_seconds = timeout_seconds;
  return options;
}

}  // namespace echo::bench
