// The agent channel's messages (DESIGN.md §5): JSON text frames over the WebSocket the agent
// opens at /v1/agent/connect. Every state-changing message is idempotent: `exited` and `log`
// carry ids the server deduplicates, so an agent may resend after a reconnect.
//
// agent -> server: hello, heartbeat, started, log, exited, preempted, conformance
// server -> agent: welcome, assign, cancel, preempt, log_ack, exit_ack, reverify, error
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
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

Json ToJson(const Hello& m);
Json ToJson(const Assign& m);
Json ToJson(const Exited& m);
Json LogMessage(const std::string& attempt_id, const std::vector<LogEntry>& lines);

Result<Hello> HelloFromJson(const Json& j);
Result<Assign> AssignFromJson(const Json& j);
Result<Exited> ExitedFromJson(const Json& j);
Result<std::vector<LogEntry>> LogEntriesFromJson(const Json& j);

}  // namespace sluice::proto
