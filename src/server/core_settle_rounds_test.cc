// Settlement rounds (docs/design-notes.md "Metering and the ledger"): the tick bills running
// attempts settle_slice meters a tick, so a big fleet's settlement is never one commit that holds
// the core's lock for seconds; every second is still billed exactly once, and a slice that fails
// to commit leaves memory and disk as they were.
#include <algorithm>
#include <vector>

#include "ledger/metering.h"
#include "server/core_test_fixture.h"

namespace sluice::server {
namespace {

constexpr int kJobs = 5;
constexpr int64_t kPrice = 50'000;  // micro-dollars an hour: 1 CPU at $0.05 per CPU-hour

class SettleRoundsTest : public ServerCoreTest {
 protected:
  void SetUp() override {
    opt_.settle_interval_ms = 60'000;
    opt_.settle_slice = 2;
    ServerCoreTest::SetUp();
    proto::Hello h = CpuHello();
    h.inventory.cpu_cores = 8;
    h.price_per_cpu_hour = 0.05;
    auto node = Hello(link_, h);
    ASSERT_TRUE(node.ok()) << node.status().ToString();
    node_ = *node;
    for (int i = 0; i < kJobs; ++i) {
      auto job = core_->SubmitJob(Spec(1), "");
      ASSERT_TRUE(job.ok()) << job.status().ToString();
      jobs_.push_back(job->id);
      StartLastAssigned(node_, *link_);
    }
    // How many meters each settlement commit (a batch with ledger transactions) billed.
    failing_->on_write = [this](const store::WriteBatch& b) {
      if (!b.ledger.empty()) slices_.push_back(b.meters.size());
    };
  }
  // Runs the server to second `until` (counted from the jobs' start): a heartbeat every 5 s
  // renews the node's lease, a tick every second.
  void RunTo(int until) {
    for (; second_ < until; ++second_) {
      clock_.Advance(1000);
      if ((second_ + 1) % 5 == 0) {
        ASSERT_TRUE(core_->AgentMessage(node_, link_.get(), Json{{"type", "heartbeat"}}).ok());
      }
      core_->Tick();
    }
  }
  // Each job's compute charge so far, smallest first.
  std::vector<int64_t> Charges() {
    std::vector<int64_t> out;
    for (const auto& job : jobs_) {
      auto cost = core_->CostOfJob(job);
      EXPECT_TRUE(cost.ok()) << cost.status().ToString();
      out.push_back(cost.ok() ? cost->charged_micros : -1);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  static int64_t Charge(int seconds) { return ledger::ChargeFor(kPrice, seconds * 1000LL); }

  std::shared_ptr<RecordingLink> link_ = std::make_shared<RecordingLink>();
  std::string node_;
  std::vector<std::string> jobs_;
  std::vector<size_t> slices_;
  int second_ = 0;
};

TEST_F(SettleRoundsTest, ARoundBillsASliceATickAndEveryMeterOnce) {
  RunTo(59);
  EXPECT_TRUE(slices_.empty()) << "nothing is due before the interval";
  RunTo(63);  // the round begins at 60 s: 2, 2 and 1 meters on three ticks, then nothing
  EXPECT_EQ(slices_, (std::vector<size_t>{2, 2, 1}));
  EXPECT_EQ(Charges(),
            (std::vector<int64_t>{Charge(60), Charge(60), Charge(61), Charge(61), Charge(62)}));
  RunTo(123);  // the next round begins an interval after the first began
  EXPECT_EQ(slices_, (std::vector<size_t>{2, 2, 1, 2, 2, 1}));
  EXPECT_EQ(Charges(), (std::vector<int64_t>{Charge(120), Charge(120), Charge(121), Charge(121),
                                             Charge(122)}));
  // The payer is billed what the jobs were charged, to the micro-dollar.
  int64_t total = 0;
  for (int64_t c : Charges()) total += c;
  EXPECT_EQ(core_->BalanceOf("admin"), -total);
}

TEST_F(SettleRoundsTest, AFailedSliceChangesNothingAndTheNextRoundBillsItsSeconds) {
  RunTo(60);  // the round's first slice is billed
  ASSERT_EQ(slices_.size(), 1u);
  const Json memory = core_->StateDump();
  const int64_t loaded_at = clock_.NowMillis();
  ServerCore loaded(store_.get(), &clock_, opt_);
  ASSERT_TRUE(loaded.Load().ok());
  const Json disk = loaded.StateDump();
  failing_->fail_if = [](const store::WriteBatch& b) { return !b.ledger.empty(); };
  RunTo(61);  // the second slice fails to commit
  EXPECT_EQ(failing_->failed, 1);
  EXPECT_EQ(core_->StateDump(), memory) << "a failed slice changed memory";
  // Loaded at the first load's time: a load stamps what it loads with the clock.
  const int64_t now = clock_.NowMillis();
  clock_.Set(loaded_at);
  ServerCore reloaded(store_.get(), &clock_, opt_);
  ASSERT_TRUE(reloaded.Load().ok());
  EXPECT_EQ(reloaded.StateDump(), disk) << "a failed slice changed the store";
  clock_.Set(now);
  failing_->fail_if = nullptr;
  RunTo(119);  // the failure ended the round: nothing more until the next one
  EXPECT_EQ(slices_, (std::vector<size_t>{2, 2}));  // the failed slice was counted too
  RunTo(123);
  EXPECT_EQ(slices_, (std::vector<size_t>{2, 2, 2, 2, 1}));
  // The meters the failed slice did not bill are billed by the next round, up to its time.
  EXPECT_EQ(Charges(), (std::vector<int64_t>{Charge(120), Charge(120), Charge(121), Charge(121),
                                             Charge(122)}));
}

}  // namespace
}  // namespace sluice::server
