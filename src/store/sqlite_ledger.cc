#include "store/sqlite_ledger.h"

#include <memory>

#include "store/sqlite_query.h"
#include "store/superseded_records.h"

namespace sluice::store::sqlite {
namespace {

constexpr const char* kUpsertMeter =
    "INSERT INTO meters (attempt_id, job_id, payer, provider, node_id, resource, units, "
    "memory_gb, price_micros_per_hour, interruptible, start_ms, end_ms, settled_ms, "
    "charged_micros, fee_micros, lost_micros, end_cause, credited_micros, credit_reason) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (attempt_id) DO UPDATE SET end_ms = excluded.end_ms, "
    "settled_ms = excluded.settled_ms, charged_micros = excluded.charged_micros, "
    "fee_micros = excluded.fee_micros, lost_micros = excluded.lost_micros, "
    "end_cause = excluded.end_cause, credited_micros = excluded.credited_micros, "
    "credit_reason = excluded.credit_reason";
constexpr const char* kSelectOpenMeters =
    "SELECT attempt_id, job_id, payer, provider, node_id, resource, units, memory_gb, "
    "price_micros_per_hour, interruptible, start_ms, end_ms, settled_ms, charged_micros, "
    "fee_micros, lost_micros, end_cause, credited_micros, credit_reason FROM meters WHERE end_ms = "
    "0 ORDER BY start_ms, rowid";
constexpr const char* kSelectJobMeters =
    "SELECT attempt_id, job_id, payer, provider, node_id, resource, units, memory_gb, "
    "price_micros_per_hour, interruptible, start_ms, end_ms, settled_ms, charged_micros, "
    "fee_micros, lost_micros, end_cause, credited_micros, credit_reason FROM meters WHERE job_id = "
    "? ORDER BY start_ms, rowid";
constexpr const char* kInsertTxn =
    "INSERT INTO ledger_txns (ts_ms, kind, job_id, attempt_id, node_id, from_ms, to_ms, memo) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)";
constexpr const char* kInsertEntry =
    "INSERT INTO ledger_entries (txn_id, account, category, amount_micros) VALUES (?, ?, ?, ?)";
constexpr const char* kAddCost =
    "INSERT INTO cost_totals (payer, provider, job_id, node_id, day, resource, charged_micros, "
    "fee_micros, lost_micros, metered_ms, credited_micros) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
    "?) "
    "ON CONFLICT (payer, job_id, day, provider, node_id, resource) DO UPDATE SET "
    "charged_micros = charged_micros + excluded.charged_micros, "
    "fee_micros = fee_micros + excluded.fee_micros, "
    "lost_micros = lost_micros + excluded.lost_micros, "
    "metered_ms = metered_ms + excluded.metered_ms, "
    "credited_micros = credited_micros + excluded.credited_micros";
constexpr const char* kBalances =
    "SELECT account, SUM(amount_micros) FROM ledger_entries GROUP BY account ORDER BY account";
constexpr const char* kUnbalanced =
    "SELECT t.id FROM ledger_txns t LEFT JOIN ledger_entries e ON e.txn_id = t.id "
    "GROUP BY t.id HAVING COALESCE(SUM(e.amount_micros), 0) != 0 ORDER BY t.id";
constexpr const char* kCounts =
    "SELECT (SELECT COUNT(*) FROM ledger_txns), (SELECT COUNT(*) FROM ledger_entries), "
    "(SELECT COALESCE(-SUM(amount_micros), 0) FROM ledger_entries "
    " WHERE category IN ('gpu', 'cpu')), "
    "(SELECT COALESCE(SUM(charged_micros), 0) FROM meters WHERE resource IN ('gpu', 'cpu')), "
    "(SELECT COALESCE(SUM(charged_micros), 0) FROM cost_totals "
    " WHERE resource IN ('gpu', 'cpu')), "
    "(SELECT COALESCE(SUM(amount_micros), 0) FROM ledger_entries "
    " WHERE category = 'sla-credit' AND amount_micros > 0), "
    "(SELECT COALESCE(SUM(credited_micros), 0) FROM meters), "
    "(SELECT COALESCE(SUM(credited_micros), 0) FROM cost_totals)";

MeterRecord ReadMeter(const Query& q) {
  MeterRecord m;
  m.attempt_id = q.ColText(0);
  m.job_id = q.ColText(1);
  m.payer = q.ColText(2);
  m.provider = q.ColText(3);
  m.node_id = q.ColText(4);
  m.resource = q.ColText(5);
  m.units = static_cast<int>(q.ColInt(6));
  m.memory_gb = q.ColReal(7);
  m.price_micros_per_hour = q.ColInt(8);
  m.interruptible = q.ColInt(9) != 0;
  m.start_ms = q.ColInt(10);
  m.end_ms = q.ColInt(11);
  m.settled_ms = q.ColInt(12);
  m.charged_micros = q.ColInt(13);
  m.fee_micros = q.ColInt(14);
  m.lost_micros = q.ColInt(15);
  m.end_cause = q.ColText(16);
  m.credited_micros = q.ColInt(17);
  m.credit_reason = q.ColText(18);
  return m;
}

// A statement prepared for one use (cost reports build their GROUP BY from the question).
struct OneShot {
  sqlite3_stmt* stmt = nullptr;
  ~OneShot() { sqlite3_finalize(stmt); }
};

}  // namespace

Status WriteLedger(sqlite3* db, const PrepareFn& prepare, const WriteBatch& b) {
  // The upsert settles a meter's charge columns only; the rest (who, what, the price, the start)
  // never changes once it opens, so the last record of an attempt's meter decides its row.
  const std::vector<bool> later = Superseded(
      b.meters, [](const MeterRecord& m) -> const auto& { return m.attempt_id; });
  for (size_t i = 0; i < b.meters.size(); ++i) {
    if (later[i]) continue;
    const MeterRecord& m = b.meters[i];
    SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, prepare(kUpsertMeter));
    Query q(db, s);
    q.Text(m.attempt_id).Text(m.job_id).Text(m.payer).Text(m.provider).Text(m.node_id);
    q.Text(m.resource).Int(m.units).Real(m.memory_gb).Int(m.price_micros_per_hour);
    q.Int(m.interruptible ? 1 : 0).Int(m.start_ms).Int(m.end_ms).Int(m.settled_ms);
    q.Int(m.charged_micros).Int(m.fee_micros).Int(m.lost_micros).Text(m.end_cause);
    q.Int(m.credited_micros).Text(m.credit_reason);
    SLUICE_RETURN_IF_ERROR(q.Run("write meter " + m.attempt_id));
  }
  for (const LedgerTxn& t : b.ledger) {
    // The last line of defence: an unbalanced transaction fails the whole batch.
    int64_t sum = 0;
    for (const LedgerEntry& e : t.entries) sum += e.amount_micros;
    if (sum != 0) {
      return Status::InvalidArgument("ledger transaction (" + t.kind + " " + t.attempt_id +
                                     ") does not balance: its entries sum to " +
                                     std::to_string(sum) + " micro-dollars");
    }
    {
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, prepare(kInsertTxn));
      Query q(db, s);
      q.Int(t.ts_ms).Text(t.kind).Text(t.job_id).Text(t.attempt_id).Text(t.node_id);
      q.Int(t.from_ms).Int(t.to_ms).Text(t.memo);
      SLUICE_RETURN_IF_ERROR(q.Run("write ledger transaction"));
    }
    const int64_t id = sqlite3_last_insert_rowid(db);
    for (const LedgerEntry& e : t.entries) {
      SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, prepare(kInsertEntry));
      Query q(db, s);
      q.Int(id).Text(e.account).Text(e.category).Int(e.amount_micros);
      SLUICE_RETURN_IF_ERROR(q.Run("write ledger entry"));
    }
  }
  for (const CostDelta& c : b.cost_deltas) {
    SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, prepare(kAddCost));
    Query q(db, s);
    q.Text(c.payer).Text(c.provider).Text(c.job_id).Text(c.node_id).Text(c.day);
    q.Text(c.resource).Int(c.charged_micros).Int(c.fee_micros).Int(c.lost_micros);
    q.Int(c.metered_ms).Int(c.credited_micros);
    SLUICE_RETURN_IF_ERROR(q.Run("add to cost totals"));
  }
  return Status::Ok();
}

