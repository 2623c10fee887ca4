// Versioned schema migrations for the SQLite store. Each step moves the schema from version
// N-1 to N inside its own transaction, so a crash mid-upgrade leaves the database at a whole
// version and the next open resumes from there. Steps are append-only: once released, a step's
// SQL never changes (databases in the field already ran it); fix mistakes with a new step.
#pragma once

#include <sqlite3.h>

#include <functional>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace sluice::store {

struct Migration {
  int version;                   // the schema version after this step; steps are 1, 2, 3, ...
  std::string_view description;  // recorded in schema_version for people reading the file
  std::string_view sql;          // one or more statements; constants only, never values
};

// Every step, in order. CurrentSchemaVersion() is the last one's version.
const std::vector<Migration>& Migrations();

// The schema version recorded in `db` (0 for a database without a schema_version table).
Result<int> ReadSchemaVersion(sqlite3* db);

// Applies the steps after the recorded version up to and including `target_version`.
// FailedPrecondition when the database is already newer than CurrentSchemaVersion(), naming both
// versions. Safe against a second process migrating the same file at the same time: the version
// is re-read under the write lock before each step. Tests pass a smaller target to build an old
// database. `before_step` (if set) is told of each step of an existing database's upgrade before
// it runs, not of the steps that lay out a new file: a step may rebuild a table or index a large
// one, and whoever opens the file can say why the start takes a while.
using MigrationStepHook = std::function<void(const Migration& step, int from_version)>;
Status Migrate(sqlite3* db, int target_version, const MigrationStepHook& before_step = {});

}  // namespace sluice::store
