// A persistent, size-bounded cache of profiled op times.
//
// Keys are opaque strings (the profiler makes them from the GPU model,
// driver and library versions and the op signature). Least recently used
// entries are evicted beyond `max_entries`. The file is replaced atomically
// (temp file in the same directory, fsync, rename, fsync of the directory),
// so a crash at any point leaves either the old or the new file. Format:
//
//   echo-profile-cache 2
//   entries <n>
//   <seconds>\t<C-escaped key>\t<16 hex digits>   (n lines, least recently
//                                  used first; FNV-1a 64 of the line before
//                                  its last tab)
//   checksum <16 hex digits>          (FNV-1a 64 of everything above)
//
// A file whose checksum fails keeps the entries whose own checksums hold
// (one bad byte costs one entry, not the cache); version 1 files (no entry
// checksums) still load, whole or not at all.
//
// Not thread-safe: the owner serialises access.
#ifndef ECHO_SERVER_PROFILER_PROFILE_CACHE_H_
#define ECHO_SERVER_PROFILER_PROFILE_CACHE_H_

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace echo::server {

struct CacheLoadReport {
  bool file_found = false;
  int64_t entries = 0;
  // Empty when the file loaded cleanly or was absent; else why it was
  // ignored (the cache then starts empty) or what was dropped from it.
  std::string error;
  // Entries of a damaged file that were dropped (the rest were kept).
  int64_t dropped_entries = 0;
};

class ProfileCache {
 public:
  // `path` empty: in memory only (Load and Save do nothing).
  ProfileCache(std::string path, int64_t max_entries);

  // Replaces the contents with the file's. A missing file is an empty
  // cache; a corrupt or truncated one is reported and ignored. Removes temp
  // files left by a writer that died (one writer per cache file).
  CacheLoadReport Load();

  // The file's contents for the current entries.
  std::string Serialize() const;
  // What a damaged file lost: why its checksum failed, and the entries
  // dropped.
  struct Damage {
    std::string why;
    int64_t dropped_entries = 0;
  };
  // Parses Serialize()'s format; on error, leaves the cache unchanged. A
  // damaged version 2 file loads the entries whose own checksums hold (OK)
  // and says in `damage` what was lost; one with none is an error.
  absl::Status Parse(absl::string_view contents, Damage* damage = nullptr);

  absl::Status Save() const;

  // Marks the entry most recently used.
  std::optional<double> Get(const std::string& key);
  void Put(const std::string& key, double seconds);

  int64_t size() const { return static_cast<int64_t>(order_.size()); }
  int64_t max_entries() const { return max_entries_; }
  const std::string& path() const { return path_; }

 private:
  using Entry = std::pair<std::string, double>;
  std::string path_;
  int64_t max_entries_;
  std::list<Entry> order_;  // least recently used first
  absl::flat_hash_map<std::string, std::list<Entry>::iterator> index_;
};

// Writes `contents` to `path` so that a crash leaves the old or the new
// file, never a mix: temp file in the same directory, write, fsync, rename,
// fsync the directory.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents);

}  // namespace echo::server

#endif  // ECHO_SERVER_PROFILER_PROFILE_CACHE_H_
