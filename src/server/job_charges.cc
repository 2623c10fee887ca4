#include "server/job_charges.h"

#include <algorithm>
#include <climits>
#include <cstdio>

#include "ledger/metering.h"

namespace sluice::server {

void JobCharges::Add(std::string_view resource, int64_t micros) {
  (resource == "storage" ? storage : resource == "transfer" ? transfer : compute) += micros;
}

const JobCharges& ChargesByJob::Of(const std::string& job_id) const {
  auto cached = by_job_.find(job_id);
  if (cached != by_job_.end()) return cached->second;
  store::CostQuery q;
  q.job_id = job_id;
  q.by = "resource";
  auto rows = store_->Costs(q);
  if (!rows.ok()) {
    std::fprintf(stderr, "sluice server: reading the costs of %s failed (%s)\n", job_id.c_str(),
                 rows.status().ToString().c_str());
    static const JobCharges kUnknown{INT64_MAX / 4, 0, 0};  // unknown is not zero
    return kUnknown;
  }
  JobCharges c;
  for (const auto& r : *rows) c.Add(r.key, r.charged_micros);  // by resource
  return by_job_.emplace(job_id, c).first->second;
}

void ChargesByJob::NoteCommitted(const store::CostDelta& d) {
  auto known = by_job_.find(d.job_id);
  if (known != by_job_.end()) known->second.Add(d);
}

std::optional<int64_t> BudgetMicros(const spec::JobSpec& spec) {
  if (!spec.max_total_cost) return std::nullopt;
  return ledger::PricePerHourMicros(*spec.max_total_cost);
}

int64_t StopReserve(const spec::JobSpec& spec, int64_t price_micros_per_hour, int64_t margin_ms,
                    double transfer_price_per_gb) {
  const int64_t grace =
      ledger::ChargeFor(price_micros_per_hour, spec.lifecycle.grace_period_s * 1000 + margin_ms);
  const int64_t per_gb = ledger::PricePerHourMicros(transfer_price_per_gb);
  const auto bytes = static_cast<int64_t>(spec.lifecycle.checkpoint_size_gb * 1e9);
  return grace + ledger::TransferCharge(bytes, per_gb);
}

int64_t StagedBudgeted(const store::WriteBatch& batch, const std::string& job_id) {
  int64_t staged = 0;
  for (const auto& d : batch.cost_deltas) {
    if (d.job_id == job_id && d.resource != "storage") staged += d.charged_micros;
  }
  return staged;
}

int64_t BudgetEnd(int64_t budget, int64_t others, const store::MeterRecord& meter) {
  if (meter.resource == "storage" || meter.price_micros_per_hour <= 0) return INT64_MAX;
  const int64_t room = std::max<int64_t>(0, budget - others);
  // ChargeFor(price, ms) = floor(price * ms / 3.6e6) <= room for every ms up to this.
  const __int128 ms = static_cast<__int128>(room) * 3'600'000 / meter.price_micros_per_hour;
  if (ms > static_cast<__int128>(INT64_MAX - meter.start_ms)) return INT64_MAX;
  return meter.start_ms + static_cast<int64_t>(ms);
}

}  // namespace sluice::server
