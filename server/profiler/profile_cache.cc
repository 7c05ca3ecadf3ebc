#include "server/profiler/profile_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace echo::server {
namespace {

constexpr absl::string_view kHeader = "echo-profile-cache 2";
constexpr absl::string_view kHeaderV1 = "echo-profile-cache 1";
constexpr absl::string_view kChecksumPrefix = "checksum ";

uint64_t Fnv1a64(absl::string_view data) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : data) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::InternalError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// One entry line: "<seconds>\t<C-escaped key>", then in version 2 a tab and
// the FNV-1a 64 of what precedes it. False when the line does not hold.
bool ParseEntry(absl::string_view line, bool with_checksum, std::string* key,
                double* seconds) {
  if (with_checksum) {
    const size_t tab = line.rfind('\t');
    uint64_t checksum = 0;
    if (tab == absl::string_view::npos ||
        !absl::SimpleHexAtoi(line.substr(tab + 1), &checksum) ||
        checksum != Fnv1a64(line.substr(0, tab))) {
      return false;
    }
    line = line.substr(0, tab);
  }
  std::pair<absl::string_view, absl::string_view> fields =
      absl::StrSplit(line, absl::MaxSplits('\t', 1));
  return absl::SimpleAtod(fields.first, seconds) && std::isfinite(*seconds) &&
         *seconds >= 0 && absl::CUnescape(fields.second, key);
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string TempSuffixPrefix(const std::string& path) {
  return BaseName(path) + ".tmp.";
}

void RemoveStaleTempFiles(const std::string& path) {
  const std::string dir = DirName(path);
  const std::string prefix = TempSuffixPrefix(path);
  DIR* handle = opendir(dir.c_str());
  if (handle == nullptr) return;
  while (const dirent* entry = readdir(handle)) {
    if (absl::StartsWith(entry->d_name, prefix)) {
      unlink((dir + "/" + entry->d_name).c_str());
    }
  }
  closedir(handle);
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents) {
  static std::atomic<int64_t> counter{0};
  const std::string temp =
      absl::StrCat(path, ".tmp.", getpid(), ".", counter.fetch_add(1));
  // Owner-only: the cache says which kernels this node runs and how fast.
  const int fd =
      open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("cannot create", temp);
  absl::Status status;
  size_t written = 0;
  while (status.ok() && written < contents.size()) {
    const ssize_t n =
        write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) status = ErrnoError("cannot write", temp);
    if (n > 0) written += static_cast<size_t>(n);
  }
  if (status.ok() && fsync(fd) != 0) status = ErrnoError("cannot fsync", temp);
  if (close(fd) != 0 && status.ok()) status = ErrnoError("cannot close", temp);
  if (status.ok() && rename(temp.c_str(), path.c_str()) != 0) {
    status = ErrnoError("cannot rename to", path);
  }
  if (!status.ok()) {
    unlink(temp.c_str());
    return status;
  }
  // The rename is durable only once the directory entry is.
  const std::string dir = DirName(path);
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return ErrnoError("cannot open directory", dir);
  if (fsync(dir_fd) != 0) status = ErrnoError("cannot fsync directory", dir);
  close(dir_fd);
  return status;
}

ProfileCache::ProfileCache(std::string path, int64_t max_entries)
    : path_(std::move(path)), max_entries_(std::max<int64_t>(max_entries, 1)) {}

std::optional<double> ProfileCache::Get(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  order_.splice(order_.end(), order_, it->second);
  return it->second->second;
}

void ProfileCache::Put(const std::string& key, double seconds) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    it->second->second = seconds;
    order_.splice(order_.end(), order_, it->second);
    return;
  }
  order_.emplace_back(key, seconds);
  index_[key] = std::prev(order_.end());
  while (size() > max_entries_) {
    index_.erase(order_.front().first);
    order_.pop_front();
  }
}

std::string ProfileCache::Serialize() const {
  std::string body = absl::StrCat(kHeader, "\nentries ", order_.size(), "\n");
  for (const auto& [key, seconds] : order_) {
    const std::string entry =
        absl::StrFormat("%.17g\t%s", seconds, absl::CEscape(key));
    absl::StrAppendFormat(&body, "%s\t%016x\n", entry, Fnv1a64(entry));
  }
  absl::StrAppendFormat(&body, "%s%016x\n", kChecksumPrefix, Fnv1a64(body));
  return body;
}

