// The agent's runtime, shared by its source files (agent.cc: the server link and Run;
// agent_attempts.cc: attempts, their supervisors and checkpoints; agent_sandbox.cc: the sandbox,
// job uids and warm boxes; agent_fencing.cc: leases). Internal: the public face is agent.h.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "agent/agent.h"
#include "agent/cgroup.h"
#include "agent/checkpoint_sync.h"
#include "agent/conformance.h"
#include "agent/host_info.h"
#include "agent/job_network.h"
#include "agent/lease_book.h"
#include "agent/link_probe.h"
#include "agent/process.h"
#include "agent/sandbox.h"
#include "agent/supervised_job.h"
#include "agent/supervisor_protocol.h"
#include "audit/fingerprint.h"
#include "common/agent_protocol.h"
#include "common/archive.h"
#include "common/atomic_file.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/json.h"
#include "common/text.h"
#include "common/token_file.h"
#include "net/http_client.h"
#include "net/http_types.h"
#include "net/ws_client.h"

namespace sluice::agent::internal {

namespace fs = std::filesystem;

inline constexpr size_t kMaxWorkdirBytes = 4ull << 30;
inline constexpr size_t kMaxWorkdirEntries = 200000;
inline constexpr const char* kVersion = "0.1.0";
// Slots above this are refused: the network filter covers exactly this many job uids.
inline constexpr int kMaxJobSlots = 1024;

void Log(const char* fmt, const std::string& a = "", const std::string& b = "");
Result<std::string> ReadFile(const std::string& path);
// A string field of a server message; "" when absent or not a string.
std::string StringField(const Json& msg, const char* key);
// Field 22 of /proc/PID/stat: when the process started. Recorded with the process group so a
// later agent never kills an unrelated process that reused the pid.
std::string ProcessStartTime(pid_t pid);
// Server-issued ids are [A-Za-z0-9-]; anything else is replaced so an id can never name a path
// outside the agent's data dir.
std::string SafeName(std::string_view id);
// Makes `prepared` (a directory the agent filled) the directory `box_dir` that a warm sandbox
// binds: its entries move into `box_dir` and `box_dir` takes its name. The box keeps seeing the
// same inode at its own path; the agent keeps its paths. Both are in the data dir: renames.
Status AdoptDirectory(const std::string& prepared, const std::string& box_dir);

struct Attempt {
  std::string id;
  std::string job_id;
  // Its supervisor's handle (agent/supervised_job.h): the job outlives this agent instance.
  std::unique_ptr<SupervisedJob> proc;
  pid_t pgid = 0;
  std::string start_time;
  int64_t next_seq = 1;
  std::deque<proto::LogEntry> lines;  // not yet acknowledged by the server
  int64_t sent_seq = 0;               // highest seq sent on the current connection
  std::optional<ExitInfo> exit;
  std::string error;  // could not start
  bool exit_sent = false;
  bool lost = false;            // orphaned by a previous agent instance and killed
  bool cancel_pending = false;  // cancelled before the process existed
  bool started_sent = false;
  // Checkpoints (issue 4): SLUICE_CHECKPOINT_DIR, saved to the server's blob store.
  std::string checkpoint_dir;
  std::string pending_checkpoint;  // a periodic save not yet reported to the server
  std::string final_checkpoint;    // saved after the process ended; goes with `exited`
  std::string last_checkpoint;     // the latest manifest reported, to skip unchanged saves
  bool exiting = false;            // the process ended; the final save is under way
  int64_t grace_ms = 30000;        // the job's grace period, for preemptions the agent starts
  int64_t checkpoint_interval_ms = 0;
  std::string notice;    // a preemption this agent started, not yet told the server
  bool noticed = false;  // preempted from this side already
  std::mutex upload_mu;  // one save at a time, so the final one is reported last
  std::unique_ptr<AttemptCgroup> cgroup;  // its limits and freezer; null where cgroups are not
  bool out_of_memory = false;             // the OOM killer struck in its memory cgroup
  int slot = -1;        // its job uid is first_job_uid + slot while it runs; -1: none (not boxed)
  bool frozen = false;  // its supervisor froze it: the lease ran out (fencing)
};

// A sandbox built before its job, with its supervisor waiting (docs/design-notes.md "Warm
// boxes"): it takes bwrap's setup off the path from assignment to the job's first instruction.
// Its directories and cgroup are named after it until a job takes it.
struct WarmBox {
  std::string name;  // "warm-<hex>"
  int slot = -1;     // the job uid it runs as (first_job_uid + slot); -1: the agent's own
  bool cgroup = false;
  std::unique_ptr<SupervisedJob> job;
};

class Agent {
 public:
  explicit Agent(AgentOptions opt) : opt_(std::move(opt)) {}
  int Run();

