// Monthly budgets of accounts and teams (issue 15 item 1; README "Budgets";
// docs/design-notes.md "Budgets"). What a scope is charged in a UTC calendar month (net of SLA
// credits, every resource) raises an alert at 50, 80 and 100 % of its budget, in the commit of
// the charge that crossed it, as a job event and a stored alert a webhook is sent from. At 100 %
// the scope's jobs are stopped the way a job budget stops them, and new ones wait, until the
// budget is raised or the month ends. Members of ServerCore; the caller holds mu_ unless a method
// takes it.
#include <algorithm>
#include <array>

#include "ledger/metering.h"
#include "server/accounts.h"
#include "server/core_internal.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

namespace {

constexpr std::array<int, 3> kAlertPercents = {50, 80, 100};

std::string Usd(int64_t micros) { return ledger::FormatMicros(micros); }

std::string AlertKey(const std::string& scope, const std::string& month, int percent) {
  return scope + "|" + month + "|" + std::to_string(percent);
}

}  // namespace

std::string ServerCore::MonthLocked() const { return Utc(clock_->NowMillis(), "%Y-%m"); }

std::string ServerCore::ScopeNameLocked(const std::string& scope) const {
  if (scope.rfind("account:", 0) == 0 && accounts_ != nullptr) {
    if (auto a = accounts_->FindAccount(scope.substr(8))) return "account " + a->name;
  }
  return scope.rfind("team:", 0) == 0 ? "team " + scope.substr(5) : scope;
}

std::vector<std::string> ServerCore::BudgetScopesLocked(const std::string& payer,
                                                        const std::string& team) const {
  std::vector<std::string> out;
  if (money_.budgets.count("account:" + payer)) out.push_back("account:" + payer);
  if (!team.empty() && money_.budgets.count("team:" + team)) out.push_back("team:" + team);
  return out;
}

int64_t ServerCore::ScopeSpentLocked(const std::string& scope) const {
  const std::string month = MonthLocked();
  auto cached = money_.month_spent.find(scope);
  if (cached != money_.month_spent.end() && cached->second.first == month)
    return cached->second.second;
  auto spent = store_->ScopeSpend(scope, month + "-01");
  if (!spent.ok()) {
    std::fprintf(stderr, "sluice server: reading the month's spend of %s failed (%s)\n",
                 scope.c_str(), spent.status().ToString().c_str());
    return INT64_MAX / 4;  // unknown is not zero: nothing overspends on a read error
  }
  money_.month_spent[scope] = {month, *spent};
  return *spent;
}

std::string ServerCore::MonthlyRefusalLocked(const std::string& owner,
                                             const std::string& team) const {
  for (const auto& scope : BudgetScopesLocked(PayerLocked(owner), team)) {
    const int64_t budget = money_.budgets.at(scope).monthly_micros;
    const int64_t spent = ScopeSpentLocked(scope);
    if (spent < budget) continue;
    const std::string name = ScopeNameLocked(scope);  // "account alice", "team ml"
    return std::string(kMonthlyStop) + ": " + name + " spent " + Usd(spent) + " of its " +
           Usd(budget) + " for " + MonthLocked() + " (`sluice budget --" + name +
           " --monthly USD` raises it; it resets when the month ends)";
  }
  return "";
}

void ServerCore::NoteBudgetAlertsLocked(Edit& edit) {
  if (money_.budgets.empty()) return;
  const std::string month = MonthLocked();
  std::map<std::string, int64_t> staged;      // scope -> net charged by this edit this month
  std::map<std::string, std::string> job_of;  // scope -> a job whose charge it is (its event)
  for (const auto& d : edit.batch.cost_deltas) {
    if (d.day.rfind(month, 0) != 0) continue;
    const JobState* js = ViewJobLocked(edit, d.job_id);
    for (const auto& scope : BudgetScopesLocked(d.payer, js != nullptr ? js->record.team : "")) {
      staged[scope] += d.charged_micros - d.credited_micros;
      job_of.try_emplace(scope, d.job_id);
    }
  }
  for (const auto& [scope, net] : staged) {
    const store::BudgetRecord& b = money_.budgets.at(scope);
    const int64_t spent = ScopeSpentLocked(scope) + net;
    for (int percent : kAlertPercents) {
      const std::string key = AlertKey(scope, month, percent);
      if (static_cast<__int128>(spent) * 100 < static_cast<__int128>(b.monthly_micros) * percent ||
          money_.alerts_raised.count(key) || edit.alerts.count(key)) {
        continue;
      }
      store::BudgetAlert a;
      a.scope = scope;
      a.month = month;
      a.percent = percent;
      a.ts_ms = clock_->NowMillis();
      a.spent_micros = spent;
      a.budget_micros = b.monthly_micros;
      a.webhook = b.webhook;
      edit.batch.budget_alerts.push_back(a);
      edit.alerts.insert(key);
      edit.batch.events.push_back(EventLocked(
          job_of.at(scope), "budget-alert",
          "monthly budget of " + ScopeNameLocked(scope) + ": " + std::to_string(percent) +
              "% used (" + Usd(spent) + " of " + Usd(b.monthly_micros) + " in " + month + ")" +
              (percent == 100 ? "; its jobs are stopped safely and new ones wait" : "")));
    }
  }
}

