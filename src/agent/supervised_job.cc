#include "agent/supervised_job.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/atomic_file.h"
#include "common/json.h"

extern char** environ;

namespace sluice {
namespace {

using supervisor::kExitFile;
using supervisor::kListenFd;
using supervisor::kLogFile;
using supervisor::kOutputFile;
using supervisor::kSocketFile;
using supervisor::kSpecFile;

// How long Start waits for the supervisor to say the job started (it is its first act).
constexpr auto kStartTimeout = std::chrono::seconds(30);

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

Result<sockaddr_un> SocketAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    return Status::InvalidArgument("control socket path too long (" + std::to_string(path.size()) +
                                   " bytes): " + path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

Result<int> Listen(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(sockaddr_un addr, SocketAddress(path));
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Internal(Errno("socket"));
  ::unlink(path.c_str());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::chmod(path.c_str(), 0600) != 0 || ::listen(fd, 8) != 0) {
    Status s = Status::Internal(Errno("control socket " + path));
    ::close(fd);
    return s;
  }
  return fd;
}

Result<int> Connect(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(sockaddr_un addr, SocketAddress(path));
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Internal(Errno("socket"));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    Status s = Status::Unavailable(Errno("connect " + path));
    ::close(fd);
    return s;
  }
  return fd;
}

// Starts `exe dir` with the listening socket on fd 3, stdio on /dev/null and the supervisor's
// log, in a new session (so neither the agent's death nor a signal to its group reaches it)
// with the default signal mask and dispositions (the agent blocks its stop signals).
Status Spawn(const std::string& exe, const std::string& dir, int listen_fd) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  const std::string log = dir + "/" + kLogFile;
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_adddup2(&fa, listen_fd, kListenFd);
  posix_spawn_file_actions_addclosefrom_np(&fa, kListenFd + 1);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGUSR1, SIGUSR2}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> argv = {const_cast<char*>(exe.c_str()), const_cast<char*>(dir.c_str()),
                             nullptr};
  pid_t pid;
  int rc = ::posix_spawn(&pid, exe.c_str(), &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Status::Internal("cannot start " + exe + ": " + std::strerror(rc));
  // The process started forks the supervisor and exits at once (supervisor_main.cc), so the
  // supervisor is never our child: init reaps it, whenever it ends, with us or without us.
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::Internal(exe + " failed to start (see " + log + ")");
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<SupervisedJob>> SupervisedJob::Start(const std::string& exe,
                                                            const std::string& dir,
                                                            const supervisor::Spec& spec,
                                                            Callbacks cb) {
  SLUICE_RETURN_IF_ERROR(WriteFileAtomic(dir + "/" + kSpecFile, DumpJson(supervisor::ToJson(spec)),
                                         0600, Durability::kProcessCrash));
  const std::string sock = dir + "/" + kSocketFile;
  SLUICE_ASSIGN_OR_RETURN(int listen_fd, Listen(sock));
  if (listen_fd == kListenFd) {  // dup2 onto itself would keep CLOEXEC
    int moved = ::fcntl(listen_fd, F_DUPFD_CLOEXEC, kListenFd + 1);
    ::close(listen_fd);
    if (moved < 0) return Status::Internal(Errno("fcntl"));
    listen_fd = moved;
  }
  // Connected before the supervisor is started: the connection waits in the backlog. Connecting
  // after, a supervisor whose job cannot start (a missing cwd) could end and remove the socket
  // first, and the caller would get "connect: No such file" instead of the reason; this way the
  // reader finds the connection closed and reads the recorded end from disk.
  auto fd = Connect(sock);
  Status spawned = fd.ok() ? Spawn(exe, dir, listen_fd) : fd.status();
  ::close(listen_fd);
  if (!spawned.ok()) {
    if (fd.ok()) ::close(*fd);
    return spawned;
  }
  std::unique_ptr<SupervisedJob> job(new SupervisedJob(dir, std::move(cb)));
  {
    std::lock_guard<std::mutex> lock(job->mu_);
    job->fd_ = *fd;
    job->SendLocked(Json{{"op", "attach"}, {"from", 0}});
  }
  job->reader_ = std::thread([j = job.get()] { j->ReadLoop(); });
  std::unique_lock<std::mutex> lock(job->mu_);
  job->cv_.wait_for(lock, kStartTimeout,
                    [&] { return job->done_ || (spec.warm ? job->ready_ : job->pid_ != 0); });
  return job;
}

Result<std::unique_ptr<SupervisedJob>> SupervisedJob::Attach(const std::string& dir, Callbacks cb) {
  auto fd = Connect(dir + "/" + kSocketFile);
  if (!fd.ok() && ::access((dir + "/" + kExitFile).c_str(), F_OK) != 0) {
    return Status::NotFound("no supervisor and no recorded end in " + dir + " (" +
                            fd.status().message() + ")");
  }
  std::unique_ptr<SupervisedJob> job(new SupervisedJob(dir, std::move(cb)));
  if (fd.ok()) {
    std::lock_guard<std::mutex> lock(job->mu_);
    job->fd_ = *fd;
    job->SendLocked(Json{{"op", "attach"}, {"from", 0}});
  }
  job->reader_ = std::thread([j = job.get()] { j->ReadLoop(); });
  return job;
}

SupervisedJob::~SupervisedJob() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  }
  if (reader_.joinable()) reader_.join();
  if (fd_ >= 0) ::close(fd_);
}

pid_t SupervisedJob::pid() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pid_;
}

bool SupervisedJob::ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ready_ && !done_;
}

bool SupervisedJob::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !done_;
}

