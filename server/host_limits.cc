#include "server/host_limits.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/read_file.h"

namespace echo::server {
namespace {

// v1's "no limit" is the largest page-aligned int64, not a word.
constexpr int64_t kUnlimitedV1 = int64_t{1} << 62;

std::optional<std::string> ReadSmallFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile("cgroup", path);
  if (!text.ok()) return std::nullopt;  // no such limit here
  return *std::move(text);
}

// `dir` and each directory above it up to `root`, innermost first.
std::vector<std::string> DirsUpTo(const std::string& root,
                                  absl::string_view path) {
  std::vector<std::string> parts;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    parts.emplace_back(part);
  }
  std::vector<std::string> dirs;
  for (size_t keep = parts.size() + 1; keep-- > 0;) {
    std::string dir = root;
    for (size_t i = 0; i < keep; ++i) dir += "/" + parts[i];
    dirs.push_back(std::move(dir));
  }
  return dirs;
}

template <typename T>
void KeepSmaller(std::optional<T>& limit, std::optional<T> value) {
  if (value.has_value() && (!limit.has_value() || *value < *limit)) {
    limit = value;
  }
}

// Reads `file` in each of `dirs`, parses it, and keeps the smallest limit.
template <typename T, typename Parser>
void KeepSmallestOf(const std::vector<std::string>& dirs, const char* file,
                    Parser parse, std::optional<T>& limit) {
  for (const std::string& dir : dirs) {
    if (std::optional<std::string> text = ReadSmallFile(dir + "/" + file)) {
      KeepSmaller(limit, parse(*text));
    }
  }
}

std::optional<double> CpuQuotaV1(const std::string& dir) {
  const std::optional<std::string> quota =
      ReadSmallFile(dir + "/cpu.cfs_quota_us");
  const std::optional<std::string> period =
      ReadSmallFile(dir + "/cpu.cfs_period_us");
  if (!quota.has_value() || !period.has_value()) return std::nullopt;
  int64_t q = 0;
  int64_t p = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*quota), &q) ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(*period), &p) || q <= 0 ||
      p <= 0) {
    return std::nullopt;
  }
  return static_cast<double>(q) / static_cast<double>(p);
}

int AffinityCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    return std::max(1, CPU_COUNT(&set));
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace

std::optional<double> ParseCpuMax(absl::string_view text) {
  std::vector<absl::string_view> words =
      absl::StrSplit(absl::StripAsciiWhitespace(text), ' ', absl::SkipEmpty());
  if (words.empty() || words[0] == "max") return std::nullopt;
  int64_t quota = 0;
  int64_t period = 100000;  // cpu.max's default when only the quota is given
  if (!absl::SimpleAtoi(words[0], &quota) || quota <= 0) return std::nullopt;
  if (words.size() > 1 &&
      (!absl::SimpleAtoi(words[1], &period) || period <= 0)) {
    return std::nullopt;
  }
  return static_cast<double>(quota) / static_cast<double>(period);
}

std::optional<int64_t> ParseMemoryLimit(absl::string_view text) {
  int64_t bytes = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &bytes) ||
      bytes <= 0 || bytes >= kUnlimitedV1) {
    return std::nullopt;
  }
  return bytes;
}

HostLimits ReadHostLimits(absl::string_view proc_self_cgroup,
                          const std::string& cgroup_root, int affinity_cpus) {
  HostLimits limits;
  for (absl::string_view line :
       absl::StrSplit(proc_self_cgroup, '\n', absl::SkipEmpty())) {
    // "hierarchy-id:controllers:path"; v2's has no controllers.
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3) continue;
    const absl::string_view controllers = fields[1];
    const absl::string_view path = fields[2];
    if (controllers.empty()) {
      const std::vector<std::string> dirs = DirsUpTo(cgroup_root, path);
      KeepSmallestOf(dirs, "cpu.max", ParseCpuMax, limits.cpu_quota);
      KeepSmallestOf(dirs, "memory.max", ParseMemoryLimit,
                     limits.memory_limit_bytes);
      continue;
    }
    for (absl::string_view controller : absl::StrSplit(controllers, ',')) {
      if (controller == "cpu") {
        for (const std::string& dir : DirsUpTo(cgroup_root + "/cpu", path)) {
          KeepSmaller(limits.cpu_quota, CpuQuotaV1(dir));
        }
      } else if (controller == "memory") {
        KeepSmallestOf(DirsUpTo(cgroup_root + "/memory", path),
                       "memory.limit_in_bytes", ParseMemoryLimit,
                       limits.memory_limit_bytes);
      }
    }
  }
  limits.cpus = std::max(1, affinity_cpus);
  if (limits.cpu_quota.has_value()) {
    limits.cpus = std::max(
        1,
        std::min(limits.cpus, static_cast<int>(std::ceil(*limits.cpu_quota))));
  }
  return limits;
}

HostLimits ReadHostLimits() {
  return ReadHostLimits(ReadSmallFile("/proc/self/cgroup").value_or(""),
                        "/sys/fs/cgroup", AffinityCpus());
}

}  // namespace echo::server
