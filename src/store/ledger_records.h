// The records of metering and the ledger (issue 14; docs/design-notes.md "Metering and the
// ledger"). Plain data. Amounts are integers in micro-dollars (1 USD = 1,000,000): the ledger
// never holds a floating-point amount.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::store {

// The compute one attempt used, from the server's receipt of `started` to its end, at the price
// locked when it was placed. Written in the same commit as the state change that opens, settles
// or closes it, so a crash never loses or doubles a second.
struct MeterRecord {
  std::string attempt_id;  // one meter per attempt
  std::string job_id;
  std::string payer;     // the account billed: the job's owner
  std::string provider;  // the account paid: the node's owner
  std::string node_id;
  std::string resource;               // "gpu" | "cpu": what the locked price is per hour of
  int units = 0;                      // GPUs (resource gpu) or CPUs (resource cpu) held
  double memory_gb = 0;               // held too; included in the price
  int64_t price_micros_per_hour = 0;  // the attempt's locked price (all units), micro-USD/h
  bool interruptible = false;         // capacity kind: interruptible or on-demand
  int64_t start_ms = 0;               // the server's receipt of `started`
  int64_t end_ms = 0;                 // 0 while open
  int64_t settled_ms = 0;             // charged up to here (start_ms before the first charge)
  int64_t charged_micros = 0;         // charged so far: ChargeFor(price, settled - start)
  int64_t fee_micros = 0;             // of which the platform's fee
  // Compute paid for after the attempt's last saved checkpoint, when it ended interrupted
  // (preempted, node lost): work the job has to do again. Part of charged_micros, not extra.
  int64_t lost_micros = 0;
  std::string end_cause{};  // the attempt's cause when it closed ("exited", "node lost", ...)
  // SLA credits (issue 15 item 3): how much of charged_micros was paid back to the payer, and
  // the published rule that did it. A meter with a reason set while it runs ("the node failed
  // verification while running it") has every later charge credited too.
  int64_t credited_micros = 0;
  std::string credit_reason{};
  bool operator==(const MeterRecord&) const = default;
};

// One line of a ledger transaction: `amount_micros` added to `account` (negative: debited).
struct LedgerEntry {
  std::string account;
  std::string category;  // "gpu" | "cpu" | "earnings" | "fee" | "top-up" | "funding"
  int64_t amount_micros = 0;
  bool operator==(const LedgerEntry&) const = default;
};

// A balanced transaction: its entries sum to zero. Appended, never changed.
struct LedgerTxn {
  int64_t id = 0;  // assigned by the store
  int64_t ts_ms = 0;
  std::string kind;  // "charge" | "top-up"
  // A charge: the meter (attempt) and the metered span [from_ms, to_ms) it bills.
  std::string job_id{};
  std::string attempt_id{};
  std::string node_id{};
  int64_t from_ms = 0;
  int64_t to_ms = 0;
  std::string memo{};
  std::vector<LedgerEntry> entries{};
  bool operator==(const LedgerTxn&) const = default;
};

// What `sluice ledger check` found, computed by the store from the entries alone.
struct LedgerCheck {
  int64_t transactions = 0;
  int64_t entries = 0;
  std::vector<int64_t> unbalanced{};  // ids of transactions whose entries do not sum to zero
  // The balance of each account as its entries sum it.
  std::vector<std::pair<std::string, int64_t>> balances{};
  // Compute charged, three ways that must agree: the payers' gpu/cpu entries (negated), the
  // meters' charged_micros, and the cost totals reports read.
  int64_t charged_by_entries = 0;
  int64_t charged_by_meters = 0;
  int64_t charged_by_totals = 0;
  // SLA credits, the same three ways: the payers' sla-credit entries, the meters, the totals.
  int64_t credited_by_entries = 0;
  int64_t credited_by_meters = 0;
  int64_t credited_by_totals = 0;
};

// A cost report's question (`sluice costs`). Empty fields do not filter.
struct CostQuery {
  std::string payer;
  std::string provider;
  std::string job_id;
  int64_t since_ms = 0;    // charges for time from this UTC day on (aggregates are per day)
  std::string by = "job";  // "job" | "day" | "node" | "resource" | "account"
};

// A charge added to the incrementally kept cost totals (one row per payer, provider, job, node,
// UTC day and resource), in the same commit as its ledger transaction: cost reports read these
// instead of every meter record.
struct CostDelta {
  std::string payer;
  std::string provider;
  std::string job_id;
  std::string node_id;
  std::string day;       // "2026-12-02" (UTC) of the end of the span charged
  std::string resource;  // "gpu" | "cpu"
  int64_t charged_micros = 0;
  int64_t fee_micros = 0;
  int64_t lost_micros = 0;
  int64_t metered_ms = 0;
  int64_t credited_micros = 0;  // SLA credits paid back (part of charged_micros, not extra)
  bool operator==(const CostDelta&) const = default;
};

// One line of a cost report: what `key` (a job id, a day, a node id, a resource) cost.
struct CostRow {
  std::string key;
  int64_t charged_micros = 0;
  int64_t fee_micros = 0;
  int64_t lost_micros = 0;
  int64_t metered_ms = 0;       // compute time billed
  int64_t credited_micros = 0;  // SLA credits paid back: the net cost is charged - credited
  bool operator==(const CostRow&) const = default;
};

// A monthly budget (issue 15 item 1; README "Budgets"): what an account or a team may be charged
// per UTC calendar month (net of SLA credits, every resource), and where its alerts are POSTed.
struct BudgetRecord {
  std::string scope;           // "account:<account id>" | "team:<team name>"
  int64_t monthly_micros = 0;  // > 0; a removed budget is deleted (`removed`)
  std::string webhook{};       // http(s) URL for alerts, or ""
  int64_t updated_ms = 0;
  bool removed = false;  // in a WriteBatch: delete the row instead
  bool operator==(const BudgetRecord&) const = default;
};

// An alert: a scope's month crossed 50, 80 or 100 % of its budget. Raised once per scope, month
// and threshold (the key), in the commit of the charge that crossed it; the webhook's delivery
// is recorded on it.
struct BudgetAlert {
  std::string scope;
  std::string month;  // "2026-12" (UTC)
  int percent = 0;    // 50 | 80 | 100
  int64_t ts_ms = 0;
  int64_t spent_micros = 0;
  int64_t budget_micros = 0;
  std::string webhook{};     // where it is to be delivered ("" when none)
  int64_t delivered_ms = 0;  // 0 until the webhook answered 2xx
  int attempts = 0;          // deliveries tried
  std::string last_error{};  // why the last delivery failed
  bool operator==(const BudgetAlert&) const = default;
};

}  // namespace sluice::store
