// The profile cache's file: an SQLite database (WAL, one transaction per
// save), readable with the sqlite3 CLI:
//
//   sqlite3 ~/.cache/echo/profile_cache.db
//     "SELECT device, op, seconds FROM op_timings ORDER BY used DESC"
//
// Schema version 1 (PRAGMA user_version):
//   op_timings(device TEXT, op TEXT, seconds REAL, used INTEGER,
//              PRIMARY KEY (device, op))
// `device` is the profiler's device key (GPU name, compute capability,
// driver, CUDA runtime, cuBLAS and cuDNN versions), `op` the op's
// planner::OpSignature, `used` a recency stamp (higher: used later).
//
// Not thread-safe: the owner serialises access.
#ifndef ECHO_SERVER_PROFILER_PROFILE_STORE_H_
#define ECHO_SERVER_PROFILER_PROFILE_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct sqlite3;

namespace echo::server {

struct StoredTiming {
  std::string device;
  std::string op;
  double seconds = 0;
  int64_t used = 0;
};

class ProfileStore {
 public:
  static constexpr int kSchemaVersion = 1;

  // Opens the database at `path`, creating it and its schema when absent.
  // DATA_LOSS when the file is not a database or fails SQLite's quick
  // check; FAILED_PRECONDITION when a newer echod wrote it (a later schema:
  // it is left as it is).
  static absl::StatusOr<std::unique_ptr<ProfileStore>> Open(
      const std::string& path);
  // The rows that still read from a damaged database at `path`, opened
  // read-only and unchecked, least recently used first; the error says
  // where reading stopped.
  static absl::Status Salvage(const std::string& path,
                              std::vector<StoredTiming>* out);
  ~ProfileStore();
  ProfileStore(const ProfileStore&) = delete;
  ProfileStore& operator=(const ProfileStore&) = delete;

  // Every timing, least recently used first. On a damaged database, `out`
  // holds the rows read before the damage and the error says what it was.
  absl::Status ReadAll(std::vector<StoredTiming>* out);

  // One transaction: inserts or updates `rows` (or, with `keep_existing`,
  // inserts only the ones absent), then drops all but the `max_entries`
  // most recently used.
  absl::Status Write(const std::vector<StoredTiming>& rows, int64_t max_entries,
                     bool keep_existing = false);

 private:
  explicit ProfileStore(sqlite3* db) : db_(db) {}
  sqlite3* db_;
};

}  // namespace echo::server

#endif  // ECHO_SERVER_PROFILER_PROFILE_STORE_H_
