// echod as a child process on a free loopback port, for the benchmarks that
// measure it as clients see it (over gRPC, in its own process).
#ifndef ECHO_TESTS_BENCH_ECHOD_CHILD_H_
#define ECHO_TESTS_BENCH_ECHOD_CHILD_H_

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/planner_client.h"

namespace echo::bench {

class EchodChild {
 public:
  // Starts `echod` (the binary beside argv0 when empty) with `flags` added,
  // its stderr to /tmp/<name>.<pid>.log, and waits up to 20 s for health.
  static absl::StatusOr<EchodChild> Start(std::string echod,
                                          const std::string& argv0,
                                          const std::vector<std::string>& flags,
                                          const std::string& name);
  EchodChild(EchodChild&& other) noexcept;
  EchodChild& operator=(EchodChild&&) = delete;
  ~EchodChild();  // Stop()s it if still running

  // SIGTERM, then waits: the wait status (WIFEXITED, WEXITSTATUS), or -1
  // when already stopped or the wait failed.
  int Stop();

  pid_t pid() const { return pid_; }
  const std::string& log() const { return log_; }
  client::ClientOptions ClientOptions(double timeout_seconds) const;

 private:
  EchodChild(pid_t pid, int port, std::string log)
      : pid_(pid), port_(port), log_(std::move(log)) {}

  pid_t pid_;
  int port_;
  std::string log_;
};

}  // namespace echo::bench

#endif  // ECHO_TESTS_BENCH_ECHOD_CHILD_H_
