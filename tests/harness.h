// Test harness for integration tests: starts the real `sluice` binary as server, agents and CLI
// on loopback, in a fresh temporary directory, and waits on conditions with deadlines.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/json.h"

namespace sluice::testing {

// Path of the built `sluice` binary (from SLUICE_BINARY_DIR, set by ctest).
std::string SluiceBinary();

// A file's text, "" when it cannot be opened, what was read when a read fails; never throws.
// For /proc and cgroup files too: a process (or cgroup) may go between listing and reading, and
// the kernel then fails the read (ESRCH), which std::istreambuf_iterator throws out of the test
// as an exception, where streaming the buffer (`ss << in.rdbuf()`) sets the stream's state.
std::string ReadAll(const std::string& path);

struct CommandResult {
  int exit_code = -1;  // 128+signal when killed
  std::string out;
  std::string err;
};

// Runs a command to completion (killed after `timeout`), capturing stdout and stderr.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env = {},
                         std::chrono::milliseconds timeout = std::chrono::seconds(60),
                         const std::string& stdin_data = "");

// A long-running child (server, agent) whose output goes to a log file.
class Daemon {
 public:
  Daemon(std::vector<std::string> argv, std::map<std::string, std::string> env,
         std::string log_path);
  ~Daemon();  // SIGKILL if still running
  void Signal(int sig);
  // Waits for exit; returns the exit code (128+signal), or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout);
  bool running();
  pid_t pid() const { return pid_; }
  std::string Log() const;

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
  std::string log_path_;
};

// Polls `cond` every few milliseconds until it holds or `timeout` passes.
bool WaitUntil(const std::function<bool()>& cond,
               std::chrono::milliseconds timeout = std::chrono::seconds(20));

// A server plus agents in one temporary directory.
class Cluster {
 public:
  Cluster();
  ~Cluster();

  // Starts (or restarts, on the same data dir and port) the server and waits for server.url.
  void StartServer(std::vector<std::string> extra = {});
  void KillServer(int sig);
  // Starts an agent named `name` with its own data dir and waits until it is online and the
  // server has verified it (its conformance suite passed; only verified nodes take work).
  // Agents skip the software probe (python/torch imports take seconds) unless a test sets
  // probe_software before starting them, and run a small conformance suite.
  Daemon* StartAgent(const std::string& name, std::vector<std::string> extra = {},
                     bool wait_online = true, std::map<std::string, std::string> env = {});
  // Arguments and environment that make an agent probe its GPUs from a recorded nvidia-smi
  // output and run its GPU conformance checks on the fake CUDA driver (src/agent/fake_cuda)
  // pretending to be exactly those GPUs (PCI ids and memory from the same recording).
  struct FakeGpus {
    std::vector<std::string> args;
    std::map<std::string, std::string> env;
  };
  FakeGpus FakeGpuAgent(const std::string& nvidia_smi_fixture);
  bool probe_software = false;
  // The --join-token-file agents are started with; empty: the server's join.token.
  std::string agent_join_token_file;
  // The URL agents dial instead of the server's (a PausableProxy in front of it); empty: url().
  std::string agent_server_url;
  // Agents start with --allow-unfiltered-network, so a test machine whose iptables cannot be
  // used (a container without CAP_NET_ADMIN) still runs the suite; the network filter's own
  // tests check that it is installed wherever it can be.
  bool allow_unfiltered_network = true;
  // A command the agent is started through (it must exec the rest of its arguments), e.g. one
  // that takes something away from the agent's mount namespace; empty: none.
  std::vector<std::string> agent_launcher;

  // Runs the CLI against this cluster's server with the admin token (and, for a server started
  // with --tls, its generated CA as SLUICE_CA_FILE).
  CommandResult Cli(std::vector<std::string> args,
                    std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // `sluice <args> --json` parsed.
  Json CliJson(std::vector<std::string> args);
  // Writes a file under the cluster's directory and returns its path.
  std::string WriteFile(const std::string& name, const std::string& content);

  const std::string& dir() const { return dir_; }
  const std::string& url() const { return url_; }
  const std::string& admin_token() const { return admin_token_; }
  const std::string& join_token() const { return join_token_; }
  std::string server_data_dir() const { return dir_ + "/server"; }
  Daemon* server() { return server_.get(); }
  // The agent started under `name`, or nullptr.
  Daemon* agent(const std::string& name) {
    auto it = agents_.find(name);
    return it == agents_.end() ? nullptr : it->second.get();
  }
  std::string ServerLog() const;

 private:
  std::string dir_;
  std::string url_;
  std::string listen_ = "127.0.0.1:0";
  std::string admin_token_;
  std::string join_token_;
  std::vector<std::string> server_extra_;
  std::unique_ptr<Daemon> server_;
  std::map<std::string, std::unique_ptr<Daemon>> agents_;
  int server_starts_ = 0;
};

}  // namespace sluice::testing
