// Budgets that stop safely (issue 15 item 1; docs/design-notes.md "Budgets"). A job's
// max_total_cost bounds what its attempts are charged (compute and transfer). Placement leaves
// room for the job's expected cost plus what a stop costs (the grace period at the locked price
// and the final checkpoint's upload); a running attempt is stopped through the preemption path
// (SIGTERM, checkpoint saved) before its job or its account would pass its budget or credit, and
// its job waits in the state budget-exhausted until the budget is raised or credit added. As a
// backstop the meter never bills past the budget. Members of ServerCore; the caller holds mu_
// unless a method takes it.
#include <algorithm>
#include <climits>

#include "ledger/metering.h"
#include "server/accounts.h"
#include "server/core_internal.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

namespace {

// $1.23 for micro-dollars.
std::string Usd(int64_t micros) { return ledger::FormatMicros(micros); }

}  // namespace

int64_t ServerCore::BudgetEndLocked(const Edit& edit, const store::MeterRecord& meter) const {
  const JobState* js = ViewJobLocked(edit, meter.job_id);
  const auto budget = js != nullptr ? BudgetMicros(js->spec) : std::nullopt;
  if (!budget) return INT64_MAX;
  // Everything else charged to the job: committed and staged, less this meter's own.
  const int64_t others = charges_.Budgeted(meter.job_id) +
                         StagedBudgeted(edit.batch, meter.job_id) - meter.charged_micros;
  return BudgetEnd(*budget, others, meter);
}

int64_t ServerCore::WithinBudgetLocked(const Edit& edit, const std::string& job_id,
                                       int64_t amount) const {
  const JobState* js = ViewJobLocked(edit, job_id);
  const auto budget = js != nullptr ? BudgetMicros(js->spec) : std::nullopt;
  if (!budget) return amount;
  const int64_t spent = charges_.Budgeted(job_id) + StagedBudgeted(edit.batch, job_id);
  return std::clamp<int64_t>(*budget - spent, 0, amount);
}

void ServerCore::RequeueExhaustedLocked(Edit& edit,
                                        const std::function<bool(const store::JobRecord&)>& which) {
  std::vector<std::string> ids;
  for (const auto& [id, js] : jobs_) {
    if (js.record.state == st::JobState::kBudgetExhausted) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());  // jobs_ is hashed: requeue in id (submission) order
  for (const auto& id : ids) {
    const JobState* view = ViewJobLocked(edit, id);
    if (view == nullptr || view->record.state != st::JobState::kBudgetExhausted) continue;
    if (!which(view->record)) continue;
    if (!CanSpendLocked(view->record.owner, &edit)) continue;  // no credit yet: it stays stopped
    if (!MonthlyRefusalLocked(view->record.owner, view->record.team).empty()) continue;
    const auto budget = BudgetMicros(view->spec);
    const int64_t spent = charges_.Budgeted(id);
    if (budget && spent >= *budget) continue;  // nothing left to run on
    JobState& js = StagedJobLocked(edit, id);
    js.record.state = st::JobState::kQueued;
    js.record.reason = "queued again after its stop by budget or credit";
    js.queued_since_mono = clock_->MonotonicMillis();
    edit.batch.jobs.push_back(js.record);
    edit.batch.events.push_back(
        EventLocked(id, "requeued",
                    "queued again: " +
                        (budget ? Usd(*budget - spent) + " left of max_total_cost " + Usd(*budget)
                                : std::string("no max_total_cost")) +
                        "; " +
                        (js.record.checkpoint.empty()
                             ? "no checkpoint saved, so it starts from the beginning"
                             : "resumes from checkpoint " + js.record.checkpoint.substr(0, 12))));
  }
}

Result<store::JobRecord> ServerCore::SetJobBudget(const std::string& job_id,
                                                  std::optional<double> max_total_cost) {
  if (max_total_cost && (!(*max_total_cost > 0) || *max_total_cost > 1e9)) {
    return Status::InvalidArgument("max_total_cost: must be more than 0 and at most 1e9 USD");
  }
  std::lock_guard<TimedMutex> lock(mu_);
  SLUICE_RETURN_IF_ERROR(UnfinishedJobLocked(job_id).status());
  Edit edit;
  JobState& js = StagedJobLocked(edit, job_id);
  js.spec.max_total_cost = max_total_cost;
  js.record.spec = spec::ToJson(js.spec);
  js.request.reset();  // placement reads the budget
  edit.batch.jobs.push_back(js.record);
  const int64_t spent = charges_.Budgeted(job_id);
  edit.batch.events.push_back(EventLocked(
      job_id, "budget",
      (max_total_cost ? "max_total_cost set to " + Usd(ledger::PricePerHourMicros(*max_total_cost))
                      : std::string("max_total_cost removed")) +
          "; " + Usd(spent) + " charged so far"));
  RequeueExhaustedLocked(edit, [&](const store::JobRecord& j) { return j.id == job_id; });
  SLUICE_RETURN_IF_ERROR(CommitLocked(edit));
  SLUICE_RETURN_IF_ERROR(RequestScheduleLocked());
  return jobs_.at(job_id).record;
}

Status ServerCore::EnforceBudgets() {
  std::lock_guard<TimedMutex> lock(mu_);
  return EnforceBudgetsLocked();
}