 private:
  std::string AttemptsDir() const { return opt_.data_dir + "/attempts"; }
  // The node's own credential (docs/design-notes.md "Node identity"), issued at enrolment.
  std::string CredentialPath() const { return opt_.data_dir + "/node.credential"; }
  // The bearer token for the server: the node credential once enrolled, else the join token.
  std::string BearerToken() {
    std::lock_guard<std::mutex> lock(mu_);
    return token_;
  }
  std::string WorkDir(const std::string& id) const { return opt_.data_dir + "/work/" + id; }
  // The attempt's supervisor directory (agent/supervisor_protocol.h), 0700.
  std::string SupervisorDir(const std::string& id) const { return AttemptsDir() + "/" + id + ".d"; }
  std::string WarmCheckpointDir(const std::string& name) const {
    return opt_.data_dir + "/checkpoints/" + name;
  }
  // One directory per job, reused across its attempts on this node.
  std::string CheckpointDir(const std::string& job_id) const {
    return opt_.data_dir + "/checkpoints/" + SafeName(job_id);
  }
  // Saves `a`'s checkpoint directory; the manifest digest, or "" when there is nothing to save
  // or the save failed (logged; the server keeps the previous complete checkpoint).
  std::string SaveCheckpoint(Attempt& a);
  void CheckpointLoop(std::weak_ptr<Attempt> weak, int64_t interval_ms);
  // Starts `a`'s periodic checkpoints, if its job asked for them.
  void StartCheckpointsLocked(const std::shared_ptr<Attempt>& a);
  // Preempts every running attempt from this side (the node is going away): tells the server
  // why, then SIGTERM, grace, SIGKILL, final checkpoint, exit, as for a server preemption.
  void PreemptAllLocked(const std::string& cause);
  // Polls opt_.spot_metadata_url until the agent stops; a termination notice preempts all.
  void SpotNoticeLoop();
  // Runs the conformance suite for `trigger` (the server's reason) once no job holds a GPU, and
  // queues its report for the server. One run at a time; a request during a run is kept.
  void VerifyLoop();
  bool GpuBusyLocked() const;
  void RecoverAttempts();
  // Reattaches `a` (from the attempts dir) to its supervisor; false when it has none left and
  // no recorded end, or its supervisor killed it because no agent renewed its lease.
  bool ReattachLocked(const std::shared_ptr<Attempt>& a);
  void PersistLocked(const Attempt& a);
  void ConnectionLoop();
  Status ConnectOnce();
  void OnMessage(std::string_view text);
  void HandleAssign(const proto::Assign& assign);
  void StartAttempt(proto::Assign assign);
  // `a` runs under `job` (cold or warm start): persists it, honours a cancel that came while it
  // started, and starts its periodic checkpoints.
  void StartedLocked(const std::shared_ptr<Attempt>& a, std::unique_ptr<SupervisedJob> job);
  void FlushLocked(WsClient& ws);
  void ForgetLocked(const std::string& attempt_id);
  // Runs `fn` on a detached thread counted in active_workers_; Run() waits for them all.
  void SpawnLocked(std::function<void()> fn);
  std::map<std::string, std::string> JobEnv(const proto::Assign& a) const;

