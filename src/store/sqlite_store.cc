#include "store/sqlite_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/json.h"
#include "store/migrations.h"
#include "store/sqlite_budgets.h"
#include "store/sqlite_job_queries.h"
#include "store/sqlite_ledger.h"
#include "store/sqlite_query.h"
#include "store/sqlite_state_upserts.h"
#include "store/superseded_records.h"
#include "store/wal_checkpointer.h"
#include "store/wal_write_batching.h"

namespace sluice::store {
namespace {

using sqlite::Error;
using sqlite::Query;

// Stored JSON was validated when it entered the system, so reading it back allows deeper nesting
// than the API's limit rather than making an accepted record unreadable.
constexpr int kStoredJsonMaxDepth = 512;

// --- SQL. Each literal is also its own cache key (by address). ---

constexpr const char* kUpsertToken =
    "INSERT INTO tokens (id, kind, sha256, created_ms, account_id, scope, name, expires_ms, "
    "revoked_ms, node_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, sha256 = excluded.sha256, "
    "created_ms = excluded.created_ms, account_id = excluded.account_id, "
    "scope = excluded.scope, name = excluded.name, expires_ms = excluded.expires_ms, "
    "revoked_ms = excluded.revoked_ms, node_id = excluded.node_id";
constexpr const char* kUpsertAccount =
    "INSERT INTO accounts (id, name, role, disabled, created_ms, owner, credit_limit_micros) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET name = excluded.name, role = excluded.role, "
    "disabled = excluded.disabled, created_ms = excluded.created_ms, owner = excluded.owner, "
    "credit_limit_micros = excluded.credit_limit_micros";
constexpr const char* kSelectAccounts =
    "SELECT id, name, role, disabled, created_ms, owner, credit_limit_micros FROM accounts "
    "ORDER BY created_ms, rowid";
constexpr const char* kUpsertTeamMember =
    "INSERT INTO team_members (team, account_id, added_ms) VALUES (?, ?, ?) "
    "ON CONFLICT (team, account_id) DO UPDATE SET added_ms = excluded.added_ms";
constexpr const char* kDeleteTeamMember =
    "DELETE FROM team_members WHERE team = ? AND account_id = ?";
constexpr const char* kSelectTeamMembers =
    "SELECT team, account_id, added_ms FROM team_members ORDER BY team, added_ms, rowid";
constexpr const char* kInsertIdempotency =
    "INSERT INTO idempotency_keys (account_id, key, body_sha256, job_id, created_ms) "
    "VALUES (?, ?, ?, ?, ?)";
constexpr const char* kSelectIdempotency =
    "SELECT account_id, key, body_sha256, job_id, created_ms FROM idempotency_keys "
    "WHERE account_id = ? AND key = ? AND created_ms >= ?";
constexpr const char* kExpireIdempotency = "DELETE FROM idempotency_keys WHERE created_ms < ?";
constexpr const char* kUpsertBlobOwner =
    "INSERT INTO blob_owners (digest, account_id, size, created_ms) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (digest, account_id) DO UPDATE SET size = excluded.size";
constexpr const char* kDeleteBlobOwner =
    "DELETE FROM blob_owners WHERE digest = ? AND account_id = ?";
constexpr const char* kSelectBlobOwners =
    "SELECT digest, account_id, size, created_ms FROM blob_owners ORDER BY created_ms, rowid";
constexpr const char* kInsertEvent =
    "INSERT INTO events (job_id, ts_ms, type, message) VALUES (?, ?, ?, ?)";
// ON CONFLICT on the named key rather than INSERT OR IGNORE: OR IGNORE would also silently
// drop rows that break NOT NULL or CHECK constraints, and those must fail the batch.
constexpr const char* kInsertLog =
    "INSERT INTO logs (job_id, attempt_id, seq, stream, ts_ms, text) VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (attempt_id, seq) DO NOTHING";

constexpr const char* kSelectTokens =
    "SELECT id, kind, sha256, created_ms, account_id, scope, name, expires_ms, revoked_ms, node_id "
    "FROM tokens ORDER BY created_ms, rowid";
constexpr const char* kSelectNodes =
    "SELECT id, name, inventory, state, registered_ms, last_seen_ms, price_per_gpu_hour, "
    "price_per_cpu_hour, region, interruptible_price_per_gpu_hour, "
    "interruptible_price_per_cpu_hour, verification, verification_reasons, hardware_fingerprint, "
    "software_fingerprint, verified_ms, conformance, owner, revoked, paused_until_ms, "
    "paused_reason FROM nodes "
    "ORDER BY registered_ms, rowid";
#define SLUICE_ATTEMPT_COLUMNS                                                             \
  "SELECT id, job_id, node_id, gpus, cpus, memory_gb, price_per_hour, state, created_ms, " \
  "started_ms, ended_ms, exit_code, cause, number, checkpoint_restored, interruptible, "   \
  "node_snapshot, expected_cost_micros FROM attempts "
using sqlite::kSelectFinishedJobs;  // the job reads: sqlite_job_queries.h
using sqlite::kSelectFinishedJobsOfOwner;
using sqlite::kSelectFinishedJobsOfTeam;
using sqlite::kSelectJob;
using sqlite::kSelectJobs;
using sqlite::kUpsertAttempt;  // the state rows' upserts: sqlite_state_upserts.h
using sqlite::kUpsertJob;
using sqlite::kUpsertNode;
constexpr const char* kSelectAttemptsForJob =
    SLUICE_ATTEMPT_COLUMNS "WHERE job_id = ? ORDER BY created_ms, rowid";
constexpr const char* kSelectActiveAttempts =
    SLUICE_ATTEMPT_COLUMNS "WHERE state IN ('starting', 'running') ORDER BY created_ms, rowid";
constexpr const char* kSelectAttemptsSince =
    SLUICE_ATTEMPT_COLUMNS "WHERE created_ms >= ? ORDER BY created_ms, rowid";
#undef SLUICE_ATTEMPT_COLUMNS
constexpr const char* kSelectLogs =
    "SELECT id, job_id, attempt_id, seq, stream, ts_ms, text FROM logs "
    "WHERE job_id = ? AND id > ? ORDER BY id LIMIT ?";
constexpr const char* kLogBytes =
    "SELECT coalesce(sum(length(CAST(text AS BLOB))), 0) FROM logs WHERE attempt_id = ?";
// The first line at which the running total of the oldest lines reaches the bytes to free.
constexpr const char* kFindLogTrim =
    "SELECT seq, cum, n FROM (SELECT seq, sum(length(CAST(text AS BLOB))) OVER (ORDER BY seq) "
    "AS cum, row_number() OVER (ORDER BY seq) AS n FROM logs WHERE attempt_id = ?) "
    "WHERE cum >= ? ORDER BY seq LIMIT 1";
constexpr const char* kTrimLogs = "DELETE FROM logs WHERE attempt_id = ? AND seq < ?";
constexpr const char* kMaxLogSeq = "SELECT coalesce(max(seq), 0) FROM logs WHERE attempt_id = ?";
constexpr const char* kUpsertCatalog =
    "INSERT INTO catalogs (provider, source_name, csv, imported_ms) VALUES (?, ?, ?, ?) "
    "ON CONFLICT(provider) DO UPDATE SET source_name = excluded.source_name, "
    "csv = excluded.csv, imported_ms = excluded.imported_ms";
constexpr const char* kUpsertCheckpoint =
    "INSERT INTO checkpoints (job_id, manifest, attempt_id, created_ms) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (job_id, manifest) DO UPDATE SET attempt_id = excluded.attempt_id, "
    "created_ms = excluded.created_ms";
constexpr const char* kDeleteCheckpoint =
    "DELETE FROM checkpoints WHERE job_id = ? AND manifest = ?";
constexpr const char* kSelectCheckpoints =
    "SELECT job_id, manifest, attempt_id, created_ms FROM checkpoints "
    "ORDER BY created_ms, rowid";
constexpr const char* kInsertSnapshot =
    "INSERT INTO node_snapshots (digest, json) VALUES (?, ?) ON CONFLICT (digest) DO NOTHING";
constexpr const char* kSelectSnapshot = "SELECT digest, json FROM node_snapshots WHERE digest = ?";
constexpr const char* kUpsertUptime =
    "INSERT INTO node_uptime (node_id, start_ms, end_ms) VALUES (?, ?, ?) "
    "ON CONFLICT (node_id, start_ms) DO UPDATE SET end_ms = excluded.end_ms";
constexpr const char* kSelectUptime =
    "SELECT node_id, start_ms, end_ms FROM node_uptime WHERE end_ms >= ? "
    "ORDER BY start_ms, rowid";
constexpr const char* kInsertAudit =
    "INSERT INTO audit_log (ts_ms, actor, source, action, target, params, status) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)";
constexpr const char* kSelectAudit =
    "SELECT id, ts_ms, actor, source, action, target, params, status FROM audit_log "
    "WHERE ts_ms >= ? AND id > ? ORDER BY id LIMIT ?";
// Children first: attempts reference jobs.
constexpr const char* kDeleteJobRows[] = {
    "DELETE FROM logs WHERE job_id = ?", "DELETE FROM events WHERE job_id = ?",
    "DELETE FROM checkpoints WHERE job_id = ?", "DELETE FROM attempts WHERE job_id = ?",
    "DELETE FROM jobs WHERE id = ?"};
constexpr const char* kSelectCatalogs =
    "SELECT provider, source_name, csv, imported_ms FROM catalogs ORDER BY provider";
constexpr const char* kSelectEvents =
    "SELECT id, job_id, ts_ms, type, message FROM events "
    "WHERE job_id = ? AND id > ? ORDER BY id LIMIT ?";

// --- Row codecs. ---

Result<Json> ColumnJson(const Query& q, int i, std::string_view what) {
  auto j = ParseJson(q.ColText(i), kStoredJsonMaxDepth);
  if (!j.ok())
    return Status::Internal("sqlite store: " + std::string(what) + ": " + j.status().message());
  return std::move(j).value();
}

// A stored document kept as text (json_text.h): checked, then its compact form kept.
Result<JsonText> ColumnJsonText(const Query& q, int i, std::string_view what) {
  SLUICE_ASSIGN_OR_RETURN(Json j, ColumnJson(q, i, what));
  return JsonText(j);
}

std::string GpusToText(const std::vector<int>& gpus) { return DumpJson(Json(gpus)); }

Result<std::vector<int>> GpusFromJson(const Json& j, const std::string& attempt_id) {
  std::vector<int> gpus;
  if (!j.is_array()) {
    return Status::Internal("sqlite store: attempt " + attempt_id + ": gpus is not an array");
  }
  for (const Json& g : j) {
    if (!g.is_number_integer()) {
      return Status::Internal("sqlite store: attempt " + attempt_id + ": gpus holds a non-integer");
    }
    gpus.push_back(g.get<int>());
  }
  return gpus;
}

template <typename T>
Result<T> Corrupt(Result<T> r, std::string_view table, const std::string& id) {
  if (r.ok()) return r;
  return Status::Internal("sqlite store: " + std::string(table) + " row " + id + ": " +
                          r.status().message());
}

Result<TokenRecord> ReadToken(const Query& q) {
  TokenRecord t;
  t.id = q.ColText(0);
  t.kind = q.ColText(1);
  t.sha256 = q.ColText(2);
  t.created_ms = q.ColInt(3);
  t.account_id = q.ColText(4);
  t.scope = q.ColText(5);
  t.name = q.ColText(6);
  t.expires_ms = q.ColInt(7);
  t.revoked_ms = q.ColInt(8);
  t.node_id = q.ColText(9);
  return t;
}

Result<NodeRecord> ReadNode(const Query& q) {
  NodeRecord n;
  n.id = q.ColText(0);
  n.name = q.ColText(1);
  SLUICE_ASSIGN_OR_RETURN(n.inventory, ColumnJsonText(q, 2, "node " + n.id + " inventory"));
  SLUICE_ASSIGN_OR_RETURN(n.state, Corrupt(ParseNodeState(q.ColText(3)), "nodes", n.id));
  n.registered_ms = q.ColInt(4);
  n.last_seen_ms = q.ColInt(5);
  n.price_per_gpu_hour = q.ColReal(6);
  n.price_per_cpu_hour = q.ColReal(7);
  n.region = q.ColText(8);
  n.interruptible_price_per_gpu_hour = q.ColReal(9);
  n.interruptible_price_per_cpu_hour = q.ColReal(10);
  n.verification = q.ColText(11);
  SLUICE_ASSIGN_OR_RETURN(n.verification_reasons, ColumnJson(q, 12, "node " + n.id + " reasons"));
  n.hardware_fingerprint = q.ColText(13);
  n.software_fingerprint = q.ColText(14);
  n.verified_ms = q.ColInt(15);
  SLUICE_ASSIGN_OR_RETURN(n.conformance, ColumnJsonText(q, 16, "node " + n.id + " conformance"));
  n.owner = q.ColText(17);
  n.revoked = q.ColInt(18) != 0;
  n.paused_until_ms = q.ColInt(19);
  n.paused_reason = q.ColText(20);
  return n;
}

Result<JobRecord> ReadJob(const Query& q) {
  JobRecord j;
  j.id = q.ColText(0);
  j.name = q.ColText(1);
  SLUICE_ASSIGN_OR_RETURN(j.spec, ColumnJsonText(q, 2, "job " + j.id + " spec"));
  j.workdir_blob = q.ColText(3);
  SLUICE_ASSIGN_OR_RETURN(j.state, Corrupt(ParseJobState(q.ColText(4)), "jobs", j.id));
  j.priority = static_cast<int>(q.ColInt(5));
  j.submitted_ms = q.ColInt(6);
  j.started_ms = q.ColInt(7);
  j.finished_ms = q.ColInt(8);
  j.exit_code = q.ColOptInt(9);
  j.reason = q.ColText(10);
  j.attempt_id = q.ColText(11);
  j.cancel_requested = q.ColInt(12) != 0;
  j.checkpoint = q.ColText(13);
  j.preemptions = static_cast<int>(q.ColInt(14));
  j.owner = q.ColText(15);
  j.team = q.ColText(16);
  return j;
}

Result<AttemptRecord> ReadAttempt(const Query& q) {
  AttemptRecord a;
  a.id = q.ColText(0);
  a.job_id = q.ColText(1);
  a.node_id = q.ColText(2);
  SLUICE_ASSIGN_OR_RETURN(Json gpus, ColumnJson(q, 3, "attempt " + a.id + " gpus"));
  SLUICE_ASSIGN_OR_RETURN(a.gpus, GpusFromJson(gpus, a.id));
  a.cpus = static_cast<int>(q.ColInt(4));
  a.memory_gb = q.ColReal(5);
  a.price_per_hour = q.ColReal(6);
  SLUICE_ASSIGN_OR_RETURN(a.state, Corrupt(ParseAttemptState(q.ColText(7)), "attempts", a.id));
  a.created_ms = q.ColInt(8);
  a.started_ms = q.ColInt(9);
  a.ended_ms = q.ColInt(10);
  a.exit_code = q.ColOptInt(11);
  a.cause = q.ColText(12);
  a.number = static_cast<int>(q.ColInt(13));
  a.checkpoint_restored = q.ColText(14);
  a.interruptible = q.ColInt(15) != 0;
  a.node_snapshot = q.ColText(16);
  a.expected_cost_micros = q.ColInt(17);
  return a;
}

Result<LogLine> ReadLog(const Query& q) {
  LogLine l;
  l.id = q.ColInt(0);
  l.job_id = q.ColText(1);
  l.attempt_id = q.ColText(2);
  l.seq = q.ColInt(3);
  l.stream = q.ColText(4);
  l.ts_ms = q.ColInt(5);
  l.text = q.ColText(6);
  return l;
}

Result<JobEvent> ReadEvent(const Query& q) {
  JobEvent e;
  e.id = q.ColInt(0);
  e.job_id = q.ColText(1);
  e.ts_ms = q.ColInt(2);
  e.type = q.ColText(3);
  e.message = q.ColText(4);
  return e;
}

class SqliteStore final : public Store {
 public:
  explicit SqliteStore(sqlite3* db) : db_(db) {}
  using Store::Write;  // the overload for a temporary batch
  ~SqliteStore() override {
    checkpointer_.reset();  // its hook is on db_
    for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
    sqlite3_close(db_);
  }

