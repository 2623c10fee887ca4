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
std::string UtcDay(int64_t ms) { return Utc(ms, "%Y-%m-%d"); }

constexpr int64_t kStorageSettleMs = 3'600'000;

// The published SLA rule for a lost attempt (README "SLA credits").
constexpr std::string_view kLostCredit =
    "lost with its node: the time after its last saved checkpoint is credited";

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

store::MeterRecord ServerCore::SettleIntoLocked(Edit& edit, const store::MeterRecord& meter,
                                                int64_t until_ms, int64_t lost_micros,
                                                int64_t credit_micros,
                                                const std::string& credit_reason) {
  const int64_t now = clock_->NowMillis();
  // The platform's own charges (storage) carry no fee: it is paid the whole of them.
  const int fee_bps = meter.provider == ledger::kPlatformAccount ? 0 : options_.platform_fee_bps;
  ledger::Settlement s = ledger::SettleTo(meter, until_ms, fee_bps);
  s.meter.lost_micros += lost_micros;
  // A meter credited in full (its node failed verification while running it) has every new
  // charge credited too.
  if (!meter.credit_reason.empty()) credit_micros += s.charge;
  if (s.charge > 0 || lost_micros > 0 || s.to_ms > s.from_ms) {
    store::LedgerTxn txn = ledger::ChargeTxn(s, now);
    for (const auto& e : txn.entries) edit.balance_deltas[e.account] += e.amount_micros;
    if (!txn.entries.empty()) edit.batch.ledger.push_back(std::move(txn));
    edit.batch.cost_deltas.push_back({meter.payer, meter.provider, meter.job_id, meter.node_id,
                                      UtcDay(s.to_ms), meter.resource, s.charge, s.fee, lost_micros,
                                      s.to_ms - s.from_ms});
  }
  CreditIntoLocked(edit, s.meter, credit_micros,
                   meter.credit_reason.empty() ? credit_reason : meter.credit_reason);
  return s.meter;
}

void ServerCore::CreditIntoLocked(Edit& edit, store::MeterRecord& m, int64_t amount,
                                  const std::string& reason) {
  // Never more than was charged and not yet credited.
  amount = std::min(amount, m.charged_micros - m.credited_micros);
  if (amount <= 0 || m.provider == ledger::kPlatformAccount) return;
  const int64_t now = clock_->NowMillis();
  store::LedgerTxn txn = ledger::CreditTxn(m, amount, options_.platform_fee_bps, now, reason);
  for (const auto& e : txn.entries) edit.balance_deltas[e.account] += e.amount_micros;
  edit.batch.ledger.push_back(std::move(txn));
  store::CostDelta d{m.payer, m.provider, m.job_id, m.node_id, UtcDay(now), m.resource};
  d.credited_micros = amount;
  // The platform gives back its fee on the amount (as CreditTxn takes it): fees are kept net.
  d.fee_micros = -ledger::FeeFor(amount, options_.platform_fee_bps);
  edit.batch.cost_deltas.push_back(std::move(d));
  m.credited_micros += amount;
  if (m.credit_reason.empty()) m.credit_reason = reason;  // shown with the meter
  edit.batch.events.push_back(EventLocked(
      m.job_id, "sla-credit",
      ledger::FormatMicros(amount) + " credited for attempt " + m.attempt_id + ": " + reason));
}

void ServerCore::CreditInFullLocked(Edit& edit, const std::string& attempt_id,
                                    const std::string& reason) {
  auto staged = edit.meters.find(attempt_id);
  std::optional<store::MeterRecord> open;
  if (staged != edit.meters.end()) {
    open = staged->second;
  } else if (auto live = money_.open_meters.find(attempt_id); live != money_.open_meters.end()) {
    open = live->second;
  }
  if (!open || open->end_ms != 0 || !open->credit_reason.empty()) return;
  store::MeterRecord m = *open;
  m.credit_reason = reason;
  CreditIntoLocked(edit, m, m.charged_micros, reason);  // what it was charged so far
  edit.meters[attempt_id] = m;
  edit.batch.meters.push_back(m);
}

