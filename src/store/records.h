// The records Sluice keeps durably. Plain data: the store persists them, the server's core
// holds the live copies. Times are Unix milliseconds (0 = not yet).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/json_text.h"
#include "common/status.h"
#include "store/ledger_records.h"

namespace sluice::store {

// kBudgetExhausted: stopped by its budget or its account's credit (issue 15), its checkpoint
// kept; not terminal: raising the budget or adding credit queues it again.
enum class JobState {
  kQueued,
  kStarting,
  kRunning,
  kSucceeded,
  kFailed,
  kCancelled,
  kLost,
  kBudgetExhausted
};
enum class AttemptState {
  kStarting,
  kRunning,
  kSucceeded,
  kFailed,
  kCancelled,
  kLost,
  kPreempted,  // stopped to give its capacity back; the job was requeued
};
// kOnline: connected. kOffline: disconnected but within its heartbeat grace (e.g. after a server
// restart). kLost: past the grace; its attempts were marked lost.
enum class NodeState { kOnline, kOffline, kLost };

std::string_view Name(JobState s);      // "queued", "starting", "running", "succeeded", ...
std::string_view Name(AttemptState s);  // same words
std::string_view Name(NodeState s);     // "online", "offline", "lost"
Result<JobState> ParseJobState(std::string_view s);
Result<AttemptState> ParseAttemptState(std::string_view s);
Result<NodeState> ParseNodeState(std::string_view s);
bool IsTerminal(JobState s);
bool IsTerminal(AttemptState s);

struct TokenRecord {
  std::string id;      // "tok-...", "join-...", "node-cred-..." ("admin-..." before v9)
  std::string kind;    // "api" (an account's), "join" (enrols nodes), "node" ("admin" before v9)
  std::string sha256;  // hash of the secret; the secret itself is never stored
  int64_t created_ms = 0;
  // Issue 10: every token belongs to an account. Older rows get one when the server starts.
  std::string account_id{};
  std::string scope = "full";  // "full" | "read" | "metrics" | "join" | "node"
  std::string name{};          // the owner's label for it, shown by `sluice token list`
  int64_t expires_ms = 0;      // 0: never
  int64_t revoked_ms = 0;      // 0: not revoked
  std::string node_id{};       // kind "node": the node this credential proves
  bool operator==(const TokenRecord&) const = default;
};

// An account (issue 10): who submits jobs (user), owns nodes (provider) or runs the server.
struct AccountRecord {
  std::string id;    // "acct-..."
  std::string name;  // unique, [a-z0-9._-], shown everywhere
  std::string role;  // "admin" | "user" | "provider"
  bool disabled = false;
  int64_t created_ms = 0;
  std::string owner;  // the account that created it ("" for the first admin)
  // How far below zero its balance may go, in micro-dollars (issue 14); -1: unlimited.
  int64_t credit_limit_micros = -1;
  bool operator==(const AccountRecord&) const = default;
};

// Membership of an account in a team: jobs submitted for a team are visible to its members.
struct TeamMember {
  std::string team;
  std::string account_id;
  int64_t added_ms = 0;
  bool removed = false;  // in a WriteBatch: delete the row instead
  bool operator==(const TeamMember&) const = default;
};

// `Idempotency-Key` of a submission: the same key and body return the first job.
struct IdempotencyRecord {
  std::string account_id;
  std::string key;
  std::string body_sha256;
  std::string job_id;
  int64_t created_ms = 0;
  bool operator==(const IdempotencyRecord&) const = default;
};

// Who uploaded a blob (quotas, and who may read it back). One row per (digest, account).
struct BlobOwner {
  std::string digest;
  std::string account_id;
  int64_t size = 0;
  int64_t created_ms = 0;
  bool operator==(const BlobOwner&) const = default;
};

struct NodeRecord {
  std::string id;      // "node-..."
  std::string name;    // hostname unless the provider names it
  JsonText inventory;  // common::Inventory as JSON, from the probe (text: json_text.h says why)
  NodeState state = NodeState::kOnline;
  int64_t registered_ms = 0;
  int64_t last_seen_ms = 0;
  double price_per_gpu_hour = 0;                // USD
  double price_per_cpu_hour = 0;                // USD, used when the node offers CPU capacity only
  double interruptible_price_per_gpu_hour = 0;  // 0: the node sells no interruptible capacity
  double interruptible_price_per_cpu_hour = 0;
  std::string region;
  // Trust (issue 5). The server decides verification from the probe and the conformance report;
  // the agent's own reading is never taken.
  std::string verification = "unverified";    // "verified" | "unverified" | "deverified"
  Json verification_reasons = Json::array();  // strings: why not verified, or notes
  std::string hardware_fingerprint;           // audit::HardwareFingerprint of `inventory`
  std::string software_fingerprint;           // audit::SoftwareFingerprint of `inventory`
  int64_t verified_ms = 0;                    // when the last report was evaluated
  JsonText conformance = Json::object();      // the last report as the agent sent it
  std::string owner{};   // the provider account that enrolled it ("" before issue 10)
  bool revoked = false;  // `sluice node revoke`: its credential no longer works
  // Reclaimed by its provider or under a spot-termination notice (issue 15 item 5): it takes no
  // new work until this time (wall ms) or `sluice node resume`; 0: not paused.
  int64_t paused_until_ms = 0;
  std::string paused_reason{};
  bool operator==(const NodeRecord&) const = default;
};

struct JobRecord {
  std::string id;  // "job-..."
  std::string name;
  // spec::JobSpec as JSON, held as text (common/json_text.h): a job's record is copied into every
  // edit that stages it (placement, start, exit), and a copied DOM was a heap node per value.
  JsonText spec;
  std::string workdir_blob{};  // sha256 of the uploaded workdir archive, or empty
  JobState state = JobState::kQueued;
  int priority = 0;
  int64_t submitted_ms = 0;
  int64_t started_ms = 0;
  int64_t finished_ms = 0;
  std::optional<int> exit_code{};
  std::string reason{};           // why it waits, failed or was lost; shown to the user
  std::string attempt_id{};       // the current (or last) attempt, empty before placement
  bool cancel_requested = false;  // a cancel is on its way to the agent; ends as kCancelled
  std::string checkpoint{};       // manifest digest of the latest complete checkpoint, or empty
  int preemptions = 0;            // attempts that ended preempted or with their node lost
  std::string owner{};            // the submitting account ("" before issue 10: the admin's)
  std::string team{};             // the team it is shared with, or ""
  bool operator==(const JobRecord&) const = default;
};

// A position in the list of jobs by submission (Store::ListFinishedJobs).
struct JobCursor {
  int64_t submitted_ms = 0;
  std::string id;
};

// The job list's order: true when `a` comes before `b`, newest submission first, then the later
// id (ids are time-ordered). Store::ListFinishedJobs and the server's live jobs both use it.
inline bool ListedBefore(const JobRecord& a, const JobRecord& b) {
  return a.submitted_ms != b.submitted_ms ? a.submitted_ms > b.submitted_ms : a.id > b.id;
}

// Whose jobs a list shows (Store::ListFinishedJobs, ServerCore::ListJobs): those owned by one of
// `owners` ("" = jobs from before accounts) or shared with one of `teams`. A tenant's list reads
// its own jobs through an index instead of every job (docs/design-notes.md "The job list").
struct JobScope {
  std::vector<std::string> owners;
  std::vector<std::string> teams;  // "" is not a team and matches nothing
};

struct AttemptRecord {
  std::string id;  // "att-..."
  std::string job_id;
  std::string node_id;
  std::vector<int> gpus{};  // GPU indices on the node, exclusive
  int cpus = 0;
  double memory_gb = 0;
  double price_per_hour = 0;  // locked when the allocation is made
  AttemptState state = AttemptState::kStarting;
  int64_t created_ms = 0;
  int64_t started_ms = 0;
  int64_t ended_ms = 0;
  std::optional<int> exit_code{};
  std::string cause{};                // "exited", "cancelled", "node lost", ...
  int number = 1;                     // 1 for the job's first attempt, 2 for the next, ...
  std::string checkpoint_restored{};  // manifest digest restored before it started, or empty
  bool interruptible = false;         // on interruptible capacity: on-demand work may preempt it
  // Digest of the NodeSnapshot taken at placement: what hardware and software the attempt ran on,
  // for audit bundles. Empty for attempts placed before issue 5.
  std::string node_snapshot{};
  // The market's expected cost to complete when it was placed (issue 14: the bill is shown
  // beside it), micro-dollars; 0 when unknown or placed before v10.
  int64_t expected_cost_micros = 0;
  bool operator==(const AttemptRecord&) const = default;
};

struct LogLine {
  int64_t id = 0;  // assigned by the store; a cursor for readers (per job order)
  std::string job_id;
  std::string attempt_id;
  int64_t seq = 0;       // the agent's sequence number within the attempt (dedup key)
  std::string stream{};  // "stdout" or "stderr"
  int64_t ts_ms = 0;
  std::string text;  // one line, without its newline
  bool operator==(const LogLine&) const = default;
};

struct JobEvent {
  int64_t id = 0;  // assigned by the store; a cursor for readers
  std::string job_id;
  int64_t ts_ms = 0;
  std::string type;  // "submitted", "placed", "started", "exited", "cancelled", ...
  std::string message;
  bool operator==(const JobEvent&) const = default;
};

// A cloud price catalog as imported (`sluice catalog import`): the CSV is kept whole, and a new
// import for the same provider replaces the old one atomically.
struct CatalogFile {
  std::string provider;     // "aws"
  std::string source_name;  // "aws.csv", for messages
  std::string csv;
  int64_t imported_ms = 0;
  bool operator==(const CatalogFile&) const = default;
};

// A checkpoint a job keeps: the manifest digest of a checkpoint saved to the blob store.
struct CheckpointRecord {
  std::string job_id;
  std::string manifest;
  std::string attempt_id;
  int64_t created_ms = 0;
  bool operator==(const CheckpointRecord&) const = default;
};

// What a node was when an attempt was placed on it: inventory, fingerprints, verification and
// the conformance report, as JSON. Content-addressed (digest = SHA-256 of `json`), so an attempt
// refers to it and identical snapshots are stored once.
struct NodeSnapshot {
  std::string digest;
  std::string json;
  bool operator==(const NodeSnapshot&) const = default;
};

// A span during which a node was online (connected and heartbeating). The open span of a node
// that is online now is rewritten with a later end as time passes. Feeds the reliability score.
struct UptimeSpan {
  std::string node_id;
  int64_t start_ms = 0;
  int64_t end_ms = 0;
  bool operator==(const UptimeSpan&) const = default;
};

// One API mutation (issue 5): who did what, from where, with which parameters (secrets removed).
struct AuditEntry {
  int64_t id = 0;  // assigned by the store; a cursor for readers
  int64_t ts_ms = 0;
  std::string actor;   // token id ("adm-…", "join-…") or "agent:<node id>"
  std::string source;  // remote address "127.0.0.1:5555"
  std::string action;  // "POST /v1/jobs", "agent.hello", …
  std::string target;  // the object acted on: job/node id, or ""
  Json params = Json::object();
  int status = 0;  // HTTP status of the answer (agent messages: 200, or 400 when refused)
  bool operator==(const AuditEntry&) const = default;
};

// Drops an attempt's log lines with seq < before_seq (its log quota was reached).
struct LogTrim {
  std::string attempt_id;
  int64_t before_seq = 0;
  bool operator==(const LogTrim&) const = default;
};

// Where to cut an attempt's log to free at least some bytes: lines with seq < before_seq.
struct LogTrimPoint {
  int64_t before_seq = 0;
  int64_t bytes = 0;  // freed
  int64_t lines = 0;  // dropped
};

// Everything one state change writes, applied in one transaction.
struct WriteBatch {
  std::vector<TokenRecord> tokens{};      // upsert by id
  std::vector<NodeRecord> nodes{};        // upsert by id
  std::vector<JobRecord> jobs{};          // upsert by id
  std::vector<AttemptRecord> attempts{};  // upsert by id
  std::vector<JobEvent> events{};         // appended; `id` set by Store::Write
  std::vector<LogLine> logs{};  // appended unless (attempt_id, seq) exists; `id` set by Write
  std::vector<CatalogFile> catalogs{};                  // upsert by provider
  std::vector<CheckpointRecord> checkpoints{};          // upsert by (job_id, manifest)
  std::vector<CheckpointRecord> dropped_checkpoints{};  // deleted by (job_id, manifest)
  // Jobs deleted with everything they own: attempts, events, logs, checkpoints. Applied first.
  std::vector<std::string> deleted_jobs{};
  std::vector<NodeSnapshot> snapshots{};   // inserted unless the digest exists
  std::vector<UptimeSpan> uptime{};        // upsert by (node_id, start_ms)
  std::vector<AuditEntry> audit{};         // appended; `id` ignored
  std::vector<AccountRecord> accounts{};   // upsert by id
  std::vector<TeamMember> team_members{};  // upsert by (team, account_id), or delete if removed
  std::vector<IdempotencyRecord> idempotency{};  // inserted; an existing key fails the batch
  std::vector<BlobOwner> blob_owners{};          // upsert by (digest, account_id)
  std::vector<LogTrim> log_trims{};              // applied before `logs`
  std::vector<BlobOwner> dropped_blob_owners{};  // deleted by (digest, account_id)
  // Issue 14: meters (upsert by attempt_id), ledger transactions (appended; `id` ignored) and
  // the cost totals they add to (added to their row).
  std::vector<MeterRecord> meters{};
  std::vector<LedgerTxn> ledger{};
  std::vector<CostDelta> cost_deltas{};
  // Issue 15: monthly budgets (upsert by scope, or delete if removed) and their alerts (upsert by
  // scope, month and percent).
  std::vector<BudgetRecord> budgets{};
  std::vector<BudgetAlert> budget_alerts{};
  bool empty() const {
    return meters.empty() && ledger.empty() && cost_deltas.empty() && log_trims.empty() &&
           budgets.empty() && budget_alerts.empty() && dropped_blob_owners.empty() &&
           accounts.empty() && team_members.empty() && idempotency.empty() && blob_owners.empty() &&
           tokens.empty() && nodes.empty() && jobs.empty() && attempts.empty() && events.empty() &&
           logs.empty() && catalogs.empty() && checkpoints.empty() && dropped_checkpoints.empty() &&
           deleted_jobs.empty() && snapshots.empty() && uptime.empty() && audit.empty();
  }
};

}  // namespace sluice::store
