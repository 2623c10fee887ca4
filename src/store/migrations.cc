#include "store/migrations.h"

#include <string>

#include "common/clock.h"
#include "store/store.h"

namespace sluice::store {
namespace {

// v1: the records the core rebuilds its state from.
constexpr std::string_view kV1 = R"sql(
CREATE TABLE tokens (
  id TEXT PRIMARY KEY NOT NULL,
  kind TEXT NOT NULL,
  sha256 TEXT NOT NULL,
  created_ms INTEGER NOT NULL
);
CREATE TABLE nodes (
  id TEXT PRIMARY KEY NOT NULL,
  name TEXT NOT NULL,
  inventory TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('online', 'offline', 'lost')),
  registered_ms INTEGER NOT NULL,
  last_seen_ms INTEGER NOT NULL,
  price_per_gpu_hour REAL NOT NULL,
  price_per_cpu_hour REAL NOT NULL,
  region TEXT NOT NULL
);
CREATE TABLE jobs (
  id TEXT PRIMARY KEY NOT NULL,
  name TEXT NOT NULL,
  spec TEXT NOT NULL,
  workdir_blob TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN
      ('queued', 'starting', 'running', 'succeeded', 'failed', 'cancelled', 'lost')),
  priority INTEGER NOT NULL,
  submitted_ms INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  finished_ms INTEGER NOT NULL,
  exit_code INTEGER,
  reason TEXT NOT NULL,
  attempt_id TEXT NOT NULL
);
CREATE INDEX jobs_by_state ON jobs (state);
CREATE INDEX jobs_by_submitted ON jobs (submitted_ms);
CREATE TABLE attempts (
  id TEXT PRIMARY KEY NOT NULL,
  job_id TEXT NOT NULL REFERENCES jobs (id),
  node_id TEXT NOT NULL,
  gpus TEXT NOT NULL,
  cpus INTEGER NOT NULL,
  memory_gb REAL NOT NULL,
  price_per_hour REAL NOT NULL,
  state TEXT NOT NULL CHECK (state IN
      ('starting', 'running', 'succeeded', 'failed', 'cancelled', 'lost')),
  created_ms INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  ended_ms INTEGER NOT NULL,
  exit_code INTEGER,
  cause TEXT NOT NULL
);
CREATE INDEX attempts_by_job ON attempts (job_id, created_ms);
CREATE INDEX attempts_by_state ON attempts (state);
)sql";

// v2: the append-only streams. AUTOINCREMENT so a reader's cursor (the row id) never goes
// backwards, even if a later retention step deletes the newest rows.
constexpr std::string_view kV2 = R"sql(
CREATE TABLE logs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id TEXT NOT NULL,
  attempt_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  stream TEXT NOT NULL,
  ts_ms INTEGER NOT NULL,
  text TEXT NOT NULL,
  UNIQUE (attempt_id, seq)
);
CREATE INDEX logs_by_job ON logs (job_id, id);
CREATE TABLE events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id TEXT NOT NULL,
  ts_ms INTEGER NOT NULL,
  type TEXT NOT NULL,
  message TEXT NOT NULL
);
CREATE INDEX events_by_job ON events (job_id, id);
)sql";

// v3: a cancel the server accepted but the agent has not yet confirmed must survive a restart.
constexpr std::string_view kV3 = R"sql(
ALTER TABLE jobs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0
    CHECK (cancel_requested IN (0, 1));
)sql";

// v4: imported cloud price catalogs, one row per provider holding the file as imported, so a
// re-import replaces a provider's offers in one statement and the server re-parses at start.
constexpr std::string_view kV4 = R"sql(
CREATE TABLE catalogs (
  provider TEXT PRIMARY KEY NOT NULL,
  source_name TEXT NOT NULL,
  csv TEXT NOT NULL,
  imported_ms INTEGER NOT NULL
);
)sql";

