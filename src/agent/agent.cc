#include "agent/agent.h"

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

namespace sluice::agent {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxWorkdirBytes = 4ull << 30;
constexpr size_t kMaxWorkdirEntries = 200000;
constexpr const char* kVersion = "0.1.0";

void Log(const char* fmt, const std::string& a = "", const std::string& b = "") {
  std::fprintf(stderr, "sluice agent: ");
  std::fprintf(stderr, fmt, a.c_str(), b.c_str());
  std::fprintf(stderr, "\n");
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A string field of a server message; "" when absent or not a string.
std::string StringField(const Json& msg, const char* key) {
  auto v = GetStringOr(msg, key, "");
  return v.ok() ? *v : "";
}

// Field 22 of /proc/PID/stat: when the process started. Recorded with the process group so a
// later agent never kills an unrelated process that reused the pid.
std::string ProcessStartTime(pid_t pid) {
  auto stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return "";
  size_t close = stat->rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream rest(stat->substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return field;
  }
  return "";
}

// Server-issued ids are [A-Za-z0-9-]; anything else is replaced so an id can never name a path
// outside the agent's data dir.
std::string SafeName(std::string_view id) {
  std::string out;
  for (char c : id) {
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  }
  return out.empty() ? "_" : out;
}

// Makes `prepared` (a directory the agent filled) the directory `box_dir` that a warm sandbox
// binds: its entries move into `box_dir` and `box_dir` takes its name. The box keeps seeing the
// same inode at its own path; the agent keeps its paths. Both are in the data dir: renames.
Status AdoptDirectory(const std::string& prepared, const std::string& box_dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(prepared, ec)) {
    fs::rename(e.path(), fs::path(box_dir) / e.path().filename(), ec);
    if (ec) return Status::Internal("cannot move " + e.path().string() + ": " + ec.message());
  }
  if (ec) return Status::Internal("cannot list " + prepared + ": " + ec.message());
  fs::remove(prepared, ec);
  fs::rename(box_dir, prepared, ec);
  if (ec) return Status::Internal("cannot rename " + box_dir + ": " + ec.message());
  return Status::Ok();
}

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
  void OnLeaseLocked(const Json& msg);
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

int64_t Agent::KillAtLocked(int64_t until) const {
  if (until == LeaseBook::kForever) return supervisor::kNever;
  // Without a grace from the server (an older one), assume its default: 1.5 leases.
  const int64_t grace = server_grace_ms_ > lease_ms_ ? server_grace_ms_ : lease_ms_ * 3 / 2;
  return until + (grace - lease_ms_) / 2;
}

void Agent::KillMovedLocked(Attempt& a) {
  if (!a.proc || !a.proc->running()) return;
  Log("%s is no longer placed on this node: killed%s", a.id, a.frozen ? " (it was frozen)" : "");
  a.proc->Kill();  // the supervisor kills the whole cgroup, frozen or not
}

void Agent::OnLeaseLocked(const Json& msg) {
  auto num = [&](const char* key) -> int64_t {
    auto it = msg.find(key);
    return it != msg.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
  };
  std::set<std::string> listed;
  if (auto it = msg.find("attempts"); it != msg.end() && it->is_array()) {
    for (const auto& id : *it) {
      if (id.is_string()) listed.insert(id.get<std::string>());
    }
  }
  std::vector<std::string> running;
  for (const auto& [id, a] : attempts_) {
    if (a->proc && a->proc->running()) running.push_back(id);
  }
  auto out = leases_.Received(num("seq"), num("lease_ms"), listed, running);
  for (const auto& id : out.renewed) {
    const int64_t until = leases_.Until(id);
    attempts_[id]->proc->Lease(until, KillAtLocked(until));  // thaws it if it was frozen
  }
  for (const auto& id : out.not_ours) KillMovedLocked(*attempts_[id]);
}

void Agent::FenceLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    for (auto& [id, a] : attempts_) {
      if (a->proc && a->proc->running()) a->proc->Ping();
    }
    for (auto& w : warm_) w->job->Ping();  // a box whose agent is silent kills itself
    cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stopping_; });
  }
}

// Slots above this are refused: the network filter covers exactly this many job uids.
constexpr int kMaxJobSlots = 1024;

JobNetworkRules Agent::JobNetwork() const {
  JobNetworkRules r;
  r.first_uid = opt_.first_job_uid;
  r.last_uid = opt_.first_job_uid + kMaxJobSlots - 1;
  r.local_ports = {url_.port};
  return r;
}

Result<int> Agent::RunHostScript(const std::string& script, std::string* said) const {
  ProcessSpec spec;
  spec.script = script;
  spec.cwd = "/";
  spec.env = {{"PATH", "/usr/sbin:/usr/bin:/sbin:/bin"}, {"LANG", "C.UTF-8"}};
  auto proc = Process::Start(
      spec,
      [said](OutputStream, std::string_view line) {
        if (said) *said = std::string(line);
      },
      nullptr);
  if (!proc.ok()) return proc.status();
  return (*proc)->Wait().exit_code;
}

int Agent::FreeSlotLocked() const {
  std::set<int> used = warm_slots_;
  for (const auto& [id, a] : attempts_) {
    if (a->slot >= 0) used.insert(a->slot);
  }
  int slot = 0;
  while (used.count(slot)) ++slot;
  return slot;
}

std::vector<std::string> Agent::HiddenPaths() const {
  std::vector<std::string> hidden = {opt_.data_dir};
  std::error_code ec;
  if (!opt_.join_token_file.empty()) {
    hidden.push_back(fs::absolute(opt_.join_token_file, ec).lexically_normal().string());
  }
  return hidden;
}

void Agent::DetectJobSandbox() {
  const bool root = geteuid() == 0;
  SandboxSpec probe_spec;
  probe_spec.workdir = opt_.data_dir + "/work";
  probe_spec.checkpoint_dir = opt_.data_dir + "/checkpoints";
  probe_spec.hidden = HiddenPaths();
  if (root) probe_spec.uid = opt_.first_job_uid;
  std::error_code ec;
  fs::create_directories(probe_spec.checkpoint_dir, ec);
  sandbox_ = DetectSandbox(root, probe_spec, [&](const std::vector<std::string>& argv) {
    ProcessSpec spec;
    spec.script = "true";
    spec.cwd = "/";
    spec.wrapper = argv;
    std::string said;  // bwrap's own complaint, for the start line
    auto proc = Process::Start(
        spec, [&said](OutputStream, std::string_view line) { said = std::string(line); }, nullptr);
    if (!proc.ok()) return Result<int>(proc.status());
    int rc = (*proc)->Wait().exit_code;
    if (rc != 0 && !said.empty()) return Result<int>(Status::FailedPrecondition(said));
    return Result<int>(rc);
  });
}

