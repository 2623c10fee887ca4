// ChargesByJob and a budget's arithmetic alone (the core's stops: core_budget_test.cc): charges
// read once and kept with commits, a read error that refuses rather than overspends, storage
// left out of the budget, the reserve a stop needs, and the last millisecond a meter may bill.
#include "server/job_charges.h"

#include <gtest/gtest.h>

#include <climits>
#include <memory>

#include "ledger/metering.h"
#include "server/test_failing_store.h"
#include "store/store_test_util.h"

namespace sluice::server {
namespace {

constexpr int64_t kDollar = 1'000'000;

store::CostDelta Delta(const std::string& job, const std::string& resource, int64_t micros) {
  store::CostDelta d;
  d.payer = "acc-alice";
  d.provider = "acc-provider";
  d.job_id = job;
  d.node_id = "node-1";
  d.day = "2026-12-06";
  d.resource = resource;
  d.charged_micros = micros;
  return d;
}

// Cost reads fail while `fail_reads` is set; counts them.
class CountingStore : public testing::FailingStore {
 public:
  using FailingStore::FailingStore;
  bool fail_reads = false;
  int reads = 0;
  Result<std::vector<store::CostRow>> Costs(const store::CostQuery& q) override {
    ++reads;
    if (fail_reads) return Status::Unavailable("injected read failure");
    return FailingStore::Costs(q);
  }
};

class ChargesByJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::OpenSqliteStore(dir_.path() + "/sluice.db");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    sqlite_ = std::move(*s);
    store_ = std::make_unique<CountingStore>(sqlite_.get());
  }
  void Commit(const store::CostDelta& d) {
    store::WriteBatch b;
    b.cost_deltas.push_back(d);
    ASSERT_TRUE(store_->Write(b).ok());
  }
  store::testing::ScratchDir dir_;
  std::unique_ptr<store::Store> sqlite_;
  std::unique_ptr<CountingStore> store_;
};

TEST_F(ChargesByJobTest, ReadOnceThenKeptWithCommittedCharges) {
  Commit(Delta("job-1", "gpu", 3 * kDollar));
  Commit(Delta("job-1", "transfer", kDollar / 2));
  Commit(Delta("job-1", "storage", 7 * kDollar));
  ChargesByJob charges(store_.get());
  const JobCharges& c = charges.Of("job-1");
  EXPECT_EQ(c.compute, 3 * kDollar);
  EXPECT_EQ(c.transfer, kDollar / 2);
  EXPECT_EQ(c.storage, 7 * kDollar);
  EXPECT_EQ(charges.Budgeted("job-1"), 3 * kDollar + kDollar / 2);  // storage is not budgeted
  EXPECT_EQ(store_->reads, 1);

  charges.NoteCommitted(Delta("job-1", "cpu", kDollar));
  charges.NoteCommitted(Delta("job-2", "cpu", 9 * kDollar));  // not read yet: left to the read
  EXPECT_EQ(charges.Budgeted("job-1"), 4 * kDollar + kDollar / 2);
  EXPECT_EQ(store_->reads, 1);
  EXPECT_EQ(charges.Budgeted("job-2"), 0);  // the store has none of job-2's (not committed)
  EXPECT_EQ(store_->reads, 2);

  // A new job is known at zero without a read; a forgotten one is read again.
  charges.StartEmpty("job-3");
  EXPECT_EQ(charges.Budgeted("job-3"), 0);
  EXPECT_EQ(store_->reads, 2);
  charges.Forget("job-1");
  EXPECT_EQ(charges.Budgeted("job-1"), 3 * kDollar + kDollar / 2);  // the store's
  EXPECT_EQ(store_->reads, 3);
}

TEST_F(ChargesByJobTest, AFailedReadCountsAsOverAnyBudgetAndIsReadAgain) {
  Commit(Delta("job-1", "gpu", kDollar));
  ChargesByJob charges(store_.get());
  store_->fail_reads = true;
  EXPECT_GE(charges.Budgeted("job-1"), INT64_MAX / 8);
  store_->fail_reads = false;
  EXPECT_EQ(charges.Budgeted("job-1"), kDollar);
}

TEST(JobBudgetTest, StagedChargesCountComputeAndTransferOfThatJobOnly) {
  store::WriteBatch b;
  b.cost_deltas = {Delta("job-1", "gpu", 5), Delta("job-1", "transfer", 7),
                   Delta("job-1", "storage", 100), Delta("job-2", "gpu", 1000)};
  EXPECT_EQ(StagedBudgeted(b, "job-1"), 12);
  EXPECT_EQ(StagedBudgeted(b, "job-3"), 0);
}

TEST(JobBudgetTest, AStopReservesTheGracePeriodAndTheFinalUpload) {
  spec::JobSpec s;
  EXPECT_EQ(BudgetMicros(s), std::nullopt);
  s.max_total_cost = 20.5;
  EXPECT_EQ(BudgetMicros(s), 20'500'000);
  s.lifecycle.grace_period_s = 30;
  s.lifecycle.checkpoint_size_gb = 2;
  // $3.60/h for 30 s + 5 s margin: $0.035; 2 GB at $0.05/GB: $0.10.
  EXPECT_EQ(StopReserve(s, 3'600'000, 5'000, 0.05), 35'000 + 100'000);
  EXPECT_EQ(StopReserve(s, 3'600'000, 5'000, 0), 35'000);
}

TEST(JobBudgetTest, AMeterEndsWhereItsChargeWouldPassTheRoomLeft) {
  store::MeterRecord m;
  m.resource = "gpu";
  m.price_micros_per_hour = 3'600'000;  // a micro-dollar a millisecond
  m.start_ms = 1'000'000;
  // $10 budget, $4 charged elsewhere: $6 of room, 6,000,000 ms.
  const int64_t end = BudgetEnd(10 * kDollar, 4 * kDollar, m);
  EXPECT_EQ(end, m.start_ms + 6'000'000);
  EXPECT_EQ(ledger::ChargeFor(m.price_micros_per_hour, end - m.start_ms), 6 * kDollar);
  EXPECT_EQ(BudgetEnd(10 * kDollar, 12 * kDollar, m), m.start_ms);  // no room: ends at once
  // An odd price: the charge at the end is within the room, a millisecond more passes it.
  m.price_micros_per_hour = 7'777'777;
  const int64_t odd = BudgetEnd(kDollar, 0, m);
  EXPECT_LE(ledger::ChargeFor(m.price_micros_per_hour, odd - m.start_ms), kDollar);
  EXPECT_GT(ledger::ChargeFor(m.price_micros_per_hour, odd - m.start_ms + 1), kDollar);
  // Never reached: storage, a free meter, a budget beyond int64 milliseconds.
  m.resource = "storage";
  EXPECT_EQ(BudgetEnd(kDollar, 0, m), INT64_MAX);
  m.resource = "gpu";
  m.price_micros_per_hour = 0;
  EXPECT_EQ(BudgetEnd(kDollar, 0, m), INT64_MAX);
  m.price_micros_per_hour = 1;
  EXPECT_EQ(BudgetEnd(INT64_MAX / 2, 0, m), INT64_MAX);
}

}  // namespace
}  // namespace sluice::server
