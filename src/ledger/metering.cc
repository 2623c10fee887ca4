#include "ledger/metering.h"

#include <algorithm>
#include <cmath>

namespace sluice::ledger {

Micros ChargeFor(Micros price_per_hour, int64_t ms) {
  if (price_per_hour <= 0 || ms <= 0) return 0;
  const __int128 product = static_cast<__int128>(price_per_hour) * ms;
  return static_cast<Micros>(product / 3'600'000);
}

Micros FeeFor(Micros charged, int fee_bps) {
  if (charged <= 0 || fee_bps <= 0) return 0;
  return static_cast<Micros>(static_cast<__int128>(charged) * fee_bps / 10'000);
}

Settlement SettleTo(const store::MeterRecord& meter, int64_t until_ms, int fee_bps) {
  Settlement s;
  s.meter = meter;
  int64_t to = std::max(until_ms, meter.settled_ms);
  if (meter.end_ms > 0) to = std::min(to, std::max(meter.end_ms, meter.settled_ms));
  s.from_ms = meter.settled_ms;
  s.to_ms = to;
  const Micros total = ChargeFor(meter.price_micros_per_hour, to - meter.start_ms);
  const Micros total_fee = FeeFor(total, fee_bps);
  s.charge = std::max<Micros>(0, total - meter.charged_micros);
  s.fee = std::max<Micros>(0, total_fee - meter.fee_micros);
  s.meter.settled_ms = to;
  s.meter.charged_micros = meter.charged_micros + s.charge;
  s.meter.fee_micros = meter.fee_micros + s.fee;
  return s;
}

store::LedgerTxn ChargeTxn(const Settlement& s, int64_t ts_ms) {
  store::LedgerTxn txn;
  txn.ts_ms = ts_ms;
  txn.kind = "charge";
  txn.job_id = s.meter.job_id;
  txn.attempt_id = s.meter.attempt_id;
  txn.node_id = s.meter.node_id;
  txn.from_ms = s.from_ms;
  txn.to_ms = s.to_ms;
  if (s.charge == 0) return txn;
  txn.entries.push_back({s.meter.payer, s.meter.resource, -s.charge});
  if (s.meter.provider == kPlatformAccount) {
    txn.entries.push_back({kPlatformAccount, s.meter.resource, s.charge});
    return txn;
  }
  if (s.charge - s.fee != 0)
    txn.entries.push_back({s.meter.provider, "earnings", s.charge - s.fee});
  if (s.fee != 0) txn.entries.push_back({kPlatformAccount, "fee", s.fee});
  return txn;
}

store::LedgerTxn CreditTxn(const store::MeterRecord& meter, Micros amount, int fee_bps,
                           int64_t ts_ms, const std::string& reason) {
  store::LedgerTxn txn;
  txn.ts_ms = ts_ms;
  txn.kind = "sla-credit";
  txn.job_id = meter.job_id;
  txn.attempt_id = meter.attempt_id;
  txn.node_id = meter.node_id;
  txn.memo = reason;
  if (amount <= 0) return txn;
  const Micros fee = meter.provider == kPlatformAccount ? 0 : FeeFor(amount, fee_bps);
  txn.entries.push_back({meter.payer, "sla-credit", amount});
  if (amount - fee != 0) txn.entries.push_back({meter.provider, "sla-credit", -(amount - fee)});
  if (fee != 0) txn.entries.push_back({kPlatformAccount, "sla-credit", -fee});
  return txn;
}

store::LedgerTxn PlatformChargeTxn(const std::string& payer, const std::string& category,
                                   Micros amount, int64_t ts_ms, const std::string& memo) {
  store::LedgerTxn txn;
  txn.ts_ms = ts_ms;
  txn.kind = "charge";
  txn.memo = memo;
  if (amount <= 0) return txn;
  txn.entries.push_back({payer, category, -amount});
  txn.entries.push_back({kPlatformAccount, category, amount});
  return txn;
}

Micros TransferCharge(int64_t bytes, Micros micros_per_gb) {
  if (bytes <= 0 || micros_per_gb <= 0) return 0;
  return static_cast<Micros>(static_cast<__int128>(bytes) * micros_per_gb / 1'000'000'000);
}

Micros StoragePricePerHour(int64_t bytes, double usd_per_gb_month) {
  if (bytes <= 0 || !(usd_per_gb_month > 0)) return 0;
  return std::llround(static_cast<double>(bytes) / 1e9 * usd_per_gb_month / 730.0 *
                      static_cast<double>(kMicrosPerDollar));
}

store::LedgerTxn TopUpTxn(const std::string& account, Micros amount, int64_t ts_ms,
                          const std::string& memo) {
  store::LedgerTxn txn;
  txn.ts_ms = ts_ms;
  txn.kind = "top-up";
  txn.memo = memo;
  txn.entries.push_back({kFundingAccount, "funding", -amount});
  txn.entries.push_back({account, "top-up", amount});
  return txn;
}

Micros Sum(const store::LedgerTxn& txn) {
  Micros sum = 0;
  for (const auto& e : txn.entries) sum += e.amount_micros;
  return sum;
}

}  // namespace sluice::ledger
