#include "cli/main_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "agent/agent.h"
#include "agent/probe_command.h"
#include "cli/client_config.h"
#include "cli/commands.h"
#include "server/server_command.h"

namespace sluice::cli {
namespace {

constexpr const char* kVersion = "0.1.0";

void AddClientFlags(CLI::App* cmd, GlobalFlags* g, bool json = true) {
  cmd->add_option("--server", g->server,
                  "Server URL (default: $SLUICE_SERVER, else the local server's server.url)");
  cmd->add_option("--token", g->token,
                  "API token (default: $SLUICE_TOKEN, else the local server's admin.token)");
  cmd->add_option("--ca-file", CaFileFlag(),
                  "CA certificate (PEM) an https:// server must chain to (default: "
                  "$SLUICE_CA_FILE, else the token file's ca-sha256 pin, else the local server's "
                  "tls/ca.crt, else the system trust store)");
  if (json) cmd->add_flag("--json", g->json, "Print JSON for scripts instead of a table");
}

}  // namespace

int Main(int argc, char** argv) {
  CLI::App app{
      "Sluice: one job contract for GPUs everywhere.\n"
      "Run a marketplace server, join machines with agents, run jobs on them."};
  app.set_version_flag("--version", kVersion);
  app.require_subcommand(1);
  app.fallthrough(false);
  int rc = 0;
  GlobalFlags g;

  // --- server
  server::ServerOptions sopt;
  sopt.data_dir = DefaultServerDataDir();
  auto* server =
      app.add_subcommand("server", "Run the marketplace server (REST API + agent channel)");
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
  server->callback([&] { rc = server::RunServer(sopt); });

  // --- agent
  agent::AgentOptions aopt;
  aopt.data_dir = DefaultAgentDataDir();
  auto* agent_cmd = app.add_subcommand("agent", "Join this machine to a server as a provider");
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
  std::vector<std::string> advertise;
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
  agent_cmd->callback([&] {
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
    if (aopt.join_token_file.empty()) aopt.join_token_file = DefaultServerDataDir() + "/join.token";
    auto server_url = ResolveAgentServer(aopt.server_url, aopt.join_token_file);
    if (!server_url.ok()) {
      std::fprintf(stderr, "sluice agent: --server: %s\n", server_url.status().message().c_str());
      rc = 2;
      return;
    }
    aopt.server_url = *server_url;
    rc = agent::RunAgent(aopt);
  });

  // --- probe
  std::string probe_file;
  bool probe_json = false;
  auto* probe = app.add_subcommand("probe", "Print what an agent on this machine would publish");
  probe->add_option("--from-nvidia-smi", probe_file,
                    "Parse recorded `nvidia-smi -q -x` (XML) or `nvidia-smi -q` (text) output");
  probe->add_flag("--json", probe_json, "Print the inventory as JSON");
  probe->callback([&] { rc = ProbeCommand(probe_file, probe_json, std::cout, std::cerr); });

  // --- run
  RunFlags rf;
  auto* run = app.add_subcommand("run", "Submit a job spec (YAML) and follow it to the end");
  run->add_option("spec", rf.spec_path, "Job spec file, e.g. examples/hello.yaml")->required();
  auto* follow_flag = run->add_flag(
      "-f,--follow", rf.follow,
      "Stream state changes and logs until the job ends, exit with its exit code (default "
      "when stdout is a terminal)");
  run->add_flag("-d,--detach", rf.detach, "Print the job id and return")->excludes(follow_flag);
  run->add_option("--team", rf.team,
                  "Share the job with the members of this team (you must be one of them)");
  run->add_flag("--queue", rf.queue,
                "Queue the job even if no registered node can run it (it waits, with the "
                "reason, for one to join); without it such a job is refused with an explanation");
  run->add_option("--objective", rf.objective,
                  "What placement minimises: cost (expected cost to complete, the default), time "
                  "(expected time to complete) or price (hourly price); overrides the spec")
      ->check(CLI::IsMember({"cost", "time", "price"}));
  run->add_flag("--dry-run", rf.dry_run,
                "Submit and upload nothing: parse the spec and print its environment fingerprint "
                "(the runtime contract's canonical JSON and sha256), check this machine's driver, "
                "CUDA, Python and PyTorch against the runtime contract, and list the offers that "
                "satisfy the whole job (or why none does). Exit code 0 when some offer does");
  AddClientFlags(run, &g);
  run->callback([&] { rc = RunCommand(g, rf); });

  // --- jobs / job / logs / cancel
  std::string state;
  int limit = 50;
  auto* jobs = app.add_subcommand("jobs", "List jobs, newest first");
  jobs->add_option("--state", state,
                   "Only jobs in this state (queued, starting, running, succeeded, failed, "
                   "cancelled, lost, budget-exhausted)");
  jobs->add_option("--limit", limit, "At most this many")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  AddClientFlags(jobs, &g);
  jobs->callback([&] { rc = JobsCommand(g, state, limit); });

  std::string id;
  auto* job = app.add_subcommand("job", "Show a job: state, attempts, events");
  job->add_option("id", id, "Job id")->required();
  AddClientFlags(job, &g);
  job->callback([&] { rc = JobCommand(g, id); });

  bool follow_logs = false;
  auto* logs = app.add_subcommand("logs", "Print a job's output");
  logs->add_option("id", id, "Job id")->required();
  logs->add_flag("-f,--follow", follow_logs, "Keep streaming until the job ends");
  AddClientFlags(logs, &g);
  logs->callback([&] { rc = LogsCommand(g, id, follow_logs); });

  auto* cancel = app.add_subcommand(
      "cancel", "Cancel a job: SIGTERM to its process group, SIGKILL after the grace period");
  cancel->add_option("id", id, "Job id")->required();
  AddClientFlags(cancel, &g);
  cancel->callback([&] { rc = CancelCommand(g, id); });

  auto* del = app.add_subcommand(
      "delete",
      "Delete a finished job with its logs, events and checkpoints (frees their storage)");
  del->add_option("id", id, "Job id")->required();
  AddClientFlags(del, &g);
  del->callback([&] { rc = DeleteCommand(g, id); });

  // --- market
  std::string offer_query, offer_sort;
  int offer_limit = 50;
  auto* offers = app.add_subcommand(
      "offers",
      "Query the market: agent nodes and imported cloud catalogs.\n"
      "  sluice offers 'gpu=a100-80gb gpus>=4 price<2.5 region=us-* cuda>=12.1' -o price,-perf\n"
      "Fields: gpu model gpus vram price spot_price provider node region zone form interconnect\n"
      "cc driver cuda toolkit torch cpus memory disk reliability health perf verified source id;\n"
      "ops: = != < <= > >= in [a,b] notin [a,b]; globs (*, ?) on strings; units (40GB).");
  offers->add_option("query", offer_query, "Filter, e.g. 'gpu=h100 gpus>=8 price<3'");
  offers->add_option("-o,--sort", offer_sort, "Sort keys, '-' for descending (default: price)");
  offers->add_option("--limit", offer_limit, "At most this many")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  AddClientFlags(offers, &g);
  offers->callback([&] { rc = OffersCommand(g, offer_query, offer_sort, offer_limit); });

  // --- estimate
  EstimateFlags ef;
  auto* estimate = app.add_subcommand(
      "estimate",
      "Rank the offers a job could use by expected cost to complete, and say why.\n"
      "  expected cost = price × (hours ÷ perf) × (1 + interruption overhead) + storage\n"
      "hours: the job's run time on the reference GPU (a100-80gb), from the spec's expected_hours "
      "or --hours; perf: the GPU's speed relative to it; overhead: work lost to interruptions on "
      "interruptible capacity, given the checkpoint interval.");
  estimate->add_option("spec", ef.spec_path, "Job spec file")->required();
  estimate->add_option("--hours", ef.hours, "Run time on the reference GPU, in hours")
      ->check(CLI::Range(0.0001, 100000.0));
  estimate->add_option("--objective", ef.objective, "cost (default), time or price")
      ->check(CLI::IsMember({"cost", "time", "price"}));
  estimate->add_option("--limit", ef.limit, "At most this many offers")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  estimate
      ->add_option("--fail-over", ef.fail_over,
                   "Cost gate for CI: exit 3 when the best offer's expected cost to complete is "
                   "over this many USD (or unknown), 0 when it is under")
      ->check(CLI::Range(0.000001, 1e12));
  AddClientFlags(estimate, &g);
  estimate->callback([&] { rc = EstimateCommand(g, ef); });

  std::vector<std::string> catalog_files;
  auto* catalog = app.add_subcommand("catalog", "Manage cloud price catalogs");
  catalog->require_subcommand(1);
  auto* catalog_import = catalog->add_subcommand(
      "import",
      "Import cloud price catalog CSVs as comparable (not launchable) offers; a "
      "re-import replaces that provider's offers");
  catalog_import->add_option("files", catalog_files, "CSV files, e.g. data/catalog/*.csv")
      ->required();
  AddClientFlags(catalog_import, &g);
  catalog_import->callback([&] { rc = CatalogImportCommand(g, catalog_files); });
  auto* nodes = app.add_subcommand("nodes", "List registered nodes");
  AddClientFlags(nodes, &g);
  nodes->callback([&] { rc = NodesCommand(g); });
  auto* node_cmd = app.add_subcommand("node", "Act on one node (provider operations)");
  node_cmd->require_subcommand(1);
  std::string reclaim_node, reclaim_cause;
  std::vector<int> reclaim_gpus;
  auto* reclaim = node_cmd->add_subcommand(
      "reclaim",
      "Take a node (or some of its GPUs) back: the attempts there are preempted (SIGTERM, "
      "grace period, SIGKILL, final checkpoint) and their jobs requeued elsewhere");
  reclaim->add_option("node", reclaim_node, "Node id or name")->required();
  reclaim->add_option("--gpus", reclaim_gpus, "Only the attempts using these GPU indices")
      ->delimiter(',');
  reclaim->add_option("--cause", reclaim_cause, "Why, recorded with the attempt");
  AddClientFlags(reclaim, &g);
  reclaim->callback([&] { rc = NodeReclaimCommand(g, reclaim_node, reclaim_gpus, reclaim_cause); });
  std::string resume_node;
  auto* resume = node_cmd->add_subcommand(
      "resume",
      "Put a reclaimed node (or one that had a spot-termination notice) back in the market "
      "before its cool-down (sluice server --reclaim-cooldown) ends");
  resume->add_option("node", resume_node, "Node id or name")->required();
  AddClientFlags(resume, &g);
  resume->callback([&] { rc = NodeResumeCommand(g, resume_node); });

  std::string status_node;
  auto* node_status = node_cmd->add_subcommand(
      "status",
      "A node's verification (verified, unverified, deverified) with the server's reasons, its "
      "hardware and software fingerprints, reliability score and last conformance report. "
      "Exit code 2 when it is not verified");
  node_status->add_option("node", status_node, "Node id or name")->required();
  AddClientFlags(node_status, &g);
  node_status->callback([&] { rc = NodeStatusCommand(g, status_node); });

  std::string verify_node;
  bool verify_no_wait = false;
  double verify_timeout = 300;
  auto* node_verify = node_cmd->add_subcommand(
      "verify",
      "Run the node's conformance suite now and show the server's verdict (exit code 2 when "
      "the node is not verified)");
  node_verify->add_option("node", verify_node, "Node id or name")->required();
  node_verify->add_flag("--no-wait", verify_no_wait, "Ask and return; do not wait for the report");
  node_verify->add_option("--timeout", verify_timeout, "Seconds to wait for the report")
      ->capture_default_str();
  AddClientFlags(node_verify, &g);
  node_verify->callback(
      [&] { rc = NodeVerifyCommand(g, verify_node, !verify_no_wait, verify_timeout); });

  std::string revoke_node;
  auto* node_revoke = node_cmd->add_subcommand(
      "revoke",
      "Cut a node off: its credential stops working, its agent is disconnected (and exits), its "
      "offers leave the market and its running jobs are requeued elsewhere. To bring the "
      "machine back, enrol it again as a new node");
  node_revoke->add_option("node", revoke_node, "Node id or name")->required();
  AddClientFlags(node_revoke, &g);
  node_revoke->callback([&] { rc = NodeRevokeCommand(g, revoke_node); });

  // --- accounts, tokens, teams (issue 10)
  auto* whoami = app.add_subcommand("whoami", "The account, role and scope of the token in use");
  AddClientFlags(whoami, &g);
  whoami->callback([&] { rc = WhoamiCommand(g); });

  auto* account_cmd = app.add_subcommand(
      "account", "Accounts (admin): users submit jobs, providers own nodes, admins run the server");
  account_cmd->require_subcommand(1);
  std::string acct_name, acct_role = "user", acct_out;
  auto* acct_create = account_cmd->add_subcommand(
      "create", "Create an account; prints its first full token once (or writes it with --out)");
  acct_create->add_option("name", acct_name, "Account name: a-z, 0-9, '.', '_', '-'")->required();
  acct_create->add_option("--role", acct_role, "user, provider or admin")
      ->check(CLI::IsMember({"user", "provider", "admin"}))
      ->capture_default_str();
  acct_create->add_option("--out", acct_out,
                          "Write the token to this file (mode 0600, with the server's URL and CA "
                          "pin) instead of printing it");
  AddClientFlags(acct_create, &g);
  acct_create->callback([&] { rc = AccountCreateCommand(g, acct_name, acct_role, acct_out); });
  auto* acct_list = account_cmd->add_subcommand("list", "Every account, with its role and state");
  AddClientFlags(acct_list, &g);
  acct_list->callback([&] { rc = AccountListCommand(g); });
  auto* acct_disable = account_cmd->add_subcommand(
      "disable", "Disable an account: its tokens and its nodes' credentials stop working");
  acct_disable->add_option("name", acct_name, "Account name or id")->required();
  AddClientFlags(acct_disable, &g);
  acct_disable->callback([&] { rc = AccountDisableCommand(g, acct_name, true); });
  auto* acct_enable = account_cmd->add_subcommand("enable", "Enable a disabled account again");
  acct_enable->add_option("name", acct_name, "Account name or id")->required();
  AddClientFlags(acct_enable, &g);
  acct_enable->callback([&] { rc = AccountDisableCommand(g, acct_name, false); });
  // Money (issue 14; README "Bills and earnings").
  std::string budget_job, budget_amount, budget_account, budget_team, budget_monthly,
      budget_webhook;
  auto* budget = app.add_subcommand(
      "budget",
      "Set a job's max_total_cost (`sluice budget JOB USD|none`: compute and transfer over all "
      "its attempts; a job its budget stopped resumes from its checkpoint), or a monthly budget "
      "(`sluice budget --account NAME|--team NAME --monthly USD|none [--webhook URL]`: alerts at "
      "50/80/100 %, and at 100 % its jobs stop safely until it is raised or the month ends)");
  budget->add_option("job", budget_job, "Job id");
  budget->add_option("usd", budget_amount, "The job's new budget, e.g. 25 or 12.50, or none");
  budget->add_option("--account", budget_account,
                     "An account's monthly budget (yours; admins any)");
  budget->add_option("--team", budget_team, "A team's monthly budget (admins)");
  budget->add_option("--monthly", budget_monthly, "USD per UTC calendar month, or none");
  budget->add_option("--webhook", budget_webhook,
                     "http(s) URL the alerts are POSTed to as JSON (empty: none)");
  AddClientFlags(budget, &g);
  budget->callback([&] {
    if (!budget_account.empty() || !budget_team.empty()) {
      rc = MonthlyBudgetCommand(g, budget_account, budget_team, budget_monthly, budget_webhook);
    } else if (!budget_job.empty() && !budget_amount.empty()) {
      rc = JobBudgetCommand(g, budget_job, budget_amount);
    } else {
      std::fprintf(stderr,
                   "sluice: give JOB USD, or --account NAME (or --team NAME) --monthly USD; "
                   "`sluice budgets` lists monthly budgets and alerts\n");
      rc = 2;
    }
  });
  auto* budgets = app.add_subcommand(
      "budgets", "Monthly budgets you can see, this month's spend, and the alerts they raised");
  AddClientFlags(budgets, &g);
  budgets->callback([&] { rc = BudgetsCommand(g); });
  std::string credit_amount, credit_limit, credit_memo;
  auto* acct_credit = account_cmd->add_subcommand(
      "credit",
      "Add prepaid balance to an account (admin), from the funding account, as one ledger "
      "transaction; and/or set how far below zero it may go");
  acct_credit->add_option("name", acct_name, "Account name or id")->required();
  acct_credit->add_option("amount", credit_amount, "USD to add, e.g. 100 or 12.50 (exact)");
  acct_credit->add_option("--credit-limit", credit_limit,
                          "USD the balance may go below zero, or `unlimited`");
  acct_credit->add_option("--memo", credit_memo, "Why, kept with the transaction");
  AddClientFlags(acct_credit, &g);
  acct_credit->callback(
      [&] { rc = AccountCreditCommand(g, acct_name, credit_amount, credit_limit, credit_memo); });
  auto* acct_balance = account_cmd->add_subcommand(
      "balance", "An account's balance and credit limit (yours; admins: any)");
  acct_balance->add_option("name", acct_name, "Account name or id (default: yours)");
  AddClientFlags(acct_balance, &g);
  acct_balance->callback([&] { rc = AccountBalanceCommand(g, acct_name); });

  auto* ledger_cmd = app.add_subcommand("ledger", "The double-entry ledger (admin)");
  ledger_cmd->require_subcommand(1);
  auto* ledger_check = ledger_cmd->add_subcommand(
      "check",
      "Prove the ledger adds up: every transaction sums to zero, every balance equals the sum "
      "of its entries, and compute charged agrees across entries, meters and cost totals. Exit "
      "code 1 when anything does not");
  AddClientFlags(ledger_check, &g);
  ledger_check->callback([&] { rc = LedgerCheckCommand(g); });

  CostsFlags costs_flags;
  auto* costs = app.add_subcommand(
      "costs",
      "What jobs cost: totals and a breakdown (compute, work lost to interruptions, the "
      "platform's fee inside the price). Users see their own; admins any account or provider");
  costs->add_option("--job", costs_flags.job,
                    "One job: each attempt's meter, locked price and the span billed");
  costs->add_option("--account", costs_flags.account, "The paying account (admins)");
  costs->add_option("--provider", costs_flags.provider,
                    "Charges on this provider's nodes (admins)");
  costs->add_option("--since", costs_flags.since,
                    "From this UTC day (2026-12-01), an age (7d, 12h) or Unix milliseconds");
  costs->add_option("--by", costs_flags.by, "Break down by job, day, node, resource or account")
      ->check(CLI::IsMember({"job", "day", "node", "resource", "account", "provider"}))
      ->capture_default_str();
  costs->add_flag("--csv", costs_flags.csv, "CSV (RFC 4180) with amounts in USD");
  AddClientFlags(costs, &g);
  costs->callback([&] { rc = CostsCommand(g, costs_flags, false); });

  CostsFlags earn_flags;
  earn_flags.by = "node";
  auto* earnings = app.add_subcommand(
      "earnings",
      "What a provider's nodes earned: sold at the locked prices, less the platform's fee");
  earnings->add_option("--since", earn_flags.since,
                       "From this UTC day (2026-12-01), an age (7d, 12h) or Unix milliseconds");
  earnings->add_option("--by", earn_flags.by, "Break down by node, day, job or resource")
      ->check(CLI::IsMember({"node", "day", "job", "resource"}))
      ->capture_default_str();
  earnings->add_option("--provider", earn_flags.provider, "Another provider's (admins)");
  earnings->add_option("--job", earn_flags.job,
                       "One job run on your nodes: what it earned, and each SLA credit's rule");
  earnings->add_flag("--csv", earn_flags.csv, "CSV (RFC 4180) with amounts in USD");
  AddClientFlags(earnings, &g);
  earnings->callback([&] { rc = CostsCommand(g, earn_flags, true); });

  auto* token_cmd = app.add_subcommand(
      "token",
      "API tokens: scoped (full, read, metrics), expiring, revocable; listed without "
      "their secrets");
  token_cmd->require_subcommand(1);
  TokenFlags tf;
  auto* tok_create = token_cmd->add_subcommand(
      "create", "Mint a token for this account (admins: --account); the secret is shown once");
  tok_create->add_option("--name", tf.name, "A label shown by `sluice token list`");
  tok_create->add_option("--scope", tf.scope, "full, read (GET only) or metrics")
      ->check(CLI::IsMember({"full", "read", "metrics"}))
      ->capture_default_str();
  tok_create
      ->add_option("--kind", tf.kind,
                   "api, or join (a provider's: enrols new nodes with `sluice agent`)")
      ->check(CLI::IsMember({"api", "join"}))
      ->capture_default_str();
  tok_create->add_option("--ttl", tf.ttl,
                         "Expires after this long: 90d, 12h, 30m (default: never)");
  tok_create->add_option("--account", tf.account, "Admins: mint for this account");
  tok_create->add_option("--out", tf.out,
                         "Write a token file (mode 0600, with the server's URL and CA pin) "
                         "instead of printing the secret");
  AddClientFlags(tok_create, &g);
  tok_create->callback([&] { rc = TokenCreateCommand(g, tf); });
  std::string tok_account, tok_id;
  auto* tok_list = token_cmd->add_subcommand("list", "Tokens of this account (admins: all)");
  tok_list->add_option("--account", tok_account, "Admins: only this account's");
  AddClientFlags(tok_list, &g);
  tok_list->callback([&] { rc = TokenListCommand(g, tok_account); });
  auto* tok_revoke = token_cmd->add_subcommand("revoke", "Revoke a token at once");
  tok_revoke->add_option("id", tok_id, "Token id (from `sluice token list`)")->required();
  AddClientFlags(tok_revoke, &g);
  tok_revoke->callback([&] { rc = TokenRevokeCommand(g, tok_id); });

  auto* team_cmd = app.add_subcommand(
      "team", "Teams share jobs deliberately: `sluice run --team T` makes a job visible to T");
  team_cmd->require_subcommand(1);
  std::string team_name, team_account;
  auto* team_add = team_cmd->add_subcommand("add", "Add an account to a team (admin)");
  team_add->add_option("team", team_name, "Team name")->required();
  team_add->add_option("account", team_account, "Account name or id")->required();
  AddClientFlags(team_add, &g);
  team_add->callback([&] { rc = TeamAddCommand(g, team_name, team_account); });
  auto* team_remove = team_cmd->add_subcommand("remove", "Remove an account from a team (admin)");
  team_remove->add_option("team", team_name, "Team name")->required();
  team_remove->add_option("account", team_account, "Account name or id")->required();
  AddClientFlags(team_remove, &g);
  team_remove->callback([&] { rc = TeamRemoveCommand(g, team_name, team_account); });
  auto* team_list = team_cmd->add_subcommand("list", "Teams and members (yours; admins: all)");
  AddClientFlags(team_list, &g);
  team_list->callback([&] { rc = TeamListCommand(g); });

  std::string audit_since;
  bool audit_csv = false;
  auto* audit_log = app.add_subcommand(
      "audit-log",
      "Every API mutation: time, actor (token id or agent), source address, action, target, "
      "parameters (secrets removed) and the answer's status, oldest first");
  audit_log->add_option("--since", audit_since,
                        "Only entries since: a duration ago (1h, 7d), a UTC time "
                        "(2026-11-30T08:00:00Z) or Unix milliseconds");
  audit_log->add_flag("--csv", audit_csv, "CSV (RFC 4180) instead of a table");
  AddClientFlags(audit_log, &g);
  audit_log->callback([&] { rc = AuditLogCommand(g, audit_since, audit_csv); });

  std::string audit_job, audit_out, verify_path, verify_cert;
  auto* audit = app.add_subcommand(
      "audit",
      "`sluice audit JOB -o report.zip` writes the job's signed audit bundle: "
      "environment-fingerprint.json, hardware-inventory.json, conformance-log.txt, "
      "cost-statement.json, events.jsonl, "
      "job.json, manifest.sha256 and signature.p7s (CMS, by the server's key). "
      "`sluice audit verify report.zip` checks one");
  audit->add_option("job", audit_job, "Job id");
  audit->add_option("-o,--output", audit_out, "Where to write the bundle (default JOB-audit.zip)");
  AddClientFlags(audit, &g);
  auto* audit_verify = audit->add_subcommand(
      "verify",
      "Check a bundle: the CMS signature over manifest.sha256 against the signing certificate, "
      "and every file against the manifest (no file missing, changed or unlisted). Exit code 1 "
      "when anything fails");
  audit_verify->add_option("bundle", verify_path, "The .zip written by `sluice audit`")->required();
  audit_verify->add_option("--cert", verify_cert,
                           "The signing certificate (PEM) to trust; default: fetch it from the "
                           "server's /v1/audit/certificate");
  AddClientFlags(audit_verify, &g);
  audit_verify->callback([&] { rc = AuditVerifyCommand(g, verify_path, verify_cert); });
  audit->callback([&] {
    if (audit_verify->parsed()) return;
    if (audit_job.empty()) {
      std::fprintf(stderr,
                   "sluice audit: give a job id (sluice audit JOB -o report.zip) or use "
                   "`sluice audit verify report.zip`\n");
      rc = 2;
      return;
    }
    rc = AuditBundleCommand(g, audit_job, audit_out);
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return rc;
}

}  // namespace sluice::cli