  const AgentOptions opt_;
  std::string token_;      // guarded by mu_ once Run() starts threads (it changes at enrolment)
  bool enrolled_ = false;  // token_ is this node's credential, not the join token (mu_)
  Url url_;
  Inventory inventory_;

  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  std::map<std::string, std::shared_ptr<Attempt>> attempts_;
  std::shared_ptr<WsClient> ws_;
  bool connected_ = false;
  bool stopping_ = false;
  bool fatal_ = false;
  bool dirty_ = false;  // something to flush
  std::string node_id_;
  int64_t heartbeat_ms_ = 3000;
  int active_workers_ = 0;
  bool welcomed_ = false;         // the current connection got its `welcome`
  bool verify_running_ = false;   // VerifyLoop is alive
  std::string verify_requested_;  // trigger of a requested run not yet started, or ""
  std::string verify_nonce_;      // the newest request's nonce; the report echoes it
  std::string pending_report_;    // a `conformance` message not yet sent
  bool reregister_ = false;       // the inventory changed: reconnect and say hello again
  ProbeOptions probe_options_;    // how Run() probed the machine; VerifyLoop probes again
  CgroupSupport cgroups_;         // found at start; read-only afterwards
  SandboxSupport sandbox_;        // found at start; read-only afterwards
  // The lowest job-uid slot no live attempt holds (mu_).
  int FreeSlotLocked() const;
  // Finds bwrap and proves it can box a job here, as a job would run; fills sandbox_.
  void DetectJobSandbox();
  // What a job must never see even where it lies under a directory the box shows.
  std::vector<std::string> HiddenPaths() const;
  // Runs a root shell script of the agent's own (iptables); its exit code or why it could not.
  Result<int> RunHostScript(const std::string& script, std::string* said) const;
  JobNetworkRules JobNetwork() const;
  bool network_filtered_ = false;  // JobNetwork() rules installed; removed at a clean stop

  // Fencing (docs/design-notes.md "Leases and fencing"); all under mu_. The supervisors
  // enforce the leases; the agent renews them and vouches that it is alive.
  LeaseBook leases_;
  int64_t heartbeat_seq_ = 0;
  int64_t lease_ms_ = 0;         // the server's lease length (welcome); 0: no leases
  int64_t server_grace_ms_ = 0;  // the server's heartbeat grace (welcome); 0: not told
  // When a supervisor with no live agent kills a job whose lease ends at `until`: half-way
  // from the lease's end to the server's grace, so it is gone before the server can place the
  // job elsewhere (the grace counts from the server's receipt, later than our send).
  int64_t KillAtLocked(int64_t until) const;
  // Tells every supervisor once a second that this agent is alive, until the agent stops.
  void FenceLoop();
  // The server moved `a` elsewhere: SIGKILL now, frozen or not, with no grace period.
  void KillMovedLocked(Attempt& a);
  void OnLeaseLocked(const proto::Lease& lease);
  // What the agent does with a supervisor's reports on `weak`.
  SupervisedJob::Callbacks JobCallbacks(std::weak_ptr<Attempt> weak);
  std::string supervisor_exe_;  // found at start

  // Warm boxes; all under mu_.
  std::deque<std::unique_ptr<WarmBox>> warm_;  // ready, oldest first
  std::set<int> warm_slots_;                   // slots of warm boxes, ready or being built
  int warm_building_ = 0;
  int warm_failures_ = 0;  // boxes in a row that died unused; at 3 no more are built
  bool draining_ = false;  // the agent is stopping its jobs: no new boxes
  // Starts building boxes until opt_.warm_boxes are ready or being built.
  void FillWarmLocked();
  void BuildWarmBox(int slot);
  // A ready box, or null (none ready, or it died meanwhile).
  std::unique_ptr<WarmBox> TakeWarmLocked();
  // Kills an unused box and removes its directories and cgroup, on a worker.
  void DiscardWarmLocked(std::unique_ptr<WarmBox> w);
  // Runs the prepared attempt `a` in `w`: its work and checkpoint dirs become the box's (which
  // the box sees by inode), its cgroup the attempt's, and the job goes to the waiting stub.
  void StartInWarmBox(std::unique_ptr<WarmBox> w, const proto::Assign& assign,
                      const std::shared_ptr<Attempt>& a, bool resumed);
  static int64_t SteadyMs() { return supervisor::MonotonicMs(); }
};

}  // namespace sluice::agent::internal
