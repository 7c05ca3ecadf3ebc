#include "server/profiler/profile_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace echo::server {
namespace {

// SQLite's codes for a file that is not (or no longer) a database.
bool IsDamage(int code) {
  const int primary = code & 0xff;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB;
}

absl::Status SqliteError(sqlite3* db, int code, absl::string_view what) {
  const std::string message = absl::StrCat(
      what, ": ", db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(code));
  if (IsDamage(code)) return absl::DataLossError(message);
  return absl::InternalError(message);
}

absl::Status Exec(sqlite3* db, const char* sql) {
  const int code = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  if (code != SQLITE_OK) return SqliteError(db, code, sql);
  return absl::OkStatus();
}

// A prepared statement, finalized when it goes out of scope.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    code_ = sqlite3_prepare_v2(db, sql, -1, &statement_, nullptr);
  }
  ~Statement() { sqlite3_finalize(statement_); }
  absl::Status status(absl::string_view what) const {
    return code_ == SQLITE_OK ? absl::OkStatus()
                              : SqliteError(db_, code_, what);
  }
  sqlite3_stmt* get() const { return statement_; }

 private:
  sqlite3* db_;
  sqlite3_stmt* statement_ = nullptr;
  int code_ = SQLITE_OK;
};

std::string ColumnText(sqlite3_stmt* statement, int column) {
  const auto* text = sqlite3_column_text(statement, column);
  return text != nullptr ? reinterpret_cast<const char*>(text) : "";
}

// Reads an integer PRAGMA.
absl::StatusOr<int64_t> PragmaInt(sqlite3* db, const char* sql) {
  Statement pragma(db, sql);
  if (absl::Status s = pragma.status(sql); !s.ok()) return s;
  const int code = sqlite3_step(pragma.get());
  if (code != SQLITE_ROW) return SqliteError(db, code, sql);
  return sqlite3_column_int64(pragma.get(), 0);
}

// PRAGMA quick_check: "ok", or the first problem it found.
absl::Status QuickCheck(sqlite3* db) {
  Statement check(db, "PRAGMA quick_check(1)");
  if (absl::Status s = check.status("quick_check"); !s.ok()) return s;
  const int code = sqlite3_step(check.get());
  if (code != SQLITE_ROW) return SqliteError(db, code, "quick_check");
  const std::string result = ColumnText(check.get(), 0);
  if (result == "ok") return absl::OkStatus();
  return absl::DataLossError(absl::StrCat("quick_check: ", result));
}

constexpr char kSchema[] =
    "CREATE TABLE IF NOT EXISTS op_timings ("
    "  device TEXT NOT NULL,"
    "  op TEXT NOT NULL,"
    "  seconds REAL NOT NULL CHECK (seconds >= 0),"
    "  used INTEGER NOT NULL,"
    "  PRIMARY KEY (device, op)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS op_timings_by_use ON op_timings (used);"
    "PRAGMA user_version = 1;";

}  // namespace

absl::StatusOr<std::unique_ptr<ProfileStore>> ProfileStore::Open(
    const std::string& path) {
  // Owner-only: the cache says which kernels this node runs and how fast.
  // SQLite gives its -wal and -shm files the database's permissions.
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  close(fd);
  sqlite3* db = nullptr;
  const int code = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  std::unique_ptr<ProfileStore> store(new ProfileStore(db));
  if (code != SQLITE_OK) return SqliteError(db, code, "open");
  // Another echod on the same directory waits for the lock a while.
  sqlite3_busy_timeout(db, 5000);
  absl::StatusOr<int64_t> version = PragmaInt(db, "PRAGMA user_version");
  if (!version.ok()) return version.status();
  if (*version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "it has schema version ", *version, ", written by a newer echod (",
        "this one reads version ", kSchemaVersion, ")"));
  }
  if (absl::Status s = QuickCheck(db); !s.ok()) return s;
  // WAL: a save is one transaction appended to the log, so a kill at any
  // point leaves every committed save; FULL syncs the log at each commit.
  if (absl::Status s = Exec(db, "PRAGMA journal_mode = WAL"); !s.ok()) {
    return s;
  }
  if (absl::Status s = Exec(db, "PRAGMA synchronous = FULL"); !s.ok()) {
    return s;
  }
  if (absl::Status s = Exec(db, kSchema); !s.ok()) return s;
  return store;
}

