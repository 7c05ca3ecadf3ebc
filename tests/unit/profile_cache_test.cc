// The persistent profile cache: LRU bound, round trip through its SQLite
// database, damaged and foreign files, the old text file's import, and no
// saved entry lost under SIGKILL in the middle of a save.
#include "server/profiler/profile_cache.h"

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
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
#include "server/profiler/legacy_profile_cache.h"

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

// What the sqlite3 CLI prints for `sql` on the database at `path`, as a
// user reads the cache.
std::string Sqlite3(const std::string& path, const std::string& sql) {
  const std::string command =
      absl::StrCat("sqlite3 '", path, "' \"", sql, "\" 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0)
    out.append(buffer, n);
  const int status = pclose(pipe);
  if (status != 0) absl::StrAppend(&out, "[sqlite3 exit ", status, "]");
  return out;
}

constexpr char kDevice[] = "NVIDIA H100|cc 9.0|driver 580|cudart 13000";

TEST(ProfileCacheTest, EvictsLeastRecentlyUsed) {
  ProfileCache cache("", 3);
  cache.Put(kDevice, "a", 1);
  cache.Put(kDevice, "b", 2);
  cache.Put(kDevice, "c", 3);
  EXPECT_EQ(cache.Get(kDevice, "a"), 1);  // a is now the most recent
  cache.Put(kDevice, "d", 4);             // evicts b
  EXPECT_EQ(cache.size(), 3);
  EXPECT_EQ(cache.Get(kDevice, "b"), std::nullopt);
  EXPECT_EQ(cache.Get(kDevice, "a"), 1);
  EXPECT_EQ(cache.Get(kDevice, "c"), 3);
  EXPECT_EQ(cache.Get(kDevice, "d"), 4);
  cache.Put(kDevice, "c", 30);  // update refreshes: a is now the oldest
  cache.Put(kDevice, "e", 5);
  EXPECT_EQ(cache.Get(kDevice, "a"), std::nullopt);
  EXPECT_EQ(cache.Get(kDevice, "c"), 30);
  // The device is part of the key.
  EXPECT_EQ(cache.Get("another GPU", "c"), std::nullopt);
}

TEST(ProfileCacheTest, RoundTripKeepsValuesKeysAndRecency) {
  TempDir dir;
  const std::string path = dir.path() + "/cache.db";
  const std::string odd_op =
      "gemm|aten::mm|in=f16[64,128]\t\n\\|attr=\"x\"\xc3\xa9";
  {
    ProfileCache cache(path, 3);
    EXPECT_EQ(cache.Load().error, "");
    cache.Put(kDevice, "old", 0.1);
    cache.Put(kDevice, odd_op, 1.0 / 3.0);
    cache.Put(kDevice, "new", 2.5e-6);
    ASSERT_TRUE(cache.Save().ok());
  }
  ProfileCache loaded(path, 3);
  const CacheLoadReport report = loaded.Load();
  EXPECT_TRUE(report.file_found);
  EXPECT_EQ(report.error, "");
  EXPECT_EQ(report.entries, 3);
  EXPECT_EQ(loaded.Get(kDevice, odd_op), 1.0 / 3.0);  // exact: a REAL
  EXPECT_EQ(loaded.Get(kDevice, "new"), 2.5e-6);
  loaded.Put(kDevice, "newest", 7);  // "old" was least recent in the file
  EXPECT_EQ(loaded.Get(kDevice, "old"), std::nullopt);
  EXPECT_THAT(ReadFile(path), ::testing::StartsWith("SQLite format 3"));
  EXPECT_EQ(
      std::filesystem::status(path).permissions() & std::filesystem::perms::all,
      std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

// Each save writes what changed, gets included: recency survives a restart.
TEST(ProfileCacheTest, RecencyOfGetsSurvivesARestart) {
  TempDir dir;
  const std::string path = dir.path() + "/cache.db";
  {
    ProfileCache cache(path, 3);
    cache.Load();
    for (const char* op : {"a", "b", "c"}) cache.Put(kDevice, op, 1);
    ASSERT_TRUE(cache.Save().ok());
    EXPECT_EQ(cache.Get(kDevice, "a"), 1);  // b is now the oldest
    cache.Put(kDevice, "d", 4);             // evicts b, here and on disk
    ASSERT_TRUE(cache.Save().ok());
    EXPECT_TRUE(cache.TakeChanges().empty());
  }
  ProfileCache loaded(path, 3);
  EXPECT_EQ(loaded.Load().entries, 3);
  EXPECT_EQ(loaded.Get(kDevice, "b"), std::nullopt);
  EXPECT_EQ(loaded.Get(kDevice, "a"), 1);
  EXPECT_EQ(Sqlite3(path, "SELECT op FROM op_timings ORDER BY used"),
            "c\na\nd\n");
}

TEST(ProfileCacheTest, TimesThatAreNotNumbersAreNotStored) {
  ProfileCache cache("", 10);
  EXPECT_FALSE(cache.Put(kDevice, "nan", std::nan("")));
  EXPECT_FALSE(cache.Put(kDevice, "negative", -1e-6));
  EXPECT_FALSE(cache.Put(kDevice, "infinite", HUGE_VAL));
  EXPECT_TRUE(cache.Put(kDevice, "zero", 0));
  EXPECT_EQ(cache.size(), 1);
}

// A save that failed (a full disk, a lock held too long) leaves its entries
// to the next one; an entry evicted meanwhile is not written back.
TEST(ProfileCacheTest, AFailedSavesEntriesGoWithTheNextSave) {
  TempDir dir;
  const std::string path = dir.path() + "/cache.db";
  ProfileCache cache(path, 2);
  cache.Load();
  cache.Put(kDevice, "a", 1);
  cache.Put(kDevice, "b", 2);
  const std::vector<StoredTiming> failed = cache.TakeChanges();
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_TRUE(cache.TakeChanges().empty());
  cache.Put(kDevice, "c", 3);  // evicts a
  cache.Requeue(failed);
  std::vector<std::string> ops;
  for (const StoredTiming& change : cache.TakeChanges()) {
    ops.push_back(change.op);
  }
  std::sort(ops.begin(), ops.end());
  EXPECT_EQ(ops, std::vector<std::string>({"b", "c"}));
}

TEST(ProfileCacheTest, TheSqlite3CliReadsTheCache) {
  TempDir dir;
  const std::string path = dir.path() + "/cache.db";
  ProfileCache cache(path, 10);
  cache.Load();
  cache.Put(kDevice, "gemm|f16[64,64]", 1.5e-5);
  cache.Put("CPU", "conv", 0.25);
  ASSERT_TRUE(cache.Save().ok());
  EXPECT_EQ(
      Sqlite3(path, "SELECT device, op, seconds FROM op_timings ORDER BY used"),
      absl::StrCat(kDevice, "|gemm|f16[64,64]|1.5e-05\nCPU|conv|0.25\n"));
  EXPECT_EQ(Sqlite3(path, "PRAGMA journal_mode; PRAGMA user_version"),
            "wal\n1\n");
}

TEST(ProfileCacheTest, LoadKeepsTheMostRecentWhenOverTheBound) {
  TempDir dir;
  const std::string path = dir.path() + "/cache.db";
  ProfileCache big(path, 10);
  big.Load();
  for (int i = 0; i < 10; ++i) big.Put(kDevice, absl::StrCat("k", i), i);
  ASSERT_TRUE(big.Save().ok());
  ProfileCache small(path, 4);
  EXPECT_EQ(small.Load().error, "");
  EXPECT_EQ(small.size(), 4);
  EXPECT_EQ(small.Get(kDevice, "k5"), std::nullopt);
  EXPECT_EQ(small.Get(kDevice, "k6"), 6);
  EXPECT_EQ(small.Get(kDevice, "k9"), 9);
}

TEST(ProfileCacheTest, MissingFileIsAnEmptyCache) {
  TempDir dir;
  ProfileCache cache(dir.path() + "/absent.db", 10);
  const CacheLoadReport report = cache.Load();
  EXPECT_FALSE(report.file_found);
  EXPECT_EQ(report.error, "");
  EXPECT_EQ(cache.size(), 0);
}

// A file that is not a database (a disk error, a stray copy) is moved
// aside, said, and replaced by a working cache.
TEST(ProfileCacheTest, AFileThatIsNotADatabaseIsMovedAsideAndReplaced) {
  TempDir dir;
  const std::string path = dir.path() + "/cache.db";
  WriteFile(path, std::string(8192, 'x'));
  ProfileCache cache(path, 10);
  const CacheLoadReport report = cache.Load();
  EXPECT_THAT(report.error, HasSubstr("damaged profile cache"));
  EXPECT_THAT(report.error, HasSubstr("not a database"));
  EXPECT_THAT(report.error, HasSubstr("kept the 0 entries that still read"));
  EXPECT_EQ(ReadFile(path + ".damaged"), std::string(8192, 'x'));
  cache.Put(kDevice, "a", 1);
  ASSERT_TRUE(cache.Save().ok());
  ProfileCache reloaded(path, 10);
  EXPECT_EQ(reloaded.Load().error, "");
  EXPECT_EQ(reloaded.Get(kDevice, "a"), 1);
}

// A database with a damaged page keeps the entries that still read.
TEST(ProfileCacheTest, ADamagedDatabaseKeepsTheEntriesThatRead) {
  TempDir dir;
  const std::string path = dir.path() + "/cache.db";
  constexpr int kEntries = 2000;
  {
    ProfileCache cache(path, kEntries);
    cache.Load();
    for (int i = 0; i < kEntries; ++i) {
      cache.Put(kDevice, absl::StrFormat("op%05d", i), i * 1e-6);
    }
    ASSERT_TRUE(cache.Save().ok());
  }
  // Closed: the log is checkpointed into the file. Its last page is a leaf
  // of the latest entries; zero most of it.
  std::string contents = ReadFile(path);
  ASSERT_GT(contents.size(), 8 * 4096u);
  const size_t last_page = contents.size() - 4096;
  for (size_t i = last_page; i < contents.size(); ++i) contents[i] = '\0';
  WriteFile(path, contents);
  ProfileCache cache(path, kEntries);
  const CacheLoadReport report = cache.Load();
  EXPECT_THAT(report.error, HasSubstr("damaged profile cache"));
  EXPECT_GT(report.entries, 0);
  EXPECT_LT(report.entries, kEntries);
  EXPECT_THAT(report.error,
              HasSubstr(absl::StrCat("kept the ", report.entries, " entries")));
  EXPECT_TRUE(std::filesystem::exists(path + ".damaged"));
  EXPECT_EQ(cache.Get(kDevice, "op00000"), 0.0);
  ProfileCache reloaded(path, kEntries);
  EXPECT_EQ(reloaded.Load().error, "");
  EXPECT_EQ(reloaded.size(), report.entries);
}

TEST(ProfileCacheTest, ADatabaseOfANewerEchodIsLeftAlone) {
  TempDir dir;
  const std::string path = dir.path() + "/cache.db";
  {
    ProfileCache cache(path, 10);
    cache.Load();
    cache.Put(kDevice, "a", 1);
    ASSERT_TRUE(cache.Save().ok());
  }
  ASSERT_EQ(Sqlite3(path, "PRAGMA user_version = 2"), "");
  ProfileCache cache(path, 10);
  const CacheLoadReport report = cache.Load();
  EXPECT_THAT(report.error, HasSubstr("schema version 2, written by a newer"));
  EXPECT_THAT(report.error, HasSubstr("in memory only"));
  EXPECT_EQ(cache.size(), 0);
  cache.Put(kDevice, "b", 2);
  EXPECT_TRUE(cache.Save().ok());
  EXPECT_EQ(Sqlite3(path, "SELECT op FROM op_timings"), "a\n");
}

TEST(ProfileCacheTest, ADirectoryInPlaceOfTheFileIsSaidSo) {
  TempDir dir;
  const std::string path = dir.path() + "/cache.db";
  std::filesystem::create_directory(path);
  ProfileCache cache(path, 10);
  const CacheLoadReport report = cache.Load();
  EXPECT_THAT(report.error, HasSubstr("it is a directory, not a file"));
  EXPECT_EQ(cache.size(), 0);
}

// The text file of echod before the database is imported once: its keys
// split into device and op, a key of no known form dropped and counted.
TEST(ProfileCacheTest, ImportsTheOldTextCacheOnce) {
  TempDir dir;
  const std::string path = dir.path() + "/profile_cache.db";
  const std::string legacy = dir.path() + "/profile_cache.v1";
  const std::string device =
      "NVIDIA H200|cc 9.0|driver 580.65|cudart 13000|cublas 130000|cudnn 91000";
  WriteFile(legacy, SerializeLegacyProfileCache(
                        {{absl::StrCat(device, "|gemm|aten::mm|f16"), 2e-5},
                         {"no device key", 1},
                         {absl::StrCat(device, "|conv|x"), 3e-4}}));
  {
    ProfileCache cache(path, 10, legacy);
    const CacheLoadReport report = cache.Load();
    EXPECT_EQ(report.imported_entries, 2);
    EXPECT_EQ(report.dropped_entries, 1);
    EXPECT_THAT(report.error, HasSubstr("imported 2 entries, dropped 1"));
    EXPECT_EQ(cache.Get(device, "gemm|aten::mm|f16"), 2e-5);
  }
  EXPECT_FALSE(std::filesystem::exists(legacy));
  EXPECT_TRUE(std::filesystem::exists(legacy + ".imported"));
  ProfileCache reloaded(path, 10, legacy);
  const CacheLoadReport report = reloaded.Load();
  EXPECT_EQ(report.error, "");
  EXPECT_EQ(report.imported_entries, 0);
  EXPECT_EQ(reloaded.Get(device, "conv|x"), 3e-4);
  EXPECT_EQ(reloaded.size(), 2);
}

// The cache file's FNV-1a 64, as a version 1 writer computed it.
uint64_t Fnv(absl::string_view data) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : data) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

TEST(LegacyProfileCacheTest, CorruptFilesAreRefused) {
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
    const absl::StatusOr<LegacyEntries> entries = ParseLegacyProfileCache(text);
    ASSERT_FALSE(entries.ok()) << text;
    EXPECT_THAT(entries.status().message(), HasSubstr(fragment));
  }
  // An intact version 1 file still parses.
  const absl::StatusOr<LegacyEntries> v1 = ParseLegacyProfileCache(
      absl::StrFormat("%schecksum %016x\n", v1_body, Fnv(v1_body)));
  ASSERT_TRUE(v1.ok());
  EXPECT_EQ(*v1, LegacyEntries({{"k", 0.5}}));
}

// Issue 23: one bad byte dropped every entry. Each entry carries its own
// checksum, and a damaged file keeps the entries that hold.
TEST(LegacyProfileCacheTest, DamagedFilesKeepTheEntriesThatHold) {
  LegacyEntries good;
  for (int i = 0; i < 20; ++i) good.emplace_back(absl::StrCat("key", i), i);
  const std::string contents = SerializeLegacyProfileCache(good);
  const size_t line_5 = [&] {
    size_t at = 0;
    for (int i = 0; i < 2 + 5; ++i) at = contents.find('\n', at) + 1;
    return at;
  }();
  std::string flipped = contents;
  flipped[line_5] ^= 0x01;  // a digit of key5's seconds
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
    LegacyDamage damage;
    const absl::StatusOr<LegacyEntries> entries =
        ParseLegacyProfileCache(c.text, &damage);
    ASSERT_TRUE(entries.ok()) << c.why;
    EXPECT_EQ(static_cast<int64_t>(entries->size()), c.kept) << c.why;
    EXPECT_EQ(damage.dropped_entries, 20 - c.kept) << c.why;
    EXPECT_THAT(damage.why, HasSubstr(c.why));
    EXPECT_EQ(entries->front(), good.front());
  }
  LegacyDamage damage;
  ASSERT_TRUE(ParseLegacyProfileCache(contents, &damage).ok());
  EXPECT_EQ(damage.why, "");
}