// v5: preemption (issue 4). SQLite cannot change a CHECK constraint in place, so attempts is
// rebuilt to admit 'preempted' and gains its number within the job and the checkpoint it
// restored; jobs gain their latest complete checkpoint and preemption count. Nothing references
// attempts, so dropping the old table is safe with foreign keys on.
constexpr std::string_view kV5 = R"sql(
CREATE TABLE attempts_v5 (
  id TEXT PRIMARY KEY NOT NULL,
  job_id TEXT NOT NULL REFERENCES jobs (id),
  node_id TEXT NOT NULL,
  gpus TEXT NOT NULL,
  cpus INTEGER NOT NULL,
  memory_gb REAL NOT NULL,
  price_per_hour REAL NOT NULL,
  state TEXT NOT NULL CHECK (state IN
      ('starting', 'running', 'succeeded', 'failed', 'cancelled', 'lost', 'preempted')),
  created_ms INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  ended_ms INTEGER NOT NULL,
  exit_code INTEGER,
  cause TEXT NOT NULL,
  number INTEGER NOT NULL DEFAULT 1,
  checkpoint_restored TEXT NOT NULL DEFAULT ''
);
INSERT INTO attempts_v5 (id, job_id, node_id, gpus, cpus, memory_gb, price_per_hour, state,
    created_ms, started_ms, ended_ms, exit_code, cause)
  SELECT id, job_id, node_id, gpus, cpus, memory_gb, price_per_hour, state, created_ms,
    started_ms, ended_ms, exit_code, cause FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_v5 RENAME TO attempts;
CREATE INDEX attempts_by_job ON attempts (job_id, created_ms);
CREATE INDEX attempts_by_state ON attempts (state);
ALTER TABLE jobs ADD COLUMN checkpoint TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;
)sql";

// v6: interruptible capacity sold by agent nodes, and whether an attempt runs on it (only those
// may be preempted to make room for on-demand work, DESIGN.md §6).
constexpr std::string_view kV6 = R"sql(
ALTER TABLE nodes ADD COLUMN interruptible_price_per_gpu_hour REAL NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN interruptible_price_per_cpu_hour REAL NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN interruptible INTEGER NOT NULL DEFAULT 0
    CHECK (interruptible IN (0, 1));
)sql";

// v7: every checkpoint a job keeps (the retention limit drops the oldest), so dropped and
// deleted checkpoints can be removed from the blob store.
constexpr std::string_view kV7 = R"sql(
CREATE TABLE checkpoints (
  job_id TEXT NOT NULL,
  manifest TEXT NOT NULL,
  attempt_id TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  PRIMARY KEY (job_id, manifest)
);
)sql";

// v8: trust (issue 5): node verification and fingerprints, what each attempt ran on, node uptime
// for the reliability score, and the audit log of API mutations.
constexpr std::string_view kV8 = R"sql(
ALTER TABLE nodes ADD COLUMN verification TEXT NOT NULL DEFAULT 'unverified'
    CHECK (verification IN ('verified', 'unverified', 'deverified'));
ALTER TABLE nodes ADD COLUMN verification_reasons TEXT NOT NULL DEFAULT '[]';
ALTER TABLE nodes ADD COLUMN hardware_fingerprint TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN software_fingerprint TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN verified_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN conformance TEXT NOT NULL DEFAULT '{}';
ALTER TABLE attempts ADD COLUMN node_snapshot TEXT NOT NULL DEFAULT '';
CREATE INDEX attempts_by_created ON attempts (created_ms);
CREATE TABLE node_snapshots (
  digest TEXT PRIMARY KEY NOT NULL,
  json TEXT NOT NULL
);
CREATE TABLE node_uptime (
  node_id TEXT NOT NULL,
  start_ms INTEGER NOT NULL,
  end_ms INTEGER NOT NULL CHECK (end_ms >= start_ms),
  PRIMARY KEY (node_id, start_ms)
);
CREATE TABLE audit_log (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  ts_ms INTEGER NOT NULL,
  actor TEXT NOT NULL,
  source TEXT NOT NULL,
  action TEXT NOT NULL,
  target TEXT NOT NULL,
  params TEXT NOT NULL,
  status INTEGER NOT NULL
);
CREATE INDEX audit_log_by_ts ON audit_log (ts_ms);
)sql";