  Status Write(WriteBatch& batch) override {
    if (batch.empty()) return Status::Ok();
    std::lock_guard<std::mutex> lock(mu_);
    // IMMEDIATE takes the write lock up front, so a busy database fails here (and waits
    // busy_timeout) rather than midway through the batch.
    if (int rc = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr); rc != SQLITE_OK) {
      failed_commits_.fetch_add(1, std::memory_order_relaxed);  // refused before it began
      return Error(db_, rc, "begin");
    }
    AppendedIds ids;
    Status st = WriteLocked(batch, ids);
    if (st.ok()) {
      int rc = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
      if (rc != SQLITE_OK) st = Error(db_, rc, "commit");
    }
    if (st.ok()) {  // the ids are the batch's only once they are committed
      for (size_t i = 0; i < ids.events.size(); ++i) batch.events[i].id = ids.events[i];
      for (size_t i = 0; i < ids.logs.size(); ++i) batch.logs[i].id = ids.logs[i];
    }
    if (!st.ok() && !sqlite3_get_autocommit(db_)) {
      // Still inside the transaction: undo it so nothing of the batch is visible.
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    }
    // Pages this connection wrote (to the WAL) since the last read: what a commit costs in I/O,
    // which grows with the indexes a batch touches, not with its rows.
    int pages = 0, unused = 0, missed = 0;
    sqlite3_db_status(db_, SQLITE_DBSTATUS_CACHE_WRITE, &pages, &unused, /*resetFlg=*/1);
    pages_written_.fetch_add(pages, std::memory_order_relaxed);
    // And pages it had to read back because its cache no longer held them (--db-cache-mib).
    sqlite3_db_status(db_, SQLITE_DBSTATUS_CACHE_MISS, &missed, &unused, /*resetFlg=*/1);
    pages_read_.fetch_add(missed, std::memory_order_relaxed);
    (st.ok() ? commits_ : failed_commits_).fetch_add(1, std::memory_order_relaxed);
    return st;
  }