Result<store::BudgetRecord> ServerCore::SetMonthlyBudget(const std::string& scope,
                                                         std::optional<int64_t> monthly_micros,
                                                         const std::string& webhook) {
  if (monthly_micros && *monthly_micros <= 0) {
    return Status::InvalidArgument("monthly: must be more than $0");
  }
  std::lock_guard<TimedMutex> lock(mu_);
  Edit edit;
  store::BudgetRecord r;
  r.scope = scope;
  r.monthly_micros = monthly_micros.value_or(0);
  r.webhook = webhook;
  r.updated_ms = clock_->NowMillis();
  r.removed = !monthly_micros;
  edit.batch.budgets.push_back(r);
  SLUICE_RETURN_IF_ERROR(CommitLocked(edit));
  if (r.removed) {
    money_.budgets.erase(scope);
  } else {
    money_.budgets[scope] = r;
  }
  // Its spend is kept only while it has a budget: read it afresh when it next matters.
  money_.month_spent.erase(scope);
  // A raise may let its stopped jobs run again (a second commit: the budget is already durable,
  // and a failure here is retried by the next change or the month's end).
  Edit requeue;
  const bool team = scope.rfind("team:", 0) == 0;
  const std::string who = scope.substr(scope.find(':') + 1);
  RequeueExhaustedLocked(requeue, [&](const store::JobRecord& j) {
    return team ? j.team == who : PayerLocked(j.owner) == who;
  });
  if (Status s = CommitLocked(requeue); !s.ok()) {
    DegradedLocked("budget", "queuing again the jobs a monthly budget stopped", s);
  }
  if (!queued_.empty()) SLUICE_RETURN_IF_ERROR(RequestScheduleLocked());
  return r;
}

std::vector<BudgetView> ServerCore::ListBudgets() {
  std::lock_guard<TimedMutex> lock(mu_);
  std::vector<BudgetView> out;
  for (const auto& [scope, b] : money_.budgets) {
    out.push_back({b, ScopeNameLocked(scope), MonthLocked(), ScopeSpentLocked(scope)});
  }
  return out;
}

Result<std::vector<store::BudgetAlert>> ServerCore::BudgetAlerts(bool undelivered) {
  std::string since;
  {
    std::lock_guard<TimedMutex> lock(mu_);
    // This month and the last: what an alert list or a late webhook is about.
    const int64_t a_month_ago = clock_->NowMillis() - 31LL * 24 * 3600 * 1000;
    since = Utc(a_month_ago, "%Y-%m");
  }
  return store_->LoadBudgetAlerts(since, undelivered);
}

Status ServerCore::RecordAlertDelivery(const store::BudgetAlert& alert) {
  std::lock_guard<TimedMutex> lock(mu_);
  store::WriteBatch batch;
  batch.budget_alerts.push_back(alert);
  return store_->Write(batch);
}

void ServerCore::NewMonthLocked() {
  const std::string month = MonthLocked();
  if (month == money_.budget_month) return;
  const std::string previous = money_.budget_month;
  money_.budget_month = month;
  if (previous.empty()) return;  // set at Load: nothing rolled over
  // A new month: every scope starts from zero, so what a monthly budget stopped may run again.
  Edit edit;
  RequeueExhaustedLocked(edit, [](const store::JobRecord&) { return true; });
  if (Status s = CommitLocked(edit); !s.ok()) {
    DegradedLocked("budget", "queuing again at the start of a month", s);
    money_.budget_month = previous;  // tried again by the next tick
    return;
  }
  if (!queued_.empty()) {
    if (Status s = RequestScheduleLocked(); !s.ok()) {
      DegradedLocked("schedule", "scheduling at the start of a month", s);
    }
  }
}

}  // namespace sluice::server
