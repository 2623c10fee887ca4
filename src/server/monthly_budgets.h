// Monthly budgets of accounts and teams (issue 15 item 1; docs/design-notes.md "Budgets"): each
// budgeted scope's budget, what it was charged in the current UTC month (net of SLA credits, read
// from the store once, then kept with committed charges), and the alerts raised this month. The
// core (core_monthly_budget.cc) decides when a charge is committed and what a refusal stops; this
// class holds the books and words the refusals and alerts. It has no lock: the core's guards it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "store/ledger_records.h"
#include "store/store.h"

namespace sluice::server {

class MonthlyBudgets {
 public:
  // An account's name by id ("" when unknown: the scope is then named by its id).
  using AccountName = std::function<std::string(const std::string& account_id)>;
  MonthlyBudgets(store::Store* store, const Clock* clock, AccountName account_name);

  // The stored budgets, and this month's stored alerts (each is raised once).
  void Load(std::vector<store::BudgetRecord> budgets,
            const std::vector<store::BudgetAlert>& alerts);

  bool empty() const { return budgets_.empty(); }
  const std::map<std::string, store::BudgetRecord>& all() const { return budgets_; }
  // A committed budget (`removed`: it is gone). Its spend is read afresh when it next matters.
  void Set(const store::BudgetRecord& budget);

  // This UTC month ("2026-12").
  std::string Month() const;
  // "account alice" (its id when the name is unknown), "team ml".
  std::string Name(const std::string& scope) const;
  // The budgeted scopes a charge of `payer` for a job of `team` counts against.
  std::vector<std::string> ScopesOf(const std::string& payer, const std::string& team) const;
  // What `scope` was charged this month. A store read error counts as far over any budget, so
  // nothing overspends on it.
  int64_t Spent(const std::string& scope) const;
  // Why a job of `payer` and `team` may not start now ("" when it may): the first scope whose
  // month is spent, with the command that raises it.
  std::string Refusal(const std::string& payer, const std::string& team) const;

  // The alerts to raise for charges staged on top of the committed ones (`net_by_scope`: this
  // month's net charge per scope), leaving out those raised or already `staged` (alert keys).
  // Each comes with its key; the caller commits it, then NoteRaised.
  std::vector<std::pair<std::string, store::BudgetAlert>> Crossed(
      const std::map<std::string, int64_t>& net_by_scope,
      const std::set<std::string>& staged) const;
  // After a commit: the alerts it raised, and a net charge of `payer` for a job of `team` on
  // `day` ("2026-12-06").
  void NoteRaised(const std::set<std::string>& keys);
  void NoteCharged(const std::string& payer, const std::string& team, const std::string& day,
                   int64_t net_micros);

  // The month the tick last saw ("" before Load).
  const std::string& month_seen() const { return month_seen_; }
  void set_month_seen(std::string month) { month_seen_ = std::move(month); }

 private:
  store::Store* const store_;
  const Clock* const clock_;
  const AccountName account_name_;
  std::map<std::string, store::BudgetRecord> budgets_;  // by scope
  // Each budgeted scope's spend: (month, micro-dollars), a cache kept with committed charges.
  mutable std::map<std::string, std::pair<std::string, int64_t>> spent_;
  std::set<std::string> raised_;  // alert keys: scope|month|percent
  std::string month_seen_;
};

}  // namespace sluice::server
