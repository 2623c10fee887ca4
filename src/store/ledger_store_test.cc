// The ledger's tables (issue 14): meters, transactions, cost totals, and the check that proves
// they add up, against a real SQLite file.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>

#include "common/crypto.h"
#include "store/store.h"

namespace sluice::store {
namespace {

class LedgerStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("sluice-ledger-" + RandomHex(6));
    std::filesystem::create_directories(dir_);
    auto s = OpenSqliteStore((dir_ / "sluice.db").string());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  static MeterRecord Meter(const std::string& att, const std::string& job, int64_t charged) {
    MeterRecord m;
    m.attempt_id = att;
    m.job_id = job;
    m.payer = "user";
    m.provider = "prov";
    m.node_id = "node-1";
    m.resource = "cpu";
    m.units = 4;
    m.price_micros_per_hour = 36'000'000;
    m.start_ms = 1'000;
    m.settled_ms = 1'000 + charged / 10;
    m.charged_micros = charged;
    m.fee_micros = charged / 20;
    return m;
  }
  // One charge as the core writes it: meter, balanced transaction, cost delta, one commit.
  Status Charge(const std::string& att, const std::string& job, int64_t amount, bool close,
                const std::string& day = "2026-12-02") {
    WriteBatch b;
    MeterRecord m = Meter(att, job, amount);
    if (close) m.end_ms = m.settled_ms;
    b.meters.push_back(m);
    LedgerTxn t;
    t.ts_ms = 5;
    t.kind = "charge";
    t.job_id = job;
    t.attempt_id = att;
    t.entries = {{"user", "cpu", -amount},
                 {"prov", "earnings", amount - amount / 20},
                 {"sys-platform", "fee", amount / 20}};
    b.ledger.push_back(t);
    b.cost_deltas.push_back(
        {"user", "prov", job, "node-1", day, "cpu", amount, amount / 20, 0, amount / 10});
    return store_->Write(b);
  }
  std::filesystem::path dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(LedgerStoreTest, ChargesAddUpInEveryView) {
  ASSERT_TRUE(Charge("att-1", "job-1", 60'000, false).ok());
  ASSERT_TRUE(Charge("att-2", "job-2", 40'000, true, "2026-12-03").ok());
  auto open = store_->LoadMeters("");
  ASSERT_TRUE(open.ok());
  ASSERT_EQ(open->size(), 1u);
  EXPECT_EQ((*open)[0].attempt_id, "att-1");
  auto job2 = store_->LoadMeters("job-2");
  ASSERT_TRUE(job2.ok());
  ASSERT_EQ(job2->size(), 1u);
  EXPECT_EQ((*job2)[0].charged_micros, 40'000);

  auto check = store_->CheckLedger();
  ASSERT_TRUE(check.ok());
  EXPECT_EQ(check->transactions, 2);
  EXPECT_EQ(check->entries, 6);
  EXPECT_TRUE(check->unbalanced.empty());
  EXPECT_EQ(check->charged_by_entries, 100'000);
  EXPECT_EQ(check->charged_by_meters, 100'000);
  EXPECT_EQ(check->charged_by_totals, 100'000);
  auto balances = store_->LoadBalances();
  ASSERT_TRUE(balances.ok());
  std::map<std::string, int64_t> b(balances->begin(), balances->end());
  EXPECT_EQ(b["user"], -100'000);
  EXPECT_EQ(b["prov"], 95'000);
  EXPECT_EQ(b["sys-platform"], 5'000);

  // The report from the totals and the one from the raw meters agree.
  for (const char* by : {"job", "node", "resource", "account", "provider"}) {
    CostQuery q;
    q.by = by;
    auto totals = store_->Costs(q);
    auto raw = store_->CostsFromMeters(q);
    ASSERT_TRUE(totals.ok() && raw.ok()) << by;
    EXPECT_EQ(*totals, *raw) << by;
  }
  CostQuery by_day;
  by_day.by = "day";
  auto days = store_->Costs(by_day);
  ASSERT_TRUE(days.ok());
  ASSERT_EQ(days->size(), 2u);
  EXPECT_EQ((*days)[0].key, "2026-12-02");
  CostQuery since;
  since.by = "job";
  since.since_ms = 1'796'256'000'000;  // 2026-12-03T00:00Z
  auto later = store_->Costs(since);
  ASSERT_TRUE(later.ok());
  ASSERT_EQ(later->size(), 1u);
  EXPECT_EQ((*later)[0].key, "job-2");
  CostQuery bad;
  bad.by = "job_id; DROP TABLE meters";
  EXPECT_FALSE(store_->Costs(bad).ok());
}

// A meter opened and closed in one batch (an attempt started and exited within one commit),
// and one opened before and settled twice in a batch: each row ends as its last record says.
TEST_F(LedgerStoreTest, TheLastMeterRecordOfAnAttemptInABatchDecidesItsRow) {
  ASSERT_TRUE(store_->Write({.meters = {Meter("att-0", "job-0", 0)}}).ok());
  WriteBatch b;
  b.meters = {Meter("att-1", "job-1", 0), Meter("att-0", "job-0", 10)};
  MeterRecord closed = Meter("att-1", "job-1", 30);
  closed.end_ms = closed.settled_ms;
  closed.end_cause = "exited";
  MeterRecord settled = Meter("att-0", "job-0", 20);
  b.meters.push_back(closed);
  b.meters.push_back(settled);
  ASSERT_TRUE(store_->Write(b).ok());
  EXPECT_EQ(*store_->LoadMeters("job-1"), std::vector<MeterRecord>{closed});
  EXPECT_EQ(*store_->LoadMeters("job-0"), std::vector<MeterRecord>{settled});
}

TEST_F(LedgerStoreTest, AnUnbalancedTransactionFailsTheWholeBatch) {
  WriteBatch b;
  b.meters.push_back(Meter("att-1", "job-1", 10));
  LedgerTxn t;
  t.kind = "charge";
  t.entries = {{"user", "cpu", -10}, {"prov", "earnings", 9}};
  b.ledger.push_back(t);
  Status s = store_->Write(b);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("does not balance"), std::string::npos);
  auto meters = store_->LoadMeters("job-1");
  ASSERT_TRUE(meters.ok());
  EXPECT_TRUE(meters->empty()) << "nothing of a failed batch is kept";
}

// `sluice ledger check` finds a ledger that was changed behind the server's back.
TEST_F(LedgerStoreTest, TheCheckFindsATamperedEntry) {
  ASSERT_TRUE(Charge("att-1", "job-1", 60'000, true).ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ / "sluice.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "UPDATE ledger_entries SET amount_micros = amount_micros + 1 "
                         "WHERE category = 'earnings'",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto check = store_->CheckLedger();
  ASSERT_TRUE(check.ok());
  ASSERT_EQ(check->unbalanced.size(), 1u);
}

}  // namespace
}  // namespace sluice::store
