// Monthly budgets of accounts and teams (issue 15 item 1; README "Budgets";
// docs/design-notes.md "Budgets"). What a scope is charged in a UTC calendar month (net of SLA
// credits, every resource) raises an alert at 50, 80 and 100 % of its budget, in the commit of
// the charge that crossed it, as a job event and a stored alert a webhook is sent from. At 100 %
// the scope's jobs are stopped the way a job budget stops them, and new ones wait, until the
// budget is raised or the month ends. Members of ServerCore (the books are MonthlyBudgets,
// monthly_budgets.h); the caller holds mu_ unless a method takes it.
#include <map>

#include "ledger/metering.h"
#include "server/core_internal.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

namespace {

std::string Usd(int64_t micros) { return ledger::FormatMicros(micros); }

}  // namespace

std::string ServerCore::MonthlyRefusalLocked(const std::string& owner,
                                             const std::string& team) const {
  return monthly_.empty() ? "" : monthly_.Refusal(PayerLocked(owner), team);
}

void ServerCore::NoteBudgetAlertsLocked(Edit& edit) {
  if (monthly_.empty()) return;
  const std::string month = monthly_.Month();
  std::map<std::string, int64_t> staged;      // scope -> net charged by this edit this month
  std::map<std::string, std::string> job_of;  // scope -> a job whose charge it is (its event)
  for (const auto& d : edit.batch.cost_deltas) {
    if (d.day.rfind(month, 0) != 0) continue;
    const JobState* js = ViewJobLocked(edit, d.job_id);
    for (const auto& scope : monthly_.ScopesOf(d.payer, js != nullptr ? js->record.team : "")) {
      staged[scope] += d.charged_micros - d.credited_micros;
      job_of.try_emplace(scope, d.job_id);
    }
  }
  for (auto& [key, a] : monthly_.Crossed(staged, edit.alerts)) {
    edit.batch.events.push_back(EventLocked(
        job_of.at(a.scope), "budget-alert",
        "monthly budget of " + monthly_.Name(a.scope) + ": " + std::to_string(a.percent) +
            "% used (" + Usd(a.spent_micros) + " of " + Usd(a.budget_micros) + " in " + a.month +
            ")" + (a.percent == 100 ? "; its jobs are stopped safely and new ones wait" : "")));
    edit.batch.budget_alerts.push_back(std::move(a));
    edit.alerts.insert(std::move(key));
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
  monthly_.Set(r);
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
  for (const auto& [scope, b] : monthly_.all()) {
    out.push_back({b, monthly_.Name(scope), monthly_.Month(), monthly_.Spent(scope)});
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
  const std::string month = monthly_.Month();
  if (month == monthly_.month_seen()) return;
  const std::string previous = monthly_.month_seen();
  monthly_.set_month_seen(month);
  if (previous.empty()) return;  // set at Load: nothing rolled over
  // A new month: every scope starts from zero, so what a monthly budget stopped may run again.
  Edit edit;
  RequeueExhaustedLocked(edit, [](const store::JobRecord&) { return true; });
  if (Status s = CommitLocked(edit); !s.ok()) {
    DegradedLocked("budget", "queuing again at the start of a month", s);
    monthly_.set_month_seen(previous);  // tried again by the next tick
    return;
  }
  if (!queued_.empty()) {
    if (Status s = RequestScheduleLocked(); !s.ok()) {
      DegradedLocked("schedule", "scheduling at the start of a month", s);
    }
  }
}

}  // namespace sluice::server
