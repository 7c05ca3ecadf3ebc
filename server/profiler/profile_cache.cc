#include "server/profiler/profile_cache.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "server/profiler/legacy_profile_cache.h"

namespace echo::server {
namespace {

// Renames `path` and SQLite's files beside it (-wal, -shm) to `suffix`.
void MoveAside(const std::string& path, const std::string& suffix) {
  for (const char* part : {"", "-wal", "-shm"}) {
    const std::string from = path + part;
    std::error_code ignored;
    if (std::filesystem::exists(from, ignored)) {
      std::filesystem::rename(from, path + suffix + part, ignored);
    }
  }
}

void AddError(CacheLoadReport* report, const std::string& error) {
  report->error =
      report->error.empty() ? error : absl::StrCat(report->error, "; ", error);
}

}  // namespace

ProfileCache::ProfileCache(std::string path, int64_t max_entries,
                           std::string legacy_path)
    : path_(std::move(path)),
      max_entries_(std::max<int64_t>(max_entries, 1)),
      legacy_path_(std::move(legacy_path)) {}

ProfileCache::~ProfileCache() = default;

void ProfileCache::Touch(std::list<Entry>::iterator entry) {
  entry->used = ++clock_;
  order_.splice(order_.end(), order_, entry);
}

void ProfileCache::Insert(Key key, double seconds, int64_t used) {
  order_.push_back(Entry{key, seconds, used});
  index_[std::move(key)] = std::prev(order_.end());
  while (size() > max_entries_) {
    index_.erase(order_.front().key);
    order_.pop_front();
  }
}

std::optional<double> ProfileCache::Get(const std::string& device,
                                        const std::string& op) {
  auto it = index_.find(Key(device, op));
  if (it == index_.end()) return std::nullopt;
  Touch(it->second);
  return it->second->seconds;
}

bool ProfileCache::Put(const std::string& device, const std::string& op,
                       double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return false;
  Key key(device, op);
  if (auto it = index_.find(key); it != index_.end()) {
    it->second->seconds = seconds;
    Touch(it->second);
    return true;
  }
  Insert(std::move(key), seconds, ++clock_);
  return true;
}

absl::Status ProfileCache::Save() {
  std::vector<StoredTiming> changes = TakeChanges();
  absl::Status written = Write(changes);
  if (!written.ok()) Requeue(changes);
  return written;
}

void ProfileCache::Requeue(const std::vector<StoredTiming>& changes) {
  // Their stamps are unchanged unless used again since (then later still);
  // the ones evicted meanwhile are no longer in order_.
  for (const StoredTiming& change : changes) {
    saved_clock_ = std::min(saved_clock_, change.used - 1);
  }
}

std::vector<StoredTiming> ProfileCache::TakeChanges() {
  std::vector<StoredTiming> changes;
  if (store_ != nullptr) {
    for (auto it = order_.rbegin();
         it != order_.rend() && it->used > saved_clock_; ++it) {
      changes.push_back({it->key.first, it->key.second, it->seconds, it->used});
    }
  }
  saved_clock_ = clock_;
  return changes;
}

absl::Status ProfileCache::Write(const std::vector<StoredTiming>& changes) {
  if (store_ == nullptr || changes.empty()) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(write_mutex_);
  return store_->Write(changes, max_entries_);
}

void ProfileCache::OpenStore(CacheLoadReport* report) {
  std::vector<StoredTiming> rows;
  absl::StatusOr<std::unique_ptr<ProfileStore>> store =
      ProfileStore::Open(path_);
  absl::Status read = store.status();
  if (store.ok()) read = (*store)->ReadAll(&rows);
  if (absl::IsDataLoss(read)) {
    // Keep what reads, and the damaged file for a post-mortem.
    store = nullptr;
    rows.clear();
    ProfileStore::Salvage(path_, &rows).IgnoreError();
    MoveAside(path_, ".damaged");
    AddError(report,
             absl::StrCat("damaged profile cache ", path_, " (", read.message(),
                          "): kept the ", rows.size(),
                          " entries that still read; the damaged file is "
                          "kept as ",
                          path_, ".damaged"));
    store = ProfileStore::Open(path_);
    read = store.ok() ? (*store)->Write(rows, max_entries_) : store.status();
  }
  if (read.ok()) {
    store_ = *std::move(store);
  } else {
    AddError(report, absl::StrCat("cannot use profile cache ", path_, ": ",
                                  read.message(),
                                  "; the profile cache is in memory only "
                                  "(lost at exit)"));
  }
  for (StoredTiming& row : rows) {
    clock_ = std::max(clock_, row.used);
    Insert(Key(std::move(row.device), std::move(row.op)), row.seconds,
           row.used);
  }
  saved_clock_ = clock_;  // what was read is saved
}

void ProfileCache::ImportLegacy(CacheLoadReport* report) {
  std::ifstream in(legacy_path_, std::ios::binary);
  if (!in.is_open()) return;
  std::stringstream contents;
  contents << in.rdbuf();
  LegacyDamage damage;
  absl::StatusOr<LegacyEntries> entries =
      ParseLegacyProfileCache(contents.str(), &damage);
  if (!entries.ok()) {
    AddError(report,
             absl::StrCat("ignoring corrupt old profile cache ", legacy_path_,
                          ": ", entries.status().message(), "; it is kept as ",
                          legacy_path_, ".damaged"));
    MoveAside(legacy_path_, ".damaged");
    return;
  }
  int64_t unknown = 0;
  for (const auto& [key, seconds] : *entries) {
    std::string device, op;
    if (!SplitLegacyKey(key, &device, &op)) {
      ++unknown;
    } else if (!index_.contains(Key(device, op))) {
      Put(device, op, seconds);
      ++report->imported_entries;
    }
  }
  report->dropped_entries = damage.dropped_entries + unknown;
  if (!damage.why.empty() || unknown > 0) {
    AddError(report, absl::StrCat("old profile cache ", legacy_path_,
                                  ": imported ", report->imported_entries,
                                  " entries, dropped ", report->dropped_entries,
                                  damage.why.empty() ? "" : " (", damage.why,
                                  damage.why.empty() ? "" : ")"));
  }
  if (store_ != nullptr && Save().ok()) {
    MoveAside(legacy_path_, ".imported");
  }
}

CacheLoadReport ProfileCache::Load() {
  CacheLoadReport report;
  order_.clear();
  index_.clear();
  clock_ = 0;
  saved_clock_ = 0;
  store_ = nullptr;
  if (path_.empty()) return report;
  struct stat info {};
  if (::stat(path_.c_str(), &info) == 0) {
    report.file_found = true;
    if (S_ISDIR(info.st_mode)) {
      report.error = absl::StrCat("ignoring profile cache ", path_,
                                  ": it is a directory, not a file; remove "
                                  "it or set --profile_cache_dir");
      return report;
    }
  }
  OpenStore(&report);
  if (!legacy_path_.empty()) ImportLegacy(&report);
  report.entries = size();
  return report;
}

}  // namespace echo::server