// v9 (issue 10): accounts, scoped tokens, teams, node ownership, job owners, idempotency keys,
// blob owners. Tokens from before v9 are given to the bootstrap accounts by the server
// (server/accounts.h), which knows which is the admin and which the provider.
constexpr std::string_view kV9 = R"sql(
CREATE TABLE accounts (
  id TEXT PRIMARY KEY NOT NULL,
  name TEXT NOT NULL UNIQUE,
  role TEXT NOT NULL CHECK (role IN ('admin', 'user', 'provider')),
  disabled INTEGER NOT NULL DEFAULT 0,
  created_ms INTEGER NOT NULL,
  owner TEXT NOT NULL DEFAULT ''
);
ALTER TABLE tokens ADD COLUMN account_id TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN scope TEXT NOT NULL DEFAULT 'full';
ALTER TABLE tokens ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN expires_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tokens ADD COLUMN revoked_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tokens ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
CREATE TABLE team_members (
  team TEXT NOT NULL,
  account_id TEXT NOT NULL,
  added_ms INTEGER NOT NULL,
  PRIMARY KEY (team, account_id)
);
ALTER TABLE nodes ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN revoked INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN team TEXT NOT NULL DEFAULT '';
CREATE TABLE idempotency_keys (
  account_id TEXT NOT NULL,
  key TEXT NOT NULL,
  body_sha256 TEXT NOT NULL,
  job_id TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  PRIMARY KEY (account_id, key)
);
CREATE INDEX idempotency_by_created ON idempotency_keys (created_ms);
CREATE TABLE blob_owners (
  digest TEXT NOT NULL,
  account_id TEXT NOT NULL,
  size INTEGER NOT NULL,
  created_ms INTEGER NOT NULL,
  PRIMARY KEY (digest, account_id)
);
)sql";

// v10 (issue 14): metering and the double-entry ledger. Amounts are integers in micro-dollars.
// Accounts from before v10 keep an unlimited credit limit (-1), so an upgrade stops no one.
constexpr std::string_view kV10 = R"sql(
ALTER TABLE accounts ADD COLUMN credit_limit_micros INTEGER NOT NULL DEFAULT -1;
ALTER TABLE attempts ADD COLUMN expected_cost_micros INTEGER NOT NULL DEFAULT 0;
CREATE TABLE meters (
  attempt_id TEXT PRIMARY KEY NOT NULL,
  job_id TEXT NOT NULL,
  payer TEXT NOT NULL,
  provider TEXT NOT NULL,
  node_id TEXT NOT NULL,
  resource TEXT NOT NULL,
  units INTEGER NOT NULL,
  memory_gb REAL NOT NULL,
  price_micros_per_hour INTEGER NOT NULL,
  interruptible INTEGER NOT NULL,
  start_ms INTEGER NOT NULL,
  end_ms INTEGER NOT NULL,
  settled_ms INTEGER NOT NULL,
  charged_micros INTEGER NOT NULL,
  fee_micros INTEGER NOT NULL,
  lost_micros INTEGER NOT NULL,
  end_cause TEXT NOT NULL
);
CREATE INDEX meters_open ON meters (end_ms) WHERE end_ms = 0;
CREATE INDEX meters_by_job ON meters (job_id);
CREATE TABLE ledger_txns (
  id INTEGER PRIMARY KEY,
  ts_ms INTEGER NOT NULL,
  kind TEXT NOT NULL,
  job_id TEXT NOT NULL,
  attempt_id TEXT NOT NULL,
  node_id TEXT NOT NULL,
  from_ms INTEGER NOT NULL,
  to_ms INTEGER NOT NULL,
  memo TEXT NOT NULL
);
CREATE TABLE ledger_entries (
  txn_id INTEGER NOT NULL REFERENCES ledger_txns (id),
  account TEXT NOT NULL,
  category TEXT NOT NULL,
  amount_micros INTEGER NOT NULL
);
CREATE INDEX ledger_entries_by_txn ON ledger_entries (txn_id);
CREATE INDEX ledger_entries_by_account ON ledger_entries (account);
CREATE TABLE cost_totals (
  payer TEXT NOT NULL,
  provider TEXT NOT NULL,
  job_id TEXT NOT NULL,
  node_id TEXT NOT NULL,
  day TEXT NOT NULL,
  resource TEXT NOT NULL,
  charged_micros INTEGER NOT NULL,
  fee_micros INTEGER NOT NULL,
  lost_micros INTEGER NOT NULL,
  metered_ms INTEGER NOT NULL,
  -- Ordered for the common report, one account's costs by job: a range of the key, grouped
  -- without a sort.
  PRIMARY KEY (payer, job_id, day, provider, node_id, resource)
);
CREATE INDEX cost_totals_by_provider ON cost_totals (provider, day);
CREATE INDEX cost_totals_by_job ON cost_totals (job_id);
)sql";

