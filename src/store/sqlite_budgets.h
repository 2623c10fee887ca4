// The SQLite side of monthly budgets (issue 15 item 1): budgets and their alerts written inside
// the store's transaction, and what a scope was charged in a month. Called by SqliteStore with
// its connection and statement cache, under its mutex.
#pragma once

#include <sqlite3.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "store/records.h"
#include "store/sqlite_ledger.h"

namespace sluice::store::sqlite {

// The batch's budgets and alerts (inside the caller's transaction).
Status WriteBudgets(sqlite3* db, const PrepareFn& prepare, const WriteBatch& batch);
Result<std::vector<BudgetRecord>> LoadBudgets(sqlite3* db, const PrepareFn& prepare);
Result<std::vector<BudgetAlert>> LoadBudgetAlerts(sqlite3* db, const PrepareFn& prepare,
                                                  const std::string& since_month, bool undelivered);
// "account:<id>": charged to the account as payer; "team:<name>": charged for the team's jobs.
Result<int64_t> ScopeSpend(sqlite3* db, const PrepareFn& prepare, const std::string& scope,
                           const std::string& since_day);

}  // namespace sluice::store::sqlite
