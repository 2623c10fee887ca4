#include "agent/software_probe.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "common/json.h"
#include "common/text.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

// What the interpreters are asked. No shell is involved: each is one argv element.
constexpr const char* kPythonVersionScript = "import sys; print('%d.%d.%d' % sys.version_info[:3])";
constexpr const char* kTorchVersionScript = "import torch; print(torch.__version__)";

// The inventory parser accepts at most this many entries per list (common/inventory.cc).
constexpr size_t kMaxListEntries = 64;

// How long to wait for a SIGKILLed child to be reaped before leaving that to a thread. A process
// stuck in uninterruptible sleep (a wedged driver) cannot die until the kernel lets it.
constexpr milliseconds kReapAfterKill{1000};

bool IsExecutableFile(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}

// Resolved before fork so the child only calls async-signal-safe functions (the agent is
// multi-threaded; execvp's PATH walk allocates).
std::optional<std::string> FindExecutable(const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) {
    return IsExecutableFile(name) ? std::optional(name) : std::nullopt;
  }
  const char* path = std::getenv("PATH");
  for (const std::string& dir : Split(path ? path : "/usr/local/bin:/usr/bin:/bin", ':')) {
    std::string cand = (dir.empty() ? "." : dir) + "/" + name;
    if (IsExecutableFile(cand)) return cand;
  }
  return std::nullopt;
}

struct Fd {
  int fd = -1;
  ~Fd() { Close(); }
  void Close() {
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

int MillisLeft(steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<long long>(left, 1 << 30));
}

// Reaps `pid` if it has exited by `deadline`, polling every few milliseconds.
bool ReapBy(pid_t pid, steady_clock::time_point deadline, int* status) {
  while (true) {
    pid_t w = waitpid(pid, status, WNOHANG);
    if (w == pid) return true;
    if (w < 0 && errno != EINTR) {
      *status = -1;  // ECHILD: reaped elsewhere (SIGCHLD ignored); the status is lost
      return true;
    }
    int left = MillisLeft(deadline);
    if (left <= 0) return false;
    std::this_thread::sleep_for(milliseconds(std::min(left, 5)));
  }
}

// Runs in the forked child: only async-signal-safe calls from here to execv.
[[noreturn]] void ExecChild(char* const* argv, int devnull, int out, int max_fd, pid_t parent) {
  setpgid(0, 0);  // its own group, so a timeout kills whatever it started too
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) sigaction(s, &dfl, nullptr);  // SIG_IGN survives exec
  if (dup2(devnull, 0) < 0 || dup2(out, 1) < 0 || dup2(devnull, 2) < 0) _exit(127);
    // Descriptors other threads opened without O_CLOEXEC (sockets, job pipes) stay with the agent.
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
#endif
  {
    for (int fd = 3; fd < max_fd; ++fd) close(fd);
  }
  execv(argv[0], argv);
  _exit(127);
}

std::optional<std::string> ReadSmallFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string data(1 << 20, '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  return data;
}

bool Succeeded(const CommandResult& r) { return !r.timed_out && r.exit_code == 0; }

// One toolkit directory's version: version.json, else version.txt, else its own nvcc.
std::optional<std::string> ToolkitVersion(const fs::path& dir, const SoftwareProbeOptions& opts) {
  if (auto text = ReadSmallFile(dir / "version.json")) {
    if (auto v = ParseCudaVersionJson(*text); v.ok()) return *v;
  }
  if (auto text = ReadSmallFile(dir / "version.txt")) {
    if (auto v = ParseCudaVersionTxt(*text); v.ok()) return *v;
  }
  // Toolkits from pip wheels or conda-style layouts ship neither file, but do ship nvcc.
  std::string nvcc = (dir / "bin" / "nvcc").string();
  if (IsExecutableFile(nvcc)) {
    CommandResult r = opts.run({nvcc, "--version"}, opts.nvcc_timeout);
    if (Succeeded(r)) {
      if (auto v = ParseNvccVersion(r.out); v.ok()) return *v;
    }
  }
  return std::nullopt;
}

void AddUnique(std::vector<std::string>& list, std::string v) {
  if (std::find(list.begin(), list.end(), v) == list.end()) list.push_back(std::move(v));
}

}  // namespace