void SupervisedJob::SendLocked(const Json& op) {
  if (fd_ < 0) return;
  std::string raw = DumpJson(op) + "\n";
  // Never blocks the agent: a supervisor that stopped reading misses this order, and gets it
  // again after the reconnect that follows (the orders are remembered).
  ssize_t n = ::send(fd_, raw.data(), raw.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)n;
}

void SupervisedJob::Terminate(std::chrono::milliseconds grace) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!terminate_ms_ || grace.count() < *terminate_ms_) terminate_ms_ = grace.count();
  SendLocked(Json{{"op", "terminate"}, {"grace_ms", grace.count()}});
}

void SupervisedJob::Kill() {
  std::lock_guard<std::mutex> lock(mu_);
  killed_ = true;
  SendLocked(Json{{"op", "kill"}});
}

void SupervisedJob::Lease(int64_t until, int64_t kill_at) {
  std::lock_guard<std::mutex> lock(mu_);
  lease_ = {until, kill_at};
  SendLocked(Json{{"op", "lease"}, {"until", until}, {"kill_at", kill_at}});
}

void SupervisedJob::Ping() {
  std::lock_guard<std::mutex> lock(mu_);
  SendLocked(Json{{"op", "ping"}});
}

bool SupervisedJob::Go(const std::string& dir, Callbacks cb, const Json& go) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_ || delivering_) return false;
  dir_ = dir;
  cb_ = std::make_shared<Callbacks>(std::move(cb));
  go_ = go;
  SendLocked(go);
  return true;
}

void SupervisedJob::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
}

void SupervisedJob::Deliver(const End& end) {
  std::shared_ptr<const Callbacks> cb;
  {
    std::lock_guard<std::mutex> lock(mu_);
    delivering_ = true;
    cb = cb_;
  }
  if (cb->on_exit) cb->on_exit(end);
  std::lock_guard<std::mutex> lock(mu_);
  done_ = true;
  cv_.notify_all();
}

bool SupervisedJob::OnEvent(const std::string& line) {
  auto j = ParseJson(line);
  if (!j.ok() || !j->is_object()) return false;
  auto ev_name = GetStringOr(*j, "ev", "");  // json::value would throw on a wrong type
  const std::string ev = ev_name.ok() ? *ev_name : "";
  if (ev == "line") {
    auto e = supervisor::LineFromJson(*j);
    if (!e.ok() || e->seq <= last_seq_) return false;  // a replay of what we have
    last_seq_ = e->seq;
    auto cb = callbacks();
    if (cb->on_line) cb->on_line(*e);
  } else if (ev == "started") {
    std::lock_guard<std::mutex> lock(mu_);
    auto pid = GetIntOr(*j, "pid", 0);
    pid_ = pid.ok() ? static_cast<pid_t>(*pid) : 0;
    cv_.notify_all();
  } else if (ev == "ready") {
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = true;
    cv_.notify_all();
  } else if (ev == "frozen" || ev == "thawed") {
    auto cb = callbacks();
    if (cb->on_freeze) cb->on_freeze(ev == "frozen");
  } else if (ev == "exit") {
    auto e = supervisor::ExitFromJson(*j);
    End end;
    if (e.ok()) {
      end.exit = *e;
    } else {
      end.supervisor_lost = true;
    }
    Deliver(end);
    return true;
  }
  return false;
}

bool SupervisedJob::Reconnect() {
  for (int i = 0; i < 3; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto fd = Connect(dir() + "/" + kSocketFile);
    if (!fd.ok()) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) {
      ::close(*fd);
      return false;
    }
    ::close(fd_);
    fd_ = *fd;
    SendLocked(Json{{"op", "attach"}, {"from", last_seq_}});
    if (go_) SendLocked(*go_);
    if (lease_)
      SendLocked(Json{{"op", "lease"}, {"until", lease_->first}, {"kill_at", lease_->second}});
    if (terminate_ms_) SendLocked(Json{{"op", "terminate"}, {"grace_ms", *terminate_ms_}});
    if (killed_) SendLocked(Json{{"op", "kill"}});
    return true;
  }
  return false;
}

bool SupervisedJob::EndRecorded() const {
  return ::access((dir() + "/" + kExitFile).c_str(), F_OK) == 0;
}

void SupervisedJob::FinishFromDisk() {
  // The supervisor writes every line before the exit, so the file holds all we lack.
  const std::string dir = this->dir();
  std::ifstream out(dir + "/" + kOutputFile, std::ios::binary);
  for (std::string line; std::getline(out, line);) (void)OnEvent(line);
  std::ifstream in(dir + "/" + kExitFile, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  auto j = ParseJson(text.str());
  auto e = j.ok() ? supervisor::ExitFromJson(*j) : Result<supervisor::Exit>(j.status());
  End end;
  if (in && e.ok()) {
    end.exit = *e;
  } else {
    end.supervisor_lost = true;
  }
  Deliver(end);
}

void SupervisedJob::ReadLoop() {
  std::string buf;
  for (;;) {
    int fd;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closing_) return;
      fd = fd_;
    }
    if (fd >= 0) {
      char tmp[64 * 1024];
      ssize_t n = ::read(fd, tmp, sizeof tmp);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        buf.append(tmp, static_cast<size_t>(n));
        size_t start = 0;
        for (size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1) {
          if (OnEvent(buf.substr(start, nl - start))) return;
        }
        buf.erase(0, start);
        continue;
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closing_) return;
    }
    buf.clear();
    // The supervisor records the end before it closes: with the end on disk there is nobody to
    // reconnect to. (A job that ends within a millisecond ends its supervisor before it serves
    // the connection the agent opened first; waiting out Reconnect's retries cost such a job
    // 200 ms.)
    if (fd >= 0 && !EndRecorded() && Reconnect()) continue;
    FinishFromDisk();
    return;
  }
}

}  // namespace sluice
