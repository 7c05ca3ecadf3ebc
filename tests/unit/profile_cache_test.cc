// The persistent profile cache: LRU bound, round trip, corrupt files ignored,
// and crash safety under SIGKILL in the middle of a write.
#include "server/profiler/profile_cache.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace echo::server {
namespace {

using ::testing::HasSubstr;

class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "echo_cache_XXXXXX";
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
}

int CountTempFiles(const std::string& dir) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (absl::StrContains(entry.path().filename().string(), ".tmp.")) ++count;
  }
  return count;
}

TEST(ProfileCacheTest, EvictsLeastRecentlyUsed) {
  ProfileCache cache("", 3);
  cache.Put("a", 1);
  cache.Put("b", 2);
  cache.Put("c", 3);
  EXPECT_EQ(cache.Get("a"), 1);  // a is now the most recent
  cache.Put("d", 4);             // evicts b
  EXPECT_EQ(cache.size(), 3);
  EXPECT_EQ(cache.Get("b"), std::nullopt);
  EXPECT_EQ(cache.Get("a"), 1);
  EXPECT_EQ(cache.Get("c"), 3);
  EXPECT_EQ(cache.Get("d"), 4);
  cache.Put("c", 30);  // update refreshes: a is now the oldest
  cache.Put("e", 5);
  EXPECT_EQ(cache.Get("a"), std::nullopt);
  EXPECT_EQ(cache.Get("c"), 30);
}

TEST(ProfileCacheTest, RoundTripKeepsValuesKeysAndRecency) {
  TempDir dir;
  const std::string path = dir.path() + "/cache";
  const std::string odd_key =
      "gemm|aten::mm|in=f16[64,128]\t\n\\|attr=\"x\"\xc3\xa9";
  {
    ProfileCache cache(path, 3);
    cache.Put("old", 0.1);
    cache.Put(odd_key, 1.0 / 3.0);
    cache.Put("new", 2.5e-6);
    ASSERT_TRUE(cache.Save().ok());
  }
  ProfileCache loaded(path, 3);
  const CacheLoadReport report = loaded.Load();
  EXPECT_TRUE(report.file_found);
  EXPECT_EQ(report.error, "");
  EXPECT_EQ(report.entries, 3);
  EXPECT_EQ(loaded.Get(odd_key), 1.0 / 3.0);  // exact: %.17g round-trips
  EXPECT_EQ(loaded.Get("new"), 2.5e-6);
  loaded.Put("newest", 7);  // "old" was least recent in the file
  EXPECT_EQ(loaded.Get("old"), std::nullopt);
  EXPECT_THAT(ReadFile(path), ::testing::StartsWith("echo-profile-cache 2\n"));
  EXPECT_EQ(
      std::filesystem::status(path).permissions() & std::filesystem::perms::all,
      std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

TEST(ProfileCacheTest, LoadKeepsTheMostRecentWhenOverTheBound) {
  TempDir dir;
  const std::string path = dir.path() + "/cache";
  ProfileCache big(path, 10);
  for (int i = 0; i < 10; ++i) big.Put(absl::StrCat("k", i), i);
  ASSERT_TRUE(big.Save().ok());
  ProfileCache small(path, 4);
  EXPECT_EQ(small.Load().error, "");
  EXPECT_EQ(small.size(), 4);
  EXPECT_EQ(small.Get("k5"), std::nullopt);
  EXPECT_EQ(small.Get("k6"), 6);
  EXPECT_EQ(small.Get("k9"), 9);
}

TEST(ProfileCacheTest, MissingFileIsAnEmptyCache) {
  TempDir dir;
  ProfileCache cache(dir.path() + "/absent", 10);
  const CacheLoadReport report = cache.Load();
  EXPECT_FALSE(report.file_found);
  EXPECT_EQ(report.error, "");
  EXPECT_EQ(cache.size(), 0);
}

// The cache file's FNV-1a 64, as a version 1 writer computed it.
uint64_t Fnv(absl::string_view data) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : data) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

TEST(ProfileCacheTest, CorruptFilesAreReportedAndIgnored) {
  TempDir dir;
  const std::string path = dir.path() + "/cache";
  const std::string v1_body = "echo-profile-cache 1\nentries 1\n0.5\tk\n";
  const std::pair<std::string, std::string> cases[] = {
      {"", "unknown header"},
      {std::string("\0\0\0\n", 4), "unknown header"},
      {"echo-profile-cache 3\nentries 0\nchecksum 0\n", "unknown header"},
      // Version 1 has no entry checksums: whole or nothing.
      {v1_body + "checksum 0\n", "checksum mismatch"},
      {v1_body, "no checksum line"},
      // Version 2 with no entry that holds.
      {"echo-profile-cache 2\nentries 1\n0.5\tk\t0\nchecksum 0\n",
       "checksum mismatch"},
  };
  for (const auto& [text, fragment] : cases) {
    WriteFile(path, text);
    ProfileCache cache(path, 100);
    cache.Put("stale", 1);
    const CacheLoadReport report = cache.Load();
    EXPECT_TRUE(report.file_found);
    EXPECT_THAT(report.error, HasSubstr("ignoring corrupt profile cache"));
    EXPECT_THAT(report.error, HasSubstr(fragment)) << report.error;
    EXPECT_EQ(cache.size(), 0);
  }
  // An intact version 1 file still loads.
  WriteFile(path, absl::StrFormat("%schecksum %016x\n", v1_body, Fnv(v1_body)));
  ProfileCache v1(path, 100);
  EXPECT_EQ(v1.Load().error, "");
  EXPECT_EQ(v1.Get("k"), 0.5);
}

// Issue 23: one bad byte dropped every entry. Now each entry carries its own
// checksum, and a damaged file keeps the entries that hold.
TEST(ProfileCacheTest, DamagedFilesKeepTheEntriesThatHold) {
  TempDir dir;
  const std::string path = dir.path() + "/cache";
  ProfileCache good(path, 100);
  for (int i = 0; i < 20; ++i) good.Put(absl::StrCat("key", i), i * 1e-3);
  const std::string contents = good.Serialize();
  const size_t line_5 = [&] {
    size_t at = 0;
    for (int i = 0; i < 2 + 5; ++i) at = contents.find('\n', at) + 1;
    return at;
  }();
  std::string flipped = contents;
  flipped[line_5 + 2] ^= 0x01;  // a digit of key5's seconds
  const std::string cut = contents.substr(0, line_5 + 3);  // key0..key4 whole
  const std::string unsummed = contents.substr(0, contents.rfind("checksum"));
  struct Case {
    std::string text;
    std::string why;
    int64_t kept;
  };
  const Case cases[] = {{flipped, "checksum mismatch", 19},
                        {cut, "no final newline", 5},
                        {unsummed, "no checksum line", 20}};
  for (const Case& c : cases) {
    WriteFile(path, c.text);
    ProfileCache cache(path, 100);
    const CacheLoadReport report = cache.Load();
    EXPECT_EQ(report.entries, c.kept) << c.why;
    EXPECT_EQ(report.dropped_entries, 20 - c.kept) << c.why;
    EXPECT_THAT(report.error, HasSubstr("damaged profile cache"));
    EXPECT_THAT(report.error, HasSubstr(c.why));
    EXPECT_EQ(cache.Get("key0"), 0.0);
    if (c.kept == 19) {
      EXPECT_FALSE(cache.Get("key5").has_value());
    }
  }
  WriteFile(path, contents);
  ProfileCache cache(path, 100);
  EXPECT_EQ(cache.Load().error, "");
  EXPECT_EQ(cache.size(), 20);
}

TEST(ProfileCacheTest, ADirectoryInPlaceOfTheFileIsSaidSo) {
  TempDir dir;
  const std::string path = dir.path() + "/cache";
  std::filesystem::create_directory(path);
  ProfileCache cache(path, 10);
  const CacheLoadReport report = cache.Load();
  EXPECT_THAT(report.error, HasSubstr("it is a directory, not a file"));
  EXPECT_EQ(cache.size(), 0);
}

TEST(ProfileCacheTest, LoadRemovesStaleTempFiles) {
  TempDir dir;
  const std::string path = dir.path() + "/cache";
  WriteFile(path + ".tmp.123.0", "half a file");
  WriteFile(dir.path() + "/other.tmp.1", "not ours");
  ProfileCache cache(path, 10);
  cache.Load();
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp.123.0"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/other.tmp.1"));
}