CommandResult RunCommand(const std::vector<std::string>& argv, milliseconds timeout) {
  CommandResult r;
  if (argv.empty()) return r;
  std::optional<std::string> exe = FindExecutable(argv[0]);
  if (!exe) return r;

  std::vector<std::string> args = argv;
  args[0] = *exe;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return r;
  Fd out_r{p[0]}, out_w{p[1]};
  Fd devnull{open("/dev/null", O_RDWR | O_CLOEXEC)};
  if (devnull.fd < 0) return r;
  struct rlimit rl;
  int max_fd = 1024;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    max_fd = static_cast<int>(std::min<rlim_t>(rl.rlim_cur, 1 << 20));
  }

  auto deadline = steady_clock::now() + timeout;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return r;
  if (pid == 0) ExecChild(cargv.data(), devnull.fd, out_w.fd, max_fd, parent);
  setpgid(pid, pid);  // also from this side, so the group exists before any kill below
  out_w.Close();
  devnull.Close();

  bool eof = false;
  while (!eof) {
    int left = MillisLeft(deadline);
    if (left <= 0) break;
    pollfd pfd = {out_r.fd, POLLIN, 0};
    int n = poll(&pfd, 1, left);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    char buf[4096];
    ssize_t got = read(out_r.fd, buf, sizeof buf);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      break;
    }
    if (got == 0) {
      eof = true;
      break;
    }
    // Past the cap the output is drained and dropped, so the child never blocks on a full pipe.
    size_t room = kMaxCommandOutputBytes - std::min(r.out.size(), kMaxCommandOutputBytes);
    r.out.append(buf, std::min(room, static_cast<size_t>(got)));
  }
  out_r.Close();

  int status = 0;
  bool reaped = ReapBy(pid, deadline, &status);
  // Kill the group when the child is still running, or when something it started still held
  // the pipe. (Unreaped, or with a live member holding the pipe, the group id cannot be reused.)
  if (!reaped || !eof) kill(-pid, SIGKILL);
  if (!reaped) {
    kill(pid, SIGKILL);  // in case setpgid lost a race with exec and the group does not exist
    r.timed_out = true;
    r.exit_code = 128 + SIGKILL;
    if (!ReapBy(pid, steady_clock::now() + kReapAfterKill, &status)) {
      std::thread([pid] {
        while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
        }
      }).detach();
    }
    return r;
  }
  if (status == -1) {
    r.exit_code = 127;
  } else if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.exit_code = 128 + WTERMSIG(status);
  }
  return r;
}

Result<std::string> CudaMajorMinor(std::string_view version) {
  auto bad = [&] {
    return Status::InvalidArgument("not a CUDA version: \"" + std::string(version.substr(0, 64)) +
                                   "\"");
  };
  auto digits = [](std::string_view s, size_t from) {
    size_t i = from;
    while (i < s.size() && i - from < 5 && s[i] >= '0' && s[i] <= '9') ++i;
    return i - from;
  };
  size_t major = digits(version, 0);
  if (major == 0 || major > 4 || major >= version.size() || version[major] != '.') return bad();
  size_t minor = digits(version, major + 1);
  if (minor == 0 || minor > 4) return bad();
  size_t end = major + 1 + minor;
  if (end < version.size() && version[end] != '.') return bad();
  return std::string(version.substr(0, end));
}

Result<std::string> ParseCudaVersionJson(std::string_view text) {
  SLUICE_ASSIGN_OR_RETURN(Json j, ParseJson(text));
  if (!j.is_object() || !j.contains("cuda") || !j["cuda"].is_object()) {
    return Status::InvalidArgument("version.json: no \"cuda\" object");
  }
  SLUICE_ASSIGN_OR_RETURN(std::string v, GetString(j["cuda"], "version", "version.json.cuda"));
  return CudaMajorMinor(v);
}

Result<std::string> ParseCudaVersionTxt(std::string_view text) {
  constexpr std::string_view kPrefix = "CUDA Version ";
  size_t at = text.find(kPrefix);
  if (at == std::string_view::npos) {
    return Status::InvalidArgument("version.txt: no \"CUDA Version\"");
  }
  std::string_view rest = text.substr(at + kPrefix.size());
  size_t end = rest.find_first_of(" \t\r\n");
  return CudaMajorMinor(rest.substr(0, end));
}

Result<std::string> ParseNvccVersion(std::string_view text) {
  constexpr std::string_view kRelease = "release ";
  size_t at = text.find(kRelease);
  if (at == std::string_view::npos) {
    return Status::InvalidArgument("nvcc --version: no \"release\"");
  }
  std::string_view rest = text.substr(at + kRelease.size());
  size_t end = rest.find_first_of(", \t\r\n");
  return CudaMajorMinor(rest.substr(0, end));
}

