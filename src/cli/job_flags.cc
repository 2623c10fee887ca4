// Jobs and the market: run, jobs, job, logs, cancel, delete, offers, estimate, catalog, nodes, node
// (cli/command_group.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/command_group.h"
#include "cli/commands.h"

namespace sluice::cli {
namespace {

// run
class RunGroup final : public CommandGroup {
 public:
  using CommandGroup::CommandGroup;
  void Add(CLI::App& app) override {
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
    run->add_flag(
        "--dry-run", rf.dry_run,
        "Submit and upload nothing: parse the spec and print its environment fingerprint "
        "(the runtime contract's canonical JSON and sha256), check this machine's driver, "
        "CUDA, Python and PyTorch against the runtime contract, and list the offers that "
        "satisfy the whole job (or why none does). Exit code 0 when some offer does");
    AddClientFlags(run, &g);
    run->callback([this] { rc = RunCommand(g, rf); });
  }

 private:
  RunFlags rf;
};

// jobs / job / logs / cancel
class JobGroup final : public CommandGroup {
 public:
  using CommandGroup::CommandGroup;
  void Add(CLI::App& app) override {
    auto* jobs = app.add_subcommand("jobs", "List jobs, newest first");
    jobs->add_option("--state", state,
                     "Only jobs in this state (queued, starting, running, succeeded, failed, "
                     "cancelled, lost, budget-exhausted)");
    jobs->add_option("--limit", limit, "At most this many")
        ->check(CLI::Range(1, 10000))
        ->capture_default_str();
    AddClientFlags(jobs, &g);
    jobs->callback([this] { rc = JobsCommand(g, state, limit); });

    auto* job = app.add_subcommand("job", "Show a job: state, attempts, events");
    job->add_option("id", id, "Job id")->required();
    AddClientFlags(job, &g);
    job->callback([this] { rc = JobCommand(g, id); });

    auto* logs = app.add_subcommand("logs", "Print a job's output");
    logs->add_option("id", id, "Job id")->required();
    logs->add_flag("-f,--follow", follow_logs, "Keep streaming until the job ends");
    AddClientFlags(logs, &g);
    logs->callback([this] { rc = LogsCommand(g, id, follow_logs); });

    auto* cancel = app.add_subcommand(
        "cancel", "Cancel a job: SIGTERM to its process group, SIGKILL after the grace period");
    cancel->add_option("id", id, "Job id")->required();
    AddClientFlags(cancel, &g);
    cancel->callback([this] { rc = CancelCommand(g, id); });

    auto* del = app.add_subcommand(
        "delete",
        "Delete a finished job with its logs, events and checkpoints (frees their storage)");
    del->add_option("id", id, "Job id")->required();
    AddClientFlags(del, &g);
    del->callback([this] { rc = DeleteCommand(g, id); });
  }

 private:
  std::string state;
  int limit = 50;
  std::string id;
  bool follow_logs = false;
};

// market
class OffersGroup final : public CommandGroup {
 public:
  using CommandGroup::CommandGroup;
  void Add(CLI::App& app) override {
    auto* offers = app.add_subcommand(
        "offers",
        "Query the market: agent nodes and imported cloud catalogs.\n"
        "  sluice offers 'gpu=a100-80gb gpus>=4 price<2.5 region=us-* cuda>=12.1' -o price,-perf\n"
        "Fields: gpu model gpus vram price spot_price provider node region zone form interconnect\n"
        "cc driver cuda toolkit torch cpus memory disk reliability health perf verified source "
        "id;\n"
        "ops: = != < <= > >= in [a,b] notin [a,b]; globs (*, ?) on strings; units (40GB).");
    offers->add_option("query", offer_query, "Filter, e.g. 'gpu=h100 gpus>=8 price<3'");
    offers->add_option("-o,--sort", offer_sort, "Sort keys, '-' for descending (default: price)");
    offers->add_option("--limit", offer_limit, "At most this many")
        ->check(CLI::Range(1, 100000))
        ->capture_default_str();
    AddClientFlags(offers, &g);
    offers->callback([this] { rc = OffersCommand(g, offer_query, offer_sort, offer_limit); });
  }