void ServerCore::MeterLocked(Edit& edit) {
  // Records in the order the edit wrote them: an attempt may start and end in one batch.
  const size_t n = edit.batch.attempts.size();
  for (size_t i = 0; i < n; ++i) {
    const AttemptRecord a = edit.batch.attempts[i];  // copy: the batch grows below
    std::optional<store::MeterRecord> open;
    if (auto staged = edit.meters.find(a.id); staged != edit.meters.end()) {
      open = staged->second;
    } else if (auto live = money_.open_meters.find(a.id); live != money_.open_meters.end()) {
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
    int64_t end = std::min(a.ended_ms, leases_.End(a.node_id, m.settled_ms));
    end = std::min(end, BudgetEndLocked(edit, m));  // never past the job's budget
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
    // SLA (issue 15 item 3): an attempt lost with its node is credited the work it lost.
    const bool sla = a.state == AttemptState::kLost && lost > 0;
    m = SettleIntoLocked(edit, m, end, lost, sla ? lost : 0,
                         sla ? std::string(kLostCredit) : std::string());
    edit.meters[a.id] = std::nullopt;
    edit.batch.meters.push_back(m);
  }
  ChargeTransfersLocked(edit);
  NoteAnomaliesLocked(edit);
  NoteBudgetAlertsLocked(edit);
}

int64_t ServerCore::BlobBytesLocked(const std::string& digest) const {
  return blobs_ != nullptr ? blobs_->Size(digest) : 0;
}

std::set<std::string> ServerCore::CheckpointBlobsLocked(const std::string& manifest) const {
  std::set<std::string> out;
  if (blobs_ == nullptr || manifest.empty()) return out;
  out.insert(manifest);
  for (auto& chunk : ManifestChunks(*blobs_, manifest)) out.insert(std::move(chunk));
  return out;
}

int64_t ServerCore::StoredBytesLocked(const std::string& job_id) {
  auto job = jobs_.find(job_id);
  const FinishedJob* done = job == jobs_.end() ? finished_.jobs.Find(job_id) : nullptr;
  if ((job == jobs_.end() && done == nullptr) || blobs_ == nullptr) return 0;
  const std::string& workdir =
      done != nullptr ? done->workdir_blob : job->second.record.workdir_blob;
  std::string key = workdir;
  auto kept = checkpoints_.find(job_id);
  if (kept != checkpoints_.end()) {
    for (const auto& c : kept->second) key += "," + c.manifest;
  }
  auto cached = money_.stored_bytes.find(job_id);
  if (cached != money_.stored_bytes.end() && cached->second.first == key)
    return cached->second.second;
  std::set<std::string> blobs;
  if (!workdir.empty()) blobs.insert(workdir);
  if (kept != checkpoints_.end()) {
    for (const auto& c : kept->second) blobs.merge(CheckpointBlobsLocked(c.manifest));
  }
  int64_t bytes = 0;
  for (const auto& b : blobs) bytes += BlobBytesLocked(b);
  money_.stored_bytes[job_id] = {key, bytes};
  return bytes;
}

void ServerCore::ChargeTransferLocked(Edit& edit, const std::string& job_id,
                                      const std::string& attempt_id, const std::string& node_id,
                                      int64_t bytes, const std::string& what) {
  const int64_t per_gb = ledger::PricePerHourMicros(options_.transfer_price_per_gb);
  // A job's budget bounds its transfers too (the final upload is reserved before it starts).
  const int64_t amount = WithinBudgetLocked(edit, job_id, ledger::TransferCharge(bytes, per_gb));
  if (amount <= 0) return;
  const JobState* js = ViewJobLocked(edit, job_id);
  const std::string payer = PayerLocked(js != nullptr ? js->record.owner : "");
  const int64_t now = clock_->NowMillis();
  store::LedgerTxn txn = ledger::PlatformChargeTxn(payer, "transfer", amount, now,
                                                   what + ": " + std::to_string(bytes) + " bytes");
  txn.job_id = job_id;
  txn.attempt_id = attempt_id;
  txn.node_id = node_id;
  for (const auto& e : txn.entries) edit.balance_deltas[e.account] += e.amount_micros;
  edit.batch.ledger.push_back(std::move(txn));
  edit.batch.cost_deltas.push_back(
      {payer, ledger::kPlatformAccount, job_id, node_id, UtcDay(now), "transfer", amount, 0, 0, 0});
}

void ServerCore::ChargeTransfersLocked(Edit& edit) {
  if (blobs_ == nullptr || !(options_.transfer_price_per_gb > 0)) return;
  // Downloads: what each attempt the edit started fetched before it ran.
  for (const auto& m : edit.batch.meters) {
    if (m.resource == "storage" || m.end_ms != 0 || m.settled_ms != m.start_ms) continue;
    if (money_.open_meters.count(m.attempt_id)) continue;  // opened before this edit
    const AttemptRecord* att = ViewAttemptLocked(edit, m.attempt_id);
    const JobState* js = ViewJobLocked(edit, m.job_id);
    std::set<std::string> blobs;
    if (js != nullptr && !js->record.workdir_blob.empty()) blobs.insert(js->record.workdir_blob);
    if (att != nullptr) blobs.merge(CheckpointBlobsLocked(att->checkpoint_restored));
    int64_t bytes = 0;
    for (const auto& b : blobs) bytes += BlobBytesLocked(b);
    ChargeTransferLocked(edit, m.job_id, m.attempt_id, m.node_id, bytes,
                         "workdir and checkpoint downloaded to the node");
  }
  // Uploads: a new checkpoint's blobs the job did not already keep.
  for (const auto& c : edit.batch.checkpoints) {
    const auto kept = checkpoints_.find(c.job_id);
    const std::vector<store::CheckpointRecord> none;
    const auto& earlier = kept != checkpoints_.end() ? kept->second : none;
    const bool resent = std::any_of(earlier.begin(), earlier.end(),
                                    [&](const auto& k) { return k.manifest == c.manifest; });
    if (resent) continue;  // already kept: nothing was moved for it now
    std::set<std::string> before;
    for (const auto& k : earlier) before.merge(CheckpointBlobsLocked(k.manifest));
    int64_t bytes = 0;
    for (const auto& b : CheckpointBlobsLocked(c.manifest)) {
      if (!before.count(b)) bytes += BlobBytesLocked(b);
    }
    const AttemptRecord* att = ViewAttemptLocked(edit, c.attempt_id);
    ChargeTransferLocked(edit, c.job_id, c.attempt_id, att != nullptr ? att->node_id : "", bytes,
                         "checkpoint uploaded from the node");
  }
}

void ServerCore::SettleStorageLocked(Edit& edit) {
  if (blobs_ == nullptr) return;
  const int64_t now = clock_->NowMillis();
  std::map<std::string, const store::MeterRecord*> open;  // job -> its storage meter
  for (const auto& [id, m] : money_.open_meters) {
    if (m.resource == "storage") open[m.job_id] = &m;
  }
  std::set<std::string> jobs;
  for (const auto& [job, meter] : open) jobs.insert(job);
  for (const auto& [job, kept] : checkpoints_) jobs.insert(job);
  for (const auto& [id, js] : jobs_) {
    if (!js.record.workdir_blob.empty()) jobs.insert(id);
  }
  for (const auto& [id, f] : finished_.jobs.all()) {
    if (!f.workdir_blob.empty()) jobs.insert(id);
  }
  for (const auto& job : jobs) {
    const int64_t bytes = StoredBytesLocked(job);
    const int64_t price =
        ledger::StoragePricePerHour(bytes, options_.cost_model.storage_price_per_gb_month);
    auto it = open.find(job);
    const store::MeterRecord* meter = it != open.end() ? it->second : nullptr;
    if (meter != nullptr && meter->price_micros_per_hour == price) {
      // Unchanged storage is billed hourly: cents a month need no write a minute per job.
      if (now - meter->settled_ms < kStorageSettleMs) continue;
      store::MeterRecord m = SettleIntoLocked(edit, *meter, now, 0);
      edit.meters[m.attempt_id] = m;
      edit.batch.meters.push_back(m);
      continue;
    }
    if (meter != nullptr) {  // what it keeps changed (or it was deleted): this segment ends
      store::MeterRecord m = *meter;
      m.end_ms = now;
      m.end_cause = bytes > 0 ? "stored bytes changed" : "nothing stored";
      m = SettleIntoLocked(edit, m, now, 0);
      edit.meters[m.attempt_id] = std::nullopt;
      edit.batch.meters.push_back(m);
    }
    if (price <= 0) continue;
    store::MeterRecord m;
    m.attempt_id = "storage:" + job + ":" + std::to_string(now);
    m.job_id = job;
    auto live = jobs_.find(job);  // a job with bytes stored is in jobs_ or finished_
    m.payer = PayerLocked(live != jobs_.end() ? live->second.record.owner
                                              : finished_.jobs.Find(job)->owner);
    m.provider = ledger::kPlatformAccount;
    m.resource = "storage";
    m.units = static_cast<int>(std::min<int64_t>(bytes >> 20, INT32_MAX));  // MiB
    m.price_micros_per_hour = price;
    m.start_ms = now;
    m.settled_ms = now;
    edit.meters[m.attempt_id] = m;
    edit.batch.meters.push_back(m);
  }
}

Status ServerCore::SettleMeters() {
  std::lock_guard<TimedMutex> lock(mu_);
  return SettleMetersLocked();
}

Status ServerCore::SettleMetersLocked() {
  money_.last_settle_mono = clock_->MonotonicMillis();
  money_.settle_next.reset();  // every meter is settled here: a round in progress has nothing left
  return SettleSliceLocked("", money_.open_meters.size()).status();
}

// A fleet of 10,000 busy nodes has 10,000 open meters, and settling one is a meter row, a ledger
// transaction and a cost total: in one commit, the core's lock was held for seconds every
// interval (bench/swarm's release: a tick held it over 1 s), while heartbeats, submits and exits
// waited. A slice of settle_slice meters a tick bounds that hold; a round of N meters takes
// N / settle_slice ticks, and one longer than the interval is followed by the next at once.
Status ServerCore::SettleRoundStepLocked() {
  const int64_t now_mono = clock_->MonotonicMillis();
  const bool starting = !money_.settle_next.has_value();
  if (starting && now_mono - money_.last_settle_mono < options_.settle_interval_ms) {
    return Status::Ok();
  }
  // The round's start is when it began, failed or not: a store that fails is retried at the next
  // interval, as a failed settlement always was, not every tick.
  if (starting) money_.last_settle_mono = now_mono;
  auto next = SettleSliceLocked(starting ? std::string() : *money_.settle_next,
                                std::max<size_t>(1, options_.settle_slice));
  if (!next.ok()) {
    money_.settle_next.reset();  // the round ends; the next begins at the interval
    return next.status();
  }
  money_.settle_next = std::move(*next);  // applied once the slice is committed
  return Status::Ok();
}

Result<std::optional<std::string>> ServerCore::SettleSliceLocked(const std::string& from,
                                                                 size_t limit) {
  Edit edit;
  const int64_t now = clock_->NowMillis();
  auto it = money_.open_meters.lower_bound(from);
  for (size_t n = 0; it != money_.open_meters.end() && n < limit; ++it) {
    const auto& [id, meter] = *it;
    if (meter.resource == "storage") continue;  // SettleStorageLocked, below
    ++n;
    int64_t until = std::min(now, leases_.End(meter.node_id, meter.settled_ms));
    until = std::min(until, BudgetEndLocked(edit, meter));
    if (until <= meter.settled_ms) continue;
    store::MeterRecord m = SettleIntoLocked(edit, meter, until, 0);
    edit.meters[id] = m;
    edit.batch.meters.push_back(m);
  }
  // Past the last compute meter, storage meters only: the round ends with the stored bytes.
  while (it != money_.open_meters.end() && it->second.resource == "storage") ++it;
  std::optional<std::string> next;
  if (it != money_.open_meters.end()) {
    next = it->first;  // copied before the commit changes the meters
  } else {
    SettleStorageLocked(edit);
  }
  SLUICE_RETURN_IF_ERROR(CommitLocked(edit));
  return next;
}

bool ServerCore::CanSpendLocked(const std::string& account_id, const Edit* edit) const {
  const std::string payer = PayerLocked(account_id);
  const int64_t limit = accounts_ != nullptr ? accounts_->CreditLimitOf(payer) : ledger::kUnlimited;
  if (limit == ledger::kUnlimited) return true;
  auto it = money_.balances.find(payer);
  int64_t balance = it != money_.balances.end() ? it->second : 0;
  if (edit != nullptr) {  // as the edit will leave it (a top-up in it counts)
    auto staged = edit->balance_deltas.find(payer);
    if (staged != edit->balance_deltas.end()) balance += staged->second;
  }
  return balance > -limit;
}

std::string ServerCore::CreditRefusalLocked(const std::string& account_id) const {
  const std::string payer = PayerLocked(account_id);
  auto acc = accounts_ != nullptr ? accounts_->FindAccount(payer) : std::nullopt;
  const std::string name = acc ? acc->name : payer;
  auto it = money_.balances.find(payer);
  const int64_t balance = it != money_.balances.end() ? it->second : 0;
  return "account " + name + " has no credit left: balance " + ledger::FormatMicros(balance) +
         ", credit limit " +
         ledger::FormatCreditLimit(acc ? acc->credit_limit_micros : ledger::kUnlimited) +
         " (an admin adds credit with `sluice account credit " + name + " AMOUNT`)";
}

int64_t ServerCore::BalanceOf(const std::string& account_id) {
  std::lock_guard<TimedMutex> lock(mu_);
  auto it = money_.balances.find(account_id);
  return it != money_.balances.end() ? it->second : 0;
}

Result<store::LedgerTxn> ServerCore::TopUp(const std::string& account_id, int64_t amount,
                                           const std::string& memo) {
  if (amount <= 0) return Status::InvalidArgument("amount: a top-up must be more than $0");
  std::lock_guard<TimedMutex> lock(mu_);
  Edit edit;
  store::LedgerTxn txn = ledger::TopUpTxn(account_id, amount, clock_->NowMillis(), memo);
  for (const auto& e : txn.entries) edit.balance_deltas[e.account] += e.amount_micros;
  edit.batch.ledger.push_back(txn);
  // Jobs its credit stopped run again (in the same commit: memory and disk agree).
  RequeueExhaustedLocked(
      edit, [&](const store::JobRecord& j) { return PayerLocked(j.owner) == account_id; });
  SLUICE_RETURN_IF_ERROR(CommitLocked(edit));
  // Its jobs waiting for credit may run now.
  if (!queued_.empty()) SLUICE_RETURN_IF_ERROR(RequestScheduleLocked());
  return txn;
}

void ServerCore::CreditChanged(const std::string& account_id) {
  std::lock_guard<TimedMutex> lock(mu_);
  Edit edit;
  RequeueExhaustedLocked(
      edit, [&](const store::JobRecord& j) { return PayerLocked(j.owner) == account_id; });
  if (Status s = CommitLocked(edit); !s.ok()) {
    DegradedLocked("budget", "queuing again the jobs a credit limit stopped", s);
  }
  if (queued_.empty()) return;
  if (Status s = RequestScheduleLocked(); !s.ok()) {
    DegradedLocked("schedule", "scheduling after a credit limit changed", s);
  }
}

Result<JobCost> ServerCore::CostOfJob(const std::string& job_id) {
  SLUICE_ASSIGN_OR_RETURN(auto meters, store_->LoadMeters(job_id));
  SLUICE_ASSIGN_OR_RETURN(auto attempts, store_->AttemptsForJob(job_id));
  store::CostQuery by_resource;
  by_resource.job_id = job_id;
  by_resource.by = "resource";
  SLUICE_ASSIGN_OR_RETURN(auto rows, store_->Costs(by_resource));
  std::lock_guard<TimedMutex> lock(mu_);
  JobCost cost;
  const int64_t now = clock_->NowMillis();
  for (auto& m : meters) {
    // The live copy is newer than what the store read before we took the lock.
    if (auto live = money_.open_meters.find(m.attempt_id); live != money_.open_meters.end())
      m = live->second;
    cost.charged_micros += m.charged_micros;
    (m.resource == "storage" ? cost.storage_micros : cost.compute_micros) += m.charged_micros;
    cost.fee_micros += m.fee_micros;
    cost.lost_micros += m.lost_micros;
    cost.credited_micros += m.credited_micros;
    if (m.end_ms == 0) {
      const int64_t until =
          m.resource == "storage" ? now : std::min(now, leases_.End(m.node_id, m.settled_ms));
      cost.accruing_micros += ledger::SettleTo(m, until, 0).charge;
    }
  }
  cost.meters = std::move(meters);
  for (const auto& r : rows) {
    if (r.key == "transfer") cost.transfer_micros += r.charged_micros;
  }
  cost.charged_micros += cost.transfer_micros;
  if (!attempts.empty()) cost.estimate_micros = attempts.back().expected_cost_micros;
  return cost;
}

Result<std::vector<store::CostRow>> ServerCore::Costs(const store::CostQuery& query) {
  return store_->Costs(query);
}

Result<LedgerReport> ServerCore::CheckLedger() {
  std::lock_guard<TimedMutex> lock(mu_);  // no commit may land between the two reads
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
  for (const auto& [a, b] : money_.balances) accounts.insert(a);
  for (const auto& a : accounts) {
    const int64_t entries = from_entries.count(a) ? from_entries[a] : 0;
    const int64_t held = money_.balances.count(a) ? money_.balances.at(a) : 0;
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
  if (c.credited_by_entries != c.credited_by_meters ||
      c.credited_by_entries != c.credited_by_totals) {
    report.problems.push_back("SLA credits disagree: entries " +
                              ledger::FormatMicros(c.credited_by_entries) + ", meters " +
                              ledger::FormatMicros(c.credited_by_meters) + ", cost totals " +
                              ledger::FormatMicros(c.credited_by_totals));
  }
  return report;
}

}  // namespace sluice::server
