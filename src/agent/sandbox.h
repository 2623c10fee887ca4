// The box a job runs in (issue 11 item 3; docs/design-notes.md "Job sandbox"): bubblewrap from
// Debian gives each attempt its own mount, PID and IPC namespaces, and the agent (root) starts
// it as an unprivileged uid of its own. Inside, the job sees a read-only system (/usr, /etc,
// /opt and the /bin, /lib links), its work dir and checkpoint dir read-write, a private /tmp,
// /proc of its own PID namespace, and of the GPU device nodes only those it was given plus
// nvidiactl and nvidia-uvm. The agent's and server's data dirs, tokens, other jobs' files and
// other processes are not in its mount namespace at all.
//
// A root agent runs bwrap as root (so it can bind the job's dirs wherever the data dir is) and
// bwrap runs `setpriv` inside the box, which drops to the job's uid before anything of the job
// runs. An agent that is not root runs bwrap unprivileged, in a user namespace, and jobs keep its
// uid (the box still hides everything else).
//
// This file builds the command line; the agent runs it (agent/process.h).
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace sluice {

struct SandboxSupport {
  bool usable = false;
  std::string bwrap;     // absolute path of the bwrap binary
  bool own_uid = false;  // the agent is root: jobs run as uids of their own (else as the agent's)
  std::string why_not;   // when !usable: what is missing, for the agent's start line
  std::string Describe() const;
};

// What one attempt's box contains.
struct SandboxSpec {
  std::string workdir;         // bound read-write at the same path; the job starts here
  std::string checkpoint_dir;  // bound read-write at the same path ($SLUICE_CHECKPOINT_DIR)
  std::vector<int> gpus;       // GPU indices it was given: /dev/nvidia<i> for each
  // Where the GPU device nodes are found on the host (tests point this at a directory with
  // mknod'ed fakes); inside they always appear under /dev.
  std::string host_dev_dir = "/dev";
  // Paths that must stay out of sight even if they lie under a directory that is bound (a join
  // token in /etc, a data dir under /opt): each is covered with an empty tmpfs (directories) or
  // /dev/null (files). Paths not under a bound directory are simply absent.
  std::vector<std::string> hidden;
  // The uid (and gid) the job runs as, with no supplementary groups, no capabilities and no way
  // to gain any (no_new_privs); -1: the agent's own (an agent that is not root).
  int64_t uid = -1;
};

// The directories bound read-only from the host; everything else is absent.
const std::vector<std::string>& SandboxSystemDirs();

// The argv prefix that runs a command inside the box: "bwrap ... --". The command must restore
// SIGTERM, SIGINT and SIGHUP (the agent starts bwrap with them ignored so that its own monitor
// process survives the group's SIGTERM and the job's grace period runs): the prefix ends with
// `/usr/bin/env --default-signal=...` for that.
std::vector<std::string> SandboxArgv(const SandboxSupport& support, const SandboxSpec& spec);

// Finds bwrap and checks that it can build a box here (user namespaces may be disabled, or the
// agent itself may run in a container that forbids them). `probe` runs a trivial command behind
// the given argv prefix and returns its exit code or an error; the agent runs it as a job would
// run. `spec` names existing directories.
using SandboxProbe = std::function<Result<int>(const std::vector<std::string>& argv)>;
SandboxSupport DetectSandbox(bool own_uid, const SandboxSpec& spec, const SandboxProbe& probe);

// The uid (and gid) the attempt in `slot` runs as: first_uid + slot.
inline uid_t SandboxUid(uid_t first_uid, int slot) { return first_uid + static_cast<uid_t>(slot); }

// Makes `dir` and everything in it belong to uid:gid (lchown; never follows links). The agent
// unpacks work dirs and restores checkpoints as root, then hands them to the job's uid.
Status ChownTree(const std::string& dir, uid_t uid, gid_t gid);

}  // namespace sluice