 private:
  std::string offer_query, offer_sort;
  int offer_limit = 50;
};

// estimate
class EstimateGroup final : public CommandGroup {
 public:
  using CommandGroup::CommandGroup;
  void Add(CLI::App& app) override {
    auto* estimate = app.add_subcommand(
        "estimate",
        "Rank the offers a job could use by expected cost to complete, and say why.\n"
        "  expected cost = price × (hours ÷ perf) × (1 + interruption overhead) + storage\n"
        "hours: the job's run time on the reference GPU (a100-80gb), from the spec's "
        "expected_hours "
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
    estimate->callback([this] { rc = EstimateCommand(g, ef); });

    auto* catalog = app.add_subcommand("catalog", "Manage cloud price catalogs");
    catalog->require_subcommand(1);
    auto* catalog_import = catalog->add_subcommand(
        "import",
        "Import cloud price catalog CSVs as comparable (not launchable) offers; a "
        "re-import replaces that provider's offers");
    catalog_import->add_option("files", catalog_files, "CSV files, e.g. data/catalog/*.csv")
        ->required();
    AddClientFlags(catalog_import, &g);
    catalog_import->callback([this] { rc = CatalogImportCommand(g, catalog_files); });
    auto* nodes = app.add_subcommand("nodes", "List registered nodes");
    AddClientFlags(nodes, &g);
    nodes->callback([this] { rc = NodesCommand(g); });
    auto* node_cmd = app.add_subcommand("node", "Act on one node (provider operations)");
    node_cmd->require_subcommand(1);
    auto* reclaim = node_cmd->add_subcommand(
        "reclaim",
        "Take a node (or some of its GPUs) back: the attempts there are preempted (SIGTERM, "
        "grace period, SIGKILL, final checkpoint) and their jobs requeued elsewhere");
    reclaim->add_option("node", reclaim_node, "Node id or name")->required();
    reclaim->add_option("--gpus", reclaim_gpus, "Only the attempts using these GPU indices")
        ->delimiter(',');
    reclaim->add_option("--cause", reclaim_cause, "Why, recorded with the attempt");
    AddClientFlags(reclaim, &g);
    reclaim->callback(
        [this] { rc = NodeReclaimCommand(g, reclaim_node, reclaim_gpus, reclaim_cause); });
    auto* resume = node_cmd->add_subcommand(
        "resume",
        "Put a reclaimed node (or one that had a spot-termination notice) back in the market "
        "before its cool-down (sluice server --reclaim-cooldown) ends");
    resume->add_option("node", resume_node, "Node id or name")->required();
    AddClientFlags(resume, &g);
    resume->callback([this] { rc = NodeResumeCommand(g, resume_node); });

    auto* node_status = node_cmd->add_subcommand(
        "status",
        "A node's verification (verified, unverified, deverified) with the server's reasons, its "
        "hardware and software fingerprints, reliability score and last conformance report. "
        "Exit code 2 when it is not verified");
    node_status->add_option("node", status_node, "Node id or name")->required();
    AddClientFlags(node_status, &g);
    node_status->callback([this] { rc = NodeStatusCommand(g, status_node); });

    auto* node_verify = node_cmd->add_subcommand(
        "verify",
        "Run the node's conformance suite now and show the server's verdict (exit code 2 when "
        "the node is not verified)");
    node_verify->add_option("node", verify_node, "Node id or name")->required();
    node_verify->add_flag("--no-wait", verify_no_wait,
                          "Ask and return; do not wait for the report");
    node_verify->add_option("--timeout", verify_timeout, "Seconds to wait for the report")
        ->capture_default_str();
    AddClientFlags(node_verify, &g);
    node_verify->callback(
        [this] { rc = NodeVerifyCommand(g, verify_node, !verify_no_wait, verify_timeout); });

    auto* node_revoke = node_cmd->add_subcommand(
        "revoke",
        "Cut a node off: its credential stops working, its agent is disconnected (and exits), its "
        "offers leave the market and its running jobs are requeued elsewhere. To bring the "
        "machine back, enrol it again as a new node");
    node_revoke->add_option("node", revoke_node, "Node id or name")->required();
    AddClientFlags(node_revoke, &g);
    node_revoke->callback([this] { rc = NodeRevokeCommand(g, revoke_node); });
  }

 private:
  EstimateFlags ef;
  std::vector<std::string> catalog_files;
  std::string reclaim_node, reclaim_cause;
  std::vector<int> reclaim_gpus;
  std::string resume_node;
  std::string status_node;
  std::string verify_node;
  bool verify_no_wait = false;
  double verify_timeout = 300;
  std::string revoke_node;
};

}  // namespace

std::unique_ptr<CommandGroup> MakeRunGroup(GlobalFlags& g, int& rc) {
  return std::make_unique<RunGroup>(g, rc);
}

std::unique_ptr<CommandGroup> MakeJobGroup(GlobalFlags& g, int& rc) {
  return std::make_unique<JobGroup>(g, rc);
}

std::unique_ptr<CommandGroup> MakeOffersGroup(GlobalFlags& g, int& rc) {
  return std::make_unique<OffersGroup>(g, rc);
}

std::unique_ptr<CommandGroup> MakeEstimateGroup(GlobalFlags& g, int& rc) {
  return std::make_unique<EstimateGroup>(g, rc);
}

}  // namespace sluice::cli
