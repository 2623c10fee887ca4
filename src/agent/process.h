// Process: one job's shell, run in its own session and process group with its output streamed
// as lines. Linux only (pidfd, prctl). This is the agent's executor primitive: everything the
// job starts lives in one process group, so preemption (SIGTERM -> grace -> SIGKILL, DESIGN.md §6)
// and cleanup reach every descendant that did not deliberately leave the group.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"

namespace sluice {

struct ProcessSpec {
  // Run as `/bin/bash -c script`; the script decides about `set -e` and friends.
  std::string script;
  // Working directory of the child; must exist (Start fails otherwise).
  std::string cwd;
  // The COMPLETE environment of the child: nothing is inherited from the agent implicitly.
  std::map<std::string, std::string> env;
  // `cgroup.procs` files (AttemptCgroup::procs_fds) the child joins before exec, so the job is
  // inside its cgroups from its first instruction. Not owned: they stay open for the caller.
  std::vector<int> join_cgroup_fds;
  // When non-empty, what runs is `wrapper... /bin/bash -c script`, wrapper[0] an absolute path:
  // the sandbox (agent/sandbox.h). The wrapper's own processes are in the job's group, so the
  // child starts it with SIGTERM, SIGINT and SIGHUP ignored (a group SIGTERM must not kill
  // bwrap's monitor before the job's grace period has run); the wrapper must give the job its
  // default dispositions back, as SandboxArgv does with `env --default-signal`.
  std::vector<std::string> wrapper;
  // The child's stdin; -1: /dev/null. Not owned: the caller closes its own copy after Start.
  int stdin_fd = -1;
};

enum class OutputStream { kStdout, kStderr };

struct ExitInfo {
  int exit_code = 0;  // 0..255, or 128+signal when killed by a signal
  int signal = 0;     // 0 if the process exited normally
  // "exit code 3" or "killed by signal 9 (SIGKILL)".
  std::string ToString() const;
};

// Longest line delivered to on_line; longer lines arrive in pieces of this size.
inline constexpr size_t kMaxLineBytes = 64 * 1024;

// How long the reader keeps draining the pipes after the group has been SIGKILLed. A daemonized
// grandchild (new session) that still holds the pipes must not hang the job forever.
inline constexpr std::chrono::milliseconds kDrainAfterKill{2000};

// Thread safety: all public methods may be called from any thread, except that the callbacks
// run on the Process's own monitor thread and must not call Wait() or destroy the Process.
// Callback order: all on_line calls (per stream in order) happen before the single on_exit.
class Process {
 public:
  using LineCallback = std::function<void(OutputStream, std::string_view line)>;
  using ExitCallback = std::function<void(const ExitInfo&)>;

  // Starts the child. Returns an error (and leaves no child behind) when the spec is unusable:
  // missing cwd (NotFound), bash not executable, fork/pipe failure. Either callback may be empty.
  static Result<std::unique_ptr<Process>> Start(const ProcessSpec& spec, LineCallback on_line,
                                                ExitCallback on_exit);

  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  // Kills the group if the shell is still running and joins the monitor thread (bounded by
  // kDrainAfterKill).
  ~Process();

  pid_t pid() const { return pid_; }
  pid_t pgid() const { return pid_; }  // the shell leads its own group

  // SIGTERM to the whole group now; SIGKILL to the group after `grace` if the shell has not
  // exited by then. Does not block: the grace timer runs on the monitor thread. A later call
  // can only shorten the deadline.
  void Terminate(std::chrono::milliseconds grace);
  // SIGKILL to the whole group.
  void Kill();
  // True until the shell (the group leader) has exited.
  bool running() const;
  // Blocks until the shell has exited, its output is delivered and on_exit has returned.
  ExitInfo Wait();

 private:
  Process(LineCallback on_line, ExitCallback on_exit);

  // Monitor thread body: forks the child (so PR_SET_PDEATHSIG is tied to a thread that lives as
  // long as the job), then reads output, reaps, and runs the grace timer.
  void Run(const ProcessSpec& spec, std::promise<Status>* started);
  void Monitor();
  // Sends `sig` to the group if the leader has not been reaped. Requires mu_ held.
  void SignalGroupLocked(int sig);
  void Wake();

  // Constant after construction / Start.
  const LineCallback on_line_;
  const ExitCallback on_exit_;
  pid_t pid_ = -1;
  int out_fd_ = -1;  // read ends; owned by the monitor thread after Start
  int err_fd_ = -1;
  int wake_fd_ = -1;  // eventfd that wakes the monitor for Terminate/Kill
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  // Guarded by mu_.
  bool reaped_ = false;  // leader reaped: its pid/pgid may be reused, never signal it again
  bool leader_exited_ = false;
  bool done_ = false;  // on_exit has returned
  ExitInfo exit_info_;
  // Steady-clock deadline for SIGKILL after Terminate; max() when none is pending.
  std::chrono::steady_clock::time_point kill_deadline_ =
      std::chrono::steady_clock::time_point::max();
};

// Sends `signal` to every process in group `pgid` (used at agent start to clean up groups left
// by a previous agent instance). NotFound when no such group exists.
Status KillProcessGroup(pid_t pgid, int signal);

}  // namespace sluice