void Agent::RecoverAttempts() {
  // Reattached supervisors report from their own threads from the start.
  std::lock_guard<std::mutex> lock(mu_);
  std::error_code ec;
  fs::create_directories(AttemptsDir(), ec);
  for (const auto& entry : fs::directory_iterator(AttemptsDir(), ec)) {
    if (entry.path().extension() != ".json") continue;
    auto text = ReadFile(entry.path().string());
    if (!text.ok()) continue;
    auto j = ParseJson(*text);
    if (!j.ok() || !j->is_object()) {
      fs::remove(entry.path(), ec);
      continue;
    }
    auto a = std::make_shared<Attempt>();
    a->id = j->value("attempt_id", "");
    a->job_id = j->value("job_id", "");
    a->pgid = j->value("pgid", 0);
    a->start_time = j->value("start_time", "");
    a->error = j->value("error", "");
    a->slot = j->value("slot", -1);
    a->checkpoint_dir = j->value("checkpoint_dir", "");
    a->checkpoint_interval_ms = j->value("checkpoint_interval_ms", int64_t{0});
    a->grace_ms = j->value("grace_ms", int64_t{30000});
    if (a->id.empty() || SafeName(a->id) != a->id) continue;
    if (j->contains("exit_code") && (*j)["exit_code"].is_number_integer()) {
      a->exit = ExitInfo{(*j)["exit_code"].get<int>(), j->value("signal", 0)};
      a->final_checkpoint = j->value("checkpoint", "");
      a->out_of_memory = j->value("out_of_memory", false);
    } else if (a->error.empty() && j->value("supervised", false) && ReattachLocked(a)) {
      // Still running under its supervisor (or it ended while we were away, and the
      // supervisor recorded how): the job is not restarted.
    } else if (a->error.empty()) {
      // It was running when the previous agent died. PR_SET_PDEATHSIG took the shell; kill
      // whatever is left of its group. Safe against pid reuse: Linux never hands out a pid that
      // is still some group's id, so if a process with that pid exists it must be our leader
      // (same start time), and if none exists any remaining members of the group are ours.
      std::string leader_start = a->pgid > 0 ? ProcessStartTime(a->pgid) : "";
      if (a->pgid > 1 && (leader_start.empty() || leader_start == a->start_time)) {
        (void)KillProcessGroup(a->pgid, SIGKILL);
      }
      // And whatever left the group (setsid, double fork) but not the attempt's cgroup.
      if (auto cg = AttemptCgroup::Open(cgroups_, a->id); cg.ok()) {
        (void)(*cg)->KillAll();
        a->cgroup = std::move(*cg);
      }
      a->lost = true;
      Log("attempt %s has no supervisor left and no recorded end; reporting it lost", a->id);
    }
    attempts_[a->id] = a;
  }
}

bool Agent::ReattachLocked(const std::shared_ptr<Attempt>& a) {
  const std::string dir = SupervisorDir(a->id);
  if (auto end = ReadFile(dir + "/" + supervisor::kExitFile); end.ok()) {
    auto j = ParseJson(*end);
    auto e = j.ok() ? supervisor::ExitFromJson(*j) : Result<supervisor::Exit>(j.status());
    if (!e.ok() || e->fenced) return false;  // fenced: the server has it as lost (or soon will)
  }
  auto job = SupervisedJob::Attach(dir, JobCallbacks(a));
  if (!job.ok()) return false;
  a->proc = std::move(*job);
  Log("reattached to the supervisor of %s", a->id);
  StartCheckpointsLocked(a);
  return true;
}

void Agent::PersistLocked(const Attempt& a) {
  Json j{{"attempt_id", a.id},
         {"job_id", a.job_id},
         {"pgid", a.pgid},
         {"start_time", a.start_time},
         {"error", a.error},
         {"supervised", a.proc != nullptr},
         {"slot", a.slot},
         {"checkpoint_dir", a.checkpoint_dir},
         {"checkpoint_interval_ms", a.checkpoint_interval_ms},
         {"grace_ms", a.grace_ms}};
  if (a.exit) {
    j["exit_code"] = a.exit->exit_code;
    j["signal"] = a.exit->signal;
    j["checkpoint"] = a.final_checkpoint;
    j["out_of_memory"] = a.out_of_memory;
  }
  Status s = WriteFileAtomic(AttemptsDir() + "/" + a.id + ".json", DumpJson(j));
  if (!s.ok()) Log("%s", s.ToString());
}

void Agent::ForgetLocked(const std::string& attempt_id) {
  auto it = attempts_.find(attempt_id);
  if (it == attempts_.end()) return;
  if (it->second->proc && it->second->proc->running()) return;  // still running: keep
  std::error_code ec;
  fs::remove(AttemptsDir() + "/" + attempt_id + ".json", ec);
  fs::remove_all(WorkDir(attempt_id), ec);
  fs::remove_all(SupervisorDir(attempt_id), ec);
  // The final checkpoint is on the server (the exit that carried it was acknowledged), and a
  // later attempt here restores from there.
  if (!it->second->checkpoint_dir.empty()) fs::remove_all(it->second->checkpoint_dir, ec);
  // ~Process joins its monitor thread, so it must not run on that thread (a callback may hold
  // the last reference for a moment) nor under mu_: a worker waits until the callbacks are
  // done, then drops the attempt.
  std::shared_ptr<Attempt> keep = it->second;
  attempts_.erase(it);
  leases_.Forget(attempt_id);
  SpawnLocked([keep]() mutable {
    if (keep->proc) keep->proc->Wait();
    if (keep->cgroup) {
      // Killed when the leader exited; the kernel may take a moment to empty it.
      for (int i = 0; i < 50 && !keep->cgroup->Remove().ok(); ++i) {
        (void)keep->cgroup->KillAll();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    keep.reset();
  });
}

void Agent::SpawnLocked(std::function<void()> fn) {
  ++active_workers_;
  std::thread([this, fn = std::move(fn)]() mutable {
    fn();
    fn = nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    --active_workers_;
    cv_.notify_all();
  }).detach();
}

std::string Agent::SaveCheckpoint(Attempt& a) {
  if (a.checkpoint_dir.empty()) return "";
  std::lock_guard<std::mutex> one_at_a_time(a.upload_mu);
  std::error_code ec;
  if (fs::is_empty(a.checkpoint_dir, ec) || ec) return "";  // the job saved nothing (yet)
  checkpoint::HttpBlobTransport transport(url_, BearerToken());
  auto r = checkpoint::UploadCheckpoint(a.checkpoint_dir, transport);
  if (!r.ok()) {
    Log("saving the checkpoint of %s failed: %s", a.id, r.status().message());
    return "";
  }
  if (r->files == 0) return "";
  Log("saved checkpoint of %s: %s", a.id,
      std::to_string(r->files) + " files, " + std::to_string(r->total_bytes) + " bytes, " +
          std::to_string(r->uploaded_bytes) + " sent");
  return r->manifest_digest;
}

// Every `interval_ms` while the attempt runs: save SLUICE_CHECKPOINT_DIR and report the
// manifest if it changed.
void Agent::CheckpointLoop(std::weak_ptr<Attempt> weak, int64_t interval_ms) {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(interval_ms);
      cv_.wait_until(lock, deadline, [&] {
        auto a = weak.lock();
        return stopping_ || !a || a->exiting;
      });
      auto a = weak.lock();
      if (stopping_ || !a || a->exiting) return;
    }
    auto a = weak.lock();
    if (!a) return;
    std::string manifest = SaveCheckpoint(*a);
    std::lock_guard<std::mutex> lock(mu_);
    if (!manifest.empty() && manifest != a->last_checkpoint && !a->exiting) {
      a->last_checkpoint = manifest;
      a->pending_checkpoint = manifest;
      dirty_ = true;
      cv_.notify_all();
    }
  }
}

void Agent::PreemptAllLocked(const std::string& cause) {
  for (auto& [id, a] : attempts_) {
    if (!a->proc || !a->proc->running() || a->exiting || a->noticed) continue;
    Log("preempting %s: %s", id, cause);
    a->noticed = true;
    a->notice = cause;
    a->proc->Terminate(std::chrono::milliseconds(a->grace_ms));
  }
  dirty_ = true;
  cv_.notify_all();
}

void Agent::SpotNoticeLoop() {
  auto url = ParseUrl(opt_.spot_metadata_url);
  if (!url.ok()) {
    Log("--spot-metadata-url: %s", url.status().message());
    return;
  }
  // The whole URL path is the resource polled, not a prefix.
  std::string path = url->base_path.empty() ? "/" : url->base_path;
  url->base_path.clear();
  const auto interval =
      std::chrono::milliseconds(static_cast<int64_t>(opt_.spot_poll_interval_s * 1000));
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, interval, [&] { return stopping_; })) return;
    }
    HttpClient http(*url, "", std::chrono::seconds(2));
    auto resp = http.Request("GET", path);
    if (!resp.ok() || resp->status != 200) continue;  // 404: no notice; errors: try again
    std::string body = Trim(resp->body.substr(0, 200));
    std::lock_guard<std::mutex> lock(mu_);
    PreemptAllLocked("spot termination notice" + (body.empty() ? "" : ": " + body));
  }
}

