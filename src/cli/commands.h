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
  std::string team;       // share the job with this team's members
};

struct EstimateFlags {
  std::string spec_path;
  double hours = 0;       // > 0 overrides the spec's expected_hours
  std::string objective;  // cost | time | price; empty: the spec's (default cost)
  int limit = 10;
  // > 0: the cost gate (issue 14 item 4). Exit 3 when the best offer's expected cost to complete
  // is over this many USD, or cannot be known; 0 under it.
  double fail_over = 0;
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
// A reclaimed (or noticed) node takes work again before its cool-down ends.
int NodeResumeCommand(const GlobalFlags& g, const std::string& node);
int NodeReclaimCommand(const GlobalFlags& g, const std::string& node, const std::vector<int>& gpus,
                       const std::string& cause);

// Trust (issue 5), in trust_commands.cc. Status exits 2 when the node is not verified.
int NodeStatusCommand(const GlobalFlags& g, const std::string& node);
// Asks the node to run its conformance suite; with `wait`, prints the server's verdict.
int NodeVerifyCommand(const GlobalFlags& g, const std::string& node, bool wait, double timeout_s);
// Node identity (issue 10 item 2): cuts a node off; its credential stops working at once.
int NodeRevokeCommand(const GlobalFlags& g, const std::string& node);
// Accounts and tenancy (issue 10 item 1), in account_commands.cc.
struct TokenFlags {
  std::string name;
  std::string scope = "full";  // full | read | metrics
  std::string kind = "api";    // api | join
  std::string account;         // admins: for another account
  std::string ttl;             // "90d", "12h", "30m", seconds; empty: never expires
  std::string out;             // write a token file (mode 0600) instead of printing the secret
};
int WhoamiCommand(const GlobalFlags& g);
int AccountCreateCommand(const GlobalFlags& g, const std::string& name, const std::string& role,
                         const std::string& out);
int AccountListCommand(const GlobalFlags& g);
// Money (issue 14), in money_commands.cc. `amount` and `credit_limit` are text as typed ("" when
// not given); amounts are parsed exactly.
// `sluice budget JOB USD|none`: sets a job's max_total_cost; a job its budget stopped resumes.
int JobBudgetCommand(const GlobalFlags& g, const std::string& job, const std::string& amount);
// `sluice budget --account|--team NAME --monthly USD|none [--webhook URL]`; `sluice budgets`.
int MonthlyBudgetCommand(const GlobalFlags& g, const std::string& account, const std::string& team,
                         const std::string& monthly, const std::string& webhook);
int BudgetsCommand(const GlobalFlags& g);
int AccountCreditCommand(const GlobalFlags& g, const std::string& account,
                         const std::string& amount, const std::string& credit_limit,
                         const std::string& memo);
int AccountBalanceCommand(const GlobalFlags& g, const std::string& account);
// Exit 1 when the ledger does not add up.
int LedgerCheckCommand(const GlobalFlags& g);
struct CostsFlags {
  std::string job, account, provider, since;
  std::string by = "job";  // job | day | node | resource | account | provider
  bool csv = false;
};
// `earnings`: the provider's view (sold, fee, earnings).
int CostsCommand(const GlobalFlags& g, const CostsFlags& f, bool earnings);
int AccountDisableCommand(const GlobalFlags& g, const std::string& name, bool disable);
int TokenCreateCommand(const GlobalFlags& g, const TokenFlags& f);
int TokenListCommand(const GlobalFlags& g, const std::string& account);
int TokenRevokeCommand(const GlobalFlags& g, const std::string& id);
int TeamAddCommand(const GlobalFlags& g, const std::string& team, const std::string& account);
int TeamRemoveCommand(const GlobalFlags& g, const std::string& team, const std::string& account);
int TeamListCommand(const GlobalFlags& g);
int AuditLogCommand(const GlobalFlags& g, const std::string& since, bool csv);
int AuditBundleCommand(const GlobalFlags& g, const std::string& job, const std::string& out);
int AuditVerifyCommand(const GlobalFlags& g, const std::string& path, const std::string& cert);

}  // namespace sluice::cli
