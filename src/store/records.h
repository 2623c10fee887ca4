// The records Sluice keeps durably. Plain data: the store persists them, the server's core
// holds the live copies. Times are Unix milliseconds (0 = not yet).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace sluice::store {

enum class JobState { kQueued, kStarting, kRunning, kSucceeded, kFailed, kCancelled, kLost };
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
  std::string id;      // "adm-..." / "join-..."
  std::string kind;    // "admin" or "join"
  std::string sha256;  // hash of the secret; the secret itself is never stored
  int64_t created_ms = 0;
  bool operator==(const TokenRecord&) const = default;
};

struct NodeRecord {
  std::string id;    // "node-..."
  std::string name;  // hostname unless the provider names it
  Json inventory;    // common::Inventory as JSON, from the probe
  NodeState state = NodeState::kOnline;
  int64_t registered_ms = 0;
  int64_t last_seen_ms = 0;
  double price_per_gpu_hour = 0;                // USD
  double price_per_cpu_hour = 0;                // USD, used when the node offers CPU capacity only
  double interruptible_price_per_gpu_hour = 0;  // 0: the node sells no interruptible capacity
  double interruptible_price_per_cpu_hour = 0;
  std::string region;
  bool operator==(const NodeRecord&) const = default;
};

struct JobRecord {
  std::string id;  // "job-..."
  std::string name;
  Json spec;                 // spec::JobSpec as JSON
  std::string workdir_blob;  // sha256 of the uploaded workdir archive, or empty
  JobState state = JobState::kQueued;
  int priority = 0;
  int64_t submitted_ms = 0;
  int64_t started_ms = 0;
  int64_t finished_ms = 0;
  std::optional<int> exit_code;
  std::string reason;             // why it waits, failed or was lost; shown to the user
  std::string attempt_id;         // the current (or last) attempt, empty before placement
  bool cancel_requested = false;  // a cancel is on its way to the agent; ends as kCancelled
  std::string checkpoint;         // manifest digest of the latest complete checkpoint, or empty
  int preemptions = 0;            // attempts that ended preempted or with their node lost
  bool operator==(const JobRecord&) const = default;
};

struct AttemptRecord {
  std::string id;  // "att-..."
  std::string job_id;
  std::string node_id;
  std::vector<int> gpus;  // GPU indices on the node, exclusive
  int cpus = 0;
  double memory_gb = 0;
  double price_per_hour = 0;  // locked when the allocation is made
  AttemptState state = AttemptState::kStarting;
  int64_t created_ms = 0;
  int64_t started_ms = 0;
  int64_t ended_ms = 0;
  std::optional<int> exit_code;
  std::string cause;                // "exited", "cancelled", "node lost", ...
  int number = 1;                   // 1 for the job's first attempt, 2 for the next, ...
  std::string checkpoint_restored;  // manifest digest restored before it started, or empty
  bool interruptible = false;       // on interruptible capacity: on-demand work may preempt it
  bool operator==(const AttemptRecord&) const = default;
};

struct LogLine {
  int64_t id = 0;  // assigned by the store; a cursor for readers (per job order)
  std::string job_id;
  std::string attempt_id;
  int64_t seq = 0;     // the agent's sequence number within the attempt (dedup key)
  std::string stream;  // "stdout" or "stderr"
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

// Everything one state change writes, applied in one transaction.
struct WriteBatch {
  std::vector<TokenRecord> tokens;      // upsert by id
  std::vector<NodeRecord> nodes;        // upsert by id
  std::vector<JobRecord> jobs;          // upsert by id
  std::vector<AttemptRecord> attempts;  // upsert by id
  std::vector<JobEvent> events;         // appended; `id` ignored
  std::vector<LogLine> logs;            // appended unless (attempt_id, seq) exists; `id` ignored
  std::vector<CatalogFile> catalogs;    // upsert by provider
  std::vector<CheckpointRecord> checkpoints;          // upsert by (job_id, manifest)
  std::vector<CheckpointRecord> dropped_checkpoints;  // deleted by (job_id, manifest)
  // Jobs deleted with everything they own: attempts, events, logs, checkpoints. Applied first.
  std::vector<std::string> deleted_jobs;
  bool empty() const {
    return tokens.empty() && nodes.empty() && jobs.empty() && attempts.empty() && events.empty() &&
           logs.empty() && catalogs.empty() && checkpoints.empty() && dropped_checkpoints.empty() &&
           deleted_jobs.empty();
  }
};

}  // namespace sluice::store
