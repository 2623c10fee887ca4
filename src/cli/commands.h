// The user-facing subcommands. Each returns the process exit code: 0 on success, 1 for an
// error from the server or the environment, 2 for a usage error; `run` in follow mode returns
// the job's own exit code.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "spec/job_spec.h"

namespace sluice::cli {

struct GlobalFlags {
  std::string server;
  std::string token;
  bool json = false;
};

struct RunFlags {
  std::string spec_path;
  bool follow = false;
  bool detach = false;
  bool queue = false;     // queue even when no registered node can ever run it
  std::string objective;  // overrides the spec's objective when set
  bool dry_run = false;   // check the spec, this machine and the market; submit nothing
};

struct EstimateFlags {
  std::string spec_path;
  double hours = 0;       // > 0 overrides the spec's expected_hours
  std::string objective;  // cost | time | price; empty: the spec's (default cost)
  int limit = 10;
};

int RunCommand(const GlobalFlags& g, const RunFlags& f);
// Reads and parses a job spec file; errors carry file:line:col. A GPU short form that covers
// several labels is noted on stderr (`a100` = a100-40gb | a100-80gb).
Result<spec::JobSpec> ReadJobSpec(const std::string& path);
int JobsCommand(const GlobalFlags& g, const std::string& state, int limit);
int JobCommand(const GlobalFlags& g, const std::string& id);
int LogsCommand(const GlobalFlags& g, const std::string& id, bool follow);
int CancelCommand(const GlobalFlags& g, const std::string& id);
// Deletes a finished job with its logs, events and checkpoints.
int DeleteCommand(const GlobalFlags& g, const std::string& id);
// `query` is the offer query language (market/query.h), `sort` like "price,-perf".
int OffersCommand(const GlobalFlags& g, const std::string& query, const std::string& sort,
                  int limit);
// Ranks the offers a job spec could use by expected cost (or time, or price) to complete.
int EstimateCommand(const GlobalFlags& g, const EstimateFlags& f);
int CatalogImportCommand(const GlobalFlags& g, const std::vector<std::string>& files);
int NodesCommand(const GlobalFlags& g);
// Preempts what runs on a node (or on some of its GPUs): the provider takes it back.
int NodeReclaimCommand(const GlobalFlags& g, const std::string& node, const std::vector<int>& gpus,
                       const std::string& cause);

// Trust (issue 5), in trust_commands.cc. Status exits 2 when the node is not verified.
int NodeStatusCommand(const GlobalFlags& g, const std::string& node);
// Asks the node to run its conformance suite; with `wait`, prints the server's verdict.
int NodeVerifyCommand(const GlobalFlags& g, const std::string& node, bool wait, double timeout_s);
int AuditLogCommand(const GlobalFlags& g, const std::string& since, bool csv);
int AuditBundleCommand(const GlobalFlags& g, const std::string& job, const std::string& out);
int AuditVerifyCommand(const GlobalFlags& g, const std::string& path, const std::string& cert);

}  // namespace sluice::cli