// v11 (issue 15 item 5): a node its provider reclaimed, or under a spot-termination notice, takes
// no new work until a time or until it is resumed.
constexpr std::string_view kV11 = R"sql(
ALTER TABLE nodes ADD COLUMN paused_until_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN paused_reason TEXT NOT NULL DEFAULT '';
)sql";

// v12 (issue 15): jobs admit the state 'budget-exhausted' (a stop by budget or credit). SQLite
// cannot change a CHECK constraint in place, so jobs is rebuilt (attempts refer to it: Migrate
// runs with foreign keys off and checks them before each step commits). Meters and cost totals
// gain SLA credits: what was credited back, and why.
constexpr std::string_view kV12 = R"sql(
CREATE TABLE jobs_v12 (
  id TEXT PRIMARY KEY NOT NULL,
  name TEXT NOT NULL,
  spec TEXT NOT NULL,
  workdir_blob TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN
      ('queued', 'starting', 'running', 'succeeded', 'failed', 'cancelled', 'lost',
       'budget-exhausted')),
  priority INTEGER NOT NULL,
  submitted_ms INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  finished_ms INTEGER NOT NULL,
  exit_code INTEGER,
  reason TEXT NOT NULL,
  attempt_id TEXT NOT NULL,
  cancel_requested INTEGER NOT NULL DEFAULT 0,
  checkpoint TEXT NOT NULL DEFAULT '',
  preemptions INTEGER NOT NULL DEFAULT 0,
  owner TEXT NOT NULL DEFAULT '',
  team TEXT NOT NULL DEFAULT ''
);
INSERT INTO jobs_v12 (id, name, spec, workdir_blob, state, priority, submitted_ms, started_ms,
    finished_ms, exit_code, reason, attempt_id, cancel_requested, checkpoint, preemptions, owner,
    team)
  SELECT id, name, spec, workdir_blob, state, priority, submitted_ms, started_ms, finished_ms,
    exit_code, reason, attempt_id, cancel_requested, checkpoint, preemptions, owner, team
  FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_v12 RENAME TO jobs;
CREATE INDEX jobs_by_state ON jobs (state);
CREATE INDEX jobs_by_submitted ON jobs (submitted_ms);
ALTER TABLE meters ADD COLUMN credited_micros INTEGER NOT NULL DEFAULT 0;
ALTER TABLE meters ADD COLUMN credit_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE cost_totals ADD COLUMN credited_micros INTEGER NOT NULL DEFAULT 0;
)sql";

// v13 (issue 15 item 1): monthly budgets of accounts and teams, and the alerts they raised.
constexpr std::string_view kV13 = R"sql(
CREATE TABLE budgets (
  scope TEXT PRIMARY KEY NOT NULL,
  monthly_micros INTEGER NOT NULL,
  webhook TEXT NOT NULL,
  updated_ms INTEGER NOT NULL
);
CREATE TABLE budget_alerts (
  scope TEXT NOT NULL,
  month TEXT NOT NULL,
  percent INTEGER NOT NULL,
  ts_ms INTEGER NOT NULL,
  spent_micros INTEGER NOT NULL,
  budget_micros INTEGER NOT NULL,
  webhook TEXT NOT NULL,
  delivered_ms INTEGER NOT NULL,
  attempts INTEGER NOT NULL,
  last_error TEXT NOT NULL,
  PRIMARY KEY (scope, month, percent)
);
CREATE INDEX cost_totals_by_day ON cost_totals (day);
)sql";

