#include "agent/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

namespace sluice {
namespace {

namespace fs = std::filesystem;
using Layout = CgroupSupport::Layout;

constexpr char kParent[] = "sluice";
constexpr int64_t kCfsPeriodUs = 100000;

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

Result<std::string> ReadSmall(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read " + path + ": " + ErrnoText(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// cgroupfs files take one write(2) each; ofstream could split or buffer it. O_CREAT changes
// nothing on cgroupfs (its files exist or cannot be made) and lets tests use a plain directory.
int OpenForWrite(const std::string& path) {
  return open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
}

Status WriteSmall(const std::string& path, const std::string& value) {
  int fd = OpenForWrite(path);
  if (fd < 0) return Status::Internal("cannot open " + path + ": " + ErrnoText(errno));
  ssize_t n = write(fd, value.data(), value.size());
  int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    return Status::Internal("writing '" + value + "' to " + path + ": " + ErrnoText(err));
  }
  return Status::Ok();
}

// The value of `key` in a flat-keyed file ("oom_kill 3\n..."), or 0 when absent.
int64_t KeyedValue(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string k;
  int64_t v = 0;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return 0;
}

// Whether a child directory can be made (and removed) in `dir`: the agent has the rights.
bool CanCreateIn(const std::string& dir, std::string* why) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    *why = "cannot create " + dir + ": " + ec.message();
    return false;
  }
  std::string probe = dir + "/.probe-" + std::to_string(getpid());
  if (mkdir(probe.c_str(), 0755) != 0 && errno != EEXIST) {
    *why = "cannot create cgroups in " + dir + ": " + ErrnoText(errno);
    return false;
  }
  rmdir(probe.c_str());
  return true;
}

struct V1Tree {
  const char* name;
  bool CgroupSupport::*flag;
};
constexpr V1Tree kV1Trees[] = {{"memory", &CgroupSupport::memory},
                               {"cpu", &CgroupSupport::cpu},
                               {"pids", &CgroupSupport::pids},
                               {"freezer", &CgroupSupport::freezer}};

// Our parent directory in every tree `support` uses (v2: one).
std::vector<std::string> ParentDirs(const CgroupSupport& support) {
  std::vector<std::string> dirs;
  if (support.layout == Layout::kV2) {
    dirs.push_back(support.root + "/" + kParent);
  } else if (support.layout == Layout::kV1) {
    for (const auto& t : kV1Trees) {
      if (support.*(t.flag)) dirs.push_back(support.root + "/" + t.name + "/" + kParent);
    }
  }
  return dirs;
}

// The attempt's directories; the name comes from the server (assign) or from the agent's data
// dir (recovery), and must stay one level below our parent.
Result<std::vector<std::string>> AttemptDirs(const CgroupSupport& support,
                                             const std::string& name) {
  if (support.layout == Layout::kNone) return Status::FailedPrecondition(support.why_not);
  if (name.empty() || name.find('/') != std::string::npos || name[0] == '.') {
    return Status::InvalidArgument("bad cgroup name '" + name + "'");
  }
  std::vector<std::string> dirs = ParentDirs(support);
  for (auto& d : dirs) d += "/" + name;
  return dirs;
}

}  // namespace

std::string CgroupSupport::Describe() const {
  if (layout == Layout::kNone) return "no cgroups: " + why_not;
  std::string s = layout == Layout::kV2 ? "cgroup v2 (" : "cgroup v1 (";
  bool first = true;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    s += (first ? "" : ", ") + std::string(name);
    first = false;
  };
  add(memory, "memory");
  add(cpu, "cpu");
  add(pids, "pids");
  add(freezer, "freezer");
  s += ")";
  if (!why_not.empty()) s += "; " + why_not;
  return s;
}

