// Metering (issue 14 item 1; docs/design-notes.md "Metering and the ledger"): what an attempt's
// time costs, and the balanced ledger transaction that bills it. Pure: no clock, no I/O.
//
// Rounding: an attempt's charge for its first `ms` milliseconds is ChargeFor(price, ms), rounded
// down to the micro-dollar. A settlement bills the difference between the charge at its end and
// the charge already billed, so however often a meter is settled its charges add up to exactly
// ChargeFor(price, end - start): settling more often never costs a user a micro-dollar more.
// The fee is the same: FeeFor(total charged so far) less the fee already taken.
#pragma once

#include <cstdint>
#include <string>

#include "ledger/micros.h"
#include "store/ledger_records.h"

namespace sluice::ledger {

// The accounts the platform keeps for itself: its fee (and later storage and transfer), and the
// funding account every top-up comes from (its balance is minus all the money ever put in).
inline constexpr const char* kPlatformAccount = "sys-platform";
inline constexpr const char* kFundingAccount = "sys-funding";

// price × ms / 3,600,000, rounded down (exact: 128-bit intermediate).
Micros ChargeFor(Micros price_per_hour, int64_t ms);
// The platform's share of `charged`: charged × fee_bps / 10,000, rounded down.
Micros FeeFor(Micros charged, int fee_bps);

// A meter settled up to a point: the charge to bill now and the meter as it will stand.
struct Settlement {
  Micros charge = 0;  // this settlement's share
  Micros fee = 0;
  int64_t from_ms = 0;
  int64_t to_ms = 0;
  store::MeterRecord meter;  // settled_ms, charged_micros and fee_micros advanced
};
// Settles `meter` up to `until_ms` (never before what it already settled, never past its end
// when it has one).
Settlement SettleTo(const store::MeterRecord& meter, int64_t until_ms, int fee_bps);

// The balanced transaction billing a settlement: the payer debited the charge (category = the
// meter's resource), the provider credited the charge less the fee ("earnings"), the platform
// the fee ("fee"). A meter whose provider is the platform (storage) credits it the whole charge
// under the meter's resource. Entries of zero are left out; a zero charge gives none.
store::LedgerTxn ChargeTxn(const Settlement& s, int64_t ts_ms);
// An SLA credit (issue 15 item 3; README "SLA credits"): `amount` of what `meter` charged, paid
// back to its payer, taken from the provider's share and the platform's fee as the charge split
// them (FeeFor(amount) from the platform, the rest from the provider), category "sla-credit",
// with `reason` as its memo. Balanced; no entries for a zero amount.
store::LedgerTxn CreditTxn(const store::MeterRecord& meter, Micros amount, int fee_bps,
                           int64_t ts_ms, const std::string& reason);
// A charge the platform itself is paid (storage, transfer): the payer debited, the platform
// credited, both under `category`.
store::LedgerTxn PlatformChargeTxn(const std::string& payer, const std::string& category,
                                   Micros amount, int64_t ts_ms, const std::string& memo);
// What moving `bytes` costs at `micros_per_gb` (10^9 bytes), rounded down.
Micros TransferCharge(int64_t bytes, Micros micros_per_gb);
// The hourly price of keeping `bytes` at `usd_per_gb_month` (a month = 730 h), rounded to the
// micro-dollar per hour.
Micros StoragePricePerHour(int64_t bytes, double usd_per_gb_month);
// A top-up: `amount` from the funding account to `account`.
store::LedgerTxn TopUpTxn(const std::string& account, Micros amount, int64_t ts_ms,
                          const std::string& memo);

// Sum of a transaction's entries: zero when it balances.
Micros Sum(const store::LedgerTxn& txn);

}  // namespace sluice::ledger
