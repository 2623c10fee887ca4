// What each job was charged, by kind, and the arithmetic of its budget (issue 15 item 1; docs/
// design-notes.md "Budgets"): a job's max_total_cost bounds what its attempts are charged
// (compute and transfer; storage is billed to it but not counted against it). The core
// (core_budget.cc) decides what to stop and when; these say how much is charged and how much
// room is left. No lock of its own: the core's guards it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "spec/job_spec.h"
#include "store/ledger_records.h"
#include "store/store.h"

namespace sluice::server {

struct JobCharges {
  int64_t compute = 0, transfer = 0, storage = 0;
  // What counts against the job's budget.
  int64_t Budgeted() const { return compute + transfer; }
  // Adds `micros` charged for `resource` ("storage", "transfer", else compute) to its kind.
  void Add(std::string_view resource, int64_t micros);
  void Add(const store::CostDelta& d) { Add(d.resource, d.charged_micros); }
};

// Each job's committed charges: read from the store at first use, then kept with the charges
// the core commits (a read per job was a fifth of the server's time in a burst of exits).
class ChargesByJob {
 public:
  explicit ChargesByJob(store::Store* store) : store_(store) {}
  // A store read error counts the job as far over any budget (not kept: read again next time),
  // so nothing overspends on it.
  const JobCharges& Of(const std::string& job_id) const;
  int64_t Budgeted(const std::string& job_id) const { return Of(job_id).Budgeted(); }
  // A new job: charged nothing, known without a read.
  void StartEmpty(const std::string& job_id) { by_job_.emplace(job_id, JobCharges{}); }
  // After a commit: its charges, for the jobs already known (the rest are read when asked).
  void NoteCommitted(const store::CostDelta& d);
  // The job left memory: read from the store again if a report asks.
  void Forget(const std::string& job_id) { by_job_.erase(job_id); }

 private:
  store::Store* const store_;
  mutable std::map<std::string, JobCharges> by_job_;
};

// The job's budget in micro-dollars, if it has one.
std::optional<int64_t> BudgetMicros(const spec::JobSpec& spec);
// What a stop costs at `price_micros_per_hour` (the grace period plus `margin_ms` of compute and
// the final checkpoint's upload at `transfer_price_per_gb`), so a stop never overshoots.
int64_t StopReserve(const spec::JobSpec& spec, int64_t price_micros_per_hour, int64_t margin_ms,
                    double transfer_price_per_gb);
// What `batch` charges `job_id` that counts against its budget.
int64_t StagedBudgeted(const store::WriteBatch& batch, const std::string& job_id);
// The last wall ms `meter` may be billed to when everything else charged to its job comes to
// `others` under `budget`: ChargeFor(price, ms) stays within the room left up to it. INT64_MAX
// when it never reaches it (a free meter, storage, an overflow).
int64_t BudgetEnd(int64_t budget, int64_t others, const store::MeterRecord& meter);

}  // namespace sluice::server