CgroupSupport DetectCgroups(const std::string& root) {
  CgroupSupport s;
  s.root = root;
  std::error_code ec;
  // v1 (or hybrid, where the v1 trees hold the controllers): one directory per controller.
  if (fs::exists(root + "/memory/memory.limit_in_bytes", ec)) {
    s.layout = Layout::kV1;
    for (const auto& t : kV1Trees) {
      std::string why;
      if (fs::is_directory(root + "/" + t.name, ec) &&
          CanCreateIn(root + "/" + t.name + "/" + kParent, &why)) {
        s.*(t.flag) = true;
      } else if (!why.empty()) {
        s.why_not += (s.why_not.empty() ? "" : "; ") + why;
      } else {
        s.why_not += (s.why_not.empty() ? "" : "; ") + std::string("no ") + t.name + " hierarchy";
      }
    }
    return s;
  }
  auto controllers = ReadSmall(root + "/cgroup.controllers");
  if (!controllers.ok()) {
    s.why_not = "neither cgroup v1 nor v2 is mounted at " + root;
    return s;
  }
  s.layout = Layout::kV2;
  std::string why;
  if (!CanCreateIn(root + "/" + kParent, &why)) {
    s.why_not = why;
    s.layout = Layout::kNone;
    return s;
  }
  // Controllers must be enabled down to our parent for its children to have them.
  std::istringstream in(*controllers);
  std::string enable;
  for (std::string c; in >> c;) {
    if (c == "memory" || c == "cpu" || c == "pids") enable += (enable.empty() ? "+" : " +") + c;
  }
  for (const std::string& dir : {root, root + "/" + kParent}) {
    if (!enable.empty() && !WriteSmall(dir + "/cgroup.subtree_control", enable).ok()) {
      s.why_not = "cannot enable " + enable + " in " + dir + "/cgroup.subtree_control";
    }
  }
  auto enabled = ReadSmall(root + "/" + kParent + "/cgroup.subtree_control");
  std::istringstream on(enabled.ok() ? *enabled : "");
  for (std::string c; on >> c;) {
    if (!c.empty() && c[0] == '+') c.erase(0, 1);
    s.memory |= c == "memory";
    s.cpu |= c == "cpu";
    s.pids |= c == "pids";
  }
  s.freezer = true;  // cgroup.freeze is core in v2
  return s;
}

int RemoveStaleCgroups(const CgroupSupport& support, int64_t min_age_s) {
  const std::vector<std::string> parents = ParentDirs(support);
  const time_t now = time(nullptr);
  int removed = 0;
  for (const auto& parent : parents) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(parent, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("att-", 0) != 0 || !e.is_directory(ec)) continue;
      struct stat st {};
      if (stat(e.path().c_str(), &st) != 0 || now - st.st_mtime < min_age_s) continue;
      auto procs = ReadSmall(e.path().string() + "/cgroup.procs");
      if (!procs.ok() || procs->find_first_not_of(" \n") != std::string::npos) continue;
      // On cgroupfs the control files go with the directory; elsewhere (tests) remove them.
      if (rmdir(e.path().c_str()) == 0 || (fs::remove_all(e.path(), ec) > 0 && !ec)) ++removed;
    }
  }
  return removed;
}

AttemptCgroup::AttemptCgroup(CgroupSupport support, std::vector<std::string> dirs)
    : support_(std::move(support)), dirs_(std::move(dirs)) {}

AttemptCgroup::~AttemptCgroup() {
  for (int fd : procs_fds_) close(fd);
}

std::string AttemptCgroup::TreeDir(const char* tree) const {
  if (support_.layout == Layout::kV2) return dirs_.front();
  for (const auto& d : dirs_) {
    if (d.find(std::string("/") + tree + "/") != std::string::npos) return d;
  }
  return "";
}

// Writes `limits` into the attempt's directories, one per tree (v2: one).
static Status WriteLimits(const CgroupSupport& support, const std::vector<std::string>& dirs,
                          const CgroupLimits& limits) {
  std::vector<std::pair<std::string, std::string>> writes;
  const bool v2 = support.layout == Layout::kV2;
  for (const auto& d : dirs) {
    auto in = [&](const char* tree) {
      return v2 || d.find(std::string("/") + tree + "/") != std::string::npos;
    };
    if (limits.memory_bytes > 0 && support.memory && in("memory")) {
      writes.push_back({d + (v2 ? "/memory.max" : "/memory.limit_in_bytes"),
                        std::to_string(limits.memory_bytes)});
      // Without swap the limit is the limit; with it a job could spill past it unnoticed.
      if (v2 && std::filesystem::exists(d + "/memory.swap.max")) {
        writes.push_back({d + "/memory.swap.max", "0"});
      }
    }
    if (limits.cpus > 0 && support.cpu && in("cpu")) {
      auto quota = static_cast<int64_t>(std::llround(limits.cpus * kCfsPeriodUs));
      if (v2) {
        writes.push_back(
            {d + "/cpu.max", std::to_string(quota) + " " + std::to_string(kCfsPeriodUs)});
      } else {
        writes.push_back({d + "/cpu.cfs_period_us", std::to_string(kCfsPeriodUs)});
        writes.push_back({d + "/cpu.cfs_quota_us", std::to_string(quota)});
      }
    }
    if (limits.max_pids > 0 && support.pids && in("pids")) {
      writes.push_back({d + "/pids.max", std::to_string(limits.max_pids)});
    }
  }
  for (const auto& [path, value] : writes) SLUICE_RETURN_IF_ERROR(WriteSmall(path, value));
  return Status::Ok();
}

