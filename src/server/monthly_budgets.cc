#include "server/monthly_budgets.h"

#include <array>
#include <cstdio>

#include "ledger/metering.h"
#include "server/core_internal.h"

namespace sluice::server {

namespace {

constexpr std::array<int, 3> kAlertPercents = {50, 80, 100};
constexpr std::string_view kAccount = "account:", kTeam = "team:";

std::string Usd(int64_t micros) { return ledger::FormatMicros(micros); }

std::string AlertKey(const std::string& scope, const std::string& month, int percent) {
  return scope + "|" + month + "|" + std::to_string(percent);
}

}  // namespace

MonthlyBudgets::MonthlyBudgets(store::Store* store, const Clock* clock, AccountName account_name)
    : store_(store), clock_(clock), account_name_(std::move(account_name)) {}

void MonthlyBudgets::Load(std::vector<store::BudgetRecord> budgets,
                          const std::vector<store::BudgetAlert>& alerts) {
  budgets_.clear();
  spent_.clear();
  for (auto& b : budgets) budgets_[b.scope] = std::move(b);
  raised_.clear();
  for (const auto& a : alerts) raised_.insert(AlertKey(a.scope, a.month, a.percent));
}

void MonthlyBudgets::Set(const store::BudgetRecord& budget) {
  if (budget.removed) {
    budgets_.erase(budget.scope);
  } else {
    budgets_[budget.scope] = budget;
  }
  // Its spend is kept only while it has a budget: read it afresh when it next matters.
  spent_.erase(budget.scope);
}

std::string MonthlyBudgets::Month() const { return core::Utc(clock_->NowMillis(), "%Y-%m"); }

std::string MonthlyBudgets::Name(const std::string& scope) const {
  if (scope.starts_with(kAccount)) {
    const std::string name = account_name_ ? account_name_(scope.substr(kAccount.size())) : "";
    if (!name.empty()) return "account " + name;
  }
  return scope.starts_with(kTeam) ? "team " + scope.substr(kTeam.size()) : scope;
}

std::vector<std::string> MonthlyBudgets::ScopesOf(const std::string& payer,
                                                  const std::string& team) const {
  std::vector<std::string> out;
  if (budgets_.empty()) return out;
  if (std::string account = std::string(kAccount) + payer; budgets_.count(account)) {
    out.push_back(std::move(account));
  }
  if (std::string t = std::string(kTeam) + team; !team.empty() && budgets_.count(t)) {
    out.push_back(std::move(t));
  }
  return out;
}

int64_t MonthlyBudgets::Spent(const std::string& scope) const {
  const std::string month = Month();
  auto cached = spent_.find(scope);
  if (cached != spent_.end() && cached->second.first == month) return cached->second.second;
  auto spent = store_->ScopeSpend(scope, month + "-01");
  if (!spent.ok()) {
    std::fprintf(stderr, "sluice server: reading the month's spend of %s failed (%s)\n",
                 scope.c_str(), spent.status().ToString().c_str());
    return INT64_MAX / 4;  // unknown is not zero (and not kept: read again next time)
  }
  spent_[scope] = {month, *spent};
  return *spent;
}

std::string MonthlyBudgets::Refusal(const std::string& payer, const std::string& team) const {
  for (const auto& scope : ScopesOf(payer, team)) {
    const int64_t budget = budgets_.at(scope).monthly_micros;
    const int64_t spent = Spent(scope);
    if (spent < budget) continue;
    const std::string name = Name(scope);
    return std::string(core::kMonthlyStop) + ": " + name + " spent " + Usd(spent) + " of its " +
           Usd(budget) + " for " + Month() + " (`sluice budget --" + name +
           " --monthly USD` raises it; it resets when the month ends)";
  }
  return "";
}

std::vector<std::pair<std::string, store::BudgetAlert>> MonthlyBudgets::Crossed(
    const std::map<std::string, int64_t>& net_by_scope, const std::set<std::string>& staged) const {
  std::vector<std::pair<std::string, store::BudgetAlert>> out;
  const std::string month = Month();
  for (const auto& [scope, net] : net_by_scope) {
    auto b = budgets_.find(scope);
    if (b == budgets_.end()) continue;
    const int64_t spent = Spent(scope) + net;
    for (int percent : kAlertPercents) {
      std::string key = AlertKey(scope, month, percent);
      if (static_cast<__int128>(spent) * 100 <
              static_cast<__int128>(b->second.monthly_micros) * percent ||
          raised_.count(key) || staged.count(key)) {
        continue;
      }
      store::BudgetAlert a;
      a.scope = scope;
      a.month = month;
      a.percent = percent;
      a.ts_ms = clock_->NowMillis();
      a.spent_micros = spent;
      a.budget_micros = b->second.monthly_micros;
      a.webhook = b->second.webhook;
      out.emplace_back(std::move(key), std::move(a));
    }
  }
  return out;
}

void MonthlyBudgets::NoteRaised(const std::set<std::string>& keys) {
  raised_.insert(keys.begin(), keys.end());
}

void MonthlyBudgets::NoteCharged(const std::string& payer, const std::string& team,
                                 const std::string& day, int64_t net_micros) {
  for (const auto& scope : ScopesOf(payer, team)) {
    auto cached = spent_.find(scope);
    if (cached != spent_.end() && day.starts_with(cached->second.first)) {
      cached->second.second += net_micros;
    }
  }
}

}  // namespace sluice::server
