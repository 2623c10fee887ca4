// Accounts, money and audit: whoami, account, budget(s), ledger, costs, earnings, token, team,
// audit-log, audit (cli/command_group.h).
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

// accounts, tokens, teams (issue 10)
class AccountGroup final : public CommandGroup {
 public:
  using CommandGroup::CommandGroup;
  void Add(CLI::App& app) override {
    auto* whoami = app.add_subcommand("whoami", "The account, role and scope of the token in use");
    AddClientFlags(whoami, &g);
    whoami->callback([this] { rc = WhoamiCommand(g); });

    auto* account_cmd = app.add_subcommand(
        "account",
        "Accounts (admin): users submit jobs, providers own nodes, admins run the server");
    account_cmd->require_subcommand(1);
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
    acct_create->callback([this] { rc = AccountCreateCommand(g, acct_name, acct_role, acct_out); });
    auto* acct_list = account_cmd->add_subcommand("list", "Every account, with its role and state");
    AddClientFlags(acct_list, &g);
    acct_list->callback([this] { rc = AccountListCommand(g); });
    auto* acct_disable = account_cmd->add_subcommand(
        "disable", "Disable an account: its tokens and its nodes' credentials stop working");
    acct_disable->add_option("name", acct_name, "Account name or id")->required();
    AddClientFlags(acct_disable, &g);
    acct_disable->callback([this] { rc = AccountDisableCommand(g, acct_name, true); });
    auto* acct_enable = account_cmd->add_subcommand("enable", "Enable a disabled account again");
    acct_enable->add_option("name", acct_name, "Account name or id")->required();
    AddClientFlags(acct_enable, &g);
    acct_enable->callback([this] { rc = AccountDisableCommand(g, acct_name, false); });
    // Money (issue 14; README "Bills and earnings").
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
    budget->callback([this] {
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
    budgets->callback([this] { rc = BudgetsCommand(g); });
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
    acct_credit->callback([this] {
      rc = AccountCreditCommand(g, acct_name, credit_amount, credit_limit, credit_memo);
    });
    auto* acct_balance = account_cmd->add_subcommand(
        "balance", "An account's balance and credit limit (yours; admins: any)");
    acct_balance->add_option("name", acct_name, "Account name or id (default: yours)");
    AddClientFlags(acct_balance, &g);
    acct_balance->callback([this] { rc = AccountBalanceCommand(g, acct_name); });

    auto* ledger_cmd = app.add_subcommand("ledger", "The double-entry ledger (admin)");
    ledger_cmd->require_subcommand(1);
    auto* ledger_check = ledger_cmd->add_subcommand(
        "check",
        "Prove the ledger adds up: every transaction sums to zero, every balance equals the sum "
        "of its entries, and compute charged agrees across entries, meters and cost totals. Exit "
        "code 1 when anything does not");
    AddClientFlags(ledger_check, &g);
    ledger_check->callback([this] { rc = LedgerCheckCommand(g); });

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
    costs->callback([this] { rc = CostsCommand(g, costs_flags, false); });

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
    earnings->callback([this] { rc = CostsCommand(g, earn_flags, true); });

    auto* token_cmd = app.add_subcommand(
        "token",
        "API tokens: scoped (full, read, metrics), expiring, revocable; listed without "
        "their secrets");
    token_cmd->require_subcommand(1);
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
    tok_create->callback([this] { rc = TokenCreateCommand(g, tf); });
    auto* tok_list = token_cmd->add_subcommand("list", "Tokens of this account (admins: all)");
    tok_list->add_option("--account", tok_account, "Admins: only this account's");
    AddClientFlags(tok_list, &g);
    tok_list->callback([this] { rc = TokenListCommand(g, tok_account); });
    auto* tok_revoke = token_cmd->add_subcommand("revoke", "Revoke a token at once");
    tok_revoke->add_option("id", tok_id, "Token id (from `sluice token list`)")->required();
    AddClientFlags(tok_revoke, &g);
    tok_revoke->callback([this] { rc = TokenRevokeCommand(g, tok_id); });

    auto* team_cmd = app.add_subcommand(
        "team", "Teams share jobs deliberately: `sluice run --team T` makes a job visible to T");
    team_cmd->require_subcommand(1);
    auto* team_add = team_cmd->add_subcommand("add", "Add an account to a team (admin)");
    team_add->add_option("team", team_name, "Team name")->required();
    team_add->add_option("account", team_account, "Account name or id")->required();
    AddClientFlags(team_add, &g);
    team_add->callback([this] { rc = TeamAddCommand(g, team_name, team_account); });
    auto* team_remove = team_cmd->add_subcommand("remove", "Remove an account from a team (admin)");
    team_remove->add_option("team", team_name, "Team name")->required();
    team_remove->add_option("account", team_account, "Account name or id")->required();
    AddClientFlags(team_remove, &g);
    team_remove->callback([this] { rc = TeamRemoveCommand(g, team_name, team_account); });
    auto* team_list = team_cmd->add_subcommand("list", "Teams and members (yours; admins: all)");
    AddClientFlags(team_list, &g);
    team_list->callback([this] { rc = TeamListCommand(g); });
  }

 private:
  std::string acct_name, acct_role = "user", acct_out;
  std::string budget_job, budget_amount, budget_account, budget_team, budget_monthly,
      budget_webhook;
  std::string credit_amount, credit_limit, credit_memo;
  CostsFlags costs_flags;
  CostsFlags earn_flags;
  TokenFlags tf;
  std::string tok_account, tok_id;
  std::string team_name, team_account;
};

// audit
class AuditGroup final : public CommandGroup {
 public:
  using CommandGroup::CommandGroup;
  void Add(CLI::App& app) override {
    auto* audit_log = app.add_subcommand(
        "audit-log",
        "Every API mutation: time, actor (token id or agent), source address, action, target, "
        "parameters (secrets removed) and the answer's status, oldest first");
    audit_log->add_option("--since", audit_since,
                          "Only entries since: a duration ago (1h, 7d), a UTC time "
                          "(2026-11-30T08:00:00Z) or Unix milliseconds");
    audit_log->add_flag("--csv", audit_csv, "CSV (RFC 4180) instead of a table");
    AddClientFlags(audit_log, &g);
    audit_log->callback([this] { rc = AuditLogCommand(g, audit_since, audit_csv); });

    auto* audit = app.add_subcommand(
        "audit",
        "`sluice audit JOB -o report.zip` writes the job's signed audit bundle: "
        "environment-fingerprint.json, hardware-inventory.json, conformance-log.txt, "
        "cost-statement.json, events.jsonl, "
        "job.json, manifest.sha256 and signature.p7s (CMS, by the server's key). "
        "`sluice audit verify report.zip` checks one");
    audit->add_option("job", audit_job, "Job id");
    audit->add_option("-o,--output", audit_out,
                      "Where to write the bundle (default JOB-audit.zip)");
    AddClientFlags(audit, &g);
    auto* audit_verify = audit->add_subcommand(
        "verify",
        "Check a bundle: the CMS signature over manifest.sha256 against the signing certificate, "
        "and every file against the manifest (no file missing, changed or unlisted). Exit code 1 "
        "when anything fails");
    audit_verify->add_option("bundle", verify_path, "The .zip written by `sluice audit`")
        ->required();
    audit_verify->add_option("--cert", verify_cert,
                             "The signing certificate (PEM) to trust; default: fetch it from the "
                             "server's /v1/audit/certificate");
    AddClientFlags(audit_verify, &g);
    audit_verify->callback([this] { rc = AuditVerifyCommand(g, verify_path, verify_cert); });
    audit->callback([this, audit_verify] {
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
  }

 private:
  std::string audit_since;
  bool audit_csv = false;
  std::string audit_job, audit_out, verify_path, verify_cert;
};

}  // namespace

std::unique_ptr<CommandGroup> MakeAccountGroup(GlobalFlags& g, int& rc) {
  return std::make_unique<AccountGroup>(g, rc);
}

std::unique_ptr<CommandGroup> MakeAuditGroup(GlobalFlags& g, int& rc) {
  return std::make_unique<AuditGroup>(g, rc);
}

}  // namespace sluice::cli