Result<std::unique_ptr<AttemptCgroup>> AttemptCgroup::Create(const CgroupSupport& support,
                                                             const std::string& name,
                                                             const CgroupLimits& limits) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> dirs, AttemptDirs(support, name));
  std::unique_ptr<AttemptCgroup> cg(new AttemptCgroup(support, dirs));
  auto undo = [&](Status st) -> Status {
    for (int fd : cg->procs_fds_) close(fd);
    cg->procs_fds_.clear();
    for (const auto& d : dirs) rmdir(d.c_str());
    return st;
  };
  for (const auto& d : dirs) {
    if (mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) {
      return undo(Status::Internal("cannot create cgroup " + d + ": " + ErrnoText(errno)));
    }
  }
  if (Status s = WriteLimits(support, dirs, limits); !s.ok()) return undo(s);
  for (const auto& d : dirs) {
    int fd = OpenForWrite(d + "/cgroup.procs");
    if (fd < 0) {
      return undo(Status::Internal("cannot open " + d + "/cgroup.procs: " + ErrnoText(errno)));
    }
    cg->procs_fds_.push_back(fd);
  }
  return cg;
}

Result<std::unique_ptr<AttemptCgroup>> AttemptCgroup::Open(const CgroupSupport& support,
                                                           const std::string& name) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> dirs, AttemptDirs(support, name));
  std::error_code ec;
  for (const auto& d : dirs) {
    if (!fs::is_directory(d, ec)) return Status::NotFound("no cgroup " + d);
  }
  std::unique_ptr<AttemptCgroup> cg(new AttemptCgroup(support, dirs));
  for (const auto& d : dirs) {  // the supervisor joins its job to a cgroup the agent made
    int fd = OpenForWrite(d + "/cgroup.procs");
    if (fd < 0) return Status::Internal("cannot open " + d + "/cgroup.procs: " + ErrnoText(errno));
    cg->procs_fds_.push_back(fd);
  }
  return cg;
}

// cgroup v2 cannot rename a cgroup (the kernel's rename is v1's alone: EPERM on a v2 host), so
// there the warm box's processes move: a new cgroup with the attempt's limits, every pid of the
// old one written into it, the old one removed. The box is idle (its stub waits on a read), so
// nothing forks meanwhile; a few rounds still catch one that did. Memory the box already used
// stays charged to the parent when the old cgroup goes: a few MB, outside the job's limit.
static Result<std::unique_ptr<AttemptCgroup>> MoveInto(const CgroupSupport& support,
                                                       const std::string& from,
                                                       const std::string& to,
                                                       const CgroupLimits& limits) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> old_dirs, AttemptDirs(support, from));
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> new_dirs, AttemptDirs(support, to));
  const std::string& old_dir = old_dirs.front();
  const std::string& new_dir = new_dirs.front();
  std::error_code ec;
  if (!fs::is_directory(old_dir, ec)) return Status::NotFound("no cgroup " + old_dir);
  SLUICE_ASSIGN_OR_RETURN(auto cg, AttemptCgroup::Create(support, to, limits));
  auto move = [](const std::string& src, const std::string& dst) -> Status {
    SLUICE_ASSIGN_OR_RETURN(std::string text, ReadSmall(src + "/cgroup.procs"));
    std::istringstream in(text);
    for (std::string pid; in >> pid;) {
      Status st = WriteSmall(dst + "/cgroup.procs", pid);
      // A process that exited since the read is not an error (ESRCH).
      if (!st.ok() && fs::exists("/proc/" + pid)) return st;
    }
    return Status::Ok();
  };
  Status st = Status::Ok();
  for (int round = 0; round < 5; ++round) {
    st = move(old_dir, new_dir);
    if (!st.ok()) break;
    if (rmdir(old_dir.c_str()) == 0) return cg;
    const int err = errno;
    if (err != EBUSY) {  // a plain directory (tests): its files stay; cgroupfs removes its own
      if (err == ENOTEMPTY && fs::remove_all(old_dir, ec) > 0 && !ec) return cg;
      st = Status::Internal("cannot remove cgroup " + old_dir + ": " + ErrnoText(err));
      break;
    }
    st = Status::Internal("cgroup " + old_dir + " still has processes after moving them");
  }
  (void)move(new_dir, old_dir);  // back where they were; the new one goes
  (void)cg->Remove();
  return Status::Internal("cannot move the warm box into its job's cgroup: " + st.message());
}