std::map<std::string, std::string> Agent::JobEnv(const proto::Assign& a) const {
  std::map<std::string, std::string> env;
  auto inherit = [&](const char* key, const char* fallback) {
    const char* v = std::getenv(key);
    if (v)
      env[key] = v;
    else if (fallback)
      env[key] = fallback;
  };
  inherit("PATH", "/usr/local/bin:/usr/bin:/bin");
  inherit("HOME", "/");
  inherit("USER", nullptr);
  inherit("LOGNAME", nullptr);
  inherit("LANG", "C.UTF-8");
  inherit("TZ", nullptr);
  env["SHELL"] = "/bin/bash";
  env["PYTHONUNBUFFERED"] = "1";  // job output should stream, not arrive at exit
  for (const auto& [k, v] : a.env) env[k] = v;
  // Set last: the spec validator forbids these keys, and the agent has the final word.
  std::string uuids, indices;
  for (int g : a.gpus) {
    std::string id = std::to_string(g);
    for (const auto& gi : inventory_.gpus) {
      if (gi.index == g && !gi.uuid.empty()) id = gi.uuid;
    }
    uuids += (uuids.empty() ? "" : ",") + id;
    indices += (indices.empty() ? "" : ",") + std::to_string(g);
  }
  env["CUDA_VISIBLE_DEVICES"] = uuids;  // empty: the job sees no GPU at all
  env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  env["NVIDIA_VISIBLE_DEVICES"] = uuids.empty() ? "void" : uuids;
  env["SLUICE_GPUS"] = indices;
  env["SLUICE_CPUS"] = std::to_string(a.cpus);
  env["SLUICE_JOB_ID"] = a.job_id;
  env["SLUICE_ATTEMPT_ID"] = a.attempt_id;
  env["SLUICE_ATTEMPT"] = std::to_string(a.attempt);
  env["SLUICE_NODE_ID"] = node_id_;
  return env;
}

void Agent::HandleAssign(const proto::Assign& assign) {
  std::lock_guard<std::mutex> lock(mu_);
  if (attempts_.count(assign.attempt_id)) return;  // a duplicate assign is a no-op
  auto a = std::make_shared<Attempt>();
  a->id = assign.attempt_id;
  a->job_id = assign.job_id;
  attempts_[a->id] = a;
  leases_.Granted(a->id, SteadyMs());
  PersistLocked(*a);
  // Fetching and unpacking the workdir may take a while: not on the socket's thread.
  SpawnLocked([this, assign] { StartAttempt(assign); });
}

SupervisedJob::Callbacks Agent::JobCallbacks(std::weak_ptr<Attempt> weak) {
  SupervisedJob::Callbacks cb;
  cb.on_line = [this, weak](const proto::LogEntry& e) {
    auto att = weak.lock();
    if (!att) return;
    std::lock_guard<std::mutex> lock(mu_);
    att->next_seq = std::max(att->next_seq, e.seq + 1);
    att->lines.push_back(e);
    dirty_ = true;
    cv_.notify_all();
  };
  cb.on_freeze = [this, weak](bool frozen) {
    auto att = weak.lock();
    if (!att) return;
    std::lock_guard<std::mutex> lock(mu_);
    att->frozen = frozen;
    Log(frozen
            ? "lease of %s ran out (no word from the server): frozen until the server confirms it"
            : "the server confirmed %s: thawed",
        att->id);
  };
  cb.on_exit = [this, weak](const SupervisedJob::End& end) {
    auto att = weak.lock();
    if (!att) return;
    std::lock_guard<std::mutex> lock(mu_);
    att->exiting = true;
    att->frozen = false;
    cv_.notify_all();
    // The final checkpoint is saved before the exit is reported, so the server requeues the
    // job with it (issue 4: ... SIGKILL → final checkpoint upload → attempt ended).
    SpawnLocked([this, att, end] {
      const bool started = end.exit.error.empty();
      std::string manifest = started ? SaveCheckpoint(*att) : "";
      std::lock_guard<std::mutex> lock(mu_);
      if (!started) {
        att->error = end.exit.error;
      } else if (end.supervisor_lost || end.exit.fenced) {
        // Killed behind the job's back (its supervisor died, or fenced it while this agent
        // was unresponsive): the node's fault, not the job's. Say hello again to report it
        // lost, which requeues the job without counting it against the job.
        att->lost = true;
        reregister_ = true;
        Log("attempt %s was killed by %s; reporting it lost", att->id,
            end.supervisor_lost ? "the loss of its supervisor" : "its supervisor (lease ran out)");
      } else {
        att->exit = end.exit.info;
        att->final_checkpoint = manifest;
        att->out_of_memory = end.exit.out_of_memory;
      }
      PersistLocked(*att);
      dirty_ = true;
      cv_.notify_all();
    });
  };
  return cb;
}

