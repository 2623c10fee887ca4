#include "agent/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "agent/cgroup.h"
#include "agent/process.h"
#include "agent/supervisor_protocol.h"
#include "common/atomic_file.h"
#include "common/clock.h"
#include "common/json.h"

namespace sluice::supervisor {
namespace {

// A send to the agent that blocks longer than this detaches it: the job's output must not stall
// behind an agent that stopped reading. It reattaches and replays from the file.
constexpr int kSendTimeoutMs = 2000;
constexpr const char* kFrozenEvent = "{\"ev\":\"frozen\"}\n";
constexpr const char* kThawedEvent = "{\"ev\":\"thawed\"}\n";
constexpr const char* kReadyEvent = "{\"ev\":\"ready\"}\n";
// Longest line the agent may send; anything longer is not our agent. A warm box's `go` carries
// the whole job: a valid spec holds up to 64 KiB of script and 256 variables of 32 KiB each
// (spec/job_spec.h), ~8 MiB that JSON escaping can make up to six times longer. (64 KiB here
// killed every warm-box job of more than 64 KiB.)
constexpr size_t kMaxInput = 64 * 1024 * 1024;

// Sets the scheduling policy of thread or process `tid` (0: the calling thread).
void SetPolicy(pid_t tid, int policy) {
  sched_param param{};
  (void)::sched_setscheduler(tid, policy, &param);
}

// `pid` and its descendants, from /proc (children of its main thread; box processes are
// single-threaded).
std::vector<pid_t> ProcessTree(pid_t pid) {
  std::vector<pid_t> out = {pid};
  for (size_t i = 0; i < out.size(); ++i) {
    std::ifstream in("/proc/" + std::to_string(out[i]) + "/task/" + std::to_string(out[i]) +
                     "/children");
    for (pid_t child; in >> child;) out.push_back(child);
  }
  return out;
}

void Say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void Say(const char* fmt, ...) {
  // Wall-clock time to the millisecond: the log is read beside the agent's and the server's.
  const int64_t ms = RealClock::Get()->NowMillis();
  const time_t secs = static_cast<time_t>(ms / 1000);
  tm t{};
  gmtime_r(&secs, &t);
  std::fprintf(stderr, "%02d:%02d:%02d.%03d sluice-supervisor: ", t.tm_hour, t.tm_min, t.tm_sec,
               static_cast<int>(ms % 1000));
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

class Supervisor {
 public:
  Supervisor(std::string dir, int listen_fd) : dir_(std::move(dir)), listen_fd_(listen_fd) {}
  ~Supervisor() {
    if (stub_fd_ >= 0) ::close(stub_fd_);
  }
  int Run();

 private:
  std::string Path(const char* file) const { return dir_ + "/" + file; }
  Status StartJob();
  void OnLine(OutputStream stream, std::string_view text);
  void OnExit(const ExitInfo& info);
  Status RecordExitLocked(const Exit& e);
  void Accept();
  void ReadClient();
  void HandleOp(const Json& op);
  // A warm box's job arrives: hands it to the stub.
  void GoLocked(const Json& op);
  void SendLocked(const std::string& raw);
  void ReplayLocked(int64_t from);
  void EnforceLocked(int64_t now);
  void SetFrozenLocked(bool frozen);
  void KillJobLocked();
  // Alive: heard from lately, and still connected, or not connected yet (the agent that
  // started us connects right after).
  bool AgentAliveLocked(int64_t now) const {
    if (now - last_word_ >= spec_.agent_silence_ms) return false;
    return (client_fd_ >= 0 && !client_dead_) || !had_client_;
  }
  int64_t NextDeadlineLocked() const;

  std::string dir_;  // main thread writes it (at `go`) under mu_; others read it under mu_
  const int listen_fd_;
  int wake_fd_ = -1;
  Spec spec_;
  std::unique_ptr<AttemptCgroup> cgroup_;
  std::unique_ptr<Process> proc_;
  std::string inbuf_;  // main thread only

  std::mutex mu_;
  // Guarded by mu_.
  int client_fd_ = -1;        // the attached agent; closed only by the main thread
  bool client_dead_ = false;  // a send failed: shut down, the main thread closes it
  bool attached_ = false;     // the client asked for the output: it gets events from now on
  bool had_client_ = false;   // an agent connected once
  int out_fd_ = -1;
  int64_t out_bytes_ = 0;
  bool out_full_ = false;
  int64_t next_seq_ = 1;
  std::optional<Exit> exit_;
  bool frozen_ = false;
  bool terminating_ = false;
  bool fenced_ = false;
  bool killed_ = false;      // SIGKILLed: never frozen again, or the kill could be held up
  bool warm_ = false;        // a warm box waiting for its job
  bool warm_ready_ = false;  // its stub said it is ready
  int stub_fd_ = -1;         // the warm stub's stdin, until `go`
  int64_t last_word_ = 0;    // when the agent last said anything (MonotonicMs)
};

Status Supervisor::StartJob() {
  ProcessSpec ps = spec_.process;
  if (spec_.cgroups.layout != CgroupSupport::Layout::kNone) {
    auto cg = AttemptCgroup::Open(spec_.cgroups, spec_.attempt_id);
    if (!cg.ok()) return Status::Internal("cannot open its cgroup: " + cg.status().message());
    cgroup_ = std::move(*cg);
    ps.join_cgroup_fds = cgroup_->procs_fds();
  }
  int stub[2] = {-1, -1};
  if (spec_.warm) {
    // Built only with CPU time nobody else wants: a box is built while other jobs start, and
    // must not slow them. The monitor thread Start creates, and the box, inherit the policy;
    // `go` restores the normal one before the job runs.
    if (::pipe2(stub, O_CLOEXEC) != 0) {
      return Status::Internal(std::string("pipe2: ") + std::strerror(errno));
    }
    ps.script = kWarmStub;
    ps.stdin_fd = stub[0];
    std::lock_guard<std::mutex> lock(mu_);
    warm_ = true;  // before the stub can print its ready line
    SetPolicy(0, SCHED_IDLE);
  }
  auto proc = Process::Start(
      ps, [this](OutputStream s, std::string_view line) { OnLine(s, line); },
      [this](const ExitInfo& info) { OnExit(info); });
  if (spec_.warm) SetPolicy(0, SCHED_OTHER);
  if (stub[0] >= 0) ::close(stub[0]);
  if (!proc.ok()) {
    if (stub[1] >= 0) ::close(stub[1]);
    return proc.status();
  }
  std::lock_guard<std::mutex> lock(mu_);
  proc_ = std::move(*proc);
  stub_fd_ = stub[1];
  return Status::Ok();
}

void Supervisor::OnLine(OutputStream stream, std::string_view text) {
  std::lock_guard<std::mutex> lock(mu_);
  if (warm_ && !warm_ready_ && stream == OutputStream::kStdout && text == kWarmReady) {
    warm_ready_ = true;  // the box is built: its stub says so before it waits for the job
    SendLocked(kReadyEvent);
    return;
  }
  proto::LogEntry e;
  e.seq = next_seq_++;
  e.stream = stream == OutputStream::kStdout ? "stdout" : "stderr";
  e.ts_ms = RealClock::Get()->NowMillis();
  e.text = std::string(text);
  std::string raw = DumpJson(LineEvent(e)) + "\n";
  if (!out_full_ && out_bytes_ + static_cast<int64_t>(raw.size()) > spec_.max_output_bytes) {
    out_full_ = true;
    Say("output beyond %lld bytes is sent live only, not kept for a restarted agent",
        static_cast<long long>(spec_.max_output_bytes));
  }
  if (!out_full_) {
    // One write(2) per line on an O_APPEND fd: a reader never sees half a line mixed in.
    ssize_t n = ::write(out_fd_, raw.data(), raw.size());
    if (n == static_cast<ssize_t>(raw.size())) {
      out_bytes_ += n;
    } else {
      out_full_ = true;
      Say("cannot write %s (%s): output is sent live only from here", kOutputFile,
          n < 0 ? std::strerror(errno) : "short write");
    }
  }
  SendLocked(raw);
}

void Supervisor::OnExit(const ExitInfo& info) {
  std::lock_guard<std::mutex> lock(mu_);
  Exit e;
  e.info = info;
  e.fenced = fenced_;
  if (cgroup_) {
    auto oom = cgroup_->OomKilled();
    e.out_of_memory = oom.ok() && *oom;
    // The leader is gone; so is everything it started, even what left its process group.
    (void)cgroup_->KillAll();
  }
  (void)RecordExitLocked(e);
  uint64_t one = 1;
  ssize_t ignored = ::write(wake_fd_, &one, sizeof one);
  (void)ignored;
}

Status Supervisor::RecordExitLocked(const Exit& e) {
  exit_ = e;
  // Written after every line (which went out in write(2)s before this): a reader that finds
  // the exit finds all the output. Not fsynced: after a reboot nothing here means anything.
  Status s =
      WriteFileAtomic(Path(kExitFile), DumpJson(ToJson(e)) + "\n", 0600, Durability::kProcessCrash);
  if (!s.ok()) Say("cannot record the exit: %s", s.message().c_str());
  SendLocked(DumpJson(ToJson(e)) + "\n");
  return s;
}

void Supervisor::SendLocked(const std::string& raw) {
  if (client_fd_ < 0 || client_dead_ || !attached_) return;
  for (size_t off = 0; off < raw.size();) {
    ssize_t n = ::send(client_fd_, raw.data() + off, raw.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // Gone, or not reading for kSendTimeoutMs. The main thread polls this fd, so it closes it.
      Say("the agent is not reading (%s): detached; it replays from the file when it is back",
          n < 0 ? std::strerror(errno) : "closed");
      ::shutdown(client_fd_, SHUT_RDWR);
      client_dead_ = true;
      return;
    }
    off += static_cast<size_t>(n);
  }
}

void Supervisor::ReplayLocked(int64_t from) {
  std::ifstream in(Path(kOutputFile), std::ios::binary);
  std::string line;
  while (!client_dead_ && std::getline(in, line)) {
    auto j = ParseJson(line);
    if (!j.ok()) continue;
    auto e = LineFromJson(*j);
    if (e.ok() && e->seq > from) SendLocked(line + "\n");
  }
}

void Supervisor::Accept() {
  int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  timeval tv{kSendTimeoutMs / 1000, (kSendTimeoutMs % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::lock_guard<std::mutex> lock(mu_);
  // One agent at a time: the newest connection is the agent now.
  if (client_fd_ >= 0) ::close(client_fd_);
  client_fd_ = fd;
  had_client_ = true;
  client_dead_ = false;
  attached_ = false;
  last_word_ = MonotonicMs();
  inbuf_.clear();
}

void Supervisor::ReadClient() {
  char buf[4096];
  ssize_t n = ::read(client_fd_, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    std::lock_guard<std::mutex> lock(mu_);
    ::close(client_fd_);
    client_fd_ = -1;
    client_dead_ = false;
    attached_ = false;
    return;
  }
  inbuf_.append(buf, static_cast<size_t>(n));
  for (size_t nl; (nl = inbuf_.find('\n')) != std::string::npos;) {
    std::string line = inbuf_.substr(0, nl);
    inbuf_.erase(0, nl + 1);
    auto op = ParseJson(line);
    if (op.ok() && op->is_object()) HandleOp(*op);
  }
  if (inbuf_.size() > kMaxInput) {
    std::lock_guard<std::mutex> lock(mu_);
    Say("dropping a connection that sent a line over %zu bytes", kMaxInput);
    ::shutdown(client_fd_, SHUT_RDWR);
    client_dead_ = true;
    inbuf_.clear();
  }
}

void Supervisor::HandleOp(const Json& op) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = MonotonicMs();
  last_word_ = now;
  // Never json::value here: it throws on a field of the wrong type.
  auto op_name = GetStringOr(op, "op", "");
  const std::string what = op_name.ok() ? *op_name : "";
  auto num = [&](const char* key, int64_t fallback) {
    auto it = op.find(key);
    return it != op.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
  };
  if (what == "attach") {
    attached_ = true;
    if (proc_) SendLocked(DumpJson(Json{{"ev", "started"}, {"pid", proc_->pid()}}) + "\n");
    ReplayLocked(num("from", 0));
    if (frozen_) SendLocked(kFrozenEvent);
    if (warm_ && warm_ready_) SendLocked(kReadyEvent);
    if (exit_) SendLocked(DumpJson(ToJson(*exit_)) + "\n");
  } else if (what == "terminate") {
    if (!proc_ || exit_) return;
    terminating_ = true;
    SetFrozenLocked(false);  // a frozen job gets its SIGTERM and grace period like any other
    proc_->Terminate(std::chrono::milliseconds(std::max<int64_t>(0, num("grace_ms", 10000))));
  } else if (what == "kill") {
    KillJobLocked();
  } else if (what == "go") {
    GoLocked(op);
  } else if (what == "lease") {
    spec_.lease_until = num("until", spec_.lease_until);
    spec_.kill_at = num("kill_at", spec_.kill_at);
    if (frozen_ && now < spec_.lease_until) SetFrozenLocked(false);
  }
  // "ping" and anything else: the agent is alive, which last_word_ now says.
}

void Supervisor::GoLocked(const Json& op) {
  if (!warm_ || !proc_ || exit_) return;  // not warm (any more): a repeated `go` is a no-op
  auto dir = GetString(op, "dir");
  auto attempt = GetString(op, "attempt_id");
  auto cwd = GetString(op, "cwd");
  auto script = GetString(op, "script");
  auto env = op.find("env");
  if (!dir.ok() || !attempt.ok() || !cwd.ok() || !script.ok() || env == op.end() ||
      !env->is_object()) {
    Say("ignoring a malformed go");
    return;
  }
  std::map<std::string, std::string> vars;
  for (const auto& [k, v] : env->items()) {
    if (v.is_string()) vars[k] = v.get<std::string>();
  }
  warm_ = false;
  dir_ = *dir;  // the agent renamed our directory (our open files and socket moved with it)
  spec_.attempt_id = *attempt;
  if (cgroup_) {
    // Renamed too, with the attempt's limits written: reopened by its new name.
    auto cg = AttemptCgroup::Open(spec_.cgroups, spec_.attempt_id);
    if (!cg.ok()) {
      Say("cannot open the job's cgroup: %s", cg.status().message().c_str());
      KillJobLocked();
      return;
    }
    cgroup_ = std::move(*cg);
  }
  auto num = [&](const char* key, int64_t fallback) {
    auto v = GetIntOr(op, key, fallback);
    return v.ok() ? *v : fallback;
  };
  // The job runs at the normal priority, and so do our threads that carry its output.
  for (pid_t p : ProcessTree(proc_->pid())) SetPolicy(p, SCHED_OTHER);
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    SetPolicy(static_cast<pid_t>(std::atoi(task.path().filename().c_str())), SCHED_OTHER);
  }
  next_seq_ = std::max(next_seq_, num("first_seq", 1));
  spec_.lease_until = num("until", kNever);
  spec_.kill_at = num("kill_at", kNever);
  const std::string input = WarmStubInput(*cwd, *script, vars);
  // The stub reads as we write, so a job larger than the pipe's buffer goes through too.
  for (size_t off = 0; off < input.size();) {
    ssize_t n = ::write(stub_fd_, input.data() + off, input.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Say("cannot hand the job to the box: %s", std::strerror(errno));
      break;
    }
    off += static_cast<size_t>(n);
  }
  ::close(stub_fd_);
  stub_fd_ = -1;
}

void Supervisor::SetFrozenLocked(bool frozen) {
  if (frozen_ == frozen || !proc_ || exit_ || (frozen && (killed_ || !proc_->running()))) {
    return;
  }
  Status s = cgroup_ ? (frozen ? cgroup_->Freeze() : cgroup_->Thaw())
             : ::kill(-proc_->pgid(), frozen ? SIGSTOP : SIGCONT) == 0
                 ? Status::Ok()
                 : Status::Internal(std::strerror(errno));
  if (!s.ok()) {
    Say("cannot %s the job: %s", frozen ? "freeze" : "thaw", s.message().c_str());
    return;
  }
  frozen_ = frozen;
  Say(frozen ? "lease ran out: job frozen" : "lease renewed: job thawed");
  SendLocked(frozen ? kFrozenEvent : kThawedEvent);
}

void Supervisor::KillJobLocked() {
  if (!proc_ || exit_) return;
  killed_ = true;
  // KillAll freezes, kills and thaws: it reaches frozen processes and ones that left the group.
  if (cgroup_) (void)cgroup_->KillAll();
  proc_->Kill();
  if (!cgroup_ && frozen_) ::kill(-proc_->pgid(), SIGCONT);  // SIGKILL is pending on them
  frozen_ = false;
}

void Supervisor::EnforceLocked(int64_t now) {
  if (!proc_ || exit_) return;
  if (warm_) {
    // A box nobody will use: the agent that wanted it is gone (its connection closed, or it
    // never came). Silence alone is not enough here: a box built at idle priority on a busy
    // machine may take longer than that to get ready, and a job-less box harms nobody.
    const bool connected = client_fd_ >= 0 && !client_dead_;
    if (!connected && (had_client_ || now - last_word_ >= spec_.agent_silence_ms)) {
      KillJobLocked();
    }
    return;
  }
  if (!frozen_ && !terminating_ && now >= spec_.lease_until) SetFrozenLocked(true);
  // While the agent is alive it speaks for the server (a server outage must not kill work:
  // it thaws or kills on the server's word). Without it nobody will, and the server may
  // place the job elsewhere once its grace has run: the job must be gone before that.
  if (!fenced_ && now >= spec_.kill_at && !AgentAliveLocked(now)) {
    fenced_ = true;
    Say("lease ran out and no agent speaks for the job: killed");
    KillJobLocked();
  }
}

int64_t Supervisor::NextDeadlineLocked() const {
  int64_t next = MonotonicMs() + 1000;
  if (!frozen_ && !terminating_) next = std::min(next, spec_.lease_until);
  if (!fenced_) {
    // kill_at matters once the agent is silent too: whichever comes later.
    next = std::min(next, std::max(spec_.kill_at, last_word_ + spec_.agent_silence_ms));
  }
  return next;
}

int Supervisor::Run() {
  out_fd_ =
      ::open(Path(kOutputFile).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  if (out_fd_ < 0) Say("cannot create %s: %s", kOutputFile, std::strerror(errno));
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  Status started = Status::Ok();
  {
    std::ifstream in(Path(kSpecFile), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    auto j = ParseJson(text.str());
    auto spec = j.ok() ? SpecFromJson(*j) : Result<Spec>(j.status());
    if (!in || !spec.ok()) {
      started = Status::InvalidArgument(std::string("cannot read ") + kSpecFile + ": " +
                                        (spec.ok() ? "unreadable" : spec.status().message()));
    } else {
      spec_ = std::move(*spec);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    next_seq_ = spec_.first_seq;
    last_word_ = MonotonicMs();
  }
  if (started.ok()) started = StartJob();
  if (!started.ok()) {
    Say("the job could not start: %s", started.message().c_str());
    std::lock_guard<std::mutex> lock(mu_);
    Exit e;
    e.error = started.message();
    (void)RecordExitLocked(e);
  }
  for (;;) {
    int client;
    int64_t timeout_ms;
    {
      std::lock_guard<std::mutex> lock(mu_);
      EnforceLocked(MonotonicMs());
      if (exit_) break;
      client = client_fd_;
      timeout_ms = std::clamp<int64_t>(NextDeadlineLocked() - MonotonicMs(), 0, 1000);
    }
    pollfd fds[3] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}, {client, POLLIN, 0}};
    int n = ::poll(fds, client >= 0 ? 3 : 2, static_cast<int>(timeout_ms));
    if (n < 0 && errno != EINTR) {
      Say("poll: %s", std::strerror(errno));
      break;
    }
    if (n <= 0) continue;
    if (fds[1].revents) {
      uint64_t v;
      ssize_t ignored = ::read(wake_fd_, &v, sizeof v);
      (void)ignored;
    }
    if (client >= 0 && fds[2].revents) ReadClient();
    if (fds[0].revents & POLLIN) Accept();
  }
  bool recorded;
  {
    std::lock_guard<std::mutex> lock(mu_);
    recorded = exit_.has_value();
    if (!recorded) KillJobLocked();  // never leave a job nobody supervises
  }
  proc_.reset();  // joins the monitor thread: the exit callback has run
  {
    std::lock_guard<std::mutex> lock(mu_);
    recorded = exit_.has_value() && ::access(Path(kExitFile).c_str(), F_OK) == 0;
    if (client_fd_ >= 0) ::close(client_fd_);
    client_fd_ = -1;
  }
  ::unlink(Path(kSocketFile).c_str());
  if (out_fd_ >= 0) ::close(out_fd_);
  ::close(wake_fd_);
  return recorded ? 0 : 1;
}

}  // namespace

int RunSupervisor(const std::string& dir, int listen_fd) {
  Supervisor s(dir, listen_fd);
  return s.Run();
}

}  // namespace sluice::supervisor
