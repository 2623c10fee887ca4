// Metering and the ledger in the core (issue 14; docs/design-notes.md "Metering and the
// ledger"). Meters open and close in the same commit as the attempt's `started` and its end, and
// every charge is a balanced ledger transaction in the commit that settles it, so a crash never
// loses or doubles a second. Members of ServerCore; the caller holds mu_ unless a method takes
// it.
#include <algorithm>
#include <ctime>

#include "ledger/metering.h"
#include "server/accounts.h"
#include "server/core_internal.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

namespace {

// "2026-12-02": the UTC day cost totals file a charge under.
std::string UtcDay(int64_t ms) {
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

bool Interrupted(AttemptState s) {
  return s == AttemptState::kLost || s == AttemptState::kPreempted;
}

}  // namespace

std::string ServerCore::PayerLocked(const std::string& owner) const {
  if (!owner.empty()) return owner;
  return accounts_ != nullptr ? accounts_->admin_account_id() : "admin";  // jobs before accounts
}

std::string ServerCore::ProviderLocked(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  if (it != nodes_.end() && !it->second.record.owner.empty()) return it->second.record.owner;
  return accounts_ != nullptr ? accounts_->builtin_provider_id() : "provider";
}

void ServerCore::NoteLeaseRenewedLocked(const std::string& node_id) {
  lease_renewed_mono_[node_id] = clock_->MonotonicMillis();
}

int64_t ServerCore::LeaseEndLocked(const std::string& node_id, int64_t fallback) const {
  auto it = lease_renewed_mono_.find(node_id);
  if (it == lease_renewed_mono_.end()) return fallback;
  const int64_t since = clock_->MonotonicMillis() - it->second;
  return clock_->NowMillis() - since + options_.lease_ms;
}

store::MeterRecord ServerCore::SettleIntoLocked(Edit& edit, const store::MeterRecord& meter,
                                                int64_t until_ms, int64_t lost_micros) {
  const int64_t now = clock_->NowMillis();
  ledger::Settlement s = ledger::SettleTo(meter, until_ms, options_.platform_fee_bps);
  s.meter.lost_micros += lost_micros;
  if (s.charge > 0 || lost_micros > 0 || s.to_ms > s.from_ms) {
    store::LedgerTxn txn = ledger::ChargeTxn(s, now);
    for (const auto& e : txn.entries) edit.balance_deltas[e.account] += e.amount_micros;
    if (!txn.entries.empty()) edit.batch.ledger.push_back(std::move(txn));
    edit.batch.cost_deltas.push_back({meter.payer, meter.provider, meter.job_id, meter.node_id,
                                      UtcDay(s.to_ms), meter.resource, s.charge, s.fee, lost_micros,
                                      s.to_ms - s.from_ms});
  }
  return s.meter;
}

void ServerCore::MeterLocked(Edit& edit) {
  // Records in the order the edit wrote them: an attempt may start and end in one batch.
  const size_t n = edit.batch.attempts.size();
  for (size_t i = 0; i < n; ++i) {
    const AttemptRecord a = edit.batch.attempts[i];  // copy: the batch grows below
    std::optional<store::MeterRecord> open;
    if (auto staged = edit.meters.find(a.id); staged != edit.meters.end()) {
      open = staged->second;
    } else if (auto live = open_meters_.find(a.id); live != open_meters_.end()) {
      open = live->second;
    }
    if (!open && a.state == AttemptState::kRunning && a.started_ms > 0 &&
        edit.meters.count(a.id) == 0) {
      store::MeterRecord m;
      m.attempt_id = a.id;
      m.job_id = a.job_id;
      const JobState* js = ViewJobLocked(edit, a.job_id);
      m.payer = PayerLocked(js != nullptr ? js->record.owner : "");
      m.provider = ProviderLocked(a.node_id);
      m.node_id = a.node_id;
      m.resource = a.gpus.empty() ? "cpu" : "gpu";
      m.units = a.gpus.empty() ? a.cpus : static_cast<int>(a.gpus.size());
      m.memory_gb = a.memory_gb;
      m.price_micros_per_hour = ledger::PricePerHourMicros(a.price_per_hour);
      m.interruptible = a.interruptible;
      m.start_ms = a.started_ms;
      m.settled_ms = a.started_ms;
      edit.meters[a.id] = m;
      edit.batch.meters.push_back(m);
      continue;
    }
    if (!open || !st::IsTerminal(a.state)) continue;
    // Charged to the earliest of its end as the server received it and its last lease renewal
    // plus the lease (never from the provider's own timestamps). A node not heard since our
    // restart is charged no further than what was already settled.
    store::MeterRecord m = *open;
    int64_t end = std::min(a.ended_ms, LeaseEndLocked(a.node_id, m.settled_ms));
    end = std::max(end, m.settled_ms);
    m.end_ms = end;
    m.end_cause = a.cause;
    int64_t lost = 0;
    if (Interrupted(a.state)) {
      // Work after the attempt's last saved checkpoint is done again by the next attempt.
      int64_t saved = m.start_ms;
      auto kept = edit.checkpoints.find(a.job_id);
      const auto* list = kept != edit.checkpoints.end() ? &kept->second : nullptr;
      if (list == nullptr) {
        auto live = checkpoints_.find(a.job_id);
        if (live != checkpoints_.end()) list = &live->second;
      }
      if (list != nullptr) {
        for (const auto& c : *list) {
          if (c.attempt_id == a.id) saved = std::max(saved, std::min(c.created_ms, end));
        }
      }
      lost = ledger::ChargeFor(m.price_micros_per_hour, end - m.start_ms) -
             ledger::ChargeFor(m.price_micros_per_hour, saved - m.start_ms);
    }
    m = SettleIntoLocked(edit, m, end, lost);
    edit.meters[a.id] = std::nullopt;
    edit.batch.meters.push_back(m);
  }
}

Status ServerCore::SettleMeters() {
  std::lock_guard<std::mutex> lock(mu_);
  return SettleMetersLocked();
}

Status ServerCore::SettleMetersLocked() {
  last_settle_mono_ = clock_->MonotonicMillis();
  if (open_meters_.empty()) return Status::Ok();
  Edit edit;
  const int64_t now = clock_->NowMillis();
  for (const auto& [id, meter] : open_meters_) {
    const int64_t until = std::min(now, LeaseEndLocked(meter.node_id, meter.settled_ms));
    if (until <= meter.settled_ms) continue;
    store::MeterRecord m = SettleIntoLocked(edit, meter, until, 0);
    edit.meters[id] = m;
    edit.batch.meters.push_back(m);
  }
  return CommitLocked(edit);
}

bool ServerCore::CanSpendLocked(const std::string& account_id) const {
  const std::string payer = PayerLocked(account_id);
  const int64_t limit = accounts_ != nullptr ? accounts_->CreditLimitOf(payer) : ledger::kUnlimited;
  if (limit == ledger::kUnlimited) return true;
  auto it = balances_.find(payer);
  const int64_t balance = it != balances_.end() ? it->second : 0;
  return balance > -limit;
}

std::string ServerCore::CreditRefusalLocked(const std::string& account_id) const {
  const std::string payer = PayerLocked(account_id);
  auto acc = accounts_ != nullptr ? accounts_->FindAccount(payer) : std::nullopt;
  const std::string name = acc ? acc->name : payer;
  auto it = balances_.find(payer);
  const int64_t balance = it != balances_.end() ? it->second : 0;
  return "account " + name + " has no credit left: balance " + ledger::FormatMicros(balance) +
         ", credit limit " +
         ledger::FormatCreditLimit(acc ? acc->credit_limit_micros : ledger::kUnlimited) +
         " (an admin adds credit with `sluice account credit " + name + " AMOUNT`)";
}

int64_t ServerCore::BalanceOf(const std::string& account_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = balances_.find(account_id);
  return it != balances_.end() ? it->second : 0;
}

Result<store::LedgerTxn> ServerCore::TopUp(const std::string& account_id, int64_t amount,
                                           const std::string& memo) {
  if (amount <= 0) return Status::InvalidArgument("amount: a top-up must be more than $0");
  std::lock_guard<std::mutex> lock(mu_);
  Edit edit;
  store::LedgerTxn txn = ledger::TopUpTxn(account_id, amount, clock_->NowMillis(), memo);
  for (const auto& e : txn.entries) edit.balance_deltas[e.account] += e.amount_micros;
  edit.batch.ledger.push_back(txn);
  SLUICE_RETURN_IF_ERROR(CommitLocked(edit));
  // Its jobs waiting for credit may run now.
  if (!queued_.empty()) SLUICE_RETURN_IF_ERROR(RequestScheduleLocked());
  return txn;
}

void ServerCore::CreditChanged() {
  std::lock_guard<std::mutex> lock(mu_);
  if (queued_.empty()) return;
  if (Status s = RequestScheduleLocked(); !s.ok()) {
    DegradedLocked("schedule", "scheduling after a credit limit changed", s);
  }
}

Result<JobCost> ServerCore::CostOfJob(const std::string& job_id) {
  SLUICE_ASSIGN_OR_RETURN(auto meters, store_->LoadMeters(job_id));
  SLUICE_ASSIGN_OR_RETURN(auto attempts, store_->AttemptsForJob(job_id));
  std::lock_guard<std::mutex> lock(mu_);
  JobCost cost;
  const int64_t now = clock_->NowMillis();
  for (auto& m : meters) {
    // The live copy is newer than what the store read before we took the lock.
    if (auto live = open_meters_.find(m.attempt_id); live != open_meters_.end()) m = live->second;
    cost.charged_micros += m.charged_micros;
    cost.fee_micros += m.fee_micros;
    cost.lost_micros += m.lost_micros;
    if (m.end_ms == 0) {
      const int64_t until = std::min(now, LeaseEndLocked(m.node_id, m.settled_ms));
      cost.accruing_micros += ledger::SettleTo(m, until, 0).charge;
    }
  }
  cost.meters = std::move(meters);
  if (!attempts.empty()) cost.estimate_micros = attempts.back().expected_cost_micros;
  return cost;
}

Result<std::vector<store::CostRow>> ServerCore::Costs(const store::CostQuery& query) {
  return store_->Costs(query);
}

Result<LedgerReport> ServerCore::CheckLedger() {
  std::lock_guard<std::mutex> lock(mu_);  // no commit may land between the two reads
  LedgerReport report;
  SLUICE_ASSIGN_OR_RETURN(report.check, store_->CheckLedger());
  const auto& c = report.check;
  for (int64_t id : c.unbalanced) {
    report.problems.push_back("transaction " + std::to_string(id) + " does not sum to zero");
  }
  int64_t total = 0;
  std::map<std::string, int64_t> from_entries;
  for (const auto& [account, balance] : c.balances) {
    from_entries[account] = balance;
    total += balance;
  }
  if (total != 0) {
    report.problems.push_back("the balances sum to " + ledger::FormatMicros(total) + ", not zero");
  }
  std::set<std::string> accounts;
  for (const auto& [a, b] : from_entries) accounts.insert(a);
  for (const auto& [a, b] : balances_) accounts.insert(a);
  for (const auto& a : accounts) {
    const int64_t entries = from_entries.count(a) ? from_entries[a] : 0;
    const int64_t held = balances_.count(a) ? balances_.at(a) : 0;
    if (entries != held) {
      report.problems.push_back("account " + a + ": balance " + ledger::FormatMicros(held) +
                                " but its entries sum to " + ledger::FormatMicros(entries));
    }
  }
  if (c.charged_by_entries != c.charged_by_meters || c.charged_by_entries != c.charged_by_totals) {
    report.problems.push_back("compute charged disagrees: entries " +
                              ledger::FormatMicros(c.charged_by_entries) + ", meters " +
                              ledger::FormatMicros(c.charged_by_meters) + ", cost totals " +
                              ledger::FormatMicros(c.charged_by_totals));
  }
  return report;
}

}  // namespace sluice::server
