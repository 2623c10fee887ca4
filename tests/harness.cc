#include "harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/crypto.h"
#include "common/text.h"

namespace sluice::testing {
namespace {

namespace fs = std::filesystem;

std::vector<char*> CStrings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::vector<std::string> EnvWith(const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  // The CLI must never pick up a developer's own server by accident.
  env.erase("SLUICE_SERVER");
  env.erase("SLUICE_TOKEN");
  env.erase("SLUICE_TOKEN_FILE");
  env.erase("SLUICE_CA_FILE");
  for (const auto& [k, v] : extra) env[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string SluiceBinary() {
  const char* dir = std::getenv("SLUICE_BINARY_DIR");
  return std::string(dir ? dir : SLUICE_BINARY_DIR_DEFAULT) + "/sluice";
}

CommandResult RunCommand(const std::vector<std::string>& argv_in,
                         const std::map<std::string, std::string>& env_in,
                         std::chrono::milliseconds timeout, const std::string& stdin_data) {
  std::vector<std::string> argv = argv_in;
  std::vector<std::string> env = EnvWith(env_in);
  auto cargv = CStrings(argv);
  auto cenv = CStrings(env);
  int out_pipe[2], err_pipe[2], in_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) || pipe2(err_pipe, O_CLOEXEC) || pipe2(in_pipe, O_CLOEXEC)) {
    throw std::runtime_error("pipe failed");
  }
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    execve(cargv[0], cargv.data(), cenv.data());
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (!stdin_data.empty()) {
    ssize_t n = write(in_pipe[1], stdin_data.data(), stdin_data.size());
    (void)n;
  }
  close(in_pipe[1]);
  CommandResult r;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  bool killed = false;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 && !killed) {
      kill(pid, SIGKILL);
      killed = true;
    }
    int n = poll(fds, 2, killed ? 1000 : static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n <= 0) {
      if (killed) break;
      continue;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(got));
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

Daemon::Daemon(std::vector<std::string> argv, std::map<std::string, std::string> env,
               std::string log_path)
    : log_path_(std::move(log_path)) {
  std::vector<std::string> envv = EnvWith(env);
  auto cargv = CStrings(argv);
  auto cenv = CStrings(envv);
  int log_fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  pid_ = fork();
  if (pid_ == 0) {
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    execve(cargv[0], cargv.data(), cenv.data());
    _exit(127);
  }
  close(log_fd);
}

Daemon::~Daemon() {
  if (running()) {
    kill(pid_, SIGKILL);
    Wait(std::chrono::seconds(10));
  }
}

void Daemon::Signal(int sig) {
  if (!reaped_) kill(pid_, sig);
}

bool Daemon::running() {
  if (reaped_) return false;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    status_ = status;
    return false;
  }
  return true;
}

int Daemon::Wait(std::chrono::milliseconds timeout) {
  if (!WaitUntil([&] { return !running(); }, timeout)) return -1;
  return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
}

std::string Daemon::Log() const { return ReadAll(log_path_); }

bool WaitUntil(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (cond()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling interval
  }
}

Cluster::Cluster() {
  dir_ = (fs::temp_directory_path() / ("sluice-it-" + RandomHex(6))).string();
  fs::create_directories(dir_);
}

Cluster::~Cluster() {
  for (auto& [name, a] : agents_) {
    a->Signal(SIGTERM);
    a->Wait(std::chrono::seconds(10));
  }
  agents_.clear();
  if (server_) {
    server_->Signal(SIGTERM);
    server_->Wait(std::chrono::seconds(10));
  }
  server_.reset();
  std::error_code ec;
  if (!std::getenv("SLUICE_KEEP_TEST_DIRS")) fs::remove_all(dir_, ec);
}

void Cluster::StartServer(std::vector<std::string> extra) {
  if (!extra.empty() || server_starts_ == 0) server_extra_ = extra;
  std::string data = server_data_dir();
  std::error_code ec;
  fs::remove(data + "/server.url", ec);
  std::vector<std::string> argv = {SluiceBinary(), "server",     "--listen",
                                   listen_,        "--data-dir", data};
  for (const auto& e : server_extra_) argv.push_back(e);
  server_ =
      std::make_unique<Daemon>(argv, std::map<std::string, std::string>{}, dir_ + "/server.log");
  ++server_starts_;
  bool up = WaitUntil([&] { return fs::exists(data + "/server.url") || !server_->running(); },
                      std::chrono::seconds(20));
  if (!up || !server_->running()) {
    throw std::runtime_error("server did not start:\n" + ServerLog());
  }
  url_ = Trim(ReadAll(data + "/server.url"));
  // A restart must come back on the same port, or agents could not find it.
  listen_ = url_.substr(url_.find("://") + 3);
  // Token files hold the secret on their first line (then optional ca-sha256/server lines).
  auto first_line = [](const std::string& text) { return Trim(text.substr(0, text.find('\n'))); };
  admin_token_ = first_line(ReadAll(data + "/admin.token"));
  join_token_ = first_line(ReadAll(data + "/join.token"));
}

void Cluster::KillServer(int sig) {
  server_->Signal(sig);
  server_->Wait(std::chrono::seconds(20));
}

Daemon* Cluster::StartAgent(const std::string& name, std::vector<std::string> extra,
                            bool wait_online, std::map<std::string, std::string> env) {
  std::vector<std::string> argv = agent_launcher;
  argv.insert(
      argv.end(),
      {SluiceBinary(), "agent", "--server", agent_server_url.empty() ? url_ : agent_server_url,
       "--join-token-file",
       agent_join_token_file.empty() ? server_data_dir() + "/join.token" : agent_join_token_file,
       "--data-dir", dir_ + "/agent-" + name, "--name", name, "--keep-alive-interval", "1",
       "--conformance-disk-mib", "16", "--conformance-memory-mib", "64"});
  if (!probe_software) argv.push_back("--skip-software-probe");
  if (allow_unfiltered_network) argv.push_back("--allow-unfiltered-network");
  for (const auto& e : extra) argv.push_back(e);
  agents_[name] = std::make_unique<Daemon>(argv, env, dir_ + "/agent-" + name + ".log");
  Daemon* d = agents_[name].get();
  if (wait_online) {
    // Enrolment and the whole conformance suite (eight played GPUs' speed checks, for some tests),
    // under the sanitizers and beside another test doing the same, took over 20 s in one run: a
    // deadline generous enough that load cannot flip the test, and no cost when it passes.
    bool online = WaitUntil(
        [&] {
          Json nodes = CliJson({"nodes"});
          if (!nodes.is_array()) return false;
          for (const auto& n : nodes) {
            if (n.value("name", "") == name && n.value("state", "") == "online" &&
                n.value("verification", "") == "verified") {
              return true;
            }
          }
          return false;
        },
        std::chrono::seconds(60));
    if (!online) {
      throw std::runtime_error("agent " + name + " did not come online verified:\n" + d->Log() +
                               "\n" + Cli({"node", "status", name}).out);
    }
  }
  return d;
}

Cluster::FakeGpus Cluster::FakeGpuAgent(const std::string& fixture) {
  FakeGpus f;
  f.args = {"--from-nvidia-smi",
            fixture,
            "--cuda-library",
            SLUICE_FAKE_CUDA_PATH,
            "--conformance-gpu-mib",
            "16",
            "--conformance-gpu-elements",
            "65536",
            "--conformance-gpu-perf-ms",
            "20"};
  CommandResult probe =
      RunCommand({SluiceBinary(), "probe", "--from-nvidia-smi", fixture, "--json"});
  auto inv = ParseJson(probe.out);
  if (!inv.ok() || !inv->contains("gpus")) {
    throw std::runtime_error("sluice probe " + fixture + " failed: " + probe.err);
  }
  std::string pci;
  for (const auto& g : (*inv)["gpus"]) {
    pci += (pci.empty() ? "" : ",") + g.value("pci_bus_id", "");
  }
  f.env = {{"FAKE_CUDA_DEVICES", std::to_string((*inv)["gpus"].size())},
           {"FAKE_CUDA_PCI", pci},
           {"FAKE_CUDA_TOTAL_MIB",
            std::to_string((*inv)["gpus"].empty() ? 0 : (*inv)["gpus"][0].value("memory_mib", 0))}};
  return f;
}

CommandResult Cluster::Cli(std::vector<std::string> args, std::chrono::milliseconds timeout) {
  std::vector<std::string> argv = {SluiceBinary()};
  for (auto& a : args) argv.push_back(a);
  std::map<std::string, std::string> env = {{"SLUICE_SERVER", url_},
                                            {"SLUICE_TOKEN", admin_token_}};
  // An https server (started with --tls) is verified against the CA it generated.
  if (url_.rfind("https://", 0) == 0) env["SLUICE_CA_FILE"] = server_data_dir() + "/tls/ca.crt";
  return RunCommand(argv, env, timeout);
}

Json Cluster::CliJson(std::vector<std::string> args) {
  args.push_back("--json");
  CommandResult r = Cli(args);
  if (r.exit_code != 0) return Json();
  auto j = ParseJson(r.out);
  return j.ok() ? *j : Json();
}

std::string Cluster::WriteFile(const std::string& name, const std::string& content) {
  std::string path = dir_ + "/" + name;
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

std::string Cluster::ServerLog() const { return ReadAll(dir_ + "/server.log"); }

}  // namespace sluice::testing