// A child rewrites the cache in a loop, every entry of generation g holding
// g; the parent SIGKILLs it, on even iterations just after a temp file
// appears (inside a write), on odd ones at a random moment. The file must
// always load, whole and from one generation.
TEST(ProfileCacheCrashTest, SigkillMidWriteNeverCorruptsTheFile) {
  TempDir dir;
  const std::string path = dir.path() + "/cache";
  constexpr int kEntries = 20000;
  constexpr int kIterations = 40;
  const auto key = [](int i) {
    return absl::StrCat("gemm|aten::mm|in=f16[", i, ",4096]");
  };
  std::mt19937 random(42);
  int kills_mid_write = 0, loads_with_file = 0;
  for (int iteration = 0; iteration < kIterations; ++iteration) {
    int first_save[2];
    ASSERT_EQ(pipe(first_save), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      close(first_save[0]);
      std::vector<std::string> keys;
      for (int i = 0; i < kEntries; ++i) keys.push_back(key(i));
      ProfileCache cache(path, kEntries);
      for (int generation = 1;; ++generation) {
        const double value = iteration * 1e6 + generation;
        for (const std::string& k : keys) cache.Put(k, value);
        if (!cache.Save().ok()) _exit(3);
        if (generation == 1 && write(first_save[1], "s", 1) != 1) _exit(4);
      }
    }
    close(first_save[1]);
    char byte = 0;
    ASSERT_EQ(read(first_save[0], &byte, 1), 1) << "child never saved";
    close(first_save[0]);
    if (iteration % 2 == 0) {
      const auto give_up =
          std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (CountTempFiles(dir.path()) == 0 &&
             std::chrono::steady_clock::now() < give_up) {
        usleep(20);
      }
      usleep(std::uniform_int_distribution<int>(0, 500)(random));
    } else {
      usleep(std::uniform_int_distribution<int>(0, 20000)(random));
    }
    ASSERT_EQ(kill(child, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited early: " << status;
    if (CountTempFiles(dir.path()) > 0) ++kills_mid_write;

    ProfileCache loaded(path, kEntries);
    const CacheLoadReport report = loaded.Load();
    ASSERT_EQ(report.error, "") << "iteration " << iteration;
    ASSERT_TRUE(report.file_found);
    ++loads_with_file;
    ASSERT_EQ(loaded.size(), kEntries);
    const std::optional<double> first = loaded.Get(key(0));
    ASSERT_TRUE(first.has_value());
    for (int i = 0; i < kEntries; i += 997) {
      ASSERT_EQ(loaded.Get(key(i)), first);
    }
    EXPECT_EQ(CountTempFiles(dir.path()), 0);
  }
  std::printf("%d kills, %d inside a write (temp file left), %d loads\n",
              kIterations, kills_mid_write, loads_with_file);
  // The test only means something if kills did land inside writes.
  EXPECT_GT(kills_mid_write, 0);
}

}  // namespace
}  // namespace echo::server