// v14 (issue 12): no index of jobs by state. No query reads jobs by state (the core loads them
// all by submission time and keeps the live ones in memory), yet every state change of a job
// moved its entry between two far-apart ranges of the index: two random pages written per
// change, three changes per job (docs/design-notes.md "Fewer rows per placement").
constexpr std::string_view kV14 = R"sql(
DROP INDEX jobs_by_state;
)sql";

// v15 (issue 12): finished jobs by submission, and by owner and by team, each an index over
// finished rows only (the server lists unfinished jobs from memory). A job list reads a range of
// one of these backwards from its cursor, newest first, instead of stepping over every
// unfinished row (an admin's list) or every other tenant's row (a tenant's) under the store's
// lock (docs/design-notes.md "The job list"). A job enters them once, when it finishes; state
// changes before that, and submits, do not touch them; owner and team never change.
constexpr std::string_view kV15 = R"sql(
CREATE INDEX jobs_finished ON jobs (submitted_ms, id)
  WHERE state IN ('succeeded', 'failed', 'cancelled', 'lost');
CREATE INDEX jobs_finished_by_owner ON jobs (owner, submitted_ms, id)
  WHERE state IN ('succeeded', 'failed', 'cancelled', 'lost');
CREATE INDEX jobs_finished_by_team ON jobs (team, submitted_ms, id)
  WHERE state IN ('succeeded', 'failed', 'cancelled', 'lost') AND team != '';
)sql";

// v16 (issue 12): the states a job, an attempt and a node may be in, and the finished jobs'
// indexes' condition, checked by comparisons instead of IN lists. SQLite evaluates an IN list of
// more than two constants by building a temporary B-tree of the list (a pager and a page cache
// of its own, allocated and freed) every time the statement runs: seven of them for each update
// of a job row, one per attempt row, four per node row. In `bench/placement` that was a fifth of
// the core's CPU per placement (docs/design-notes.md "Fewer rows per placement"). SQLite cannot
// change a CHECK constraint in place, so the three tables are rebuilt, rowids kept (reads break
// ties by rowid); nothing refers to nodes, and attempts' reference to jobs resolves by name.
constexpr std::string_view kV16 = R"sql(
CREATE TABLE jobs_v16 (
  id TEXT PRIMARY KEY NOT NULL,
  name TEXT NOT NULL,
  spec TEXT NOT NULL,
  workdir_blob TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state = 'queued' OR state = 'starting' OR state = 'running' OR
      state = 'succeeded' OR state = 'failed' OR state = 'cancelled' OR state = 'lost' OR
      state = 'budget-exhausted'),
  priority INTEGER NOT NULL,
  submitted_ms INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  finished_ms INTEGER NOT NULL,
  exit_code INTEGER,
  reason TEXT NOT NULL,
  attempt_id TEXT NOT NULL,
  cancel_requested INTEGER NOT NULL DEFAULT 0,
  checkpoint TEXT NOT NULL DEFAULT '',
  preemptions INTEGER NOT NULL DEFAULT 0,
  owner TEXT NOT NULL DEFAULT '',
  team TEXT NOT NULL DEFAULT ''
);
INSERT INTO jobs_v16 (rowid, id, name, spec, workdir_blob, state, priority, submitted_ms,
    started_ms, finished_ms, exit_code, reason, attempt_id, cancel_requested, checkpoint,
    preemptions, owner, team)
  SELECT rowid, id, name, spec, workdir_blob, state, priority, submitted_ms, started_ms,
    finished_ms, exit_code, reason, attempt_id, cancel_requested, checkpoint, preemptions, owner,
    team
  FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_v16 RENAME TO jobs;
CREATE INDEX jobs_by_submitted ON jobs (submitted_ms);
CREATE INDEX jobs_finished ON jobs (submitted_ms, id)
  WHERE (state = 'succeeded' OR state = 'failed' OR state = 'cancelled' OR state = 'lost');