Result<std::vector<MeterRecord>> LoadMeters(sqlite3* db, const PrepareFn& prepare,
                                            const std::string& job_id) {
  SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s,
                          prepare(job_id.empty() ? kSelectOpenMeters : kSelectJobMeters));
  Query q(db, s);
  if (!job_id.empty()) q.Text(job_id);
  std::vector<MeterRecord> out;
  while (true) {
    SLUICE_ASSIGN_OR_RETURN(bool row, q.Step("load meters"));
    if (!row) break;
    out.push_back(ReadMeter(q));
  }
  return out;
}

Result<std::vector<std::pair<std::string, int64_t>>> LoadBalances(sqlite3* db,
                                                                  const PrepareFn& prepare) {
  SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, prepare(kBalances));
  Query q(db, s);
  std::vector<std::pair<std::string, int64_t>> out;
  while (true) {
    SLUICE_ASSIGN_OR_RETURN(bool row, q.Step("load balances"));
    if (!row) break;
    out.emplace_back(q.ColText(0), q.ColInt(1));
  }
  return out;
}

Result<LedgerCheck> CheckLedger(sqlite3* db, const PrepareFn& prepare) {
  LedgerCheck check;
  {
    SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, prepare(kCounts));
    Query q(db, s);
    SLUICE_ASSIGN_OR_RETURN(bool row, q.Step("count the ledger"));
    if (row) {
      check.transactions = q.ColInt(0);
      check.entries = q.ColInt(1);
      check.charged_by_entries = q.ColInt(2);
      check.charged_by_meters = q.ColInt(3);
      check.charged_by_totals = q.ColInt(4);
      check.credited_by_entries = q.ColInt(5);
      check.credited_by_meters = q.ColInt(6);
      check.credited_by_totals = q.ColInt(7);
    }
  }
  {
    SLUICE_ASSIGN_OR_RETURN(sqlite3_stmt * s, prepare(kUnbalanced));
    Query q(db, s);
    while (true) {
      SLUICE_ASSIGN_OR_RETURN(bool row, q.Step("find unbalanced transactions"));
      if (!row) break;
      check.unbalanced.push_back(q.ColInt(0));
    }
  }
  SLUICE_ASSIGN_OR_RETURN(check.balances, LoadBalances(db, prepare));
  return check;
}

