// SQLite helpers the store's files share (not part of the Store interface): result codes mapped
// onto Status, and one use of a cached prepared statement.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace sluice::store::sqlite {

// Maps SQLite's result codes onto ours: a lock held too long is worth retrying, a constraint
// means the batch itself is wrong, anything else is the environment (disk, corruption).
inline Status Error(sqlite3* db, int rc, std::string_view what) {
  std::string msg = "sqlite store: " + std::string(what) + ": " + sqlite3_errmsg(db);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Status::Unavailable(std::move(msg));
    case SQLITE_CONSTRAINT:
      return Status::InvalidArgument(std::move(msg));
    default:
      return Status::Internal(std::move(msg));
  }
}

// One use of a cached prepared statement: binds positionally, steps, and resets the statement
// on destruction so the cache can hand it out again.
class Query {
 public:
  Query(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  ~Query() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;

  // Values are copied (SQLITE_TRANSIENT) so callers may bind temporaries such as dumped JSON.
  Query& Text(std::string_view v) {
    Check(sqlite3_bind_text64(stmt_, ++index_, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
    return *this;
  }
  Query& Int(int64_t v) {
    Check(sqlite3_bind_int64(stmt_, ++index_, v));
    return *this;
  }
  Query& Real(double v) {
    Check(sqlite3_bind_double(stmt_, ++index_, v));
    return *this;
  }
  Query& OptInt(const std::optional<int>& v) {
    Check(v ? sqlite3_bind_int64(stmt_, ++index_, *v) : sqlite3_bind_null(stmt_, ++index_));
    return *this;
  }

  // True when a row is available, false when done.
  Result<bool> Step(std::string_view what) {
    if (bind_rc_ != SQLITE_OK) return Error(db_, bind_rc_, what);
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return Error(db_, rc, what);
  }
  Status Run(std::string_view what) {
    SLUICE_ASSIGN_OR_RETURN(bool row, Step(what));
    (void)row;
    return Status::Ok();
  }

  std::string ColText(int i) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, i));
    int n = sqlite3_column_bytes(stmt_, i);  // after column_text, as SQLite requires
    return p ? std::string(p, static_cast<size_t>(n)) : std::string();
  }
  int64_t ColInt(int i) const { return sqlite3_column_int64(stmt_, i); }
  double ColReal(int i) const { return sqlite3_column_double(stmt_, i); }
  std::optional<int> ColOptInt(int i) const {
    if (sqlite3_column_type(stmt_, i) == SQLITE_NULL) return std::nullopt;
    return sqlite3_column_int(stmt_, i);
  }

 private:
  void Check(int rc) {
    if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  }
  sqlite3* const db_;
  sqlite3_stmt* const stmt_;
  int index_ = 0;
  int bind_rc_ = SQLITE_OK;
};

}  // namespace sluice::store::sqlite