CREATE INDEX jobs_finished_by_owner ON jobs (owner, submitted_ms, id)
  WHERE (state = 'succeeded' OR state = 'failed' OR state = 'cancelled' OR state = 'lost');
CREATE INDEX jobs_finished_by_team ON jobs (team, submitted_ms, id)
  WHERE (state = 'succeeded' OR state = 'failed' OR state = 'cancelled' OR state = 'lost')
    AND team != '';
CREATE TABLE attempts_v16 (
  id TEXT PRIMARY KEY NOT NULL,
  job_id TEXT NOT NULL REFERENCES jobs (id),
  node_id TEXT NOT NULL,
  gpus TEXT NOT NULL,
  cpus INTEGER NOT NULL,
  memory_gb REAL NOT NULL,
  price_per_hour REAL NOT NULL,
  state TEXT NOT NULL CHECK (state = 'starting' OR state = 'running' OR state = 'succeeded' OR
      state = 'failed' OR state = 'cancelled' OR state = 'lost' OR state = 'preempted'),
  created_ms INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  ended_ms INTEGER NOT NULL,
  exit_code INTEGER,
  cause TEXT NOT NULL,
  number INTEGER NOT NULL DEFAULT 1,
  checkpoint_restored TEXT NOT NULL DEFAULT '',
  interruptible INTEGER NOT NULL DEFAULT 0 CHECK (interruptible = 0 OR interruptible = 1),
  node_snapshot TEXT NOT NULL DEFAULT '',
  expected_cost_micros INTEGER NOT NULL DEFAULT 0
);
INSERT INTO attempts_v16 (rowid, id, job_id, node_id, gpus, cpus, memory_gb, price_per_hour,
    state, created_ms, started_ms, ended_ms, exit_code, cause, number, checkpoint_restored,
    interruptible, node_snapshot, expected_cost_micros)
  SELECT rowid, id, job_id, node_id, gpus, cpus, memory_gb, price_per_hour, state, created_ms,
    started_ms, ended_ms, exit_code, cause, number, checkpoint_restored, interruptible,
    node_snapshot, expected_cost_micros
  FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_v16 RENAME TO attempts;
CREATE INDEX attempts_by_job ON attempts (job_id, created_ms);
CREATE INDEX attempts_by_state ON attempts (state);
CREATE INDEX attempts_by_created ON attempts (created_ms);
CREATE TABLE nodes_v16 (
  id TEXT PRIMARY KEY NOT NULL,
  name TEXT NOT NULL,
  inventory TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state = 'online' OR state = 'offline' OR state = 'lost'),
  registered_ms INTEGER NOT NULL,
  last_seen_ms INTEGER NOT NULL,
  price_per_gpu_hour REAL NOT NULL,
  price_per_cpu_hour REAL NOT NULL,
  region TEXT NOT NULL,
  interruptible_price_per_gpu_hour REAL NOT NULL DEFAULT 0,
  interruptible_price_per_cpu_hour REAL NOT NULL DEFAULT 0,
  verification TEXT NOT NULL DEFAULT 'unverified' CHECK (verification = 'verified' OR
      verification = 'unverified' OR verification = 'deverified'),
  verification_reasons TEXT NOT NULL DEFAULT '[]',
  hardware_fingerprint TEXT NOT NULL DEFAULT '',
  software_fingerprint TEXT NOT NULL DEFAULT '',
  verified_ms INTEGER NOT NULL DEFAULT 0,
  conformance TEXT NOT NULL DEFAULT '{}',
  owner TEXT NOT NULL DEFAULT '',
  revoked INTEGER NOT NULL DEFAULT 0,
  paused_until_ms INTEGER NOT NULL DEFAULT 0,
  paused_reason TEXT NOT NULL DEFAULT ''
);
INSERT INTO nodes_v16 (rowid, id, name, inventory, state, registered_ms, last_seen_ms,
    price_per_gpu_hour, price_per_cpu_hour, region, interruptible_price_per_gpu_hour,
    interruptible_price_per_cpu_hour, verification, verification_reasons, hardware_fingerprint,
    software_fingerprint, verified_ms, conformance, owner, revoked, paused_until_ms,
    paused_reason)
  SELECT rowid, id, name, inventory, state, registered_ms, last_seen_ms, price_per_gpu_hour,
    price_per_cpu_hour, region, interruptible_price_per_gpu_hour,
    interruptible_price_per_cpu_hour, verification, verification_reasons, hardware_fingerprint,
    software_fingerprint, verified_ms, conformance, owner, revoked, paused_until_ms, paused_reason
  FROM nodes;