void Agent::StartAttempt(proto::Assign assign) {
  std::string dir = WorkDir(assign.attempt_id);
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  Status prepared =
      ec ? Status::Internal("cannot create " + dir + ": " + ec.message()) : Status::Ok();
  if (prepared.ok() && !assign.workdir_blob.empty()) {
    HttpClient http(url_, BearerToken(), std::chrono::seconds(60));
    auto resp = http.Request("GET", "/v1/blobs/" + assign.workdir_blob);
    if (!resp.ok()) {
      prepared = resp.status();
    } else if (resp->status != 200) {
      prepared = Status::Unavailable("fetching workdir: HTTP " + std::to_string(resp->status));
    } else {
      prepared = UnpackArchive(resp->body, dir, kMaxWorkdirBytes, kMaxWorkdirEntries);
    }
  }
  // The job's checkpoint directory: the server's latest complete checkpoint, or empty. Local
  // leftovers of an earlier attempt are never trusted over the server's account.
  const std::string ckpt = CheckpointDir(assign.job_id);
  bool resumed = false;
  std::string restore_warning;
  if (prepared.ok()) {
    if (!assign.checkpoint.empty()) {
      checkpoint::HttpBlobTransport transport(url_, BearerToken());
      Status r = checkpoint::RestoreCheckpoint(assign.checkpoint, ckpt, transport);
      resumed = r.ok();
      if (!r.ok()) {
        restore_warning = "sluice: could not restore checkpoint " +
                          assign.checkpoint.substr(0, 12) + " (" + r.message() +
                          "); starting without it";
        Log("%s", restore_warning);
      }
    }
    if (!resumed) {
      fs::remove_all(ckpt, ec);
      fs::create_directories(ckpt, ec);
      if (ec) prepared = Status::Internal("cannot create " + ckpt + ": " + ec.message());
    }
  }
  std::shared_ptr<Attempt> a;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = attempts_.find(assign.attempt_id);
    if (it == attempts_.end()) return;
    a = it->second;
    a->checkpoint_dir = ckpt;
    a->grace_ms = assign.grace_ms;
    a->last_checkpoint = resumed ? assign.checkpoint : "";
    if (!restore_warning.empty()) {
      proto::LogEntry e;
      e.seq = a->next_seq++;
      e.stream = "stderr";
      e.ts_ms = RealClock::Get()->NowMillis();
      e.text = restore_warning;
      a->lines.push_back(std::move(e));
    }
    if (a->cancel_pending && prepared.ok()) prepared = Status::Cancelled("cancelled before start");
    if (!prepared.ok()) {
      a->error = prepared.message();
      PersistLocked(*a);
      dirty_ = true;
      cv_.notify_all();
      return;
    }
  }
  // A warm box when one is ready. Not for GPU jobs: a box shows only the GPUs it was built for,
  // and a GPU job's start takes seconds in CUDA anyway.
  std::unique_ptr<WarmBox> warm;
  if (assign.gpus.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    warm = TakeWarmLocked();
  }
  if (warm) return StartInWarmBox(std::move(warm), assign, a, resumed);
  ProcessSpec spec;
  spec.script = assign.run;
  spec.cwd = dir;
  spec.env = JobEnv(assign);
  spec.env["SLUICE_CHECKPOINT_DIR"] = ckpt;
  if (resumed) spec.env["SLUICE_RESUMED"] = "1";
  if (sandbox_.usable) {
    SandboxSpec box;
    box.workdir = dir;
    box.checkpoint_dir = ckpt;
    box.gpus = assign.gpus;
    box.hidden = HiddenPaths();
    spec.env["HOME"] = dir;
    // The job's uid has no passwd entry; tools that ask for a user name (Python's getpass, and
    // with it PyTorch's compile cache) read these first.
    spec.env["USER"] = spec.env["LOGNAME"] = "sluice-job";
    if (sandbox_.own_uid) {
      int slot;
      {
        std::lock_guard<std::mutex> lock(mu_);
        slot = a->slot = FreeSlotLocked();
      }
      if (slot >= kMaxJobSlots) {
        std::lock_guard<std::mutex> lock(mu_);
        a->error = "this node already runs " + std::to_string(kMaxJobSlots) + " jobs";
        PersistLocked(*a);
        dirty_ = true;
        cv_.notify_all();
        return;
      }
      uid_t uid = SandboxUid(static_cast<uid_t>(opt_.first_job_uid), slot);
      box.uid = uid;
      // Unpacked and restored as root: the job's from here on.
      Status owned = ChownTree(dir, uid, uid);
      if (owned.ok()) owned = ChownTree(ckpt, uid, uid);
      if (!owned.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        a->error = "cannot hand its directories to the job's user: " + owned.message();
        PersistLocked(*a);
        dirty_ = true;
        cv_.notify_all();
        return;
      }
    }
    spec.wrapper = SandboxArgv(sandbox_, box);
  }
  std::unique_ptr<AttemptCgroup> cgroup;
  if (cgroups_.usable()) {
    CgroupLimits limits;
    limits.memory_bytes = static_cast<int64_t>(assign.memory_gb * 1024.0 * 1024.0 * 1024.0);
    limits.cpus = assign.cpus;
    limits.max_pids = opt_.max_pids_per_job;
    auto cg = AttemptCgroup::Create(cgroups_, assign.attempt_id, limits);
    if (!cg.ok()) {
      // The node sells limited slices; a job it cannot confine does not run.
      std::lock_guard<std::mutex> lock(mu_);
      a->error = "cannot create its cgroup: " + cg.status().message();
      PersistLocked(*a);
      dirty_ = true;
      cv_.notify_all();
      return;
    }
    cgroup = std::move(*cg);  // its supervisor joins the job to it
  }
  supervisor::Spec sup;
  sup.attempt_id = assign.attempt_id;
  sup.process = spec;
  if (cgroup) sup.cgroups = cgroups_;
  const std::string sup_dir = SupervisorDir(assign.attempt_id);
  fs::create_directories(sup_dir, ec);
  fs::permissions(sup_dir, fs::perms::owner_all, ec);
  {
    std::lock_guard<std::mutex> lock(mu_);
    sup.first_seq = a->next_seq;
    sup.lease_until = leases_.Until(a->id);
    sup.kill_at = KillAtLocked(sup.lease_until);
    a->cgroup = std::move(cgroup);
    a->checkpoint_interval_ms = assign.checkpoint_interval_ms;
  }
  // Not under mu_: it waits for the job to start, and the supervisor's reports take mu_.
  auto proc = SupervisedJob::Start(supervisor_exe_, sup_dir, sup, JobCallbacks(a));
  std::lock_guard<std::mutex> lock(mu_);
  if (!proc.ok()) {
    a->error = "cannot start its supervisor: " + proc.status().message();
    PersistLocked(*a);
  } else {
    StartedLocked(a, std::move(*proc));
  }
  dirty_ = true;
  cv_.notify_all();
}

void Agent::StartedLocked(const std::shared_ptr<Attempt>& a, std::unique_ptr<SupervisedJob> job) {
  a->proc = std::move(job);
  a->pgid = a->proc->pgid();
  a->start_time = a->pgid > 0 ? ProcessStartTime(a->pgid) : "";
  PersistLocked(*a);
  if (a->cancel_pending) {
    a->proc->Terminate(std::chrono::milliseconds(a->grace_ms));  // cancelled while starting
  }
  StartCheckpointsLocked(a);
  dirty_ = true;
  cv_.notify_all();
}

void Agent::StartCheckpointsLocked(const std::shared_ptr<Attempt>& a) {
  if (a->checkpoint_interval_ms <= 0) return;
  std::weak_ptr<Attempt> weak = a;
  SpawnLocked(
      [this, weak, interval = a->checkpoint_interval_ms] { CheckpointLoop(weak, interval); });
}

void Agent::FillWarmLocked() {
  if (draining_ || stopping_ || warm_failures_ >= 3) return;
  while (static_cast<int>(warm_.size()) + warm_building_ < opt_.warm_boxes) {
    int slot = -1;
    if (sandbox_.own_uid) {
      slot = FreeSlotLocked();
      if (slot >= kMaxJobSlots) return;
      warm_slots_.insert(slot);
    }
    ++warm_building_;
    SpawnLocked([this, slot] { BuildWarmBox(slot); });
  }
}

void Agent::BuildWarmBox(int slot) {
  auto w = std::make_unique<WarmBox>();
  w->name = "warm-" + RandomHex(6);
  w->slot = slot;
  const std::string work = WorkDir(w->name), ckpt = WarmCheckpointDir(w->name),
                    dir = SupervisorDir(w->name);
  std::error_code ec;
  Status s = Status::Ok();
  for (const auto& d : {work, ckpt, dir}) {
    fs::create_directories(d, ec);
    if (ec) s = Status::Internal("cannot create " + d + ": " + ec.message());
  }
  fs::permissions(dir, fs::perms::owner_all, ec);
  SandboxSpec box;
  box.workdir = work;
  box.checkpoint_dir = ckpt;
  box.hidden = HiddenPaths();
  if (s.ok() && slot >= 0) {
    box.uid = SandboxUid(static_cast<uid_t>(opt_.first_job_uid), slot);
    s = ChownTree(work, box.uid, box.uid);
    if (s.ok()) s = ChownTree(ckpt, box.uid, box.uid);
  }
  supervisor::Spec spec;
  spec.attempt_id = w->name;
  spec.warm = true;
  spec.process.cwd = work;  // the environment stays empty (supervisor_protocol.h, kWarmStub)
  if (sandbox_.usable) spec.process.wrapper = SandboxArgv(sandbox_, box);
  if (s.ok() && cgroups_.usable()) {
    CgroupLimits limits;  // the job's own come with it (AttemptCgroup::Adopt)
    limits.max_pids = opt_.max_pids_per_job;
    auto cg = AttemptCgroup::Create(cgroups_, w->name, limits);
    s = cg.status();
    w->cgroup = cg.ok();
    spec.cgroups = cgroups_;
  }
  SupervisedJob::Callbacks cb;
  cb.on_exit = [this, name = w->name](const SupervisedJob::End& end) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = warm_.begin(); it != warm_.end(); ++it) {
      if ((*it)->name != name) continue;
      // Died unused: killed with its agent's stop, or something is wrong with the box.
      if (!stopping_) {
        ++warm_failures_;
        Log("warm sandbox %s ended before a job came (%s)", name,
            end.exit.error.empty() ? end.exit.info.ToString() : end.exit.error);
        if (warm_failures_ >= 3) Log("warm sandboxes: three failed in a row; not building more");
      }
      auto w = std::move(*it);
      warm_.erase(it);
      DiscardWarmLocked(std::move(w));
      FillWarmLocked();
      return;
    }
  };
  Result<std::unique_ptr<SupervisedJob>> job =
      s.ok() ? SupervisedJob::Start(supervisor_exe_, dir, spec, cb)
             : Result<std::unique_ptr<SupervisedJob>>(s);
  std::lock_guard<std::mutex> lock(mu_);
  --warm_building_;
  if (job.ok()) w->job = std::move(*job);
  if (!job.ok() || draining_ || stopping_ || !w->job->ready()) {
    // Broken (it could not start, or ended): counts towards giving up. Merely slow (built with
    // idle CPU time only, on a busy machine): discarded, and the next one tried.
    if (!job.ok() || (!draining_ && !stopping_ && !w->job->running())) {
      ++warm_failures_;
      Log("cannot build a warm sandbox: %s",
          job.ok() ? std::string("it ended before it was ready") : job.status().message());
    }
    DiscardWarmLocked(std::move(w));
    FillWarmLocked();  // at most three broken ones in a row
    return;
  }
  warm_.push_back(std::move(w));
}

