// The agent channel's messages (DESIGN.md §5): JSON text frames over the WebSocket the agent
// opens at /v1/agent/connect. Every state-changing message is idempotent: `exited` and `log`
// carry ids the server deduplicates, so an agent may resend after a reconnect.
//
// agent -> server: hello, heartbeat, conformance, started, log, checkpoint, preempt_notice,
//                  exited
// server -> agent: welcome, reverify, assign, cancel, preempt, kill, lease, log_ack, exit_ack,
//                  error
// Every message is a struct here with ToJson and a FromJson that names the bad field; both ends
// build and read messages only through these (issue 12 item 2).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/inventory.h"
#include "common/json.h"
#include "common/status.h"

namespace sluice::proto {

inline constexpr size_t kMaxLogLineBytes = 64 * 1024;
inline constexpr size_t kMaxLinesPerLogMessage = 1000;
// Bounds on what a provider's agent may declare (issue 10 item 5).
inline constexpr double kMaxPricePerHour = 100000;  // USD, per GPU or CPU hour
inline constexpr size_t kMaxNodeNameBytes = 128;

// What an agent knows about one attempt when it says hello (after a restart or reconnect).
struct AttemptReport {
  std::string attempt_id;
  bool running = false;          // still running here
  std::optional<int> exit_code;  // set when it finished and the exit is not yet acknowledged
  int signal = 0;
  std::string error;  // the attempt could not start (bad workdir, exec failure)
  bool lost = false;  // this agent restarted and could not keep the process
};

// What a provider advertises (`sluice agent --advertise-gpu h100-80gb:8`). Never used to make an
// offer: the server checks it against the probe and refuses a node whose claim the probe
// contradicts, so a provider learns at once that the listing it expected will not appear.
struct GpuClaim {
  std::string label;  // canonical GPU label, "h100-80gb"
  int count = 1;
  bool operator==(const GpuClaim&) const = default;
};

struct Hello {
  std::string node_id;  // empty on first registration
  std::string name;
  Inventory inventory;
  double price_per_gpu_hour = 0;
  double price_per_cpu_hour = 0;
  double interruptible_price_per_gpu_hour = 0;  // 0: no interruptible capacity sold
  double interruptible_price_per_cpu_hour = 0;
  std::string region;
  std::string agent_version;
  std::vector<AttemptReport> attempts;
  std::vector<GpuClaim> claims;
};

struct Assign {
  std::string attempt_id;
  std::string job_id;
  std::string run;
  std::map<std::string, std::string> env;
  std::vector<int> gpus;
  int cpus = 0;
  double memory_gb = 0;
  std::string workdir_blob;            // sha256 of the workdir archive, empty for none
  int attempt = 1;                     // SLUICE_ATTEMPT: 1, 2, ... across the job's restarts
  std::string checkpoint;              // manifest digest to restore before starting, empty for none
  int64_t checkpoint_interval_ms = 0;  // how often to save SLUICE_CHECKPOINT_DIR; 0 = only at exit
  int64_t grace_ms = 30000;            // SIGTERM → SIGKILL when the agent itself preempts the job
};

struct LogEntry {
  int64_t seq = 0;     // 1, 2, 3... per attempt
  std::string stream;  // "stdout" | "stderr"
  int64_t ts_ms = 0;
  std::string text;
};

struct Exited {
  std::string attempt_id;
  int exit_code = 0;
  int signal = 0;
  std::string error{};  // non-empty when the job could not be started
  // Manifest digest of the checkpoint saved after the job stopped, empty when there was none or
  // it could not be saved (the server keeps the previous complete one).
  std::string checkpoint{};
  // The kernel's OOM killer struck inside the attempt's memory cgroup (its limit is the job's
  // resources.memory_gb): the server reports "out of memory", not a bare SIGKILL.
  bool out_of_memory = false;
};

// --- the small messages: agent -> server
struct Heartbeat {
  int64_t seq = 0;  // echoed in the `lease` reply
};
struct ConformanceMessage {
  Json report;        // conformance::Report as JSON (common/conformance.h parses it)
  std::string nonce;  // the `reverify` request this answers
};
struct Started {
  std::string attempt_id;
};
struct CheckpointSaved {  // "checkpoint": a periodic save, stored and complete
  std::string attempt_id;
  std::string manifest;
};
struct PreemptNotice {  // "preempt_notice": the node itself is going
  std::string attempt_id;
  std::string cause;
};

// --- server -> agent
struct Welcome {
  std::string node_id;
  int64_t heartbeat_interval_ms = 3000;
  int64_t lease_ms = 0;            // 0: an older server without leases
  int64_t heartbeat_grace_ms = 0;  // 0: not told
  std::string credential{};        // set once, at enrolment
};
struct Reverify {
  std::string reason;  // registration | scheduled | on-demand | what changed
  std::string nonce;
};
struct Stop {  // "cancel" and "preempt": SIGTERM, the grace period, SIGKILL
  std::string attempt_id;
  int64_t grace_ms = 10000;
  std::string cause{};  // preempt only
};
struct Kill {  // no grace: the attempt is no longer placed on this node
  std::string attempt_id;
  std::string reason;
};
struct Lease {
  int64_t seq = 0;  // the heartbeat it answers
  int64_t lease_ms = 0;
  std::vector<std::string> attempts;  // placed on this node: each may run another lease
};
struct LogAck {
  std::string attempt_id;
  int64_t seq = 0;  // every line up to this one is stored
};
struct ExitAck {
  std::string attempt_id;
};
struct ErrorMessage {
  std::string code;  // a StatusCode name, e.g. FAILED_PRECONDITION
  std::string message;
};

struct LogBatch {  // "log"
  std::string attempt_id;
  std::vector<LogEntry> lines;
};

// Any message an agent sends after its hello, read by its `type`: what the server's core takes.
using AgentMessage = std::variant<Heartbeat, ConformanceMessage, Started, LogBatch, CheckpointSaved,
                                  PreemptNotice, Exited>;
// InvalidArgument naming the type or the field that is wrong.
Result<AgentMessage> AgentMessageFromJson(const Json& j);

Json ToJson(const Heartbeat& m);
Json ToJson(const ConformanceMessage& m);
Json ToJson(const Started& m);
Json ToJson(const CheckpointSaved& m);
Json ToJson(const PreemptNotice& m);
Json ToJson(const Welcome& m);
Json ToJson(const Reverify& m);
Json CancelMessage(const Stop& m);
Json PreemptMessage(const Stop& m);
Json ToJson(const Kill& m);
Json ToJson(const Lease& m);
Json ToJson(const LogAck& m);
Json ToJson(const ExitAck& m);
Json ToJson(const ErrorMessage& m);

Result<Heartbeat> HeartbeatFromJson(const Json& j);
Result<ConformanceMessage> ConformanceFromJson(const Json& j);
Result<Started> StartedFromJson(const Json& j);
Result<CheckpointSaved> CheckpointSavedFromJson(const Json& j);
Result<PreemptNotice> PreemptNoticeFromJson(const Json& j);
Result<Welcome> WelcomeFromJson(const Json& j);
Result<Reverify> ReverifyFromJson(const Json& j);
Result<Stop> StopFromJson(const Json& j);
Result<Kill> KillFromJson(const Json& j);
Result<Lease> LeaseFromJson(const Json& j);
Result<LogAck> LogAckFromJson(const Json& j);
Result<ExitAck> ExitAckFromJson(const Json& j);
Result<ErrorMessage> ErrorFromJson(const Json& j);

Json ToJson(const Hello& m);
Json ToJson(const Assign& m);
Json ToJson(const Exited& m);
Json LogMessage(const std::string& attempt_id, const std::vector<LogEntry>& lines);

Result<Hello> HelloFromJson(const Json& j);
Result<Assign> AssignFromJson(const Json& j);
Result<Exited> ExitedFromJson(const Json& j);
Result<std::vector<LogEntry>> LogEntriesFromJson(const Json& j);

}  // namespace sluice::proto