DROP TABLE nodes;
ALTER TABLE nodes_v16 RENAME TO nodes;
)sql";

Status SqliteError(sqlite3* db, std::string_view what) {
  return Status::Internal("schema migration: " + std::string(what) + ": " + sqlite3_errmsg(db));
}

Status Exec(sqlite3* db, std::string_view sql, std::string_view what) {
  std::string text(sql);  // sqlite3_exec needs a NUL-terminated string
  if (sqlite3_exec(db, text.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
    return SqliteError(db, what);
  }
  return Status::Ok();
}

// After a step: every reference still resolves (the step ran with foreign keys off).
Status CheckForeignKeys(sqlite3* db, int version) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db, "PRAGMA foreign_key_check", -1, &stmt, nullptr) != SQLITE_OK) {
    return SqliteError(db, "prepare foreign key check");
  }
  const int rc = sqlite3_step(stmt);
  std::string table;
  if (rc == SQLITE_ROW) table = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
  sqlite3_finalize(stmt);
  if (rc == SQLITE_ROW) {
    return Status::Internal("schema migration: step " + std::to_string(version) +
                            " left a row of " + table + " referring to nothing");
  }
  if (rc != SQLITE_DONE) return SqliteError(db, "foreign key check");
  return Status::Ok();
}

Status NewerThanBuild(int found) {
  return Status::FailedPrecondition("database schema version " + std::to_string(found) +
                                    " is newer than the version this build of Sluice supports (" +
                                    std::to_string(CurrentSchemaVersion()) +
                                    "); upgrade Sluice to open it");
}

Status ApplyStep(sqlite3* db, const Migration& m) {
  SLUICE_RETURN_IF_ERROR(Exec(db, m.sql, "step " + std::to_string(m.version)));
  sqlite3_stmt* stmt = nullptr;
  constexpr const char* kRecord =
      "INSERT INTO schema_version (version, description, applied_ms) VALUES (?, ?, ?)";
  if (sqlite3_prepare_v2(db, kRecord, -1, &stmt, nullptr) != SQLITE_OK) {
    return SqliteError(db, "prepare version record");
  }
  sqlite3_bind_int(stmt, 1, m.version);
  sqlite3_bind_text(stmt, 2, m.description.data(), static_cast<int>(m.description.size()),
                    SQLITE_STATIC);
  sqlite3_bind_int64(stmt, 3, RealClock::Get()->NowMillis());
  int rc = sqlite3_step(stmt);
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) return SqliteError(db, "record version");
  return Status::Ok();
}

}  // namespace

const std::vector<Migration>& Migrations() {
  static const std::vector<Migration> kSteps = {
      {1, "tokens, nodes, jobs, attempts", kV1},
      {2, "logs and events", kV2},
      {3, "jobs.cancel_requested", kV3},
      {4, "catalogs", kV4},
      {5, "preempted attempts, attempt numbers, job checkpoints", kV5},
      {6, "interruptible node prices, interruptible attempts", kV6},
      {7, "checkpoints", kV7},
      {8, "node verification, attempt snapshots, node uptime, audit log", kV8},
      {9, "accounts, scoped tokens, teams, owners, idempotency keys, blob owners", kV9},
      {10, "meters, ledger, cost totals, credit limits", kV10},
      {11, "paused nodes", kV11},
      {12, "budget-exhausted jobs, SLA credits", kV12},
      {13, "monthly budgets and alerts", kV13},
      {14, "no index of jobs by state", kV14},
      {15, "finished jobs by submission, owner and team", kV15},
      {16, "state checks without a temporary table per row", kV16},
  };
  return kSteps;
}

