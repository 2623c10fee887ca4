// The API's money routes (issue 14): balances and top-ups, the ledger check, cost reports and
// providers' earnings. Amounts travel as integers in micro-dollars (`*_micros`) beside a
// formatted string for people; the CLI never does arithmetic on floats.
#include <ctime>
#include <set>

#include "ledger/micros.h"
#include "server/api.h"
#include "server/api_util.h"
#include "server/webhook.h"

namespace sluice::server {
namespace {

Json CostRowToJson(const store::CostRow& r) {
  return Json{{"key", r.key},
              {"charged_micros", r.charged_micros},
              {"fee_micros", r.fee_micros},
              // Fees are net of the fee given back with SLA credits, so this is exact.
              {"earnings_micros", r.charged_micros - r.credited_micros - r.fee_micros},
              {"credited_micros", r.credited_micros},
              {"net_micros", r.charged_micros - r.credited_micros},
              {"lost_micros", r.lost_micros},
              {"metered_ms", r.metered_ms}};
}

Json MeterToJson(const store::MeterRecord& m) {
  return Json{{"attempt_id", m.attempt_id},
              {"node_id", m.node_id},
              {"resource", m.resource},
              {"units", m.units},
              {"memory_gb", m.memory_gb},
              {"price_micros_per_hour", m.price_micros_per_hour},
              {"interruptible", m.interruptible},
              {"start_ms", m.start_ms},
              {"end_ms", m.end_ms},
              {"settled_ms", m.settled_ms},
              {"charged_micros", m.charged_micros},
              {"fee_micros", m.fee_micros},
              {"lost_micros", m.lost_micros},
              {"credited_micros", m.credited_micros},
              {"credit_reason", m.credit_reason},
              {"end_cause", m.end_cause}};
}

// `since`: unix milliseconds, a UTC day ("2026-12-01"), or an age ("7d", "12h").
Result<int64_t> ParseSince(const std::string& text, int64_t now_ms) {
  if (text.empty()) return int64_t{0};
  auto bad = Status::InvalidArgument("since: \"" + text +
                                     "\" is not a UTC day (2026-12-01), an age (7d, 12h) or unix "
                                     "milliseconds");
  if (text.size() == 10 && text[4] == '-' && text[7] == '-') {
    std::tm tm{};
    if (strptime(text.c_str(), "%Y-%m-%d", &tm) == nullptr) return bad;
    return static_cast<int64_t>(timegm(&tm)) * 1000;
  }
  const char unit = text.back();
  if (unit == 'd' || unit == 'h') {
    int64_t n = 0;
    for (size_t i = 0; i + 1 < text.size(); ++i) {
      if (text[i] < '0' || text[i] > '9' || n > 100000) return bad;
      n = n * 10 + (text[i] - '0');
    }
    if (text.size() < 2) return bad;
    return now_ms - n * (unit == 'd' ? 86'400'000 : 3'600'000);
  }
  int64_t ms = 0;
  for (char c : text) {
    if (c < '0' || c > '9' || ms > 100'000'000'000'000LL) return bad;
    ms = ms * 10 + (c - '0');
  }
  return ms;
}

// An amount in a JSON body: a string ("0.25", exact) or a number.
Result<int64_t> AmountField(const Json& body, const char* key, bool limit) {
  const Json& v = body.at(key);
  std::string text;
  if (v.is_string()) {
    text = v.get<std::string>();
  } else if (v.is_number()) {
    text = v.dump();
  } else {
    return Status::InvalidArgument(std::string(key) + ": expected an amount in dollars");
  }
  return limit ? ledger::ParseCreditLimit(text, key) : ledger::ParseDollars(text, key);
}

}  // namespace

Json Api::AccountMoneyJson(const store::AccountRecord& a) {
  const int64_t balance = core_->BalanceOf(a.id);
  return Json{{"account", a.name},
              {"account_id", a.id},
              {"balance_micros", balance},
              {"balance", ledger::FormatMicros(balance)},
              {"credit_limit_micros", a.credit_limit_micros},
              {"credit_limit", ledger::FormatCreditLimit(a.credit_limit_micros)}};
}

HttpResponse Api::SetBudget(const Principal& who, const HttpRequest& req) {
  auto body = ObjectBody(req);
  if (!body.ok()) return ErrorResponse(body.status());
  if (Status s = OnlyFields(*body, {"account", "team", "monthly", "webhook"}); !s.ok()) {
    return ErrorResponse(s);
  }
  const bool admin = who.role == Role::kAdmin;
  auto account = GetStringOr(*body, "account", "");
  auto team = GetStringOr(*body, "team", "");
  auto webhook = GetStringOr(*body, "webhook", "");
  for (const auto* r : {&account, &team, &webhook}) {
    if (!r->ok()) return ErrorResponse(r->status());
  }
  if (account->empty() == team->empty()) {
    return ErrorResponse(Status::InvalidArgument("expected one of `account` and `team`"));
  }
  if (!body->contains("monthly")) {
    return ErrorResponse(
        Status::InvalidArgument("expected `monthly`: USD per month, or null to remove it"));
  }
  std::string scope;
  if (!account->empty()) {
    auto acc = accounts_->FindAccount(*account);
    // Another account's budget is not even confirmed to exist.
    if (!acc || (!admin && acc->id != who.account_id)) {
      return ErrorResponse(Status::NotFound("no account " + *account));
    }
    scope = "account:" + acc->id;
  } else {
    // Teams are an admin's to manage (their members share jobs, and so the team's budget).
    if (!admin) {
      return ErrorResponse(Status::PermissionDenied("only an admin sets a team's budget"));
    }
    if (team->size() > 64) return ErrorResponse(Status::InvalidArgument("team: at most 64 bytes"));
    scope = "team:" + *team;
  }
  std::optional<int64_t> monthly;
  if (!body->at("monthly").is_null()) {
    auto m = AmountField(*body, "monthly", false);
    if (!m.ok()) return ErrorResponse(m.status());
    if (*m <= 0) return ErrorResponse(Status::InvalidArgument("monthly: must be more than $0"));
    monthly = *m;
  }
  if (webhook->size() > 2048) {
    return ErrorResponse(Status::InvalidArgument("webhook: at most 2048 bytes"));
  }
  if (!webhook->empty()) {
    Status ok = CheckWebhookUrl(*webhook, options_.allow_private_webhooks, /*resolve=*/false);
    if (!ok.ok()) return ErrorResponse(ok);
  }
  auto r = core_->SetMonthlyBudget(scope, monthly, *webhook);
  if (!r.ok()) return ErrorResponse(r.status());
  return JsonResponse(200, Json{{"scope", r->scope},
                                {"monthly_micros", r->monthly_micros},
                                {"monthly", monthly ? ledger::FormatMicros(*monthly) : "none"},
                                {"webhook", r->webhook}});
}

HttpResponse Api::MoneyRoute(const Call& call, const HttpRequest& req) {
  const std::string pattern = call.route->pattern;
  const Principal& who = call.who;
  const bool admin = who.role == Role::kAdmin;

  if (pattern == "/v1/accounts/{account}/credit") {
    auto body = ObjectBody(req);
    if (!body.ok()) return ErrorResponse(body.status());
    if (Status s = OnlyFields(*body, {"amount", "credit_limit", "memo"}); !s.ok()) {
      return ErrorResponse(s);
    }
    if (!body->contains("amount") && !body->contains("credit_limit")) {
      return ErrorResponse(Status::InvalidArgument("expected `amount`, `credit_limit` or both"));
    }
    auto acc = accounts_->FindAccount(call.params.at("account"));
    if (!acc) return ErrorResponse(Status::NotFound("no account " + call.params.at("account")));
    auto memo = GetStringOr(*body, "memo", "");
    if (!memo.ok()) return ErrorResponse(memo.status());
    if (memo->size() > 256)
      return ErrorResponse(Status::InvalidArgument("memo: at most 256 bytes"));
    // Both parsed before either is applied: a bad limit must not leave a top-up behind.
    std::optional<int64_t> amount, limit;
    if (body->contains("amount")) {
      auto a = AmountField(*body, "amount", false);
      if (!a.ok()) return ErrorResponse(a.status());
      if (*a <= 0) return ErrorResponse(Status::InvalidArgument("amount: must be more than $0"));
      amount = *a;
    }
    if (body->contains("credit_limit")) {
      auto l = AmountField(*body, "credit_limit", true);
      if (!l.ok()) return ErrorResponse(l.status());
      limit = *l;
    }
    if (limit) {
      auto updated = accounts_->SetCreditLimit(acc->id, *limit);
      if (!updated.ok()) return ErrorResponse(updated.status());
      acc = *updated;
    }
    Json out = Json::object();
    if (amount) {
      std::string why = memo->empty() ? "top-up by " + who.account_name : *memo;
      auto txn = core_->TopUp(acc->id, *amount, why);
      if (!txn.ok()) return ErrorResponse(txn.status());
      out["transaction_ts_ms"] = txn->ts_ms;
    } else {
      core_->CreditChanged(acc->id);  // a raised limit may let waiting jobs run
    }
    out.update(AccountMoneyJson(*acc));
    return JsonResponse(200, out);
  }
  if (pattern == "/v1/jobs/{job}/budget") {
    // Raise (or lower, or remove with null) a job's max_total_cost; a job its budget stopped
    // resumes from its checkpoint.
    auto body = ObjectBody(req);
    if (!body.ok()) return ErrorResponse(body.status());
    if (Status s = OnlyFields(*body, {"max_total_cost"}); !s.ok()) return ErrorResponse(s);
    if (!body->contains("max_total_cost")) {
      return ErrorResponse(Status::InvalidArgument(
          "expected `max_total_cost`: an amount in dollars, or null to remove the budget"));
    }
    std::optional<double> budget;
    if (!body->at("max_total_cost").is_null()) {
      auto a = AmountField(*body, "max_total_cost", false);
      if (!a.ok()) return ErrorResponse(a.status());
      if (*a <= 0) {
        return ErrorResponse(Status::InvalidArgument("max_total_cost: must be more than $0"));
      }
      budget = static_cast<double>(*a) / 1e6;
    }
    auto job = core_->SetJobBudget(call.params.at("job"), budget);
    if (!job.ok()) return ErrorResponse(job.status());
    return JsonResponse(200, Json{{"job", RedactJobEnv(JobToJson(*job))}});
  }
  if (pattern == "/v1/budgets" && req.method == "POST") return SetBudget(who, req);
  if (pattern == "/v1/budgets" || pattern == "/v1/budget-alerts") {
    // Yours: your account's and your teams'; an admin's: all.
    std::set<std::string> mine = {"account:" + who.account_id};
    for (const auto& t : accounts_->TeamsOf(who.account_id)) mine.insert("team:" + t);
    auto visible = [&](const std::string& scope) { return admin || mine.count(scope) > 0; };
    if (pattern == "/v1/budgets") {
      Json arr = Json::array();
      for (const auto& v : core_->ListBudgets()) {
        if (!visible(v.budget.scope)) continue;
        const int64_t budget = v.budget.monthly_micros;
        arr.push_back(Json{{"scope", v.budget.scope},
                           {"name", v.name},
                           {"month", v.month},
                           {"monthly_micros", budget},
                           {"monthly", ledger::FormatMicros(budget)},
                           {"spent_micros", v.spent_micros},
                           {"spent", ledger::FormatMicros(v.spent_micros)},
                           {"percent", budget > 0 ? v.spent_micros * 100 / budget : 0},
                           {"webhook", v.budget.webhook}});
      }
      return JsonResponse(200, Json{{"budgets", arr}});
    }
    auto alerts = core_->BudgetAlerts(false);
    if (!alerts.ok()) return ErrorResponse(alerts.status());
    Json arr = Json::array();
    for (const auto& a : *alerts) {
      if (visible(a.scope)) arr.push_back(AlertToJson(a, a.scope));
    }
    return JsonResponse(200, Json{{"alerts", arr}});
  }
  if (pattern == "/v1/accounts/{account}/balance") {
    auto acc = accounts_->FindAccount(call.params.at("account"));
    // Another account's balance is not even confirmed to exist.
    if (!acc || (!admin && acc->id != who.account_id)) {
      return ErrorResponse(Status::NotFound("no account " + call.params.at("account")));
    }
    return JsonResponse(200, AccountMoneyJson(*acc));
  }
  if (pattern == "/v1/ledger/check") {
    auto report = core_->CheckLedger();
    if (!report.ok()) return ErrorResponse(report.status());
    Json balances = Json::array();
    for (const auto& [account, micros] : report->check.balances) {
      auto acc = accounts_->FindAccount(account);
      balances.push_back(Json{{"account", acc ? acc->name : account},
                              {"account_id", account},
                              {"balance_micros", micros},
                              {"balance", ledger::FormatMicros(micros)}});
    }
    const auto& c = report->check;
    return JsonResponse(200, Json{{"ok", report->problems.empty()},
                                  {"problems", report->problems},
                                  {"transactions", c.transactions},
                                  {"entries", c.entries},
                                  {"charged_by_entries_micros", c.charged_by_entries},
                                  {"charged_by_meters_micros", c.charged_by_meters},
                                  {"charged_by_totals_micros", c.charged_by_totals},
                                  {"balances", balances}});
  }
  // GET /v1/costs
  store::CostQuery q;
  q.by = QueryParam(req, "by");
  if (q.by.empty()) q.by = "job";
  auto since = ParseSince(QueryParam(req, "since"), clock_->NowMillis());
  if (!since.ok()) return ErrorResponse(since.status());
  q.since_ms = *since;
  auto account_of = [&](const char* key) -> Result<std::string> {
    const std::string name = QueryParam(req, key);
    if (name.empty()) return std::string();
    auto acc = accounts_->FindAccount(name);
    if (!acc) return Status::NotFound(std::string(key) + ": no account " + name);
    return acc->id;
  };
  auto payer = account_of("account");
  if (!payer.ok()) return ErrorResponse(payer.status());
  auto provider = account_of("provider");
  if (!provider.ok()) return ErrorResponse(provider.status());
  q.payer = *payer;
  q.provider = *provider;
  q.job_id = QueryParam(req, "job");
  // A user sees what it pays, a provider what its nodes earned; only admins see the rest.
  if (!admin) {
    if (who.role == Role::kProvider) {
      if (!q.payer.empty() || (!q.provider.empty() && q.provider != who.account_id)) {
        return ErrorResponse(Status::PermissionDenied("a provider sees its own nodes' earnings"));
      }
      q.provider = who.account_id;
    } else {
      if (!q.provider.empty() || (!q.payer.empty() && q.payer != who.account_id)) {
        return ErrorResponse(Status::PermissionDenied("only admins see other accounts' costs"));
      }
      if (q.job_id.empty()) q.payer = who.account_id;
    }
  }
  Json out{{"by", q.by}, {"since_ms", q.since_ms}};
  if (!q.job_id.empty() && (admin || who.role == Role::kUser)) {
    if (Status s = CheckJob(who, q.job_id, false, nullptr); !s.ok()) return ErrorResponse(s);
    auto cost = core_->CostOfJob(q.job_id);
    if (!cost.ok()) return ErrorResponse(cost.status());
    Json meters = Json::array();
    for (const auto& m : cost->meters) meters.push_back(MeterToJson(m));
    out["job"] = q.job_id;
    out["meters"] = meters;
    out["charged_micros"] = cost->charged_micros;
    out["accruing_micros"] = cost->accruing_micros;
    out["fee_micros"] = cost->fee_micros;
    out["lost_micros"] = cost->lost_micros;
    out["credited_micros"] = cost->credited_micros;
    out["compute_micros"] = cost->compute_micros;
    out["storage_micros"] = cost->storage_micros;
    out["transfer_micros"] = cost->transfer_micros;
    out["estimate_micros"] = cost->estimate_micros;
    q.payer.clear();  // the job's own rows, whoever pays (a team's job)
  } else if (!q.job_id.empty() && who.role == Role::kProvider) {
    // SLA credits are visible to both parties: the provider sees each credit on its nodes and
    // the rule behind it (nothing else of the user's bill).
    if (Status s = CheckJob(who, q.job_id, false, nullptr); !s.ok()) return ErrorResponse(s);
    auto cost = core_->CostOfJob(q.job_id);
    if (!cost.ok()) return ErrorResponse(cost.status());
    Json credits = Json::array();
    for (const auto& m : cost->meters) {
      if (m.provider != who.account_id || m.credited_micros <= 0) continue;
      credits.push_back(Json{{"attempt_id", m.attempt_id},
                             {"node_id", m.node_id},
                             {"credited_micros", m.credited_micros},
                             {"credit_reason", m.credit_reason}});
    }
    out["job"] = q.job_id;
    out["credits"] = credits;
  }
  auto rows = core_->Costs(q);
  if (!rows.ok()) return ErrorResponse(rows.status());
  Json arr = Json::array();
  store::CostRow total;
  for (const auto& r : *rows) {
    arr.push_back(CostRowToJson(r));
    total.charged_micros += r.charged_micros;
    total.fee_micros += r.fee_micros;
    total.lost_micros += r.lost_micros;
    total.credited_micros += r.credited_micros;
    total.metered_ms += r.metered_ms;
  }
  total.key = "total";
  out["rows"] = arr;
  out["total"] = CostRowToJson(total);
  return JsonResponse(200, out);
}

}  // namespace sluice::server
