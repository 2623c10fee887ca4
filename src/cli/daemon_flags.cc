// The daemons' commands: server, agent, probe (cli/command_group.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "agent/probe_command.h"
#include "cli/client_config.h"
#include "cli/command_group.h"
#include "cli/commands.h"
#include "server/server_command.h"
#include "store/wal_checkpointer.h"

namespace sluice::cli {
namespace {

// server
class ServerGroup final : public CommandGroup {
 public:
  using CommandGroup::CommandGroup;
  void Add(CLI::App& app) override {
    sopt.data_dir = DefaultServerDataDir();
    auto* server = app.add_subcommand("server", kServerAbout);
    server->add_option("--listen", sopt.listen, "HOST:PORT to listen on; port 0 picks a free one")
        ->capture_default_str();
    server
        ->add_option("--data-dir", sopt.data_dir,
                     "State directory: SQLite database, blobs, admin.token, join.token, server.url")
        ->capture_default_str();
    server
        ->add_option("--heartbeat-interval", sopt.heartbeat_interval_s,
                     "Seconds between agent heartbeats")
        ->capture_default_str();
    server
        ->add_option("--heartbeat-grace", sopt.heartbeat_grace_s,
                     "Seconds without a heartbeat before a node is lost")
        ->capture_default_str();
    server
        ->add_option("--lease", sopt.lease_s,
                     "Seconds a running job may go on after its agent last heard from this server; "
                     "then the agent freezes it until the server confirms it (fencing). Must be "
                     "shorter than --heartbeat-grace and longer than --heartbeat-interval "
                     "(default: two thirds of the grace)")
        ->check(CLI::NonNegativeNumber);
    server
        ->add_option("--cancel-grace", sopt.cancel_grace_s,
                     "Seconds between SIGTERM and SIGKILL when a job is cancelled")
        ->capture_default_str();
    server
        ->add_option("--storage-price-per-gb-month", sopt.storage_price_per_gb_month,
                     "USD per GB-month of storage: what a job's kept workdir and checkpoints are "
                     "billed (per hour, a month being 730 h), and what expected costs assume")
        ->check(CLI::Range(0.0, 1000.0))
        ->capture_default_str();
    server
        ->add_option("--checkpoint-retention", sopt.checkpoint_retention,
                     "Checkpoints kept per job; older ones (and chunks nothing else uses) are "
                     "deleted")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    server
        ->add_option("--reverify-interval", sopt.reverify_interval_s,
                     "Seconds after which a verified node is asked to run its conformance suite "
                     "again (0: only at registration and on `sluice node verify`)")
        ->check(CLI::Range(0.0, 365.0 * 86400))
        ->capture_default_str();
    server
        ->add_option("--preempt-cooldown", sopt.preempt_cooldown_s,
                     "Seconds a preempted job avoids the node it was preempted or lost on")
        ->check(CLI::Range(0.0, 86400.0))
        ->capture_default_str();
    server
        ->add_option("--interruption-prior", sopt.interruption_prior_per_hour,
                     "Interruptions per hour assumed for interruptible capacity without history")
        ->check(CLI::Range(0.0, 100.0))
        ->capture_default_str();
    server
        ->add_option("--reclaim-cooldown", sopt.reclaim_cooldown_s,
                     "Seconds a node its provider reclaimed whole, or one under a spot-termination "
                     "notice, takes no new work (0: it takes work at once); `sluice node resume` "
                     "ends it sooner")
        ->check(CLI::Range(0.0, 30.0 * 86400))
        ->capture_default_str();
    server
        ->add_option("--platform-fee-percent", sopt.platform_fee_percent,
                     "The platform's fee, taken from the provider's share of every charge (users "
                     "pay the price shown in offers)")
        ->check(CLI::Range(0.0, 100.0))
        ->capture_default_str();
    server
        ->add_option("--settle-interval", sopt.settle_interval_s,
                     "Seconds between bills of running attempts (their end bills the rest at once)")
        ->check(CLI::Range(1.0, 86400.0))
        ->capture_default_str();
    server
        ->add_option("--transfer-price-per-gb", sopt.transfer_price_per_gb,
                     "USD per GB the platform charges for moving a job's workdir and checkpoints "
                     "to and from nodes (storage is charged at --storage-price-per-gb-month)")
        ->check(CLI::Range(0.0, 1000.0))
        ->capture_default_str();
    server->add_flag("--allow-private-webhooks", sopt.allow_private_webhooks,
                     "Let budget alert webhooks point at loopback, link-local or private "
                     "addresses (refused by default: a user's webhook must not reach what only the "
                     "server can)");
    server
        ->add_option("--default-credit-limit", sopt.default_credit_limit,
                     "How far below zero a new user account's balance may go, in USD, or "
                     "`unlimited` (0: prepaid; add credit with `sluice account credit`)")
        ->capture_default_str();
    server
        ->add_option("--max-active-jobs-per-account", sopt.max_active_jobs_per_account,
                     "Unfinished jobs one user account may have (admins are exempt)")
        ->check(CLI::Range(1, 10000000))
        ->capture_default_str();
    server
        ->add_option("--max-nodes-per-provider", sopt.max_nodes_per_provider,
                     "Nodes one provider account may enrol")
        ->check(CLI::Range(1, 10000000))
        ->capture_default_str();
    server
        ->add_option("--max-concurrent-verifications", sopt.max_concurrent_verifications,
                     "Conformance suites run at once across all nodes; the rest wait their turn "
                     "(a fleet registering together would otherwise fail its own measurements)")
        ->check(CLI::Range(1, 100000))
        ->capture_default_str();
    server
        ->add_option("--verify-retries", sopt.verify_retries,
                     "Times a failed verification is asked again before the node stays unverified")
        ->check(CLI::Range(0, 20))
        ->capture_default_str();
    server
        ->add_option("--verify-retry", sopt.verify_retry_s,
                     "Seconds before the first retry of a failed verification; each later one "
                     "waits twice as long, with jitter")
        ->check(CLI::Range(0.1, 86400.0))
        ->capture_default_str();
    server
        ->add_option("--max-log-mib-per-attempt", sopt.max_log_mib_per_attempt,
                     "Log bytes kept per attempt (MiB); past it the oldest lines give way")
        ->check(CLI::Range(0.001, 1048576.0))
        ->capture_default_str();
    server
        ->add_option("--max-upload-gib-per-account", sopt.max_upload_gib_per_account,
                     "Workdir and checkpoint bytes one account (or node) may upload (GiB)")
        ->check(CLI::Range(0.0, 1048576.0))
        ->capture_default_str();
    server
        ->add_option("--upload-grace-hours", sopt.upload_grace_hours,
                     "Uploads nothing references (a workdir never submitted, checkpoint chunks "
                     "without a manifest) are deleted once this old")
        ->check(CLI::Range(0.01, 24.0 * 365))
        ->capture_default_str();
    server
        ->add_option("--refusals-per-second", sopt.refusals_per_second,
                     "Refused requests (bad or missing tokens) one client address may make per "
                     "second before it gets 429s")
        ->check(CLI::Range(0.01, 1000000.0))
        ->capture_default_str();
    server
        ->add_option("--threads", sopt.threads,
                     "Network threads (sluice-io): sockets, TLS, HTTP and WebSocket framing, and "
                     "agents' messages (heartbeats are answered there). One costs the least CPU "
                     "per message: two or more hand work to each other through the kernel")
        ->check(CLI::Range(1, 256))
        ->capture_default_str();
    server
        ->add_option("--api-threads", sopt.api_threads,
                     "Threads that run the API's request handlers (sluice-api), off the network "
                     "threads: a slow request holds up neither the agents nor other requests")
        ->check(CLI::Range(1, 256))
        ->capture_default_str();
    server
        ->add_option("--keep-alive-interval", sopt.keep_alive_interval_s,
                     "Seconds between WebSocket pings on agent links")
        ->capture_default_str();
    // TLS and connection limits (README "TLS").
    server->add_flag("--tls", sopt.tls,
                     "Serve HTTPS/WSS with a CA and certificate generated in DATA_DIR/tls (clients "
                     "pin the CA: token files carry its sha256)");
    server->add_option("--tls-cert", sopt.tls_cert_file,
                       "Serve HTTPS/WSS with this PEM certificate chain (leaf first) instead");
    server->add_option("--tls-key", sopt.tls_key_file, "The private key (PEM) for --tls-cert");
    server->add_option("--tls-san", sopt.tls_sans,
                       "Extra DNS name or IP address for the generated certificate (repeatable); "
                       "localhost, 127.0.0.1, ::1 and the --listen host are always in it");
    server->add_flag("--insecure-http", sopt.insecure_http,
                     "Allow plain HTTP on a non-loopback --listen address (behind a TLS proxy)");
    server
        ->add_option("--max-connections-per-address", sopt.max_connections_per_address,
                     "Open connections one client IP address may hold; more are closed at once "
                     "(0: no cap)")
        ->check(CLI::Range(0, 10000000))
        ->capture_default_str();
    server->add_flag(
        "!--no-wal-batching", sopt.wal_write_batching,
        "Write each WAL frame of the database as SQLite does, in two writes, instead of "
        "a commit's frames in a few large ones (for comparison, or a filesystem that "
        "misbehaves with it)");
    server
        ->add_option("--db-cache-mib", sopt.db_cache_mib,
                     "The database writer's page cache in MiB (0: SQLite's default, 2 MiB)")
        ->check(CLI::Range(0, 65536))
        ->capture_default_str();
    server
        ->add_option("--wal-checkpoint-pages", sopt.wal_checkpoint_pages,
                     "WAL pages (4 KiB each) written between the database's background "
                     "checkpoints (0: the default, " +
                         std::to_string(store::WalCheckpointerOptions{}.wake_frames) +
                         "): more copies a page many commits rewrote once, for a longer WAL "
                         "file")
        ->check(CLI::Range(0, 1000000));
    server->callback([this] { rc = server::RunServer(sopt); });
  }