// A child saves the cache in a loop, generation g writing g into every
// entry; the parent SIGKILLs it, on even iterations just after a save
// begins, on odd ones at a random moment. The database must always load,
// whole, from one generation, and never older than the last save the child
// finished.
TEST(ProfileCacheCrashTest, SigkillMidSaveLosesNoSavedEntry) {
  TempDir dir;
  const std::string path = dir.path() + "/cache.db";
  constexpr int kEntries = 5000;
  constexpr int kIterations = 30;
  const auto op = [](int i) {
    return absl::StrCat("gemm|aten::mm|in=f16[", i, ",4096]");
  };
  // Shared with the child: whether a save is under way, and the last
  // generation it finished.
  struct Progress {
    volatile int saving;
    volatile int64_t saved;
  };
  auto* progress = static_cast<Progress*>(
      mmap(nullptr, sizeof(Progress), PROT_READ | PROT_WRITE,
           MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(progress, MAP_FAILED);
  std::mt19937 random(42);
  int kills_mid_save = 0;
  for (int iteration = 0; iteration < kIterations; ++iteration) {
    progress->saving = 0;
    progress->saved = 0;
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      std::vector<std::string> ops;
      for (int i = 0; i < kEntries; ++i) ops.push_back(op(i));
      ProfileCache cache(path, kEntries);
      if (!cache.Load().error.empty()) _exit(2);
      for (int64_t generation = 1;; ++generation) {
        const double value = iteration * 1e6 + generation;
        for (const std::string& o : ops) cache.Put(kDevice, o, value);
        progress->saving = 1;
        if (!cache.Save().ok()) _exit(3);
        progress->saved = static_cast<int64_t>(value);
        progress->saving = 0;
      }
    }
    const auto give_up =
        std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (progress->saved == 0 && std::chrono::steady_clock::now() < give_up) {
      usleep(100);
    }
    ASSERT_NE(progress->saved, 0) << "child never saved";
    if (iteration % 2 == 0) {
      while (progress->saving == 0 &&
             std::chrono::steady_clock::now() < give_up) {
        usleep(20);
      }
      usleep(std::uniform_int_distribution<int>(0, 5000)(random));
    } else {
      usleep(std::uniform_int_distribution<int>(0, 20000)(random));
    }
    ASSERT_EQ(kill(child, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited early: " << status;
    if (progress->saving != 0) ++kills_mid_save;
    const int64_t last_saved = progress->saved;

    ProfileCache loaded(path, kEntries);
    const CacheLoadReport report = loaded.Load();
    ASSERT_EQ(report.error, "") << "iteration " << iteration;
    ASSERT_EQ(loaded.size(), kEntries);
    const std::optional<double> first = loaded.Get(kDevice, op(0));
    ASSERT_TRUE(first.has_value());
    EXPECT_GE(*first, last_saved) << "a saved generation was lost";
    for (int i = 0; i < kEntries; i += 97) {
      ASSERT_EQ(loaded.Get(kDevice, op(i)), first);
    }
  }
  munmap(progress, sizeof(Progress));
  std::printf("%d kills, %d inside a save\n", kIterations, kills_mid_save);
  // The test only means something if kills did land inside saves.
  EXPECT_GT(kills_mid_save, 0);
}

}  // namespace
}  // namespace echo::server
