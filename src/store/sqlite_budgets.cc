#include "store/sqlite_budgets.h"

#include "store/sqlite_query.h"

namespace sluice::store::sqlite {
namespace {

constexpr const char* kUpsertBudget =
    "INSERT INTO budgets (scope, monthly_micros, webhook, updated_ms) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (scope) DO UPDATE SET monthly_micros = excluded.monthly_micros, "
    "webhook = excluded.webhook, updated_ms = excluded.updated_ms";
constexpr const char* kDeleteBudget = "DELETE FROM budgets WHERE scope = ?";
constexpr const char* kSelectBudgets =
    "SELECT scope, monthly_micros, webhook, updated_ms FROM budgets ORDER BY scope";
constexpr const char* kUpsertAlert =
    "INSERT INTO budget_alerts (scope, month, percent, ts_ms, spent_micros, budget_micros, "
    "webhook, delivered_ms, attempts, last_error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (scope, month, percent) DO UPDATE SET delivered_ms = excluded.delivered_ms, "
    "attempts = excluded.attempts, last_error = excluded.last_error";
constexpr const char* kSelectAlerts =
    "SELECT scope, month, percent, ts_ms, spent_micros, budget_micros, webhook, delivered_ms, "
    "attempts, last_error FROM budget_alerts WHERE month >= ?1 AND "
    "(?2 = 0 OR (webhook != '' AND delivered_ms = 0)) ORDER BY ts_ms, scope, percent";
constexpr const char* kAccountSpend =
    "SELECT COALESCE(SUM(charged_micros - credited_micros), 0) FROM cost_totals "
    "WHERE payer = ?1 AND day >= ?2";
constexpr const char* kTeamSpend =
    "SELECT COALESCE(SUM(c.charged_micros - c.credited_micros), 0) FROM cost_totals c "
    "JOIN jobs j ON j.id = c.job_id WHERE j.team = ?1 AND c.day >= ?2";

}  // namespace

Status WriteBudgets(sqlite3* db, const PrepareFn& prepare, const WriteBatch& b) {
  for (const BudgetRecord& r : b.budgets) {
    SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, prepare(r.removed ? kDeleteBudget : kUpsertBudget));
    Query q(db, s);
    q.Text(r.scope);
    if (!r.removed) q.Int(r.monthly_micros).Text(r.webhook).Int(r.updated_ms);
    SLUICE_RETURN_IF_ERROR(q.Run("write budget " + r.scope));
  }
  for (const BudgetAlert& a : b.budget_alerts) {
    SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, prepare(kUpsertAlert));
    Query q(db, s);
    q.Text(a.scope).Text(a.month).Int(a.percent).Int(a.ts_ms).Int(a.spent_micros);
    q.Int(a.budget_micros).Text(a.webhook).Int(a.delivered_ms).Int(a.attempts).Text(a.last_error);
    SLUICE_RETURN_IF_ERROR(q.Run("write budget alert " + a.scope));
  }
  return Status::Ok();
}

Result<std::vector<BudgetRecord>> LoadBudgets(sqlite3* db, const PrepareFn& prepare) {
  SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, prepare(kSelectBudgets));
  Query q(db, s);
  std::vector<BudgetRecord> out;
  while (true) {
    SLUICE_ASSIGN_OR_RETURN(bool row, q.Step("load budgets"));
    if (!row) break;
    out.push_back({q.ColText(0), q.ColInt(1), q.ColText(2), q.ColInt(3)});
  }
  return out;
}

Result<std::vector<BudgetAlert>> LoadBudgetAlerts(sqlite3* db, const PrepareFn& prepare,
                                                  const std::string& since_month,
                                                  bool undelivered) {
  SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, prepare(kSelectAlerts));
  Query q(db, s);
  q.Text(since_month).Int(undelivered ? 1 : 0);
  std::vector<BudgetAlert> out;
  while (true) {
    SLUICE_ASSIGN_OR_RETURN(bool row, q.Step("load budget alerts"));
    if (!row) break;
    BudgetAlert a;
    a.scope = q.ColText(0);
    a.month = q.ColText(1);
    a.percent = static_cast<int>(q.ColInt(2));
    a.ts_ms = q.ColInt(3);
    a.spent_micros = q.ColInt(4);
    a.budget_micros = q.ColInt(5);
    a.webhook = q.ColText(6);
    a.delivered_ms = q.ColInt(7);
    a.attempts = static_cast<int>(q.ColInt(8));
    a.last_error = q.ColText(9);
    out.push_back(std::move(a));
  }
  return out;
}

Result<int64_t> ScopeSpend(sqlite3* db, const PrepareFn& prepare, const std::string& scope,
                           const std::string& since_day) {
  const bool team = scope.rfind("team:", 0) == 0;
  if (!team && scope.rfind("account:", 0) != 0) {
    return Status::InvalidArgument("budget scope \"" + scope + "\" is not account:ID or team:NAME");
  }
  SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, prepare(team ? kTeamSpend : kAccountSpend));
  Query q(db, s);
  q.Text(scope.substr(scope.find(':') + 1)).Text(since_day);
  SLUICE_ASSIGN_OR_RETURN(bool row, q.Step("budget spend"));
  return row ? q.ColInt(0) : 0;
}

}  // namespace sluice::store::sqlite