 private:
  server::ServerOptions sopt;
};

// agent
class AgentGroup final : public CommandGroup {
 public:
  using CommandGroup::CommandGroup;
  void Add(CLI::App& app) override {
    aopt.data_dir = DefaultAgentDataDir();
    auto* agent_cmd = app.add_subcommand("agent", kAgentAbout);
    agent_cmd->add_option("--server", aopt.server_url,
                          "Server URL (default: $SLUICE_SERVER, else the join token file's server: "
                          "line, else the local server's server.url)");
    agent_cmd->add_option("--join-token-file", aopt.join_token_file,
                          "File holding the provider join token (default: the local server's "
                          "join.token)");
    agent_cmd->add_option("--ca-file", aopt.ca_file,
                          "CA certificate (PEM) an https:// server must chain to (default: the "
                          "join token file's ca-sha256 pin, else the system trust store)");
    agent_cmd->add_option("--data-dir", aopt.data_dir, "Agent state and job work directories")
        ->capture_default_str();
    agent_cmd->add_option("--name", aopt.name, "Node name (default: the hostname)");
    agent_cmd->add_option("--price-per-gpu-hour", aopt.price_per_gpu_hour, "USD per GPU-hour")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    agent_cmd
        ->add_option("--price-per-cpu-hour", aopt.price_per_cpu_hour,
                     "USD per CPU-hour, for CPU-only jobs")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    agent_cmd
        ->add_option("--interruptible-price-per-gpu-hour", aopt.interruptible_price_per_gpu_hour,
                     "Also sell GPUs as interruptible capacity at this USD per GPU-hour: "
                     "on-demand jobs may preempt jobs placed on it (0: do not)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    agent_cmd
        ->add_option("--interruptible-price-per-cpu-hour", aopt.interruptible_price_per_cpu_hour,
                     "The same for CPU-only jobs, per CPU-hour")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    agent_cmd->add_option("--region", aopt.region, "Region label shown in offers");
    agent_cmd->add_option("--spot-metadata-url", aopt.spot_metadata_url,
                          "Poll this URL for a cloud spot-termination notice (HTTP 200 = the "
                          "instance goes: running jobs are preempted), e.g. "
                          "http://169.254.169.254/latest/meta-data/spot/instance-action");
    agent_cmd
        ->add_option("--spot-poll-interval", aopt.spot_poll_interval_s,
                     "Seconds between polls of --spot-metadata-url")
        ->check(CLI::Range(0.05, 3600.0))
        ->capture_default_str();
    agent_cmd
        ->add_option("--max-pids-per-job", aopt.max_pids_per_job,
                     "Processes and threads one job may have at once (its pids cgroup; a fork "
                     "bomb stops there); the job's CPUs and memory are limited to what it was "
                     "allocated")
        ->check(CLI::Range(int64_t{16}, int64_t{4194304}))
        ->capture_default_str();
    agent_cmd->add_flag(
        "--no-sandbox", aopt.no_sandbox,
        "Run jobs without the sandbox (their own user, mount and PID namespaces): they can read "
        "whatever the agent can, tokens included. Only for a node whose every job is your own; "
        "its offers show `sandbox: none`. Without this flag the agent refuses to start where "
        "the sandbox cannot be built");
    agent_cmd->add_flag(
        "--allow-unfiltered-network", aopt.allow_unfiltered_network,
        "Start even where the jobs' network filter cannot be installed (no iptables, no "
        "CAP_NET_ADMIN, or the agent is not root): sandboxed jobs can then reach the cloud "
        "metadata address 169.254.169.254, which hands out this machine's cloud credentials, and "
        "its local ports. Only for a machine with no cloud credentials to lose; its offers show "
        "`sandbox: bwrap-open-network`. Without this flag the agent refuses to start there");
    agent_cmd
        ->add_option("--first-job-uid", aopt.first_job_uid,
                     "Sandboxed jobs run as this uid and the ones after it, one per running job "
                     "(needs root); choose a range no account on the machine uses")
        ->check(CLI::Range(int64_t{1000}, int64_t{4000000000}))
        ->capture_default_str();
    agent_cmd
        ->add_option("--warm-boxes", aopt.warm_boxes,
                     "Sandboxes to keep built and waiting for CPU jobs, so a job starts without "
                     "waiting for its box (each holds a job uid and a few MB; 0: none)")
        ->check(CLI::Range(0, 64))
        ->capture_default_str();
    agent_cmd
        ->add_option("--supervisor", aopt.supervisor_path,
                     "The per-attempt supervisor binary (default: sluice-supervisor beside this "
                     "executable), for installs that keep it elsewhere")
        ->check(CLI::ExistingFile);
    agent_cmd->add_flag("--skip-software-probe", aopt.skip_software_probe,
                        "Do not probe CUDA toolkits, Python and PyTorch (importing torch takes "
                        "seconds); offers then list no toolkits or PyTorch builds");
    agent_cmd->add_option("--from-nvidia-smi", aopt.nvidia_smi_file,
                          "Take GPUs from recorded `nvidia-smi -q -x` or `-q` output (testing)");
    agent_cmd
        ->add_option("--keep-alive-interval", aopt.keep_alive_interval_s,
                     "Seconds between WebSocket pings")
        ->capture_default_str();
    agent_cmd
        ->add_option("--stop-grace", aopt.stop_grace_s,
                     "On shutdown, seconds between SIGTERM and SIGKILL for running jobs")
        ->capture_default_str();
    agent_cmd->add_option("--advertise-gpu", advertise,
                          "GPUs this node is listed with, as LABEL[:COUNT] (h100-80gb:8). Offers "
                          "always come from the probe; the server refuses the node when the probe "
                          "does not show what it advertises");
    agent_cmd
        ->add_option("--conformance-disk-mib", aopt.conformance.disk_mib,
                     "MiB the conformance suite writes, fsyncs and reads back in --data-dir")
        ->check(CLI::Range(1, 65536))
        ->capture_default_str();
    agent_cmd
        ->add_option("--conformance-memory-mib", aopt.conformance.memory_mib,
                     "MiB of RAM the conformance suite allocates, writes and verifies (the server "
                     "requires at least 64 by default)")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    agent_cmd
        ->add_option("--conformance-gpu-mib", aopt.conformance.gpu_alloc_mib,
                     "MiB of GPU memory the conformance suite allocates and copies per GPU")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    agent_cmd
        ->add_option("--conformance-gpu-elements", aopt.conformance.gpu_elements,
                     "32-bit words the conformance kernel hashes and the agent verifies per GPU")
        ->check(CLI::Range(1024u, 1u << 30))
        ->capture_default_str();
    agent_cmd
        ->add_option("--conformance-gpu-perf-ms", aopt.conformance.gpu_perf_ms,
                     "How long each timed run of the GPU speed check (matrix multiply, memory "
                     "copy) lasts at least")
        ->check(CLI::Range(1, 10000))
        ->capture_default_str();
    agent_cmd
        ->add_option("--cuda-library", aopt.conformance.cuda_library,
                     "The CUDA driver library the GPU checks load")
        ->capture_default_str();
    agent_cmd->callback([this] {
      for (const auto& a : advertise) {
        proto::GpuClaim c;
        size_t colon = a.find(':');
        c.label = a.substr(0, colon);
        try {
          c.count = colon == std::string::npos ? 1 : std::stoi(a.substr(colon + 1));
        } catch (...) {
          c.count = 0;
        }
        if (c.label.empty() || c.count < 1) {
          std::fprintf(stderr, "sluice agent: --advertise-gpu: expected LABEL[:COUNT], got `%s`\n",
                       a.c_str());
          rc = 2;
          return;
        }
        aopt.claims.push_back(c);
      }
      if (aopt.join_token_file.empty())
        aopt.join_token_file = DefaultServerDataDir() + "/join.token";
      auto server_url = ResolveAgentServer(aopt.server_url, aopt.join_token_file);
      if (!server_url.ok()) {
        std::fprintf(stderr, "sluice agent: --server: %s\n", server_url.status().message().c_str());
        rc = 2;
        return;
      }
      aopt.server_url = *server_url;
      rc = agent::RunAgent(aopt);
    });
  }

 private:
  agent::AgentOptions aopt;
  std::vector<std::string> advertise;
};

// probe
class ProbeGroup final : public CommandGroup {
 public:
  using CommandGroup::CommandGroup;
  void Add(CLI::App& app) override {
    auto* probe = app.add_subcommand("probe", kProbeAbout);
    probe->add_option("--from-nvidia-smi", probe_file,
                      "Parse recorded `nvidia-smi -q -x` (XML) or `nvidia-smi -q` (text) output");
    probe->add_flag("--json", probe_json, "Print the inventory as JSON");
    probe->callback([this] { rc = ProbeCommand(probe_file, probe_json, std::cout, std::cerr); });
  }

 private:
  std::string probe_file;
  bool probe_json = false;
};

}  // namespace

void HandOverDaemonCommands(int, char**) {}  // this binary runs them

std::unique_ptr<CommandGroup> MakeServerGroup(GlobalFlags& g, int& rc) {
  return std::make_unique<ServerGroup>(g, rc);
}

std::unique_ptr<CommandGroup> MakeAgentGroup(GlobalFlags& g, int& rc) {
  return std::make_unique<AgentGroup>(g, rc);
}

std::unique_ptr<CommandGroup> MakeProbeGroup(GlobalFlags& g, int& rc) {
  return std::make_unique<ProbeGroup>(g, rc);
}

}  // namespace sluice::cli
