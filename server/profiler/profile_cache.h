// A persistent, size-bounded cache of profiled op times.
//
// Entries are keyed by device (the profiler's device key: GPU model,
// driver and library versions) and op (planner::OpSignature). They live in
// memory, least recently used evicted beyond `max_entries`, and in an
// SQLite database (profile_store.h): each save writes what was put or used
// since the last one in one transaction, so a kill at any point loses no
// entry saved before it. A damaged database keeps the entries that still
// read and is moved aside; an old text cache (legacy_profile_cache.h) is
// imported once.
//
// Get and Put are not thread-safe (the owner serialises them); Write may
// run beside them (it touches the database only).
#ifndef ECHO_SERVER_PROFILER_PROFILE_CACHE_H_
#define ECHO_SERVER_PROFILER_PROFILE_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "server/profiler/profile_store.h"

namespace echo::server {

struct CacheLoadReport {
  bool file_found = false;
  int64_t entries = 0;
  // Empty when the database loaded cleanly or was absent; else why it was
  // ignored (the cache is then in memory only) or what was lost.
  std::string error;
  // Entries of a damaged old text cache that were dropped.
  int64_t dropped_entries = 0;
  // Entries imported from the old text cache.
  int64_t imported_entries = 0;
};

class ProfileCache {
 public:
  // `path` empty: in memory only (Load and Save do nothing). `legacy_path`:
  // an old text cache, imported by Load and then renamed to
  // `<legacy_path>.imported`.
  ProfileCache(std::string path, int64_t max_entries,
               std::string legacy_path = "");
  ~ProfileCache();

  // Opens the database (created when absent) and reads its entries. A
  // database that cannot be opened leaves the cache in memory only; a
  // damaged one is renamed to `<path>.damaged` and replaced by one with
  // the entries that still read. Each is said in the report's error.
  CacheLoadReport Load();

  // Saving in two steps, so that the owner's lock covers only the first:
  // the entries put or used since the last save, then their write, in one
  // transaction (a no-op in memory only).
  std::vector<StoredTiming> TakeChanges();
  absl::Status Write(const std::vector<StoredTiming>& changes);
  absl::Status Save();
  // After a failed Write: its entries still in the cache are saved by the
  // next one.
  void Requeue(const std::vector<StoredTiming>& changes);

  // Marks the entry most recently used.
  std::optional<double> Get(const std::string& device, const std::string& op);
  // A time that is not a finite number >= 0 is not stored (false).
  bool Put(const std::string& device, const std::string& op, double seconds);

  int64_t size() const { return static_cast<int64_t>(order_.size()); }
  int64_t max_entries() const { return max_entries_; }
  const std::string& path() const { return path_; }

 private:
  using Key = std::pair<std::string, std::string>;  // device, op
  struct Entry {
    Key key;
    double seconds = 0;
    int64_t used = 0;
  };

  // Opens the database and reads it into memory; a damaged one is moved
  // aside and replaced by what still reads.
  void OpenStore(CacheLoadReport* report);
  // Imports legacy_path_ when it is there.
  void ImportLegacy(CacheLoadReport* report);
  void Insert(Key key, double seconds, int64_t used);
  void Touch(std::list<Entry>::iterator entry);

  std::string path_;
  int64_t max_entries_;
  std::string legacy_path_;
  std::list<Entry> order_;  // least recently used first
  absl::flat_hash_map<Key, std::list<Entry>::iterator> index_;
  int64_t clock_ = 0;  // the last recency stamp given
  // Entries stamped after this were put or used since the last
  // TakeChanges: the tail of order_, so no set of them is kept (Get, on the
  // pricing path, only restamps).
  int64_t saved_clock_ = 0;
  std::mutex write_mutex_;
  std::unique_ptr<ProfileStore> store_;  // null: in memory only
};

}  // namespace echo::server

#endif  // ECHO_SERVER_PROFILER_PROFILE_CACHE_H_