  Status CheckWritable() override {
    std::lock_guard<std::mutex> lock(mu_);
    // BEGIN IMMEDIATE takes the write lock; a write to a scratch table proves the file (and its
    // WAL) accept writes; the rollback leaves nothing behind.
    if (int rc = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr); rc != SQLITE_OK) {
      return Error(db_, rc, "begin");
    }
    int rc = sqlite3_exec(db_,
                          "CREATE TEMP TABLE IF NOT EXISTS write_check (x); "
                          "UPDATE schema_version SET version = version WHERE 0 = 1; "
                          "INSERT INTO schema_version SELECT -1, 'write check', 0;",
                          nullptr, nullptr, nullptr);
    Status st = rc == SQLITE_OK ? Status::Ok() : Error(db_, rc, "write check");
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return st;
  }
  Result<std::vector<TokenRecord>> LoadTokens() override {
    std::lock_guard<std::mutex> lock(mu_);
    return Select(kSelectTokens, "load tokens", ReadToken, [](Query&) {});
  }
  Result<std::vector<AccountRecord>> LoadAccounts() override {
    std::lock_guard<std::mutex> lock(mu_);
    return Select(
        kSelectAccounts, "load accounts",
        [](const Query& q) -> Result<AccountRecord> {
          AccountRecord a;
          a.id = q.ColText(0);
          a.name = q.ColText(1);
          a.role = q.ColText(2);
          a.disabled = q.ColInt(3) != 0;
          a.created_ms = q.ColInt(4);
          a.owner = q.ColText(5);
          a.credit_limit_micros = q.ColInt(6);
          return a;
        },
        [](Query&) {});
  }
  Result<std::vector<TeamMember>> LoadTeamMembers() override {
    std::lock_guard<std::mutex> lock(mu_);
    return Select(
        kSelectTeamMembers, "load team members",
        [](const Query& q) -> Result<TeamMember> {
          return TeamMember{q.ColText(0), q.ColText(1), q.ColInt(2), false};
        },
        [](Query&) {});
  }
  Result<std::optional<IdempotencyRecord>> GetIdempotencyKey(const std::string& account_id,
                                                             const std::string& key,
                                                             int64_t since_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    SLUICE_ASSIGN_OR_RETURN(std::vector<IdempotencyRecord> rows,
                            Select(
                                kSelectIdempotency, "get idempotency key",
                                [](const Query& q) -> Result<IdempotencyRecord> {
                                  return IdempotencyRecord{q.ColText(0), q.ColText(1), q.ColText(2),
                                                           q.ColText(3), q.ColInt(4)};
                                },
                                [&](Query& q) { q.Text(account_id).Text(key).Int(since_ms); }));
    if (rows.empty()) return std::optional<IdempotencyRecord>();
    return std::optional<IdempotencyRecord>(std::move(rows.front()));
  }
  Result<int64_t> ExpireIdempotencyKeys(int64_t before_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(kExpireIdempotency));
    Query q(db_, s);
    q.Int(before_ms);
    SLUICE_RETURN_IF_ERROR(q.Run("expire idempotency keys"));
    return static_cast<int64_t>(sqlite3_changes(db_));
  }
  Result<std::vector<BlobOwner>> LoadBlobOwners() override {
    std::lock_guard<std::mutex> lock(mu_);
    return Select(
        kSelectBlobOwners, "load blob owners",
        [](const Query& q) -> Result<BlobOwner> {
          return BlobOwner{q.ColText(0), q.ColText(1), q.ColInt(2), q.ColInt(3)};
        },
        [](Query&) {});
  }
  Result<std::vector<NodeRecord>> LoadNodes() override {
    std::lock_guard<std::mutex> lock(mu_);
    return Select(kSelectNodes, "load nodes", ReadNode, [](Query&) {});
  }
  Result<std::vector<JobRecord>> LoadJobs() override {
    std::lock_guard<std::mutex> lock(mu_);
    return Select(kSelectJobs, "load jobs", ReadJob, [](Query&) {});
  }
  Result<std::optional<JobRecord>> GetJob(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    SLUICE_ASSIGN_OR_RETURN(std::vector<JobRecord> jobs,
                            Select(kSelectJob, "get job", ReadJob, [&](Query& q) { q.Text(id); }));
    if (jobs.empty()) return std::optional<JobRecord>();
    return std::optional<JobRecord>(std::move(jobs.front()));
  }
  Result<std::vector<JobRecord>> ListFinishedJobs(std::optional<JobState> state,
                                                  const std::optional<JobCursor>& before, int limit,
                                                  const JobScope* scope) override {
    if (state && !IsTerminal(*state)) return std::vector<JobRecord>();
    std::lock_guard<std::mutex> lock(mu_);
    // One read per owner and team (one for all without a scope), each at most `limit` rows,
    // merged: a job both owned and shared comes from two of them and is kept once.
    auto read = [&](const char* sql, const std::string* key) {
      return Select(sql, "list finished jobs", ReadJob, [&](Query& q) {
        q.Int(state ? 1 : 0).Text(state ? Name(*state) : std::string_view());
        q.Int(before ? before->submitted_ms : INT64_MAX);
        q.Text(before ? std::string_view(before->id) : std::string_view());
        if (key != nullptr) q.Text(*key);
        q.Int(std::max(0, limit));
      });
    };
    if (scope == nullptr) return read(kSelectFinishedJobs, nullptr);
    std::vector<JobRecord> out;
    auto add = [&](const char* sql, const std::string& key) -> Status {
      SLUICE_ASSIGN_OR_RETURN(auto rows, read(sql, &key));
      out.insert(out.end(), std::make_move_iterator(rows.begin()),
                 std::make_move_iterator(rows.end()));
      return Status::Ok();
    };
    for (const auto& owner : scope->owners) {
      SLUICE_RETURN_IF_ERROR(add(kSelectFinishedJobsOfOwner, owner));
    }
    for (const auto& team : scope->teams) {
      if (!team.empty()) SLUICE_RETURN_IF_ERROR(add(kSelectFinishedJobsOfTeam, team));
    }
    std::sort(out.begin(), out.end(), ListedBefore);
    out.erase(std::unique(out.begin(), out.end(),
                          [](const JobRecord& a, const JobRecord& b) { return a.id == b.id; }),
              out.end());
    if (out.size() > static_cast<size_t>(std::max(0, limit))) {
      out.resize(static_cast<size_t>(std::max(0, limit)));
    }
    return out;
  }
  Result<std::vector<AttemptRecord>> AttemptsForJob(const std::string& job_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Select(kSelectAttemptsForJob, "attempts for job", ReadAttempt,
                  [&](Query& q) { q.Text(job_id); });
  }
  Result<std::vector<AttemptRecord>> LoadActiveAttempts() override {
    std::lock_guard<std::mutex> lock(mu_);
    return Select(kSelectActiveAttempts, "load active attempts", ReadAttempt, [](Query&) {});
  }
  Result<std::vector<LogLine>> ReadLogs(const std::string& job_id, int64_t after_id,
                                        int limit) override {
    if (limit < 0) return Status::InvalidArgument("read logs: negative limit");
    if (limit == 0) return std::vector<LogLine>();
    std::lock_guard<std::mutex> lock(mu_);
    return Select(kSelectLogs, "read logs", ReadLog,
                  [&](Query& q) { q.Text(job_id).Int(after_id).Int(limit); });
  }
  Result<int64_t> LogBytes(const std::string& attempt_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    SLUICE_ASSIGN_OR_RETURN(
        std::vector<int64_t> n,
        Select(
            kLogBytes, "log bytes", [](const Query& q) -> Result<int64_t> { return q.ColInt(0); },
            [&](Query& q) { q.Text(attempt_id); }));
    return n.empty() ? int64_t{0} : n.front();
  }
  Result<LogTrimPoint> FindLogTrim(const std::string& attempt_id, int64_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    SLUICE_ASSIGN_OR_RETURN(std::vector<LogTrimPoint> rows,
                            Select(
                                kFindLogTrim, "find log trim",
                                [](const Query& q) -> Result<LogTrimPoint> {
                                  // Cut after this line: everything up to and including it goes.
                                  return LogTrimPoint{q.ColInt(0) + 1, q.ColInt(1), q.ColInt(2)};
                                },
                                [&](Query& q) { q.Text(attempt_id).Int(bytes); }));
    if (rows.empty()) return Status::NotFound("attempt " + attempt_id + " has no log to trim");
    return rows.front();
  }
  Result<int64_t> MaxLogSeq(const std::string& attempt_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    SLUICE_ASSIGN_OR_RETURN(std::vector<int64_t> max,
                            Select(
                                kMaxLogSeq, "max log seq",
                                [](const Query& q) -> Result<int64_t> { return q.ColInt(0); },
                                [&](Query& q) { q.Text(attempt_id); }));
    return max.empty() ? int64_t{0} : max.front();
  }
  Result<std::vector<JobEvent>> ReadEvents(const std::string& job_id, int64_t after_id,
                                           int limit) override {
    if (limit < 0) return Status::InvalidArgument("read events: negative limit");
    if (limit == 0) return std::vector<JobEvent>();
    std::lock_guard<std::mutex> lock(mu_);
    return Select(kSelectEvents, "read events", ReadEvent,
                  [&](Query& q) { q.Text(job_id).Int(after_id).Int(limit); });
  }
  Result<std::vector<CheckpointRecord>> LoadCheckpoints() override {
    std::lock_guard<std::mutex> lock(mu_);
    return Select(
        kSelectCheckpoints, "load checkpoints",
        [](const Query& q) -> Result<CheckpointRecord> {
          CheckpointRecord c;
          c.job_id = q.ColText(0);
          c.manifest = q.ColText(1);
          c.attempt_id = q.ColText(2);
          c.created_ms = q.ColInt(3);
          return c;
        },
        [](Query&) {});
  }
  Result<std::optional<NodeSnapshot>> GetSnapshot(const std::string& digest) override {
    std::lock_guard<std::mutex> lock(mu_);
    SLUICE_ASSIGN_OR_RETURN(std::vector<NodeSnapshot> rows,
                            Select(
                                kSelectSnapshot, "get node snapshot",
                                [](const Query& q) -> Result<NodeSnapshot> {
                                  return NodeSnapshot{q.ColText(0), q.ColText(1)};
                                },
                                [&](Query& q) { q.Text(digest); }));
    if (rows.empty()) return std::optional<NodeSnapshot>();
    return std::optional<NodeSnapshot>(std::move(rows.front()));
  }
  Result<std::vector<UptimeSpan>> LoadUptime(int64_t since_ms) override {
    if (history_) return history_->LoadUptime(since_ms);
    std::lock_guard<std::mutex> lock(mu_);
    return Select(
        kSelectUptime, "load uptime",
        [](const Query& q) -> Result<UptimeSpan> {
          return UptimeSpan{q.ColText(0), q.ColInt(1), q.ColInt(2)};
        },
        [&](Query& q) { q.Int(since_ms); });
  }
  Result<std::vector<AttemptRecord>> AttemptsSince(int64_t since_ms) override {
    if (history_) return history_->AttemptsSince(since_ms);
    std::lock_guard<std::mutex> lock(mu_);
    return Select(kSelectAttemptsSince, "attempts since", ReadAttempt,
                  [&](Query& q) { q.Int(since_ms); });
  }
  Result<std::vector<AuditEntry>> ReadAudit(int64_t since_ms, int64_t after_id,
                                            int limit) override {
    if (limit < 0) return Status::InvalidArgument("read audit log: negative limit");
    if (limit == 0) return std::vector<AuditEntry>();
    std::lock_guard<std::mutex> lock(mu_);
    return Select(
        kSelectAudit, "read audit log",
        [](const Query& q) -> Result<AuditEntry> {
          AuditEntry a;
          a.id = q.ColInt(0);
          a.ts_ms = q.ColInt(1);
          a.actor = q.ColText(2);
          a.source = q.ColText(3);
          a.action = q.ColText(4);
          a.target = q.ColText(5);
          SLUICE_ASSIGN_OR_RETURN(a.params, ColumnJson(q, 6, "audit entry params"));
          a.status = static_cast<int>(q.ColInt(7));
          return a;
        },
        [&](Query& q) { q.Int(since_ms).Int(after_id).Int(limit); });
  }
  Result<std::vector<CatalogFile>> LoadCatalogs() override {
    std::lock_guard<std::mutex> lock(mu_);
    return Select(
        kSelectCatalogs, "load catalogs",
        [](const Query& q) -> Result<CatalogFile> {
          CatalogFile c;
          c.provider = q.ColText(0);
          c.source_name = q.ColText(1);
          c.csv = q.ColText(2);
          c.imported_ms = q.ColInt(3);
          return c;
        },
        [](Query&) {});
  }

  Result<std::vector<MeterRecord>> LoadMeters(const std::string& job_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    return sqlite::LoadMeters(db_, PrepareFn(), job_id);
  }
  Result<std::vector<std::pair<std::string, int64_t>>> LoadBalances() override {
    std::lock_guard<std::mutex> lock(mu_);
    return sqlite::LoadBalances(db_, PrepareFn());
  }
  Result<LedgerCheck> CheckLedger() override {
    std::lock_guard<std::mutex> lock(mu_);
    return sqlite::CheckLedger(db_, PrepareFn());
  }
  Result<std::vector<CostRow>> Costs(const CostQuery& query) override {
    std::lock_guard<std::mutex> lock(mu_);
    return sqlite::Costs(db_, query, /*from_meters=*/false);
  }
  Result<std::vector<CostRow>> CostsFromMeters(const CostQuery& query) override {
    std::lock_guard<std::mutex> lock(mu_);
    return sqlite::Costs(db_, query, /*from_meters=*/true);
  }
  Result<std::vector<BudgetRecord>> LoadBudgets() override {
    std::lock_guard<std::mutex> lock(mu_);
    return sqlite::LoadBudgets(db_, PrepareFn());
  }
  Result<std::vector<BudgetAlert>> LoadBudgetAlerts(const std::string& since_month,
                                                    bool undelivered) override {
    std::lock_guard<std::mutex> lock(mu_);
    return sqlite::LoadBudgetAlerts(db_, PrepareFn(), since_month, undelivered);
  }
  StoreCounters Counters() override {
    StoreCounters c;
    c.commits = commits_.load(std::memory_order_relaxed);
    c.failed_commits = failed_commits_.load(std::memory_order_relaxed);
    c.pages_written = pages_written_.load(std::memory_order_relaxed);
    c.pages_read = pages_read_.load(std::memory_order_relaxed);
    c.page_cache_bytes = page_cache_bytes_;  // set at open, before the store is shared
    if (checkpointer_) {                     // likewise
      c.background_checkpoints = checkpointer_->background_checkpoints();
      c.inline_checkpoints = checkpointer_->inline_checkpoints();
      c.checkpoint_failures = checkpointer_->failures();
      c.wal_checkpoint_pages = checkpointer_->wake_frames();
    }
    return c;
  }

  Result<int64_t> ScopeSpend(const std::string& scope, const std::string& since_day) override {
    std::lock_guard<std::mutex> lock(mu_);
    return sqlite::ScopeSpend(db_, PrepareFn(), scope, since_day);
  }

 private:
  sqlite::PrepareFn PrepareFn() {
    return [this](const char* sql) { return Prepare(sql); };
  }

  // Requires mu_. Statements live as long as the connection; SQLITE_PREPARE_PERSISTENT tells
  // SQLite they will be reused many times.
  Result<sqlite3_stmt*> Prepare(const char* sql) {
    if (auto it = cache_.find(sql); it != cache_.end()) return it->second;
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) {
      sqlite3_finalize(stmt);
      return Error(db_, rc, "prepare");
    }
    cache_.emplace(sql, stmt);
    return stmt;
  }

  // Requires mu_. Runs a SELECT and converts every row with `read`.
  template <typename Read, typename Bind>
  auto Select(const char* sql, std::string_view what, Read read, Bind bind) -> Result<
      std::vector<std::remove_cvref_t<decltype(read(std::declval<const Query&>()).value())>>> {
    using T = std::remove_cvref_t<decltype(read(std::declval<const Query&>()).value())>;
    SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(sql));
    Query q(db_, s);
    bind(q);
    std::vector<T> out;
    for (;;) {
      SLUICE_ASSIGN_OR_RETURN(bool row, q.Step(what));
      if (!row) return out;
      SLUICE_ASSIGN_OR_RETURN(T value, read(q));
      out.push_back(std::move(value));
    }
  }

  // Requires mu_ and an open transaction.
  // The row ids WriteLocked's appends got, in the batch's order (0: a log line already held).
  struct AppendedIds {
    std::vector<int64_t> events;
    std::vector<int64_t> logs;
  };
  Status WriteLocked(const WriteBatch& b, AppendedIds& ids) {
    for (const std::string& job : b.deleted_jobs) {
      for (const char* sql : kDeleteJobRows) {
        SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(sql));
        Query q(db_, s);
        q.Text(job);
        SLUICE_RETURN_IF_ERROR(q.Run("delete job " + job));
      }
    }
    for (const AccountRecord& a : b.accounts) {
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(kUpsertAccount));
      Query q(db_, s);
      q.Text(a.id).Text(a.name).Text(a.role).Int(a.disabled ? 1 : 0).Int(a.created_ms);
      q.Text(a.owner).Int(a.credit_limit_micros);
      SLUICE_RETURN_IF_ERROR(q.Run("write account " + a.id));
    }
    for (const TeamMember& m : b.team_members) {
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s,
                              Prepare(m.removed ? kDeleteTeamMember : kUpsertTeamMember));
      Query q(db_, s);
      q.Text(m.team).Text(m.account_id);
      if (!m.removed) q.Int(m.added_ms);
      SLUICE_RETURN_IF_ERROR(q.Run("write team member " + m.team));
    }
    for (const IdempotencyRecord& r : b.idempotency) {
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(kInsertIdempotency));
      Query q(db_, s);
      q.Text(r.account_id).Text(r.key).Text(r.body_sha256).Text(r.job_id).Int(r.created_ms);
      SLUICE_RETURN_IF_ERROR(q.Run("write idempotency key"));
    }
    for (const BlobOwner& o : b.blob_owners) {
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(kUpsertBlobOwner));
      Query q(db_, s);
      q.Text(o.digest).Text(o.account_id).Int(o.size).Int(o.created_ms);
      SLUICE_RETURN_IF_ERROR(q.Run("write blob owner " + o.digest));
    }
    for (const BlobOwner& o : b.dropped_blob_owners) {
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(kDeleteBlobOwner));
      Query q(db_, s);
      q.Text(o.digest).Text(o.account_id);
      SLUICE_RETURN_IF_ERROR(q.Run("drop blob owner " + o.digest));
    }
    for (const TokenRecord& t : b.tokens) {
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(kUpsertToken));
      Query q(db_, s);
      q.Text(t.id).Text(t.kind).Text(t.sha256).Int(t.created_ms).Text(t.account_id).Text(t.scope);
      q.Text(t.name).Int(t.expires_ms).Int(t.revoked_ms).Text(t.node_id);
      SLUICE_RETURN_IF_ERROR(q.Run("write token " + t.id));
    }
    const std::vector<bool> later_nodes = Superseded(b.nodes);
    for (size_t i = 0; i < b.nodes.size(); ++i) {
      if (later_nodes[i]) continue;
      const NodeRecord& n = b.nodes[i];
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(kUpsertNode));
      Query q(db_, s);
      q.Text(n.id).Text(n.name).Text(n.inventory.text()).Text(Name(n.state));
      q.Int(n.registered_ms).Int(n.last_seen_ms).Real(n.price_per_gpu_hour);
      q.Real(n.price_per_cpu_hour).Text(n.region).Real(n.interruptible_price_per_gpu_hour);
      q.Real(n.interruptible_price_per_cpu_hour).Text(n.verification);
      q.Text(DumpJson(n.verification_reasons)).Text(n.hardware_fingerprint);
      q.Text(n.software_fingerprint).Int(n.verified_ms).Text(n.conformance.text());
      q.Text(n.owner).Int(n.revoked ? 1 : 0).Int(n.paused_until_ms).Text(n.paused_reason);
      SLUICE_RETURN_IF_ERROR(q.Run("write node " + n.id));
    }
    const std::vector<bool> later_jobs = Superseded(b.jobs);
    for (size_t i = 0; i < b.jobs.size(); ++i) {
      if (later_jobs[i]) continue;
      const JobRecord& j = b.jobs[i];
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(kUpsertJob));
      Query q(db_, s);
      q.Text(j.id).Text(j.name).Text(j.spec.text()).Text(j.workdir_blob).Text(Name(j.state));
      q.Int(j.priority).Int(j.submitted_ms).Int(j.started_ms).Int(j.finished_ms);
      q.OptInt(j.exit_code).Text(j.reason).Text(j.attempt_id).Int(j.cancel_requested ? 1 : 0);
      q.Text(j.checkpoint).Int(j.preemptions).Text(j.owner).Text(j.team);
      SLUICE_RETURN_IF_ERROR(q.Run("write job " + j.id));
      if (sqlite3_changes(db_) == 0) {
        return Status::InvalidArgument("sqlite store: write job " + j.id +
                                       ": its submitted_ms differs from the stored row's, and "
                                       "it never changes");
      }
    }
    const std::vector<bool> later_attempts = Superseded(b.attempts);
    for (size_t i = 0; i < b.attempts.size(); ++i) {
      if (later_attempts[i]) continue;
      const AttemptRecord& a = b.attempts[i];
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(kUpsertAttempt));
      Query q(db_, s);
      q.Text(a.id).Text(a.job_id).Text(a.node_id).Text(GpusToText(a.gpus)).Int(a.cpus);
      q.Real(a.memory_gb).Real(a.price_per_hour).Text(Name(a.state)).Int(a.created_ms);
      q.Int(a.started_ms).Int(a.ended_ms).OptInt(a.exit_code).Text(a.cause).Int(a.number);
      q.Text(a.checkpoint_restored).Int(a.interruptible ? 1 : 0).Text(a.node_snapshot);
      q.Int(a.expected_cost_micros);
      SLUICE_RETURN_IF_ERROR(q.Run("write attempt " + a.id));
      if (sqlite3_changes(db_) == 0) {
        return Status::InvalidArgument("sqlite store: write attempt " + a.id +
                                       ": its job_id or created_ms differs from the stored "
                                       "row's, and they never change");
      }
    }
    for (const JobEvent& e : b.events) {
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(kInsertEvent));
      Query q(db_, s);
      q.Text(e.job_id).Int(e.ts_ms).Text(e.type).Text(e.message);
      SLUICE_RETURN_IF_ERROR(q.Run("write event for " + e.job_id));
      ids.events.push_back(sqlite3_last_insert_rowid(db_));
    }
    for (const LogTrim& t : b.log_trims) {
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(kTrimLogs));
      Query q(db_, s);
      q.Text(t.attempt_id).Int(t.before_seq);
      SLUICE_RETURN_IF_ERROR(q.Run("trim log of " + t.attempt_id));
    }
    for (const LogLine& l : b.logs) {
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(kInsertLog));
      Query q(db_, s);
      q.Text(l.job_id).Text(l.attempt_id).Int(l.seq).Text(l.stream).Int(l.ts_ms).Text(l.text);
      SLUICE_RETURN_IF_ERROR(q.Run("write log line for " + l.attempt_id));
      ids.logs.push_back(sqlite3_changes(db_) > 0 ? sqlite3_last_insert_rowid(db_) : 0);
    }
    for (const CatalogFile& c : b.catalogs) {
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(kUpsertCatalog));
      Query q(db_, s);
      q.Text(c.provider).Text(c.source_name).Text(c.csv).Int(c.imported_ms);
      SLUICE_RETURN_IF_ERROR(q.Run("write catalog " + c.provider));
    }
    for (const CheckpointRecord& c : b.checkpoints) {
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(kUpsertCheckpoint));
      Query q(db_, s);
      q.Text(c.job_id).Text(c.manifest).Text(c.attempt_id).Int(c.created_ms);
      SLUICE_RETURN_IF_ERROR(q.Run("write checkpoint of " + c.job_id));
    }
    for (const CheckpointRecord& c : b.dropped_checkpoints) {
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(kDeleteCheckpoint));
      Query q(db_, s);
      q.Text(c.job_id).Text(c.manifest);
      SLUICE_RETURN_IF_ERROR(q.Run("drop checkpoint of " + c.job_id));
    }
    for (const NodeSnapshot& n : b.snapshots) {
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(kInsertSnapshot));
      Query q(db_, s);
      q.Text(n.digest).Text(n.json);
      SLUICE_RETURN_IF_ERROR(q.Run("write node snapshot " + n.digest));
    }
    for (const UptimeSpan& u : b.uptime) {
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(kUpsertUptime));
      Query q(db_, s);
      q.Text(u.node_id).Int(u.start_ms).Int(u.end_ms);
      SLUICE_RETURN_IF_ERROR(q.Run("write uptime of " + u.node_id));
    }
    for (const AuditEntry& a : b.audit) {
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(kInsertAudit));
      Query q(db_, s);
      q.Int(a.ts_ms).Text(a.actor).Text(a.source).Text(a.action).Text(a.target);
      q.Text(DumpJson(a.params)).Int(a.status);
      SLUICE_RETURN_IF_ERROR(q.Run("write audit entry " + a.action));
    }
    SLUICE_RETURN_IF_ERROR(sqlite::WriteLedger(db_, PrepareFn(), b));
    return sqlite::WriteBudgets(db_, PrepareFn(), b);
  }

  std::mutex mu_;
  sqlite3* const db_;                                     // guarded by mu_
  std::unordered_map<const char*, sqlite3_stmt*> cache_;  // guarded by mu_

 public:
  // A second, read-only connection for the long history reads (reliability's 30 days of
  // attempts and uptime, read in the background every minute): in WAL mode it reads the last
  // committed state without holding mu_, so commits never wait behind it. At 10,000 nodes and
  // 20,000 recent attempts such a read held mu_ for seconds, and every commit under the core's
  // lock with it (docs/design-notes.md "Server core").
  std::unique_ptr<SqliteStore> history_;

  Status StartCheckpointer(const std::string& path, const WalCheckpointerOptions& options) {
    std::lock_guard<std::mutex> lock(mu_);
    SLUICE_ASSIGN_OR_RETURN(checkpointer_, WalCheckpointer::Start(path, db_, options));
    return Status::Ok();
  }
  // The page cache limit the connection holds, for the metrics page: `PRAGMA cache_size`
  // answers in pages when positive and in KiB when negative (SQLite's own convention).
  Status ReadPageCacheSize() {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t answers[2] = {0, 0};
    const char* const pragmas[2] = {"PRAGMA cache_size", "PRAGMA page_size"};
    for (int i = 0; i < 2; ++i) {
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, Prepare(pragmas[i]));
      Query q(db_, s);
      SLUICE_ASSIGN_OR_RETURN(bool row, q.Step(pragmas[i]));
      if (row) answers[i] = q.ColInt(0);
    }
    const auto [cache, page] = answers;
    page_cache_bytes_ = cache < 0 ? -cache * 1024 : cache * page;
    return Status::Ok();
  }

 private:
  std::unique_ptr<WalCheckpointer> checkpointer_;  // set once at open, before any use
  // Write()'s counters, read without mu_ by the metrics page.
  std::atomic<int64_t> commits_{0};
  std::atomic<int64_t> failed_commits_{0};
  std::atomic<int64_t> pages_written_{0};
  std::atomic<int64_t> pages_read_{0};
  int64_t page_cache_bytes_ = 0;  // read back from the connection at open (ReadPageCacheSize)
};

}  // namespace

Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path,
                                               const SqliteStoreOptions& options) {
  sqlite3* db = nullptr;
  // NOMUTEX: the store's own mutex already serializes every use of the connection.
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           options.wal_write_batching ? sqlite::WalBatchingVfs() : nullptr);
  if (rc != SQLITE_OK) {
    Status st = Status::Unavailable("sqlite store: open " + path + ": " +
                                    (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
    sqlite3_close(db);
    return st;
  }
  // From here the store owns the connection and closes it on every return path.
  auto store = std::make_unique<SqliteStore>(db);
  sqlite3_busy_timeout(db, options.busy_timeout_ms);

  // journal_mode answers with the mode it ended up in; a filesystem without shared memory
  // support silently stays in "delete" mode, which would break the durability contract.
  sqlite3_stmt* stmt = nullptr;
  rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &stmt, nullptr);
  std::string mode;
  if (rc == SQLITE_OK && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    mode = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
  }
  sqlite3_finalize(stmt);
  if (mode.empty()) return Error(db, rc, "open " + path + ": set WAL mode");
  if (mode != "wal" && !(path == ":memory:" && mode == "memory")) {
    return Status::FailedPrecondition("sqlite store: " + path + " cannot use WAL mode (got " +
                                      mode + ")");
  }
  const char* pragmas = options.sync_on_every_commit
                            ? "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;"
                            : "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;";
  if (rc = sqlite3_exec(db, pragmas, nullptr, nullptr, nullptr); rc != SQLITE_OK) {
    return Error(db, rc, "open " + path + ": pragmas");
  }
  if (options.page_cache_mib > 0) {  // negative: a size in KiB, not pages
    const std::string cache =
        "PRAGMA cache_size = -" + std::to_string(int64_t{options.page_cache_mib} * 1024);
    if (rc = sqlite3_exec(db, cache.c_str(), nullptr, nullptr, nullptr); rc != SQLITE_OK) {
      return Error(db, rc, "open " + path + ": cache size");
    }
  }
  MigrationStepHook before_step;
  if (options.on_upgrade_step) {
    before_step = [&](const Migration& step, int from_version) {
      options.on_upgrade_step(step.version, step.description, from_version);
    };
  }
  SLUICE_RETURN_IF_ERROR(Migrate(db, CurrentSchemaVersion(), before_step));
  SLUICE_RETURN_IF_ERROR(store->ReadPageCacheSize());
  if (path != ":memory:") {  // a second connection to :memory: would be another database
    sqlite3* reader = nullptr;
    rc =
        sqlite3_open_v2(path.c_str(), &reader, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) {
      Status st = Error(reader, rc, "open " + path + " for history reads");
      sqlite3_close(reader);
      return st;
    }
    store->history_ = std::make_unique<SqliteStore>(reader);
    sqlite3_busy_timeout(reader, options.busy_timeout_ms);
    if (options.background_checkpoints) {
      WalCheckpointerOptions wal;
      wal.busy_timeout_ms = options.busy_timeout_ms;
      if (options.wal_checkpoint_pages > 0) wal.wake_frames = options.wal_checkpoint_pages;
      // The inline bound stays well above the wake-up, or commits would checkpoint inline
      // whenever the thread is a little late.
      wal.inline_frames = std::max(wal.inline_frames, 4 * wal.wake_frames);
      SLUICE_RETURN_IF_ERROR(store->StartCheckpointer(path, wal));
    }
  }
  return std::unique_ptr<Store>(std::move(store));
}

Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path) {
  return OpenSqliteStore(path, SqliteStoreOptions{});
}

}  // namespace sluice::store
