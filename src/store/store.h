// Store: the durable source of truth. The server's core keeps live copies in memory and
// writes every change through Write() before it acknowledges anything (DESIGN.md §7).
//
// Thread safety: all methods may be called from any thread; the implementation serializes.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/records.h"

namespace sluice::store {

// What a store did on its own, beside the writes it was asked for: /v1/metrics exports it.
struct StoreCounters {
  int64_t background_checkpoints = 0;  // WAL checkpoints on the checkpointer's thread
  int64_t inline_checkpoints = 0;      // in a commit: the WAL had grown past its bound
  int64_t checkpoint_failures = 0;     // neither copied the WAL (the first one is logged)
  int64_t commits = 0;                 // Write() batches committed
  int64_t failed_commits = 0;          // Write() batches refused or rolled back
  int64_t pages_written = 0;           // database pages written by Write() (to the WAL)
  int64_t pages_read = 0;  // pages the writing connection read back, missing in its page cache
  // Settings in effect, read back from SQLite and the checkpointer (not from the options asked
  // for), so the metrics page shows what a flag actually did.
  int64_t page_cache_bytes = 0;      // the writing connection's page cache limit; 0: unknown
  int64_t wal_checkpoint_pages = 0;  // WAL pages that wake the background checkpoint; 0: none
};

class Store {
 public:
  virtual ~Store() = default;

  // Applies the whole batch in one transaction, or nothing. Once it is committed, sets the `id`
  // of each event and log line the batch appended (a log line the store already held, by its
  // attempt and seq, is left at 0): live stream readers get the ids a replay would give, and
  // resume after them (docs/design-notes.md "Job streams"). A failed write changes no id.
  virtual Status Write(WriteBatch& batch) = 0;
  // The same for a batch nobody reads afterwards (its ids go with it).
  Status Write(WriteBatch&& batch) { return Write(batch); }

  // Proves the database accepts writes (a write transaction that changes nothing), so a
  // read-only file is reported at start rather than at the first real write.
  virtual Status CheckWritable() = 0;
  virtual Result<std::vector<TokenRecord>> LoadTokens() = 0;
  virtual Result<std::vector<AccountRecord>> LoadAccounts() = 0;
  virtual Result<std::vector<TeamMember>> LoadTeamMembers() = 0;
  // The submission recorded under (account, key) at or after `since_ms`, or nullopt.
  virtual Result<std::optional<IdempotencyRecord>> GetIdempotencyKey(const std::string& account_id,
                                                                     const std::string& key,
                                                                     int64_t since_ms) = 0;
  // Deletes idempotency keys older than `before_ms`; returns how many.
  virtual Result<int64_t> ExpireIdempotencyKeys(int64_t before_ms) = 0;
  // Every blob owner row (quotas and read access are computed from them).
  virtual Result<std::vector<BlobOwner>> LoadBlobOwners() = 0;
  virtual Result<std::vector<NodeRecord>> LoadNodes() = 0;
  // Every job, oldest submission first. Used at startup to rebuild the core's state.
  virtual Result<std::vector<JobRecord>> LoadJobs() = 0;
  virtual Result<std::optional<JobRecord>> GetJob(const std::string& id) = 0;
  // Finished jobs (IsTerminal), newest submission first (submitted_ms, then id, both
  // descending), strictly after `before` in that order (nullopt: from the newest), at most
  // `limit`, of `state` only when it is set, and within `scope` unless it is null. The server
  // keeps finished jobs here, not in memory (docs/design-notes.md "Finished jobs"), and pages
  // through them with this.
  virtual Result<std::vector<JobRecord>> ListFinishedJobs(std::optional<JobState> state,
                                                          const std::optional<JobCursor>& before,
                                                          int limit, const JobScope* scope) = 0;
  // Attempts of one job, oldest first.
  virtual Result<std::vector<AttemptRecord>> AttemptsForJob(const std::string& job_id) = 0;
  // Attempts not yet in a terminal state (starting/running), for reconciliation at startup.
  virtual Result<std::vector<AttemptRecord>> LoadActiveAttempts() = 0;
  // Log lines of a job with id > after_id, in arrival order, at most `limit`.
  virtual Result<std::vector<LogLine>> ReadLogs(const std::string& job_id, int64_t after_id,
                                                int limit) = 0;
  // Bytes of log text stored for an attempt (its log quota).
  virtual Result<int64_t> LogBytes(const std::string& attempt_id) = 0;
  // The smallest cut (oldest lines first) that frees at least `bytes` of the attempt's log.
  virtual Result<LogTrimPoint> FindLogTrim(const std::string& attempt_id, int64_t bytes) = 0;
  // Highest seq stored for an attempt (0 when none): the agent's resend cursor.
  virtual Result<int64_t> MaxLogSeq(const std::string& attempt_id) = 0;
  virtual Result<std::vector<JobEvent>> ReadEvents(const std::string& job_id, int64_t after_id,
                                                   int limit) = 0;
  // Every imported catalog, by provider.
  virtual Result<std::vector<CatalogFile>> LoadCatalogs() = 0;
  // Every kept checkpoint, oldest first.
  virtual Result<std::vector<CheckpointRecord>> LoadCheckpoints() = 0;
  // The snapshot with this digest, or nullopt.
  virtual Result<std::optional<NodeSnapshot>> GetSnapshot(const std::string& digest) = 0;
  // Uptime spans that end at or after `since_ms`, oldest first.
  virtual Result<std::vector<UptimeSpan>> LoadUptime(int64_t since_ms) = 0;
  // Attempts created at or after `since_ms`, oldest first (reliability window).
  virtual Result<std::vector<AttemptRecord>> AttemptsSince(int64_t since_ms) = 0;
  // Audit entries with ts_ms >= since_ms and id > after_id, oldest first, at most `limit`.
  virtual Result<std::vector<AuditEntry>> ReadAudit(int64_t since_ms, int64_t after_id,
                                                    int limit) = 0;

