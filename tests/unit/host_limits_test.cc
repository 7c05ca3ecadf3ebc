// The CPUs and memory echod sizes itself by, read from fake cgroup trees.
#include "server/host_limits.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace echo::server {
namespace {

class FakeCgroup {
 public:
  FakeCgroup()
      : root_(
            std::filesystem::temp_directory_path() /
            ("echo_cgroup_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    std::filesystem::remove_all(root_);
  }
  ~FakeCgroup() { std::filesystem::remove_all(root_); }
  void Write(const std::string& relative, const std::string& text) {
    const std::filesystem::path path = root_ / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  std::string root() const { return root_.string(); }

 private:
  std::filesystem::path root_;
};

TEST(HostLimitsTest, ParsesCgroupFiles) {
  EXPECT_FALSE(ParseCpuMax("max 100000\n").has_value());
  EXPECT_DOUBLE_EQ(*ParseCpuMax("150000 100000\n"), 1.5);
  EXPECT_DOUBLE_EQ(*ParseCpuMax("50000"), 0.5);
  EXPECT_FALSE(ParseCpuMax("lots").has_value());
  EXPECT_FALSE(ParseMemoryLimit("max\n").has_value());
  EXPECT_EQ(*ParseMemoryLimit("4294967296\n"), int64_t{4} << 30);
  // v1's "unlimited".
  EXPECT_FALSE(ParseMemoryLimit("9223372036854771712").has_value());
  EXPECT_FALSE(ParseMemoryLimit("-1").has_value());
}

// A pod's limits under cgroup v2: the tightest along the path counts, and
// the quota caps the affinity's CPUs (rounded up).
TEST(HostLimitsTest, CgroupV2TakesTheTightestLimitOnThePath) {
  FakeCgroup cgroup;
  cgroup.Write("kubepods/cpu.max", "400000 100000\n");
  cgroup.Write("kubepods/memory.max", "8589934592\n");
  cgroup.Write("kubepods/pod1/cpu.max", "150000 100000\n");
  cgroup.Write("kubepods/pod1/memory.max", "max\n");
  const HostLimits limits =
      ReadHostLimits("0::/kubepods/pod1\n", cgroup.root(), 16);
  ASSERT_TRUE(limits.cpu_quota.has_value());
  EXPECT_DOUBLE_EQ(*limits.cpu_quota, 1.5);
  EXPECT_EQ(limits.cpus, 2);
  EXPECT_EQ(limits.memory_limit_bytes, int64_t{8} << 30);
}

TEST(HostLimitsTest, CgroupV1QuotaAndMemory) {
  FakeCgroup cgroup;
  cgroup.Write("cpu/docker/abc/cpu.cfs_quota_us", "300000\n");
  cgroup.Write("cpu/docker/abc/cpu.cfs_period_us", "100000\n");
  cgroup.Write("memory/docker/abc/memory.limit_in_bytes", "2147483648\n");
  cgroup.Write("memory/memory.limit_in_bytes", "9223372036854771712\n");
  const HostLimits limits = ReadHostLimits(
      "5:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n", cgroup.root(), 8);
  EXPECT_EQ(limits.cpus, 3);
  EXPECT_EQ(limits.memory_limit_bytes, int64_t{2} << 30);
}

// No quota (v1's -1, or nothing readable): the affinity's CPUs, never 0.
TEST(HostLimitsTest, WithoutLimitsTheAffinityCounts) {
  FakeCgroup cgroup;
  cgroup.Write("cpu/cpu.cfs_quota_us", "-1\n");
  cgroup.Write("cpu/cpu.cfs_period_us", "100000\n");
  HostLimits limits = ReadHostLimits("1:cpu:/\n", cgroup.root(), 6);
  EXPECT_EQ(limits.cpus, 6);
  EXPECT_FALSE(limits.cpu_quota.has_value());
  EXPECT_FALSE(limits.memory_limit_bytes.has_value());
  limits = ReadHostLimits("", "/nonexistent", 0);
  EXPECT_EQ(limits.cpus, 1);
  // A quota below one CPU still leaves one worker.
  cgroup.Write("cpu.max", "20000 100000\n");
  EXPECT_EQ(ReadHostLimits("0::/\n", cgroup.root(), 4).cpus, 1);
}

}  // namespace
}  // namespace echo::server
