// What the host lets echod use: the CPUs it may run on and its memory,
// under the cgroup (a pod's CPU and memory limits) as well as the machine.
// Read once at start; the worker pool, the OPTIMAL children and the memory
// budget are sized from it.
#ifndef ECHO_SERVER_HOST_LIMITS_H_
#define ECHO_SERVER_HOST_LIMITS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace echo::server {

struct HostLimits {
  // CPUs this process may run on (its affinity mask), capped by the
  // cgroup's CPU quota rounded up; at least 1.
  int cpus = 1;
  // The cgroup's CPU quota in CPUs (quota / period), when it has one.
  std::optional<double> cpu_quota;
  // The cgroup's memory limit, when it has one (the tightest along the
  // cgroup's path).
  std::optional<int64_t> memory_limit_bytes;
};

// `proc_self_cgroup` is /proc/self/cgroup's text and `cgroup_root` the
// cgroup file system's mount point (tests pass a fake tree). Understands
// cgroup v2 (cpu.max, memory.max) and v1 (cpu.cfs_quota_us,
// memory.limit_in_bytes); anything unreadable counts as no limit.
HostLimits ReadHostLimits(absl::string_view proc_self_cgroup,
                          const std::string& cgroup_root, int affinity_cpus);
// This process's, from /proc/self/cgroup and /sys/fs/cgroup.
HostLimits ReadHostLimits();

// One cgroup file's limit: cpu.max ("max 100000" | "150000 100000") in
// CPUs, memory.max ("max" | bytes) or v1's memory.limit_in_bytes (a value
// near 2^63 means none). nullopt: no limit or not understood.
std::optional<double> ParseCpuMax(absl::string_view text);
std::optional<int64_t> ParseMemoryLimit(absl::string_view text);

}  // namespace echo::server

#endif  // ECHO_SERVER_HOST_LIMITS_H_