  // --- metering and the ledger (issue 14) ---
  // Meters still open (end_ms 0), or every meter of one job (`job_id` set), by start.
  virtual Result<std::vector<MeterRecord>> LoadMeters(const std::string& job_id) = 0;
  // Each account's balance: the sum of its ledger entries.
  virtual Result<std::vector<std::pair<std::string, int64_t>>> LoadBalances() = 0;
  // Every transaction's sum and every account's, from the entries alone.
  virtual Result<LedgerCheck> CheckLedger() = 0;
  // A cost report from the cost totals (kept as charges are written).
  virtual Result<std::vector<CostRow>> Costs(const CostQuery& query) = 0;
  // The same report computed from the raw meter records (a check, and bench/ledger's baseline).
  virtual Result<std::vector<CostRow>> CostsFromMeters(const CostQuery& query) = 0;

  // --- monthly budgets (issue 15 item 1) ---
  virtual Result<std::vector<BudgetRecord>> LoadBudgets() = 0;
  // Alerts of months from `since_month` ("2026-12") on, oldest first; `undelivered`: only those
  // with a webhook not yet delivered.
  virtual Result<std::vector<BudgetAlert>> LoadBudgetAlerts(const std::string& since_month,
                                                            bool undelivered) = 0;
  // What a scope was charged, net of SLA credits, on UTC days from `since_day` ("2026-12-01"):
  // an account's as payer, a team's over its jobs.
  virtual Result<int64_t> ScopeSpend(const std::string& scope, const std::string& since_day) = 0;
  // Zero for a store that does nothing on its own (a test's, or SQLite :memory:).
  virtual StoreCounters Counters() { return {}; }
};

// SQLite in WAL mode at `path` (created if absent), schema brought up to date by versioned
// migrations. A database written by a newer Sluice (unknown schema version) is refused.
Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path);

// The schema version this build writes.
int CurrentSchemaVersion();

}  // namespace sluice::store
