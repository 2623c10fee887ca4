#include "ledger/metering.h"

#include <gtest/gtest.h>

#include <random>

namespace sluice::ledger {
namespace {

store::MeterRecord Meter(Micros price, int64_t start) {
  store::MeterRecord m;
  m.attempt_id = "att-1";
  m.job_id = "job-1";
  m.payer = "acct-user";
  m.provider = "acct-prov";
  m.node_id = "node-1";
  m.resource = "cpu";
  m.units = 1;
  m.price_micros_per_hour = price;
  m.start_ms = start;
  m.settled_ms = start;
  return m;
}

TEST(Metering, ChargesPerSecondAtTheLockedPrice) {
  // $36 per hour is $0.01 per second.
  EXPECT_EQ(ChargeFor(36'000'000, 6'000), 60'000);
  EXPECT_EQ(ChargeFor(36'000'000, 1), 10);
  EXPECT_EQ(ChargeFor(1, 3'599'999), 0);  // rounded down
  EXPECT_EQ(ChargeFor(0, 1000), 0);
  // A month at $1e6/h does not overflow.
  EXPECT_EQ(ChargeFor(1'000'000LL * kMicrosPerDollar, 30LL * 24 * 3'600'000),
            720LL * 1'000'000 * kMicrosPerDollar);
}

TEST(Metering, ASettlementBillsTheCreditedShareAndBalances) {
  auto s = SettleTo(Meter(36'000'000, 1'000), 7'000, 500);
  EXPECT_EQ(s.charge, 60'000);
  EXPECT_EQ(s.fee, 3'000);
  store::LedgerTxn txn = ChargeTxn(s, 7'000);
  ASSERT_EQ(txn.entries.size(), 3u);
  EXPECT_EQ(txn.entries[0], (store::LedgerEntry{"acct-user", "cpu", -60'000}));
  EXPECT_EQ(txn.entries[1], (store::LedgerEntry{"acct-prov", "earnings", 57'000}));
  EXPECT_EQ(txn.entries[2], (store::LedgerEntry{kPlatformAccount, "fee", 3'000}));
  EXPECT_EQ(Sum(txn), 0);
  EXPECT_EQ(txn.from_ms, 1'000);
  EXPECT_EQ(txn.to_ms, 7'000);
}

// However a meter is cut into settlements, the charges and fees add up to the whole span's.
TEST(Metering, SettlingOftenNeverChangesTheTotal) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    const Micros price = std::uniform_int_distribution<Micros>(1, 50'000'000)(rng);
    const int bps = std::uniform_int_distribution<int>(0, 3000)(rng);
    const int64_t start = std::uniform_int_distribution<int64_t>(0, 1'000'000)(rng);
    const int64_t length = std::uniform_int_distribution<int64_t>(0, 10'000'000)(rng);
    store::MeterRecord m = Meter(price, start);
    Micros charged = 0, fees = 0;
    int64_t t = start;
    while (t < start + length) {
      t = std::min(start + length, t + std::uniform_int_distribution<int64_t>(1, 700'000)(rng));
      auto s = SettleTo(m, t, bps);
      EXPECT_EQ(Sum(ChargeTxn(s, t)), 0);
      charged += s.charge;
      fees += s.fee;
      m = s.meter;
    }
    EXPECT_EQ(charged, ChargeFor(price, length));
    EXPECT_EQ(fees, FeeFor(ChargeFor(price, length), bps));
    EXPECT_EQ(m.charged_micros, charged);
  }
}

TEST(Metering, NeverSettlesBackwardsOrPastTheEnd) {
  store::MeterRecord m = Meter(36'000'000, 0);
  m.settled_ms = 5'000;
  m.charged_micros = 50'000;
  auto back = SettleTo(m, 1'000, 0);
  EXPECT_EQ(back.charge, 0);
  EXPECT_EQ(back.meter.settled_ms, 5'000);
  m.end_ms = 8'000;
  auto past = SettleTo(m, 60'000, 0);
  EXPECT_EQ(past.to_ms, 8'000);
  EXPECT_EQ(past.charge, 30'000);
}

TEST(Metering, ThePlatformIsPaidWholeForWhatItStoresAndMoves) {
  // 1 GB at $0.02 per GB-month (730 h): 27.4 micro-dollars an hour, rounded.
  EXPECT_EQ(StoragePricePerHour(1'000'000'000, 0.02), 27);
  EXPECT_EQ(StoragePricePerHour(0, 0.02), 0);
  EXPECT_EQ(TransferCharge(2'500'000'000, 10'000), 25'000);  // 2.5 GB at $0.01 per GB
  EXPECT_EQ(TransferCharge(999, 1'000'000), 0);              // rounded down
  EXPECT_EQ(TransferCharge(1'000, 1'000'000), 1);
  auto txn = PlatformChargeTxn("acct-user", "transfer", 25'000, 1, "checkpoint uploaded");
  EXPECT_EQ(Sum(txn), 0);
  ASSERT_EQ(txn.entries.size(), 2u);
  EXPECT_EQ(txn.entries[1], (store::LedgerEntry{kPlatformAccount, "transfer", 25'000}));
  // A storage meter's settlement credits the platform the whole charge.
  store::MeterRecord m = Meter(1'000, 0);
  m.resource = "storage";
  m.provider = kPlatformAccount;
  auto s = SettleTo(m, 3'600'000, 0);
  auto charge = ChargeTxn(s, 3'600'000);
  ASSERT_EQ(charge.entries.size(), 2u);
  EXPECT_EQ(charge.entries[1], (store::LedgerEntry{kPlatformAccount, "storage", 1'000}));
}

TEST(Metering, ATopUpComesFromTheFundingAccount) {
  auto txn = TopUpTxn("acct-user", 100'000'000, 1, "by admin");
  EXPECT_EQ(Sum(txn), 0);
  EXPECT_EQ(txn.entries[0].account, kFundingAccount);
  EXPECT_EQ(txn.entries[1].amount_micros, 100'000'000);
}

}  // namespace
}  // namespace sluice::ledger