Status ServerCore::EnforceBudgetsLocked() {
  money_.last_budget_check_mono = clock_->MonotonicMillis();
  const int64_t ahead = clock_->NowMillis() + options_.budget_margin_ms;
  std::map<std::string, std::string> stops;  // attempt -> cause
  // Per paying account: what its running attempts will have cost by `ahead` beyond what was
  // settled, plus what stopping them costs; and those attempts.
  std::map<std::string, int64_t> exposure;
  std::map<std::string, std::vector<std::string>> running_of;
  // The same per budgeted scope (account or team): its monthly budget.
  std::map<std::string, int64_t> scope_exposure;
  std::map<std::string, std::vector<std::string>> scope_running;
  // Each payer's credit limit, asked once a check.
  std::map<std::string, int64_t> limit_of;
  const std::map<std::string, int64_t>::value_type* last_limit = nullptr;  // the last payer's
  // An attempt that no job budget, credit limit or monthly budget bounds (most, on a server
  // without limits) is passed over without a lookup of its job: its payer is its meter's (the
  // meters are walked beside the attempts, both in id order), and the jobs with a budget are
  // indexed (money_.budgeted_jobs). Lookups in a map of every job were most of the check.
  auto meter = money_.open_meters.begin();
  std::string payer_of_starting;
  for (const auto& [aid, att] : active_attempts_) {
    while (meter != money_.open_meters.end() && meter->first < aid) ++meter;
    const store::MeterRecord* m =
        meter != money_.open_meters.end() && meter->first == aid ? &meter->second : nullptr;
    if (att.cause.rfind(kPreemptingPrefix, 0) == 0) continue;  // already stopping
    const JobState* js = nullptr;
    auto job = [&]() -> const JobState* {
      if (js == nullptr) {
        auto it = jobs_.find(att.job_id);
        if (it != jobs_.end()) js = &it->second;
      }
      return js;
    };
    if (m == nullptr) {  // starting: no meter yet
      if (job() == nullptr) continue;
      payer_of_starting = PayerLocked(js->record.owner);
    }
    const std::string& payer = m != nullptr ? m->payer : payer_of_starting;
    if (last_limit == nullptr || last_limit->first != payer) {
      auto limit = limit_of.find(payer);
      if (limit == limit_of.end()) {
        limit = limit_of
                    .emplace(payer, accounts_ != nullptr ? accounts_->CreditLimitOf(payer)
                                                         : ledger::kUnlimited)
                    .first;
      }
      last_limit = &*limit;
    }
    const bool limited = last_limit->second != ledger::kUnlimited;
    const bool budgeted =
        !money_.budgeted_jobs.empty() && money_.budgeted_jobs.count(att.job_id) > 0;
    if (!budgeted && !limited && monthly_.empty()) continue;
    if (job() == nullptr) continue;
    const std::vector<std::string> scopes = monthly_.ScopesOf(payer, js->record.team);
    const auto budget = BudgetMicros(js->spec);
    if (!budget && !limited && scopes.empty()) continue;
    const int64_t price = ledger::PricePerHourMicros(att.price_per_hour);
    int64_t accruing = 0;
    if (m != nullptr) {
      accruing =
          std::max<int64_t>(0, ledger::ChargeFor(price, ahead - m->start_ms) - m->charged_micros);
    } else {
      accruing = ledger::ChargeFor(price, options_.budget_margin_ms);  // starting
    }
    const int64_t reserve =
        StopReserve(js->spec, price, options_.budget_margin_ms, options_.transfer_price_per_gb);
    if (budget) {
      const int64_t spent = charges_.Budgeted(att.job_id) + accruing;
      if (spent + reserve >= *budget) {
        stops[aid] = std::string(kBudgetStop) + ": " + Usd(spent) + " of " + Usd(*budget) +
                     " used within " + std::to_string(options_.budget_margin_ms / 1000) + "s, " +
                     Usd(reserve) + " kept for the grace period and the final checkpoint";
      }
    }
    if (limited) {
      exposure[payer] += accruing + reserve;
      running_of[payer].push_back(aid);
    }
    for (const auto& scope : scopes) {
      scope_exposure[scope] += accruing + reserve;
      scope_running[scope].push_back(aid);
    }
  }
  for (const auto& [scope, exposed] : scope_exposure) {
    const int64_t budget = monthly_.all().at(scope).monthly_micros;
    const int64_t spent = monthly_.Spent(scope);
    if (spent + exposed < budget) continue;
    const std::string cause = std::string(kMonthlyStop) + ": " + monthly_.Name(scope) + " " +
                              Usd(spent) + " of " + Usd(budget) + " for " + monthly_.Month() +
                              " spent, " + Usd(exposed) +
                              " more due by the end of its jobs' grace periods";
    for (const auto& aid : scope_running[scope]) stops.try_emplace(aid, cause);
  }
  for (const auto& [payer, exposed] : exposure) {
    const int64_t limit = limit_of.at(payer);  // limited: only those have an exposure
    auto b = money_.balances.find(payer);
    const int64_t balance = b != money_.balances.end() ? b->second : 0;
    if (balance - exposed > -limit) continue;
    auto acc = accounts_->FindAccount(payer);
    const std::string cause = std::string(kCreditStop) + ": account " + (acc ? acc->name : payer) +
                              " balance " + Usd(balance) + ", " + Usd(exposed) +
                              " more due by the end of its jobs' grace periods, " +
                              "credit limit " + ledger::FormatCreditLimit(limit);
    for (const auto& aid : running_of[payer]) stops.try_emplace(aid, cause);
  }
  for (const auto& [aid, cause] : stops) {
    std::fprintf(stderr, "sluice server: stopping attempt %s: %s\n", aid.c_str(), cause.c_str());
    SLUICE_RETURN_IF_ERROR(PreemptLocked(aid, cause));
  }
  return Status::Ok();
}

}  // namespace sluice::server