int CurrentSchemaVersion() { return Migrations().back().version; }

Result<int> ReadSchemaVersion(sqlite3* db) {
  sqlite3_stmt* stmt = nullptr;
  // A table named schema_version missing means a brand-new (empty) database.
  constexpr const char* kExists =
      "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'schema_version'";
  if (sqlite3_prepare_v2(db, kExists, -1, &stmt, nullptr) != SQLITE_OK) {
    return SqliteError(db, "look for schema_version");
  }
  int rc = sqlite3_step(stmt);
  bool exists = rc == SQLITE_ROW && sqlite3_column_int(stmt, 0) > 0;
  sqlite3_finalize(stmt);
  if (rc != SQLITE_ROW) return SqliteError(db, "look for schema_version");
  if (!exists) return 0;

  if (sqlite3_prepare_v2(db, "SELECT coalesce(max(version), 0) FROM schema_version", -1, &stmt,
                         nullptr) != SQLITE_OK) {
    return SqliteError(db, "read schema_version");
  }
  rc = sqlite3_step(stmt);
  int version = rc == SQLITE_ROW ? sqlite3_column_int(stmt, 0) : 0;
  sqlite3_finalize(stmt);
  if (rc != SQLITE_ROW) return SqliteError(db, "read schema_version");
  return version;
}

namespace {

Status MigrateSteps(sqlite3* db, int target_version, const MigrationStepHook& before_step) {
  int from_version = -1;  // as first read: 0 for a new file, whose steps are not announced
  for (;;) {
    // BEGIN IMMEDIATE takes the write lock before reading the version, so two processes opening
    // the same new file cannot both apply step 1.
    SLUICE_RETURN_IF_ERROR(Exec(db, "BEGIN IMMEDIATE", "begin"));
    // True when a step was applied and another round may be needed.
    Result<bool> stepped = [&]() -> Result<bool> {
      SLUICE_RETURN_IF_ERROR(Exec(db,
                                  "CREATE TABLE IF NOT EXISTS schema_version ("
                                  "version INTEGER PRIMARY KEY NOT NULL, "
                                  "description TEXT NOT NULL, applied_ms INTEGER NOT NULL)",
                                  "create schema_version"));
      SLUICE_ASSIGN_OR_RETURN(int version, ReadSchemaVersion(db));
      if (version > CurrentSchemaVersion()) return NewerThanBuild(version);
      if (version >= target_version) return false;
      if (from_version < 0) from_version = version;
      const Migration& step = Migrations()[version];  // steps are 1-based, dense
      if (from_version > 0 && before_step) before_step(step, from_version);
      SLUICE_RETURN_IF_ERROR(ApplyStep(db, step));
      SLUICE_RETURN_IF_ERROR(CheckForeignKeys(db, version + 1));
      return true;
    }();
    Status st = stepped.ok() ? Exec(db, "COMMIT", "commit") : stepped.status();
    if (!st.ok()) {
      sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      return st;
    }
    if (!*stepped) return Status::Ok();
  }
}

}  // namespace

Status Migrate(sqlite3* db, int target_version, const MigrationStepHook& before_step) {
  if (target_version < 0 || target_version > CurrentSchemaVersion()) {
    return Status::InvalidArgument("no schema version " + std::to_string(target_version));
  }
  // A step may rebuild a table others refer to (v5, v12), which SQLite allows only with foreign
  // keys off; they are checked before each step commits instead, and turned back on after.
  int foreign_keys = 0;
  {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, "PRAGMA foreign_keys", -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
      foreign_keys = sqlite3_column_int(stmt, 0);
    }
    sqlite3_finalize(stmt);
  }
  SLUICE_RETURN_IF_ERROR(Exec(db, "PRAGMA foreign_keys = OFF", "foreign keys off"));
  Status st = MigrateSteps(db, target_version, before_step);
  if (foreign_keys != 0) {
    Status on = Exec(db, "PRAGMA foreign_keys = ON", "foreign keys on");
    if (st.ok()) st = on;
  }
  return st;
}

}  // namespace sluice::store
