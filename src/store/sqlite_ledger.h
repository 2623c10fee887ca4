// The SQLite side of metering and the ledger (issue 14): writes meters, transactions and cost
// totals inside the store's transaction, and reads balances, checks and cost reports. Called by
// SqliteStore with its connection and statement cache, under its mutex.
#pragma once

#include <sqlite3.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "store/records.h"

namespace sluice::store::sqlite {

using PrepareFn = std::function<Result<sqlite3_stmt*>(const char* sql)>;

// The batch's meters, ledger transactions and cost deltas (inside the caller's transaction).
Status WriteLedger(sqlite3* db, const PrepareFn& prepare, const WriteBatch& batch);
Result<std::vector<MeterRecord>> LoadMeters(sqlite3* db, const PrepareFn& prepare,
                                            const std::string& job_id);
Result<std::vector<std::pair<std::string, int64_t>>> LoadBalances(sqlite3* db,
                                                                  const PrepareFn& prepare);
Result<LedgerCheck> CheckLedger(sqlite3* db, const PrepareFn& prepare);
// `from_meters`: computed from the meter records instead of the cost totals.
Result<std::vector<CostRow>> Costs(sqlite3* db, const CostQuery& query, bool from_meters);

}  // namespace sluice::store::sqlite