Result<std::vector<CostRow>> Costs(sqlite3* db, const CostQuery& query, bool from_meters) {
  // The key is chosen from a fixed set, never spliced from the caller's text.
  std::string key;
  if (query.by == "job") {
    key = "job_id";
  } else if (query.by == "node") {
    key = "node_id";
  } else if (query.by == "resource") {
    key = "resource";
  } else if (query.by == "account") {
    key = "payer";
  } else if (query.by == "provider") {
    key = "provider";
  } else if (query.by == "day") {
    key = from_meters ? "date(CASE end_ms WHEN 0 THEN settled_ms ELSE end_ms END / 1000, "
                        "'unixepoch')"
                      : "day";
  } else {
    return Status::InvalidArgument("by: \"" + query.by +
                                   "\" is not one of job, day, node, resource, account, provider");
  }
  std::string sql;
  if (from_meters) {
    sql = "SELECT " + key +
          ", SUM(charged_micros), SUM(fee_micros), SUM(lost_micros), SUM(settled_ms - start_ms), "
          "SUM(credited_micros) "
          "FROM meters WHERE (?1 = '' OR payer = ?1) AND (?2 = '' OR provider = ?2) AND "
          "(?3 = '' OR job_id = ?3) AND (end_ms = 0 OR end_ms >= ?4) ";
  } else {
    sql = "SELECT " + key +
          ", SUM(charged_micros), SUM(fee_micros), SUM(lost_micros), SUM(metered_ms), "
          "SUM(credited_micros) "
          "FROM cost_totals WHERE (?1 = '' OR payer = ?1) AND (?2 = '' OR provider = ?2) AND "
          "(?3 = '' OR job_id = ?3) AND day >= date(?4 / 1000, 'unixepoch') ";
  }
  sql += "GROUP BY 1 ORDER BY 1";
  OneShot stmt;
  if (int rc = sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt.stmt, nullptr); rc != SQLITE_OK) {
    return Error(db, rc, "prepare cost report");
  }
  std::vector<CostRow> out;
  {
    Query q(db, stmt.stmt);
    q.Text(query.payer).Text(query.provider).Text(query.job_id).Int(query.since_ms);
    while (true) {
      SLUICE_ASSIGN_OR_RETURN(bool row, q.Step("cost report"));
      if (!row) break;
      out.push_back(
          {q.ColText(0), q.ColInt(1), q.ColInt(2), q.ColInt(3), q.ColInt(4), q.ColInt(5)});
    }
  }
  return out;
}

}  // namespace sluice::store::sqlite