std::unique_ptr<WarmBox> Agent::TakeWarmLocked() {
  while (!warm_.empty()) {
    auto w = std::move(warm_.front());
    warm_.pop_front();
    if (w->job && w->job->ready()) return w;
    DiscardWarmLocked(std::move(w));
  }
  return nullptr;
}

void Agent::DiscardWarmLocked(std::unique_ptr<WarmBox> w) {
  std::shared_ptr<WarmBox> keep(std::move(w));
  SpawnLocked([this, keep] {
    if (keep->job) {
      keep->job->Kill();
      keep->job->Wait();
      keep->job.reset();
    }
    std::error_code ec;
    for (const auto& d :
         {WorkDir(keep->name), WarmCheckpointDir(keep->name), SupervisorDir(keep->name)}) {
      fs::remove_all(d, ec);
    }
    if (keep->cgroup) {
      if (auto cg = AttemptCgroup::Open(cgroups_, keep->name); cg.ok()) {
        for (int i = 0; i < 50 && !(*cg)->Remove().ok(); ++i) {
          (void)(*cg)->KillAll();
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (keep->slot >= 0) warm_slots_.erase(keep->slot);
  });
}

void Agent::StartInWarmBox(std::unique_ptr<WarmBox> w, const proto::Assign& assign,
                           const std::shared_ptr<Attempt>& a, bool resumed) {
  const std::string dir = WorkDir(assign.attempt_id), ckpt = a->checkpoint_dir;
  // What the job sees: the paths the box was built with (bound there, by inode). Unboxed
  // (--no-sandbox), the warm supervisor's stub simply moves to the attempt's own paths.
  const bool boxed = sandbox_.usable;
  const std::string box_work = boxed ? WorkDir(w->name) : dir;
  const std::string box_ckpt = boxed ? WarmCheckpointDir(w->name) : ckpt;
  auto fail = [&](const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    a->error = why;
    PersistLocked(*a);
    dirty_ = true;
    cv_.notify_all();
    DiscardWarmLocked(std::move(w));
  };
  Status s = Status::Ok();
  if (boxed) {
    s = AdoptDirectory(dir, WorkDir(w->name));
    if (s.ok()) s = AdoptDirectory(ckpt, WarmCheckpointDir(w->name));
  } else {
    std::error_code rm;  // unused: the stub changes to the attempt's own dirs
    fs::remove_all(WorkDir(w->name), rm);
    fs::remove_all(WarmCheckpointDir(w->name), rm);
  }
  if (s.ok() && w->slot >= 0) {
    const uid_t uid = SandboxUid(static_cast<uid_t>(opt_.first_job_uid), w->slot);
    s = ChownTree(dir, uid, uid);  // unpacked and restored as root: the job's from here on
    if (s.ok()) s = ChownTree(ckpt, uid, uid);
  }
  if (!s.ok()) return fail("cannot hand its directories to its sandbox: " + s.message());
  std::unique_ptr<AttemptCgroup> cgroup;
  if (w->cgroup) {
    CgroupLimits limits;
    limits.memory_bytes = static_cast<int64_t>(assign.memory_gb * 1024.0 * 1024.0 * 1024.0);
    limits.cpus = assign.cpus;
    limits.max_pids = opt_.max_pids_per_job;
    auto cg = AttemptCgroup::Adopt(cgroups_, w->name, assign.attempt_id, limits);
    if (!cg.ok()) return fail("cannot limit its cgroup: " + cg.status().message());
    cgroup = std::move(*cg);
    w->cgroup = false;  // the attempt's now
  }
  const std::string sup_dir = SupervisorDir(assign.attempt_id);
  std::error_code ec;
  fs::rename(SupervisorDir(w->name), sup_dir, ec);
  if (ec) return fail("cannot rename its supervisor's directory: " + ec.message());
  std::map<std::string, std::string> env = JobEnv(assign);
  env["SLUICE_CHECKPOINT_DIR"] = box_ckpt;
  if (resumed) env["SLUICE_RESUMED"] = "1";
  if (boxed) {  // as for a cold start (StartAttempt)
    env["HOME"] = box_work;
    env["USER"] = env["LOGNAME"] = "sluice-job";
  }
  Json env_json = Json::object();
  for (const auto& [k, v] : env) env_json[k] = v;
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t until = leases_.Until(a->id);
  Json go{{"op", "go"},
          {"dir", sup_dir},
          {"attempt_id", assign.attempt_id},
          {"cwd", box_work},
          {"script", assign.run},
          {"env", env_json},
          {"first_seq", a->next_seq},
          {"until", until},
          {"kill_at", KillAtLocked(until)}};
  a->cgroup = std::move(cgroup);
  a->checkpoint_interval_ms = assign.checkpoint_interval_ms;
  if (!w->job->Go(sup_dir, JobCallbacks(a), go)) {
    // The box died just before: nothing of the job ran.
    a->error = "its sandbox ended before the job could start";
    PersistLocked(*a);
    dirty_ = true;
    cv_.notify_all();
    DiscardWarmLocked(std::move(w));
    FillWarmLocked();
    return;
  }
  Log(boxed ? "%s runs in warm sandbox %s" : "%s runs under warm supervisor %s", a->id, w->name);
  a->slot = w->slot;  // the attempt holds the box's uid now
  warm_slots_.erase(w->slot);
  warm_failures_ = 0;
  StartedLocked(a, std::move(w->job));
  FillWarmLocked();
}

void Agent::OnMessage(std::string_view text) {
  auto msg = ParseJson(text);
  if (!msg.ok() || !msg->is_object()) {
    Log("ignoring a malformed message from the server");
    return;
  }
  std::string type = msg->value("type", "");
  if (type == "reverify") {
    std::string reason = msg->value("reason", "");
    std::string trigger = reason == "registration" ? "registration"
                          : reason == "scheduled"  ? "schedule"
                          : reason == "on-demand"  ? "on-demand"
                                                   : "re-verification";
    std::lock_guard<std::mutex> lock(mu_);
    Log("the server asks for the conformance suite (%s)", reason);
    verify_requested_ = trigger;
    verify_nonce_ = StringField(*msg, "nonce");
    if (!verify_running_) {
      verify_running_ = true;
      SpawnLocked([this] { VerifyLoop(); });
    }
    cv_.notify_all();
    return;
  }
  if (type == "welcome") {
    std::lock_guard<std::mutex> lock(mu_);
    if (std::string cred = StringField(*msg, "credential"); !cred.empty()) {
      // Enrolled: this credential is the node's only proof from now on (the server keeps just
      // its hash), so it is on disk before anything relies on it.
      Status saved = WriteFileAtomic(CredentialPath(), cred + "\n", 0600);
      if (!saved.ok()) {
        Log("cannot save the node credential (%s); stopping, as the node could not prove itself "
            "on its next connection",
            saved.message());
        fatal_ = true;
        stopping_ = true;
        cv_.notify_all();
        ::kill(::getpid(), SIGTERM);  // wake the main thread's signal wait
        return;
      }
      token_ = cred;
      enrolled_ = true;
      Log("enrolled; node credential saved to %s", CredentialPath());
    }
    welcomed_ = true;
    node_id_ = msg->value("node_id", "");
    heartbeat_ms_ = std::max<int64_t>(100, msg->value("heartbeat_interval_ms", int64_t{3000}));
    if (auto it = msg->find("lease_ms"); it != msg->end() && it->is_number_integer()) {
      leases_.SetLeaseLength(it->get<int64_t>());
      lease_ms_ = it->get<int64_t>();
      server_grace_ms_ = msg->value("heartbeat_grace_ms", int64_t{0});
      // At least three heartbeats per lease: one slow reply must not freeze healthy jobs.
      if (int64_t lease = it->get<int64_t>(); lease >= 300) {
        heartbeat_ms_ = std::min(heartbeat_ms_, lease / 3);
      }
    }
    (void)WriteFileAtomic(opt_.data_dir + "/node.id", node_id_ + "\n");
    Log("registered as node %s", node_id_);
    return;
  }
  if (type == "assign") {
    auto a = proto::AssignFromJson(*msg);
    if (!a.ok()) {
      Log("ignoring a malformed assign: %s", a.status().message());
      return;
    }
    HandleAssign(*a);
    return;
  }
  std::string attempt_id = msg->value("attempt_id", "");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = attempts_.find(attempt_id);
  if (type == "cancel" || type == "preempt") {
    // Both stop the process group the same way (SIGTERM, grace, SIGKILL); the server knows
    // which it asked for and records the attempt as cancelled or preempted.
    if (it == attempts_.end()) return;
    if (type == "preempt") {
      Log("preempting %s: %s", attempt_id, msg->value("cause", ""));
    }
    auto& a = *it->second;
    int64_t grace = msg->value("grace_ms", int64_t{10000});
    if (a.proc)
      a.proc->Terminate(std::chrono::milliseconds(grace));
    else
      a.cancel_pending = true;
  } else if (type == "lease") {
    OnLeaseLocked(*msg);
  } else if (type == "log_ack") {
    if (it == attempts_.end()) return;
    int64_t seq = msg->value("seq", int64_t{0});
    auto& lines = it->second->lines;
    while (!lines.empty() && lines.front().seq <= seq) lines.pop_front();
    it->second->sent_seq = std::max(it->second->sent_seq, seq);
  } else if (type == "exit_ack") {
    ForgetLocked(attempt_id);
  } else if (type == "error") {
    Log("server says: %s", msg->value("message", ""));
    // Refused at hello (a claim the probe contradicts, a revoked node, a node id enrolled with a
    // credential this agent lacks): retrying cannot help.
    std::string code = msg->value("code", "");
    if (!welcomed_ && (code == "FAILED_PRECONDITION" || code == "PERMISSION_DENIED")) {
      fatal_ = true;
      stopping_ = true;
      cv_.notify_all();
      ::kill(::getpid(), SIGTERM);  // wake the main thread's signal wait
    }
  }
}

bool Agent::GpuBusyLocked() const {
  if (inventory_.gpus.empty()) return false;
  for (const auto& [id, a] : attempts_) {
    if (a->proc && !a->exit) return true;
  }
  return false;
}

void Agent::VerifyLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_ && !verify_requested_.empty()) {
    // Allocating GPU memory and launching kernels under a running job would disturb it and
    // measure the job, not the machine: wait until the GPUs are idle.
    if (GpuBusyLocked()) {
      Log("conformance suite deferred until running jobs finish");
      cv_.wait(lock, [&] { return stopping_ || !GpuBusyLocked(); });
      continue;
    }
    ConformanceOptions o = opt_.conformance;
    o.trigger = verify_requested_;
    verify_requested_.clear();
    const std::string nonce = verify_nonce_;  // this run answers the newest request
    const std::string token = token_;
    if (o.disk_dir.empty()) o.disk_dir = opt_.data_dir;
    Inventory inv = inventory_;
    lock.unlock();
    // Probe again first: a driver, toolkit or PyTorch build installed since registration must
    // reach the server, whose fingerprints then deverify the node and ask for a new run.
    if (auto now = TryProbeHost(probe_options_); now.ok()) {
      bool changed =
          audit::HardwareFingerprint(*now).sha256 != audit::HardwareFingerprint(inv).sha256 ||
          audit::SoftwareFingerprint(*now).sha256 != audit::SoftwareFingerprint(inv).sha256;
      if (changed) {
        lock.lock();
        Log("the machine changed since registration (new probe); registering it again");
        inventory_ = *now;
        reregister_ = true;
        cv_.notify_all();
        continue;  // the server asks for the suite again once it has the new inventory
      }
    } else {
      Log("probe before the conformance suite failed: %s", now.status().message());
    }
    HttpLinkProbe link(url_, token);
    conformance::Report report = RunSuite(o, inv, &link, *RealClock::Get());
    int pass = 0, fail = 0, skip = 0;
    for (const auto& c : report.checks) {
      pass += c.outcome == conformance::Outcome::kPass;
      fail += c.outcome == conformance::Outcome::kFail;
      skip += c.outcome == conformance::Outcome::kSkip;
      if (c.outcome == conformance::Outcome::kFail)
        Log("conformance: %s failed: %s", c.name, c.reason);
    }
    Log("conformance suite (%s): %s", report.trigger,
        std::to_string(pass) + " passed, " + std::to_string(fail) + " failed, " +
            std::to_string(skip) + " skipped in " + std::to_string(report.duration_ms) + " ms");
    lock.lock();
    pending_report_ =
        DumpJson(Json{{"type", "conformance"}, {"report", ToJson(report)}, {"nonce", nonce}});
    dirty_ = true;
    cv_.notify_all();
  }
  verify_running_ = false;
}

void Agent::FlushLocked(WsClient& ws) {
  if (!pending_report_.empty()) {
    ws.Send(pending_report_);
    pending_report_.clear();
  }
  for (auto& [id, a] : attempts_) {
    if (a->proc && !a->started_sent) {
      ws.Send(DumpJson(Json{{"type", "started"}, {"attempt_id", id}}));
      a->started_sent = true;
    }
    std::vector<proto::LogEntry> batch;
    for (const auto& l : a->lines) {
      if (l.seq <= a->sent_seq) continue;
      batch.push_back(l);
      if (batch.size() == proto::kMaxLinesPerLogMessage) {
        ws.Send(DumpJson(proto::LogMessage(id, batch)));
        a->sent_seq = batch.back().seq;
        batch.clear();
      }
    }
    if (!batch.empty()) {
      ws.Send(DumpJson(proto::LogMessage(id, batch)));
      a->sent_seq = batch.back().seq;
    }
    if (!a->notice.empty() && !a->exit_sent) {
      ws.Send(DumpJson(Json{{"type", "preempt_notice"}, {"attempt_id", id}, {"cause", a->notice}}));
      a->notice.clear();
    }
    if (!a->pending_checkpoint.empty() && !a->exit_sent) {
      ws.Send(DumpJson(
          Json{{"type", "checkpoint"}, {"attempt_id", id}, {"manifest", a->pending_checkpoint}}));
      a->pending_checkpoint.clear();
    }
    bool finished = a->exit.has_value() || !a->error.empty();
    if (finished && !a->exit_sent && !a->lost) {
      proto::Exited ex;
      ex.attempt_id = id;
      ex.checkpoint = a->final_checkpoint;
      ex.exit_code = a->exit ? a->exit->exit_code : -1;
      ex.signal = a->exit ? a->exit->signal : 0;
      ex.error = a->error;
      ex.out_of_memory = a->out_of_memory;
      ws.Send(DumpJson(proto::ToJson(ex)));
      a->exit_sent = true;
    }
  }
}

Status Agent::ConnectOnce() {
  WsClient::Options o;
  o.url = url_;
  o.path = "/v1/agent/connect";
  o.headers.emplace_back("Authorization", "Bearer " + BearerToken());
  o.keepalive_interval =
      std::chrono::milliseconds(static_cast<int64_t>(opt_.keep_alive_interval_s * 1000));
  o.idle_timeout = o.keepalive_interval * 3;
  auto ws = std::make_shared<WsClient>(
      o, [this](std::string_view m) { OnMessage(m); },
      [this](Status why) {
        std::lock_guard<std::mutex> lock(mu_);
        connected_ = false;
        cv_.notify_all();
      });
  SLUICE_RETURN_IF_ERROR(ws->Connect());

  std::unique_lock<std::mutex> lock(mu_);
  proto::Hello hello;
  hello.node_id = node_id_;
  hello.name = opt_.name;
  hello.inventory = inventory_;
  hello.price_per_gpu_hour = opt_.price_per_gpu_hour;
  hello.price_per_cpu_hour = opt_.price_per_cpu_hour;
  hello.interruptible_price_per_gpu_hour = opt_.interruptible_price_per_gpu_hour;
  hello.interruptible_price_per_cpu_hour = opt_.interruptible_price_per_cpu_hour;
  hello.region = opt_.region;
  hello.agent_version = kVersion;
  hello.claims = opt_.claims;
  welcomed_ = false;
  std::vector<std::string> lost;
  for (auto& [id, a] : attempts_) {
    proto::AttemptReport r;
    r.attempt_id = id;
    r.lost = a->lost;
    r.error = a->error;
    if (a->exit) {
      r.exit_code = a->exit->exit_code;
      r.signal = a->exit->signal;
    }
    r.running = !a->lost && !a->exit && a->error.empty();
    hello.attempts.push_back(r);
    if (a->lost) lost.push_back(id);
    // Everything unacknowledged goes again on this connection.
    a->sent_seq = 0;
    a->exit_sent = false;
    a->started_sent = false;
  }
  ws_ = ws;
  connected_ = true;
  ws->Send(DumpJson(proto::ToJson(hello)));
  for (const auto& id : lost) ForgetLocked(id);  // reported once; the server marks them lost
  dirty_ = true;
  auto next_heartbeat = std::chrono::steady_clock::now();
  while (connected_ && !stopping_ && !reregister_) {
    if (dirty_) {
      dirty_ = false;
      FlushLocked(*ws);
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= next_heartbeat) {
      leases_.Sent(++heartbeat_seq_, SteadyMs());
      ws->Send(R"({"type":"heartbeat","seq":)" + std::to_string(heartbeat_seq_) + "}");
      next_heartbeat = now + std::chrono::milliseconds(heartbeat_ms_);
    }
    cv_.wait_until(lock, next_heartbeat,
                   [&] { return dirty_ || !connected_ || stopping_ || reregister_; });
  }
  if (reregister_ && !stopping_) {
    // The machine changed (VerifyLoop): say hello again with the new inventory.
    reregister_ = false;
    ws_.reset();
    lock.unlock();
    ws->Close();
    return Status::AlreadyExists("re-registering with the changed inventory");
  }
  bool stopping = stopping_;
  if (stopping) FlushLocked(*ws);  // last words: exits of the jobs stopped with the agent
  ws_.reset();
  lock.unlock();
  ws->Close();
  return stopping ? Status::Cancelled("stopping") : Status::Unavailable("connection lost");
}

void Agent::ConnectionLoop() {
  std::mt19937 rng(std::random_device{}());
  double backoff = 0.1;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
    }
    auto started = std::chrono::steady_clock::now();
    Status s = ConnectOnce();
    if (s.code() == StatusCode::kCancelled) return;
    if (s.code() == StatusCode::kUnauthenticated || s.code() == StatusCode::kPermissionDenied) {
      std::lock_guard<std::mutex> lock(mu_);
      // Never fall back to the join token: it cannot speak for an enrolled node, and a revoked
      // node must stay off until its provider enrols it again.
      if (enrolled_) {
        Log("node credential refused (revoked?): remove %s to enrol again (%s)",
            CredentialPath() + " and " + opt_.data_dir + "/node.id", s.message());
      } else {
        Log("the server refused the join token: %s", s.message());
      }
      fatal_ = true;
      stopping_ = true;
      cv_.notify_all();
      ::kill(::getpid(), SIGTERM);  // wake the main thread's signal wait
      return;
    }
    if (s.code() == StatusCode::kAlreadyExists) continue;  // re-registering: at once
    if (std::chrono::steady_clock::now() - started > std::chrono::seconds(10)) backoff = 0.1;
    Log("server unreachable (%s); retrying", s.message());
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    auto wait = std::chrono::milliseconds(static_cast<int64_t>(backoff * jitter(rng) * 1000));
    backoff = std::min(backoff * 2, opt_.max_backoff_s);
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, wait, [&] { return stopping_; });
  }
}