std::string VersionFromOutput(std::string_view out) {
  std::string v = Trim(out);
  if (v.empty() || v.size() > 64 || v[0] < '0' || v[0] > '9') return "";
  for (char c : v) {
    if (c <= ' ' || c > '~') return "";  // control, space, DEL or non-ASCII
  }
  return v;
}

Result<std::string> ParseRuntimeVersion(std::string_view output) {
  std::string lower = ToLower(output.substr(0, std::min<size_t>(output.size(), 4096)));
  size_t at = lower.find("version");
  if (at == std::string::npos) return Status::InvalidArgument("no \"version\" in the output");
  size_t i = at + 7;
  if (i < lower.size() && lower[i] == ':') ++i;
  while (i < lower.size() && (lower[i] == ' ' || lower[i] == '\t')) ++i;
  size_t end = output.find_first_of(", \t\r\n", i);
  std::string v =
      VersionFromOutput(output.substr(i, end == std::string_view::npos ? end : end - i));
  if (v.empty()) return Status::InvalidArgument("no version number after \"version\"");
  return v;
}

std::vector<std::string> ProbeContainerRuntimes(const SoftwareProbeOptions& in) {
  SoftwareProbeOptions opts = in;
  if (!opts.run) opts.run = RunCommand;
  std::vector<std::string> found;
  for (const std::string& name : opts.container_runtimes) {
    CommandResult r = opts.run({name, "--version"}, opts.runtime_timeout);
    if (!Succeeded(r)) continue;
    if (name == "docker" && ToLower(Trim(r.out)).starts_with("podman")) continue;
    auto v = ParseRuntimeVersion(r.out);
    if (!v.ok()) continue;
    if (found.size() < kMaxListEntries) AddUnique(found, name + " " + *v);
  }
  return found;
}

std::vector<std::string> ProbeCudaToolkits(const SoftwareProbeOptions& in) {
  SoftwareProbeOptions opts = in;
  if (!opts.run) opts.run = RunCommand;
  std::vector<fs::path> dirs;
  std::error_code ec;
  fs::path local = fs::path(opts.root.empty() ? "/" : opts.root) / "usr" / "local";
  for (fs::directory_iterator it(local, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name != "cuda" && !name.starts_with("cuda-")) continue;
    std::error_code dir_ec;
    if (fs::is_directory(it->path(), dir_ec)) dirs.push_back(it->path());  // follows symlinks
  }
  std::sort(dirs.begin(), dirs.end());

  std::vector<std::string> found;
  for (const fs::path& dir : dirs) {
    if (auto v = ToolkitVersion(dir, opts)) found.push_back(*v);
  }
  if (!opts.nvcc.empty()) {
    CommandResult r = opts.run({opts.nvcc, "--version"}, opts.nvcc_timeout);
    if (Succeeded(r)) {
      if (auto v = ParseNvccVersion(r.out); v.ok()) found.push_back(*v);
    }
  }
  std::sort(found.begin(), found.end(),
            [](const std::string& a, const std::string& b) { return CompareVersions(a, b) > 0; });
  found.erase(std::unique(found.begin(), found.end(),
                          [](const std::string& a, const std::string& b) {
                            return CompareVersions(a, b) == 0;
                          }),
              found.end());
  if (found.size() > kMaxListEntries) found.resize(kMaxListEntries);
  return found;
}

SoftwareFacts ProbeSoftware(const SoftwareProbeOptions& in) {
  SoftwareProbeOptions opts = in;
  if (!opts.run) opts.run = RunCommand;
  SoftwareFacts f;
  f.cuda_toolkits = ProbeCudaToolkits(opts);
  for (const std::string& python : opts.pythons) {
    CommandResult v = opts.run({python, "-c", kPythonVersionScript}, opts.python_timeout);
    if (!Succeeded(v)) continue;  // absent (127), broken, or hung and killed
    std::string version = VersionFromOutput(v.out);
    if (version.empty()) continue;
    if (f.python_version.empty()) f.python_version = version;
    // A non-zero exit is "no torch here" (ModuleNotFoundError), not an error.
    CommandResult t = opts.run({python, "-c", kTorchVersionScript}, opts.torch_timeout);
    if (!Succeeded(t)) continue;
    std::string build = VersionFromOutput(t.out);
    if (!build.empty() && f.torch_builds.size() < kMaxListEntries) {
      AddUnique(f.torch_builds, std::move(build));
    }
  }
  f.container_runtimes = ProbeContainerRuntimes(opts);
  return f;
}

}  // namespace sluice