absl::Status ProfileCache::Parse(absl::string_view contents,
                                 Damage* damage_out) {
  auto corrupt = [](absl::string_view why) { return absl::DataLossError(why); };
  std::vector<absl::string_view> lines =
      absl::StrSplit(contents, '\n', absl::SkipEmpty());
  const bool v2 = !lines.empty() && lines[0] == kHeader;
  if (!v2 && (lines.empty() || lines[0] != kHeaderV1)) {
    return corrupt(absl::StrCat("unknown header, expected '", kHeader, "'"));
  }
  // The whole file's checksum: intact, or why not.
  std::string damage;
  if (!absl::EndsWith(contents, "\n")) {
    damage = "no final newline (truncated)";
  } else {
    const absl::string_view lines_text =
        contents.substr(0, contents.size() - 1);
    const size_t body_end = lines_text.rfind('\n');
    const size_t checksum_start =
        body_end == absl::string_view::npos ? 0 : body_end + 1;
    absl::string_view checksum_line = lines_text.substr(checksum_start);
    uint64_t checksum = 0;
    if (!absl::ConsumePrefix(&checksum_line, kChecksumPrefix) ||
        !absl::SimpleHexAtoi(checksum_line, &checksum)) {
      damage = "no checksum line (truncated)";
    } else if (checksum != Fnv1a64(contents.substr(0, checksum_start))) {
      damage = "checksum mismatch";
    }
  }
  if (!damage.empty() && !v2) return corrupt(damage);
  // Entry lines: after the header and the count, before the checksum.
  size_t end = lines.size();
  if (end > 0 && absl::StartsWith(lines[end - 1], kChecksumPrefix)) --end;
  int64_t count = -1;
  absl::string_view count_line = lines.size() > 1 ? lines[1] : "";
  const bool counted = absl::ConsumePrefix(&count_line, "entries ") &&
                       absl::SimpleAtoi(count_line, &count);
  if (damage.empty() && (!counted || count != static_cast<int64_t>(end) - 2)) {
    return corrupt("entry count does not match the entries");
  }
  std::vector<std::pair<std::string, double>> entries;
  int64_t bad = 0;
  for (size_t i = 2; i < end; ++i) {
    std::string key;
    double seconds = 0;
    if (ParseEntry(lines[i], v2, &key, &seconds)) {
      entries.emplace_back(std::move(key), seconds);
    } else if (damage.empty()) {
      return corrupt(absl::StrCat("bad entry on line ", i + 1));
    } else {
      ++bad;
    }
  }
  if (!damage.empty()) {
    // Entries the file said it had and that are gone count as dropped too.
    bad = std::max<int64_t>(
        bad, counted ? count - static_cast<int64_t>(entries.size()) : 0);
    if (entries.empty()) return corrupt(damage);
  }
  if (damage_out != nullptr) *damage_out = {std::move(damage), bad};
  order_.clear();
  index_.clear();
  for (auto& [key, seconds] : entries) Put(key, seconds);
  return absl::OkStatus();
}

CacheLoadReport ProfileCache::Load() {
  CacheLoadReport report;
  order_.clear();
  index_.clear();
  if (path_.empty()) return report;
  RemoveStaleTempFiles(path_);
  std::ifstream in(path_, std::ios::binary);
  if (!in.is_open()) {
    if (errno != ENOENT) {
      report.error =
          absl::StrCat("cannot open ", path_, ": ", std::strerror(errno));
    }
    return report;
  }
  report.file_found = true;
  struct stat info {};
  if (::stat(path_.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    report.error = absl::StrCat("ignoring profile cache ", path_,
                                ": it is a directory, not a file; remove it "
                                "or set --profile_cache_dir");
    return report;
  }
  std::stringstream contents;
  contents << in.rdbuf();
  Damage damage;
  if (absl::Status s = Parse(contents.str(), &damage); !s.ok()) {
    report.error = absl::StrCat("ignoring corrupt profile cache ", path_, ": ",
                                s.message());
    return report;
  }
  report.entries = size();
  if (!damage.why.empty()) {
    report.dropped_entries = damage.dropped_entries;
    report.error = absl::StrCat("damaged profile cache ", path_, " (",
                                damage.why, "): kept ", report.entries,
                                " entries whose own checksums hold, dropped ",
                                damage.dropped_entries);
  }
  return report;
}

absl::Status ProfileCache::Save() const {
  if (path_.empty()) return absl::OkStatus();
  return WriteFileAtomically(path_, Serialize());
}

}  // namespace echo::server
