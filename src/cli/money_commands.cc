// Money on the command line (issue 14): `sluice account credit|balance`, `sluice ledger check`,
// `sluice costs` and `sluice earnings`. Amounts come from the server as integers in
// micro-dollars and are only formatted here (ledger/micros.h), never summed in floating point.
#include <cctype>
#include <cstdio>
#include <ctime>
#include <iostream>

#include "cli/api_client.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "ledger/micros.h"

namespace sluice::cli {
namespace {

int Fail(const Status& s) {
  std::fprintf(stderr, "sluice: %s\n", s.message().c_str());
  return 1;
}

Result<std::unique_ptr<ApiClient>> Connect(const GlobalFlags& g) {
  SLUICE_ASSIGN_OR_RETURN(ClientConfig cfg, ResolveClientConfig(g.server, g.token));
  return ApiClient::Create(cfg);
}

std::string M(const Json& obj, const char* key) {
  return ledger::FormatMicros(obj.value(key, int64_t{0}));
}

// A query parameter's value: letters, digits and -._: pass as they are; the rest is escaped.
std::string Escape(const std::string& v) {
  std::string out;
  for (unsigned char c : v) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == ':') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

std::string Csv(const std::string& v) {
  if (v.find_first_of(",\"\n") == std::string::npos) return v;
  std::string out = "\"";
  for (char c : v) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string Utc(int64_t ms) {
  if (ms <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// Micro-dollars as a plain decimal for CSV ("0.060000"): spreadsheets read it as a number.
std::string Decimal(int64_t micros) {
  std::string s = ledger::FormatMicros(micros);
  s.erase(s.find('$'), 1);
  const size_t dot = s.find('.');
  while (s.size() - dot < 7) s += '0';
  return s;
}

void PrintRows(const Json& resp, const CostsFlags& f, bool earnings) {
  const char* key_name = f.by == "day"        ? "DAY"
                         : f.by == "node"     ? "NODE"
                         : f.by == "resource" ? "RESOURCE"
                         : f.by == "account"  ? "ACCOUNT"
                         : f.by == "provider" ? "PROVIDER"
                                              : "JOB";
  if (f.csv) {
    std::cout << Csv(key_name)
              << ",charged_usd,fee_usd,earnings_usd,lost_usd,metered_s,credited_usd\n";
    for (const auto& r : resp["rows"]) {
      const int64_t charged = r.value("charged_micros", int64_t{0});
      const int64_t fee = r.value("fee_micros", int64_t{0});
      std::cout << Csv(r.value("key", "")) << "," << Decimal(charged) << "," << Decimal(fee) << ","
                << Decimal(r.value("earnings_micros", int64_t{0})) << ","
                << Decimal(r.value("lost_micros", int64_t{0})) << ","
                << r.value("metered_ms", int64_t{0}) / 1000 << ","
                << Decimal(r.value("credited_micros", int64_t{0})) << "\n";
    }
    return;
  }
  // SLA credits (README "SLA credits") come off the bill and off the provider's earnings.
  Table t = earnings ? Table({key_name, "SOLD", "SLA CREDITS", "EARNINGS", "FEE", "METERED"})
                     : Table({key_name, "CHARGED", "SLA CREDITS", "LOST TO INTERRUPTIONS",
                              "OF WHICH FEE", "METERED"});
  auto add = [&](const Json& r, const std::string& key) {
    const std::string metered = HumanDuration(r.value("metered_ms", int64_t{0}));
    if (earnings) {
      t.Add({key, M(r, "charged_micros"), M(r, "credited_micros"), M(r, "earnings_micros"),
             M(r, "fee_micros"), metered});
    } else {
      t.Add({key, M(r, "charged_micros"), M(r, "credited_micros"), M(r, "lost_micros"),
             M(r, "fee_micros"), metered});
    }
  };
  for (const auto& r : resp["rows"]) add(r, r.value("key", ""));
  add(resp["total"], "total");
  t.Print(std::cout);
}

}  // namespace

int AccountCreditCommand(const GlobalFlags& g, const std::string& account,
                         const std::string& amount, const std::string& credit_limit,
                         const std::string& memo) {
  Json body = Json::object();
  // Checked here too, so a typo is named before anything is sent.
  if (!amount.empty()) {
    auto a = ledger::ParseDollars(amount, "AMOUNT");
    if (!a.ok()) return Fail(a.status());
    body["amount"] = amount;
  }
  if (!credit_limit.empty()) {
    auto l = ledger::ParseCreditLimit(credit_limit, "--credit-limit");
    if (!l.ok()) return Fail(l.status());
    body["credit_limit"] = credit_limit;
  }
  if (body.empty()) {
    std::fprintf(stderr, "sluice: give an AMOUNT to add, --credit-limit, or both\n");
    return 2;
  }
  if (!memo.empty()) body["memo"] = memo;
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto resp = (*api)->Post("/v1/accounts/" + Escape(account) + "/credit", body);
  if (!resp.ok()) return Fail(resp.status());
  if (g.json) {
    std::cout << DumpJson(*resp, 2) << "\n";
    return 0;
  }
  if (!amount.empty()) {
    std::cout << "added " << ledger::FormatMicros(*ledger::ParseDollars(amount, "AMOUNT")) << " to "
              << account << "\n";
  }
  std::cout << account << ": balance " << resp->value("balance", "") << ", credit limit "
            << resp->value("credit_limit", "") << "\n";
  return 0;
}

int JobBudgetCommand(const GlobalFlags& g, const std::string& job, const std::string& amount) {
  Json body = Json::object();
  if (amount == "none") {
    body["max_total_cost"] = nullptr;
  } else {
    auto a = ledger::ParseDollars(amount, "USD");  // named before anything is sent
    if (!a.ok()) return Fail(a.status());
    if (*a <= 0) return Fail(Status::InvalidArgument("USD: must be more than $0, or `none`"));
    body["max_total_cost"] = amount;
  }
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto resp = (*api)->Post("/v1/jobs/" + Escape(job) + "/budget", body);
  if (!resp.ok()) return Fail(resp.status());
  const Json& j = (*resp)["job"];
  if (g.json) {
    std::cout << DumpJson(j, 2) << "\n";
    return 0;
  }
  std::cout << job << ": max_total_cost "
            << (amount == "none" ? std::string("removed")
                                 : ledger::FormatMicros(*ledger::ParseDollars(amount, "USD")))
            << "; " << j.value("state", "");
  const std::string reason = j.value("reason", "");
  if (!reason.empty()) std::cout << " (" << reason << ")";
  std::cout << "\n";
  return 0;
}

int MonthlyBudgetCommand(const GlobalFlags& g, const std::string& account, const std::string& team,
                         const std::string& monthly, const std::string& webhook) {
  if (!account.empty() && !team.empty()) {
    std::fprintf(stderr, "sluice: give --account or --team, not both\n");
    return 2;
  }
  if (monthly.empty()) {
    std::fprintf(stderr, "sluice: give --monthly USD (or none to remove the budget)\n");
    return 2;
  }
  Json body = Json::object();
  if (!account.empty()) body["account"] = account;
  if (!team.empty()) body["team"] = team;
  if (monthly == "none") {
    body["monthly"] = nullptr;
  } else {
    auto m = ledger::ParseDollars(monthly, "--monthly");  // named before anything is sent
    if (!m.ok()) return Fail(m.status());
    body["monthly"] = monthly;
  }
  if (!webhook.empty()) body["webhook"] = webhook;
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto resp = (*api)->Post("/v1/budgets", body);
  if (!resp.ok()) return Fail(resp.status());
  if (g.json) {
    std::cout << DumpJson(*resp, 2) << "\n";
    return 0;
  }
  std::cout << (account.empty() ? "team " + team : "account " + account) << ": monthly budget "
            << resp->value("monthly", "") << "\n";
  return 0;
}

int BudgetsCommand(const GlobalFlags& g) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto budgets = (*api)->Get("/v1/budgets");
  if (!budgets.ok()) return Fail(budgets.status());
  auto alerts = (*api)->Get("/v1/budget-alerts");
  if (!alerts.ok()) return Fail(alerts.status());
  if (g.json) {
    std::cout << DumpJson(Json{{"budgets", (*budgets)["budgets"]}, {"alerts", (*alerts)["alerts"]}},
                          2)
              << "\n";
    return 0;
  }
  Table t({"BUDGET", "MONTH", "SPENT", "MONTHLY", "USED", "WEBHOOK"});
  for (const auto& b : (*budgets)["budgets"]) {
    t.Add({b.value("name", ""), b.value("month", ""), b.value("spent", ""), b.value("monthly", ""),
           std::to_string(b.value("percent", int64_t{0})) + "%", b.value("webhook", "")});
  }
  if (t.empty()) {
    std::cout << "no monthly budgets (sluice budget --account NAME --monthly USD sets one)\n";
  } else {
    t.Print(std::cout);
  }
  Table a({"WHEN", "SCOPE", "MONTH", "AT", "SPENT", "OF", "WEBHOOK"});
  for (const auto& x : (*alerts)["alerts"]) {
    std::string hook = "-";
    if (x.value("delivered_ms", int64_t{0}) > 0) {
      hook = "delivered";
    } else if (x.value("attempts", 0) > 0) {
      hook = "failed " + std::to_string(x.value("attempts", 0)) + "x: " + x.value("last_error", "");
    }
    a.Add({Utc(x.value("ts_ms", int64_t{0})), x.value("scope", ""), x.value("month", ""),
           std::to_string(x.value("percent", 0)) + "%", x.value("spent", ""), x.value("budget", ""),
           hook});
  }
  if (!a.empty()) {
    std::cout << "\nalerts:\n";
    a.Print(std::cout);
  }
  return 0;
}

int AccountBalanceCommand(const GlobalFlags& g, const std::string& account) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  std::string name = account;
  if (name.empty()) {
    auto me = (*api)->Get("/v1/whoami");
    if (!me.ok()) return Fail(me.status());
    name = me->value("account", "");
  }
  auto resp = (*api)->Get("/v1/accounts/" + Escape(name) + "/balance");
  if (!resp.ok()) return Fail(resp.status());
  if (g.json) {
    std::cout << DumpJson(*resp, 2) << "\n";
    return 0;
  }
  std::cout << name << ": balance " << resp->value("balance", "") << ", credit limit "
            << resp->value("credit_limit", "") << "\n";
  return 0;
}

int LedgerCheckCommand(const GlobalFlags& g) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto resp = (*api)->Get("/v1/ledger/check");
  if (!resp.ok()) return Fail(resp.status());
  const bool ok = resp->value("ok", false);
  if (g.json) {
    std::cout << DumpJson(*resp, 2) << "\n";
    return ok ? 0 : 1;
  }
  std::cout << resp->value("transactions", int64_t{0}) << " transactions, "
            << resp->value("entries", int64_t{0}) << " entries\n"
            << "compute charged: " << M(*resp, "charged_by_entries_micros") << " by the entries, "
            << M(*resp, "charged_by_meters_micros") << " by the meters, "
            << M(*resp, "charged_by_totals_micros") << " by the cost totals\n";
  Table t({"ACCOUNT", "BALANCE"});
  for (const auto& b : (*resp)["balances"]) t.Add({b.value("account", ""), M(b, "balance_micros")});
  if (!t.empty()) t.Print(std::cout);
  if (ok) {
    std::cout << "ok: every transaction sums to zero and every balance equals its entries\n";
    return 0;
  }
  for (const auto& p : (*resp)["problems"])
    std::cout << "PROBLEM: " << p.get<std::string>() << "\n";
  return 1;
}

int CostsCommand(const GlobalFlags& g, const CostsFlags& f, bool earnings) {
  std::string q = "?by=" + Escape(f.by);
  if (!f.job.empty()) q += "&job=" + Escape(f.job);
  if (!f.account.empty()) q += "&account=" + Escape(f.account);
  if (!f.provider.empty()) q += "&provider=" + Escape(f.provider);
  if (!f.since.empty()) q += "&since=" + Escape(f.since);
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  if (earnings) {
    // A user's costs read as sales would mislead: earnings are a provider's (or an admin's) view.
    auto me = (*api)->Get("/v1/whoami");
    if (!me.ok()) return Fail(me.status());
    if (me->value("role", "") == "user") {
      std::fprintf(stderr,
                   "sluice: earnings are what a provider's nodes sold; a user's spending "
                   "is `sluice costs`\n");
      return 2;
    }
  }
  auto resp = (*api)->Get("/v1/costs" + q);
  if (!resp.ok()) return Fail(resp.status());
  if (g.json) {
    std::cout << DumpJson(*resp, 2) << "\n";
    return 0;
  }
  if (resp->contains("meters") && !f.csv) {
    // One job: each attempt's meter, the locked price and the span billed, so every line of the
    // bill can be traced.
    std::cout << "job " << f.job << ": " << M(*resp, "charged_micros") << " charged";
    if (resp->value("accruing_micros", int64_t{0}) > 0) {
      std::cout << " (+" << M(*resp, "accruing_micros") << " accruing, not yet billed)";
    }
    std::cout << ": compute " << M(*resp, "compute_micros") << " (of which "
              << M(*resp, "lost_micros") << " paid for work lost to interruptions), storage "
              << M(*resp, "storage_micros") << ", transfer " << M(*resp, "transfer_micros") << "\n";
    if (resp->value("credited_micros", int64_t{0}) > 0) {
      std::cout << "SLA credits: " << M(*resp, "credited_micros") << " paid back (see CREDIT)\n";
    }
    Table t({"ATTEMPT", "NODE", "RESOURCE", "LOCKED PRICE", "CAPACITY", "FROM (server)",
             "TO (server)", "BILLED", "CHARGED", "CREDIT", "END"});
    for (const auto& m : (*resp)["meters"]) {
      const int64_t end = m.value("end_ms", int64_t{0});
      t.Add({m.value("attempt_id", ""), m.value("node_id", ""),
             std::to_string(m.value("units", 0)) + " " + m.value("resource", ""),
             M(m, "price_micros_per_hour") + "/h",
             m.value("interruptible", false) ? "interruptible" : "on-demand",
             Utc(m.value("start_ms", int64_t{0})), end ? Utc(end) : "running",
             HumanDuration(m.value("settled_ms", int64_t{0}) - m.value("start_ms", int64_t{0})),
             M(m, "charged_micros"),
             m.value("credited_micros", int64_t{0}) > 0
                 ? M(m, "credited_micros") + ": " + m.value("credit_reason", "")
                 : "",
             m.value("end_cause", "")});
    }
    if (t.empty()) {
      std::cout << "  nothing metered yet: a job is billed from the moment its attempt starts\n";
    } else {
      t.Print(std::cout);
    }
    return 0;
  }
  PrintRows(*resp, f, earnings);
  if (resp->contains("credits") && !f.csv) {
    for (const auto& c : (*resp)["credits"]) {
      std::cout << "SLA credit " << M(c, "credited_micros") << " on attempt "
                << c.value("attempt_id", "") << " (" << c.value("node_id", "")
                << "): " << c.value("credit_reason", "") << "\n";
    }
  }
  return 0;
}

}  // namespace sluice::cli