absl::Status ProfileStore::Salvage(const std::string& path,
                                   std::vector<StoredTiming>* out) {
  sqlite3* db = nullptr;
  const int code = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  ProfileStore store(db);
  if (code != SQLITE_OK) return SqliteError(db, code, "open");
  return store.ReadAll(out);
}

ProfileStore::~ProfileStore() { sqlite3_close_v2(db_); }

absl::Status ProfileStore::ReadAll(std::vector<StoredTiming>* out) {
  constexpr char kSelect[] =
      "SELECT device, op, seconds, used FROM op_timings ORDER BY used";
  Statement select(db_, kSelect);
  if (absl::Status s = select.status("read op_timings"); !s.ok()) return s;
  int code;
  while ((code = sqlite3_step(select.get())) == SQLITE_ROW) {
    StoredTiming row;
    row.device = ColumnText(select.get(), 0);
    row.op = ColumnText(select.get(), 1);
    row.seconds = sqlite3_column_double(select.get(), 2);
    row.used = sqlite3_column_int64(select.get(), 3);
    out->push_back(std::move(row));
  }
  if (code != SQLITE_DONE) return SqliteError(db_, code, "read op_timings");
  return absl::OkStatus();
}

absl::Status ProfileStore::Write(const std::vector<StoredTiming>& rows,
                                 int64_t max_entries, bool keep_existing) {
  if (absl::Status s = Exec(db_, "BEGIN IMMEDIATE"); !s.ok()) return s;
  absl::Status status;
  {
    Statement upsert(
        db_, keep_existing
                 ? "INSERT OR IGNORE INTO op_timings (device, op, seconds, "
                   "used) VALUES (?1, ?2, ?3, ?4)"
                 : "INSERT INTO op_timings (device, op, seconds, used) "
                   "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (device, op) DO "
                   "UPDATE SET seconds = excluded.seconds, used = "
                   "excluded.used");
    status = upsert.status("write op_timings");
    for (size_t i = 0; status.ok() && i < rows.size(); ++i) {
      const StoredTiming& row = rows[i];
      sqlite3_stmt* s = upsert.get();
      sqlite3_bind_text(s, 1, row.device.data(),
                        static_cast<int>(row.device.size()), SQLITE_STATIC);
      sqlite3_bind_text(s, 2, row.op.data(), static_cast<int>(row.op.size()),
                        SQLITE_STATIC);
      sqlite3_bind_double(s, 3, row.seconds);
      sqlite3_bind_int64(s, 4, row.used);
      const int code = sqlite3_step(s);
      if (code != SQLITE_DONE) {
        status = SqliteError(db_, code, "write op_timings");
      }
      sqlite3_reset(s);
    }
  }
  if (status.ok()) {
    // Stamps are unique: all but the max_entries most recent go.
    Statement evict(db_,
                    "DELETE FROM op_timings WHERE used <= (SELECT used FROM "
                    "op_timings ORDER BY used DESC LIMIT 1 OFFSET ?1)");
    status = evict.status("evict op_timings");
    if (status.ok()) {
      sqlite3_bind_int64(evict.get(), 1, max_entries);
      const int code = sqlite3_step(evict.get());
      if (code != SQLITE_DONE) {
        status = SqliteError(db_, code, "evict op_timings");
      }
    }
  }
  if (status.ok()) status = Exec(db_, "COMMIT");
  if (!status.ok()) Exec(db_, "ROLLBACK").IgnoreError();
  return status;
}

}  // namespace echo::server
