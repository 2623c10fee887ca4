// The provider's agent: dials out to the server over one WebSocket, says hello with a real
// probe of the machine, heartbeats, runs assigned jobs with Process and streams their output.
//
// Durability: each attempt has a record in DIR/attempts/<id>.json (process group, exit status)
// so that after the server restarts the agent re-reports what it runs, and after the agent
// itself is killed the next instance kills the orphaned process groups and reports them lost.
// Log lines stay in memory until the server acknowledges them; a reconnect resends the rest.
#pragma once

#include <string>
#include <vector>

#include "agent/conformance.h"
#include "common/agent_protocol.h"

namespace sluice::agent {

struct AgentOptions {
  std::string server_url;  // http://host:port
  std::string join_token_file;
  std::string ca_file;  // PEM CA an https server must chain to; default: the join token's pin
  std::string data_dir;
  std::string name;  // defaults to the hostname
  double price_per_gpu_hour = 0;
  double interruptible_price_per_gpu_hour = 0;  // 0: sell no interruptible capacity
  double interruptible_price_per_cpu_hour = 0;
  double price_per_cpu_hour = 0;
  std::string region;
  std::string nvidia_smi_file;        // probe GPUs from a recorded file (tests, dry runs)
  bool skip_software_probe = false;   // offer no toolkits/PyTorch (faster start: no python run)
  double keep_alive_interval_s = 15;  // WebSocket ping period
  double max_backoff_s = 5;           // reconnect backoff ceiling
  double stop_grace_s = 5;            // on SIGTERM: jobs get this long after their SIGTERM
  // Cloud spot-termination notices: polled with GET; HTTP 200 means the instance is about to go
  // (AWS style, http://169.254.169.254/latest/meta-data/spot/instance-action), 404 means not.
  std::string spot_metadata_url;
  double spot_poll_interval_s = 5;
  // What the provider advertises (`--advertise-gpu h100-80gb:8`): checked by the server against
  // the probe, and the node is refused when they disagree. Offers always come from the probe.
  std::vector<proto::GpuClaim> claims;
  // The conformance suite the server asks for (at registration, on schedule, `node verify`).
  // disk_dir defaults to data_dir; trigger is set per run.
  ConformanceOptions conformance;
  // Per-attempt cgroups (agent/cgroup.h): CPU and memory as allocated, and this many processes.
  std::string cgroup_root = "/sys/fs/cgroup";
  int64_t max_pids_per_job = 4096;
  // The job sandbox (agent/sandbox.h). Without it the agent refuses to start unless no_sandbox
  // says every job here is the provider's own; its offers then show `sandbox: none`.
  bool no_sandbox = false;
  // Sandboxed jobs are kept from the cloud metadata address and this machine's local ports by
  // iptables rules on their uids (agent/job_network.h). Where those cannot be installed (no
  // iptables, no CAP_NET_ADMIN, an agent that is not root) the agent refuses to start unless
  // this says the machine has no cloud credentials to lose; offers then show
  // `sandbox: bwrap-open-network`.
  bool allow_unfiltered_network = false;
  // Jobs run as uids first_job_uid, first_job_uid + 1, ... (one per running attempt; the agent
  // must be root), never as the agent's own.
  int64_t first_job_uid = 2100000000;
  // The per-attempt supervisor binary (agent/supervisor.h); "" = `sluice-supervisor` beside
  // the agent's own executable.
  std::string supervisor_path;
  // Sandboxes kept built and waiting for CPU jobs (docs/design-notes.md "Warm boxes"); 0: none,
  // every job waits for its box to be built.
  int warm_boxes = 1;
};

// Runs until SIGINT/SIGTERM (exit 0) or a fatal error such as a rejected join token (exit 1).
int RunAgent(const AgentOptions& options);

}  // namespace sluice::agent
