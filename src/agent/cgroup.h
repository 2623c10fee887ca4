// An attempt's control groups: the CPUs, memory and process count it was allocated, enforced
// by the kernel, and the two things only a cgroup can do for a whole process tree however it
// forks or double-forks: freeze it (fencing, issue 11) and tell whether the kernel's OOM killer
// struck inside it (the exit reason `out of memory`).
//
// Both layouts are handled: cgroup v2 (one tree, `memory.max`, `cpu.max`, `pids.max`,
// `cgroup.freeze`, `memory.events`) and v1 (one tree per controller under /sys/fs/cgroup/
// {memory,cpu,pids,freezer}, as on our test machines). Each attempt gets `sluice/<attempt id>`
// in every tree it uses. The root is a parameter so tests can point it at a plain directory.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace sluice {

struct CgroupLimits {
  int64_t memory_bytes = 0;  // 0: no limit
  double cpus = 0;           // CPU time as a number of CPUs (cfs quota / cpu.max); 0: no limit
  int64_t max_pids = 0;      // 0: no limit
};

// What the host offers, found once at agent start.
struct CgroupSupport {
  enum class Layout { kNone, kV1, kV2 };
  Layout layout = Layout::kNone;
  std::string root;  // "/sys/fs/cgroup"
  bool memory = false, cpu = false, pids = false, freezer = false;
  std::string why_not;  // when something is missing: what and why, for the agent's start line

  bool usable() const { return layout != Layout::kNone && memory && pids && freezer; }
  std::string Describe() const;  // "cgroup v1 (memory, cpu, pids, freezer)" or why_not
};

// Looks at `root` (normally /sys/fs/cgroup): which layout, which controllers are there and
// writable (by creating and removing `sluice/.probe-<pid>` in each).
CgroupSupport DetectCgroups(const std::string& root = "/sys/fs/cgroup");

// Removes attempt cgroups that are empty and older than `min_age_s` (left by agents killed with
// -9 whose data dir is gone). A cgroup with processes cannot be removed, and the age keeps it
// from touching one another agent created a moment ago and is about to join. Returns how many
// were removed.
int RemoveStaleCgroups(const CgroupSupport& support, int64_t min_age_s);

class AttemptCgroup {
 public:
  // Creates `sluice/<name>` in every controller `support` has, and writes the limits. On error
  // nothing is left behind.
  static Result<std::unique_ptr<AttemptCgroup>> Create(const CgroupSupport& support,
                                                       const std::string& name,
                                                       const CgroupLimits& limits);
  // An existing one (made by Create in another process, or before an agent restart), ready to
  // be joined as after Create; NotFound when it is gone.
  static Result<std::unique_ptr<AttemptCgroup>> Open(const CgroupSupport& support,
                                                     const std::string& name);
  // Turns `from` (a cgroup a warm sandbox already runs in) into `to` with the attempt's limits:
  // v1 renames it in every tree (its processes stay where they are and come under the limits);
  // v2, which cannot rename, creates `to` and moves every process of `from` into it.
  static Result<std::unique_ptr<AttemptCgroup>> Adopt(const CgroupSupport& support,
                                                      const std::string& from,
                                                      const std::string& to,
                                                      const CgroupLimits& limits);
  ~AttemptCgroup();  // closes fds; never removes (Remove does, once the attempt is over)
  AttemptCgroup(const AttemptCgroup&) = delete;
  AttemptCgroup& operator=(const AttemptCgroup&) = delete;

  // `cgroup.procs` of every tree, opened O_WRONLY|O_CLOEXEC: a child writes "0" to each before
  // exec (async-signal-safe), so the job is inside from its first instruction.
  const std::vector<int>& procs_fds() const { return procs_fds_; }

  // Whether the kernel's OOM killer killed a process in this cgroup.
  Result<bool> OomKilled() const;
  // The pids in the cgroup now (every tree holds the same processes; the first is read).
  Result<std::vector<int>> Pids() const;
  Status Freeze();
  Status Thaw();
  Result<bool> Frozen() const;
  // SIGKILL to every process inside, with nothing able to fork meanwhile (cgroup.kill in v2;
  // freeze, kill, thaw in v1).
  Status KillAll();
  // Removes the directories; FailedPrecondition while processes are left.
  Status Remove();

 private:
  AttemptCgroup(CgroupSupport support, std::vector<std::string> dirs);
  // This attempt's directory in `tree` ("memory", "freezer"); v2 has one for all. "" if absent.
  std::string TreeDir(const char* tree) const;

  CgroupSupport support_;
  std::vector<std::string> dirs_;  // one per tree (v2: one)
  std::vector<int> procs_fds_;
};

}  // namespace sluice