int Agent::Run() {
  auto token = ReadFile(opt_.join_token_file);
  if (!token.ok()) {
    std::fprintf(stderr, "sluice agent: --join-token-file: %s\n", token.status().message().c_str());
    return 2;
  }
  // The secret on the first line, then optional `ca-sha256:` / `server:` lines (token_file.h).
  auto join_file = ParseTokenFile(*token);
  if (!join_file.ok()) {
    std::fprintf(stderr, "sluice agent: --join-token-file %s: %s\n", opt_.join_token_file.c_str(),
                 join_file.status().message().c_str());
    return 2;
  }
  token_ = join_file->secret;
  auto url = ParseUrl(opt_.server_url);
  if (!url.ok()) {
    std::fprintf(stderr, "sluice agent: --server: %s\n", url.status().message().c_str());
    return 2;
  }
  url_ = *url;
  // How an https/wss server is verified (docs/design-notes.md, "TLS"): --ca-file, else the join
  // token's CA pin, else the system store. url_ carries it into every client the agent makes.
  if (!opt_.ca_file.empty()) {
    auto ca = ReadFile(opt_.ca_file);
    if (!ca.ok()) {
      std::fprintf(stderr, "sluice agent: --ca-file: %s\n", ca.status().message().c_str());
      return 2;
    }
    url_.tls.ca_pem = *ca;
  } else {
    url_.tls.ca_sha256 = join_file->ca_sha256;
  }
  std::error_code ec;
  fs::create_directories(opt_.data_dir + "/work", ec);
  if (ec) {
    std::fprintf(stderr, "sluice agent: cannot create --data-dir %s: %s\n", opt_.data_dir.c_str(),
                 ec.message().c_str());
    return 1;
  }
  if (opt_.supervisor_path.empty()) {
    std::error_code exe_ec;
    fs::path self = fs::read_symlink("/proc/self/exe", exe_ec);
    supervisor_exe_ = (self.parent_path() / "sluice-supervisor").string();
  } else {
    supervisor_exe_ = fs::absolute(opt_.supervisor_path, ec).string();
  }
  // Each supervisor's control socket lives in the data dir, and a unix socket's path has at most
  // 107 bytes: say so now rather than fail every job.
  if (const std::string sock = SupervisorDir("att-0123456789ab") + "/" + supervisor::kSocketFile;
      sock.size() >= sizeof(sockaddr_un::sun_path)) {
    std::fprintf(stderr,
                 "sluice agent: --data-dir %s is too long (%zu bytes): its jobs' control sockets "
                 "(%s) would not fit a unix socket's %zu-byte path; use one of at most %zu "
                 "bytes\n",
                 opt_.data_dir.c_str(), opt_.data_dir.size(), sock.c_str(),
                 sizeof(sockaddr_un::sun_path) - 1,
                 opt_.data_dir.size() - (sock.size() - (sizeof(sockaddr_un::sun_path) - 1)));
    return 2;
  }
  if (::access(supervisor_exe_.c_str(), X_OK) != 0) {
    std::fprintf(stderr,
                 "sluice agent: cannot run the job supervisor %s: %s.\n"
                 "It is built and installed beside `sluice` (the `sluice-supervisor` target); "
                 "every job runs under one.\n",
                 supervisor_exe_.c_str(), std::strerror(errno));
    return 1;
  }
  ProbeOptions& popt = probe_options_;
  popt.data_dir = opt_.data_dir;
  popt.nvidia_smi_file = opt_.nvidia_smi_file;
  popt.skip_software = opt_.skip_software_probe;
  auto inv = TryProbeHost(popt);
  if (!inv.ok()) {
    std::fprintf(stderr, "sluice agent: probe: %s\n", inv.status().message().c_str());
    return 1;
  }
  inventory_ = *inv;
  Log("probed %s: %s", inventory_.hostname,
      std::to_string(inventory_.cpu_cores) + " CPUs, " +
          std::to_string(inventory_.memory_mib / 1024) + " GiB, " +
          std::to_string(inventory_.gpus.size()) + " GPUs (" + inventory_.gpu_source + ")");
  // Enrolled before: the node proves itself with its own credential, and the join token (read
  // above for what else it carries) is not sent (docs/design-notes.md "Node identity").
  if (auto cred = ReadFile(CredentialPath()); cred.ok() && !Trim(*cred).empty()) {
    token_ = Trim(*cred);
    enrolled_ = true;
    Log("using the node credential in %s", CredentialPath());
  }
  if (auto id = ReadFile(opt_.data_dir + "/node.id"); id.ok()) node_id_ = Trim(*id);
  if (opt_.no_sandbox) {
    inventory_.sandbox = "none";
    Log("sandbox: off (--no-sandbox): jobs run as this agent's user and can read whatever it "
        "can, tokens included; offers show `sandbox: none`");
  } else {
    DetectJobSandbox();
    if (!sandbox_.usable) {
      std::fprintf(stderr,
                   "sluice agent: cannot sandbox jobs here: %s.\n"
                   "Jobs from other accounts must not run unboxed on your machine. Install "
                   "bubblewrap and allow user namespaces, or start with --no-sandbox if every "
                   "job this node runs is your own.\n",
                   sandbox_.why_not.c_str());
      return 1;
    }
    inventory_.sandbox = "bwrap";
    Log("sandbox: %s", sandbox_.Describe());
  }
  if (sandbox_.usable && sandbox_.own_uid) {
    std::string said;
    auto rc = RunHostScript(InstallScript(JobNetwork()), &said);
    network_filtered_ = rc.ok() && *rc == 0;
    if (network_filtered_) {
      Log("job network: jobs may not reach 169.254.169.254 (cloud credentials) or local TCP port "
          "%s (iptables chain %s)",
          std::to_string(url_.port), JobNetwork().Chain());
    } else {
      Log("job network: NOT filtered (%s): jobs can reach the cloud metadata address "
          "169.254.169.254 and this machine's local ports",
          rc.ok() ? (said.empty() ? "iptables failed" : said) : rc.status().message());
    }
  }
  cgroups_ = DetectCgroups(opt_.cgroup_root);
  if (cgroups_.usable()) {
    Log("job limits: %s", cgroups_.Describe());
    if (int n = RemoveStaleCgroups(cgroups_, 300); n > 0) {
      Log("removed %s empty job cgroups left by agents that were killed", std::to_string(n));
    }
  } else {
    Log("job limits: none (%s): jobs run without CPU, memory or process-count limits",
        cgroups_.Describe());
  }
  RecoverAttempts();
  // Warm boxes of a previous instance: their supervisors kill them once no agent is connected.
  for (const std::string& parent :
       {opt_.data_dir + "/work", opt_.data_dir + "/checkpoints", AttemptsDir()}) {
    for (const auto& e : fs::directory_iterator(parent, ec)) {
      if (e.path().filename().string().rfind("warm-", 0) == 0) fs::remove_all(e.path(), ec);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    FillWarmLocked();
  }

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGUSR1);  // the provider takes the node back: preempt its jobs
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  std::thread conn([this] { ConnectionLoop(); });
  {
    std::lock_guard<std::mutex> lock(mu_);
    SpawnLocked([this] { FenceLoop(); });
  }
  if (!opt_.spot_metadata_url.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    SpawnLocked([this] { SpotNoticeLoop(); });
  }
  int sig = 0;
  for (;;) {
    sigwait(&stop_signals, &sig);
    if (sig != SIGUSR1) break;
    std::lock_guard<std::mutex> lock(mu_);
    PreemptAllLocked("the provider signalled the agent (SIGUSR1)");
  }
  bool fatal;
  {
    std::unique_lock<std::mutex> lock(mu_);
    fatal = fatal_;
    if (!fatal) Log("%s received: stopping jobs and shutting down", strsignal(sig));
    // Running jobs get SIGTERM and the grace period; their exits are reported if connected.
    draining_ = true;
    while (!warm_.empty()) {
      auto w = std::move(warm_.front());
      warm_.pop_front();
      DiscardWarmLocked(std::move(w));
    }
    for (auto& [id, a] : attempts_) {
      if (a->proc && a->proc->running()) {
        // Its supervisor thaws a frozen job first: it gets its SIGTERM and grace like the others.
        a->proc->Terminate(
            std::chrono::milliseconds(static_cast<int64_t>(opt_.stop_grace_s * 1000)));
      }
    }
    auto deadline =
        std::chrono::steady_clock::now() +
        std::chrono::milliseconds(static_cast<int64_t>(opt_.stop_grace_s * 1000) + 3000);
    cv_.wait_until(lock, deadline, [&] {
      for (auto& [id, a] : attempts_) {
        if (a->proc && !a->exit) return false;
      }
      return true;
    });
    stopping_ = true;
    dirty_ = true;
    cv_.notify_all();
  }
  conn.join();
  if (network_filtered_) (void)RunHostScript(RemoveScript(JobNetwork()), nullptr);
  std::map<std::string, std::shared_ptr<Attempt>> attempts;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return active_workers_ == 0; });
    attempts.swap(attempts_);
  }
  attempts.clear();  // kills what is left and joins the monitor threads, outside mu_
  return fatal ? 1 : 0;
}

}  // namespace

int RunAgent(const AgentOptions& options) {
  AgentOptions absolute = options;
  std::error_code ec;
  // The sandbox binds paths by name: they must not depend on the agent's working directory.
  absolute.data_dir = fs::absolute(options.data_dir, ec).lexically_normal().string();
  if (ec) absolute.data_dir = options.data_dir;
  while (absolute.data_dir.size() > 1 && absolute.data_dir.back() == '/') {
    absolute.data_dir.pop_back();
  }
  Agent agent(std::move(absolute));
  return agent.Run();
}

}  // namespace sluice::agent