Result<std::unique_ptr<AttemptCgroup>> AttemptCgroup::Adopt(const CgroupSupport& support,
                                                            const std::string& from,
                                                            const std::string& to,
                                                            const CgroupLimits& limits) {
  if (support.layout == Layout::kV2) return MoveInto(support, from, to, limits);
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> old_dirs, AttemptDirs(support, from));
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> new_dirs, AttemptDirs(support, to));
  for (size_t i = 0; i < old_dirs.size(); ++i) {
    if (::rename(old_dirs[i].c_str(), new_dirs[i].c_str()) != 0) {
      Status st = Status::Internal("cannot rename cgroup " + old_dirs[i] + ": " + ErrnoText(errno));
      for (size_t k = 0; k < i; ++k) (void)::rename(new_dirs[k].c_str(), old_dirs[k].c_str());
      return st;
    }
  }
  SLUICE_RETURN_IF_ERROR(WriteLimits(support, new_dirs, limits));
  return Open(support, to);
}

Result<bool> AttemptCgroup::OomKilled() const {
  std::string dir = TreeDir("memory");
  if (dir.empty()) return Status::FailedPrecondition("no memory cgroup");
  const bool v2 = support_.layout == Layout::kV2;
  SLUICE_ASSIGN_OR_RETURN(std::string text,
                          ReadSmall(dir + (v2 ? "/memory.events" : "/memory.oom_control")));
  return KeyedValue(text, "oom_kill") > 0;
}

Result<std::vector<int>> AttemptCgroup::Pids() const {
  SLUICE_ASSIGN_OR_RETURN(std::string text, ReadSmall(dirs_.front() + "/cgroup.procs"));
  std::vector<int> pids;
  std::istringstream in(text);
  for (int p; in >> p;) pids.push_back(p);
  return pids;
}

Status AttemptCgroup::Freeze() {
  std::string dir = TreeDir("freezer");
  if (dir.empty()) return Status::FailedPrecondition("no freezer cgroup");
  if (support_.layout == Layout::kV2) return WriteSmall(dir + "/cgroup.freeze", "1");
  return WriteSmall(dir + "/freezer.state", "FROZEN");
}

Status AttemptCgroup::Thaw() {
  std::string dir = TreeDir("freezer");
  if (dir.empty()) return Status::FailedPrecondition("no freezer cgroup");
  if (support_.layout == Layout::kV2) return WriteSmall(dir + "/cgroup.freeze", "0");
  return WriteSmall(dir + "/freezer.state", "THAWED");
}

Result<bool> AttemptCgroup::Frozen() const {
  std::string dir = TreeDir("freezer");
  if (dir.empty()) return Status::FailedPrecondition("no freezer cgroup");
  if (support_.layout == Layout::kV2) {
    SLUICE_ASSIGN_OR_RETURN(std::string events, ReadSmall(dir + "/cgroup.events"));
    return KeyedValue(events, "frozen") == 1;
  }
  SLUICE_ASSIGN_OR_RETURN(std::string state, ReadSmall(dir + "/freezer.state"));
  return state.rfind("FROZEN", 0) == 0;
}

Status AttemptCgroup::KillAll() {
  if (support_.layout == Layout::kV2 && fs::exists(dirs_.front() + "/cgroup.kill")) {
    return WriteSmall(dirs_.front() + "/cgroup.kill", "1");  // the kernel does it atomically
  }
  // Frozen, nothing inside can fork between reading the list and the kills; a frozen task dies
  // once thawed, with the kill already pending.
  bool froze = !TreeDir("freezer").empty() && Freeze().ok();
  auto pids = Pids();
  if (pids.ok()) {
    for (int p : *pids) kill(p, SIGKILL);
  }
  if (froze) SLUICE_RETURN_IF_ERROR(Thaw());
  return pids.status();
}

Status AttemptCgroup::Remove() {
  for (const auto& d : dirs_) {
    if (rmdir(d.c_str()) != 0 && errno != ENOENT) {
      int err = errno;
      if (err == EBUSY) return Status::FailedPrecondition("cgroup " + d + " still has processes");
      return Status::Internal("cannot remove cgroup " + d + ": " + ErrnoText(err));
    }
  }
  return Status::Ok();
}

}  // namespace sluice
