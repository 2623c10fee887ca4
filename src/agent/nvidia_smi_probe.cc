#include "agent/nvidia_smi_probe.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "agent/nvidia_smi_parser.h"
#include "common/text.h"

namespace sluice {
namespace {

bool IsExecutableFile(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}

// Resolved before fork so the child only calls async-signal-safe functions (the agent is
// multi-threaded; execvp's PATH walk allocates).
std::optional<std::string> FindExecutable(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    return IsExecutableFile(name) ? std::optional(name) : std::nullopt;
  }
  const char* path = std::getenv("PATH");
  for (const std::string& dir : Split(path ? path : "/usr/bin:/bin", ':')) {
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

}  // namespace

Result<ProbedGpus> NvidiaSmiGpuProbe::Probe() {
  std::optional<std::string> exe = FindExecutable(binary_);
  if (!exe) return Status::Unavailable(binary_ + ": not found or not executable");

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0)
    return Status::Internal(std::string("pipe: ") + strerror(errno));
  Fd out_r{out_pipe[0]}, out_w{out_pipe[1]};
  if (pipe2(err_pipe, O_CLOEXEC) != 0)
    return Status::Internal(std::string("pipe: ") + strerror(errno));
  Fd err_r{err_pipe[0]}, err_w{err_pipe[1]};

  std::vector<std::string> args = {*exe, "-q", "-x"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  pid_t pid = fork();
  if (pid < 0) return Status::Internal(std::string("fork: ") + strerror(errno));
  if (pid == 0) {
    sigset_t none;  // the agent blocks its stop signals; nvidia-smi gets the defaults
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  out_w.Close();
  err_w.Close();

  std::string out, err;
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  bool timed_out = false, too_big = false;
  while (out_r.fd >= 0 || err_r.fd >= 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[2] = {{out_r.fd, POLLIN, 0}, {err_r.fd, POLLIN, 0}};  // fd -1 is ignored
    int n = poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || fds[k].revents == 0) continue;
      char buf[65536];
      ssize_t got = read(fds[k].fd, buf, sizeof buf);
      if (got <= 0) {
        if (got < 0 && errno == EINTR) continue;
        (k == 0 ? out_r : err_r).Close();
        continue;
      }
      std::string& dst = k == 0 ? out : err;
      dst.append(buf, static_cast<size_t>(got));
      if (dst.size() > kMaxNvidiaSmiBytes) too_big = true;
    }
    if (too_big) break;
  }
  if (timed_out || too_big) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Status::DeadlineExceeded(*exe + " -q -x did not finish within " +
                                    std::to_string(timeout_.count()) + " ms");
  }
  if (too_big) return Status::InvalidArgument(*exe + " -q -x: output larger than accepted");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    // nvidia-smi explains itself on stdout ("NVIDIA-SMI has failed because ..."), others on
    // stderr; keep the first line of whichever has text.
    std::string why = Trim(err.empty() ? out : err);
    why = why.substr(0, why.find('\n')).substr(0, 200);
    std::string how = WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                        : "signal " + std::to_string(WTERMSIG(status));
    return Status::Unavailable(*exe + " -q -x failed (" + how + ")" +
                               (why.empty() ? "" : ": " + why));
  }
  auto parsed = ParseNvidiaSmiXml(out);
  if (!parsed.ok()) return Status(parsed.status().code(), *exe + ": " + parsed.status().message());
  return parsed;
}

}  // namespace sluice
