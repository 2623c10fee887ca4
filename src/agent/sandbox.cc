#include "agent/sandbox.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace sluice {
namespace fs = std::filesystem;

namespace {

// True when `path` is `dir` or below it (both absolute, no trailing slash on dir).
bool Under(const std::string& path, const std::string& dir) {
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         path[dir.size()] == '/');
}

std::string FindBwrap() {
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  path += ":/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    start = end + 1;
    if (dir.empty() || dir[0] != '/') continue;  // a relative PATH entry is not trusted
    std::string candidate = dir + "/bwrap";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

}  // namespace

std::string SandboxSupport::Describe() const {
  if (!usable) return "none (" + why_not + ")";
  return "bubblewrap (" + bwrap + "): own mount, PID and IPC namespaces; " +
         (own_uid ? std::string("each job as a uid of its own")
                  : std::string("jobs as the agent's uid (the agent is not root)"));
}

const std::vector<std::string>& SandboxSystemDirs() {
  // /sys read-only: NVML, PyTorch and CPU-count logic read it; nothing in it is writable there.
  // /run/systemd/resolve: /etc/resolv.conf often links into it, and DNS must keep working.
  static const std::vector<std::string> dirs = {"/usr", "/etc", "/opt", "/sys",
                                                "/run/systemd/resolve"};
  return dirs;
}

std::vector<std::string> SandboxArgv(const SandboxSupport& support, const SandboxSpec& spec) {
  std::vector<std::string> a = {support.bwrap,
                                // bwrap's parent is the agent's monitor thread: if the agent
                                // dies, so does the box, and with its PID namespace everything
                                // the job started.
                                "--die-with-parent", "--unshare-pid", "--unshare-ipc",
                                "--unshare-cgroup-try"};
  std::error_code ec;
  for (const auto& dir : SandboxSystemDirs()) {
    if (fs::is_directory(dir, ec)) a.insert(a.end(), {"--ro-bind", dir, dir});
  }
  // Merged /usr: /bin, /lib... are links into /usr on Debian 12; older layouts have real dirs.
  for (const char* top : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    if (fs::is_symlink(top, ec)) {
      std::string target = fs::read_symlink(top, ec).string();
      if (!ec) a.insert(a.end(), {"--symlink", target, top});
    } else if (fs::is_directory(top, ec)) {
      a.insert(a.end(), {"--ro-bind", top, top});
    }
  }
  // Sticky and world-writable like the host's: bwrap (root) creates them for a job of another uid.
  // /dev/shm too: POSIX semaphores and shared memory live there (Python multiprocessing locks,
  // PyTorch DataLoader workers, NCCL), and bwrap's /dev has it read-only for the job's uid.
  a.insert(a.end(),
           {"--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm", "--perms",
            "1777", "--tmpfs", "/tmp", "--perms", "1777", "--tmpfs", "/var/tmp"});
  // GPUs: only the ones given, plus the control nodes every CUDA process opens.
  std::vector<std::string> nodes;
  for (int g : spec.gpus) nodes.push_back("nvidia" + std::to_string(g));
  if (!spec.gpus.empty()) {
    for (const char* n : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}) nodes.push_back(n);
  }
  for (const auto& n : nodes) {
    a.insert(a.end(), {"--dev-bind-try", spec.host_dev_dir + "/" + n, "/dev/" + n});
  }
  // Before the job's own dirs, which may lie inside a hidden one (the agent's data dir).
  for (const auto& h : spec.hidden) {
    bool bound = false;
    for (const auto& dir : SandboxSystemDirs()) bound = bound || Under(h, dir);
    if (!bound) continue;  // not in the box at all
    if (fs::is_directory(h, ec)) {
      a.insert(a.end(), {"--tmpfs", h});
    } else if (fs::exists(h, ec)) {
      a.insert(a.end(), {"--ro-bind", "/dev/null", h});
    }
  }
  // bwrap would create the dirs above a bind destination 0700 and root's, which the job's uid
  // could not pass through: each is made 0711 first (passable, not listable).
  std::vector<std::string> made = {"/", "/tmp", "/var/tmp"};
  for (const auto& dir : {spec.workdir, spec.checkpoint_dir}) {
    if (dir.empty()) continue;
    for (size_t slash = dir.find('/', 1); slash != std::string::npos;
         slash = dir.find('/', slash + 1)) {
      std::string up = dir.substr(0, slash);
      if (std::find(made.begin(), made.end(), up) != made.end()) continue;
      made.push_back(up);
      a.insert(a.end(), {"--perms", "0711", "--dir", up});
    }
    a.insert(a.end(), {"--bind", dir, dir});
  }
  a.insert(a.end(), {"--chdir", spec.workdir, "--"});
  if (spec.uid >= 0) {
    std::string id = std::to_string(spec.uid);
    a.insert(a.end(), {"/usr/bin/setpriv", "--reuid", id, "--regid", id, "--clear-groups",
                       "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"});
  }
  a.insert(a.end(), {"/usr/bin/env", "--default-signal=SIGTERM,SIGINT,SIGHUP"});
  return a;
}

SandboxSupport DetectSandbox(bool own_uid, const SandboxSpec& spec, const SandboxProbe& probe) {
  SandboxSupport s;
  s.own_uid = own_uid;
  s.bwrap = FindBwrap();
  if (s.bwrap.empty()) {
    s.why_not = "bwrap not found on PATH (Debian package bubblewrap)";
    return s;
  }
  auto rc = probe(SandboxArgv(s, spec));
  if (!rc.ok()) {
    s.why_not = "bwrap could not start: " + rc.status().message();
  } else if (*rc != 0) {
    s.why_not = "bwrap cannot build a sandbox here (exit code " + std::to_string(*rc) +
                "; are unprivileged user namespaces disabled?)";
  } else {
    s.usable = true;
  }
  return s;
}

Status ChownTree(const std::string& dir, uid_t uid, gid_t gid) {
  if (lchown(dir.c_str(), uid, gid) != 0) {
    return Status::Internal("chown " + dir + ": " + std::generic_category().message(errno));
  }
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (lchown(it->path().c_str(), uid, gid) != 0) {
      return Status::Internal("chown " + it->path().string() + ": " +
                              std::generic_category().message(errno));
    }
  }
  if (ec) return Status::Internal("walking " + dir + ": " + ec.message());
  return Status::Ok();
}

}  // namespace sluice
