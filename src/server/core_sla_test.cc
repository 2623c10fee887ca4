// SLA credits (issue 15 item 3; README "SLA credits"), rule by rule on a GPU node with a fake
// clock: an attempt on a node that fails verification while running it is credited in full
// (what it was charged until then at once, and every later charge), an attempt lost with its
// node is credited the time after its last saved checkpoint, and each credit is a balanced
// ledger transaction that comes off the provider's earnings. (The random-history property test
// in core_billing_test.cc checks rules 1 and 2 against an oracle.)
#include <gtest/gtest.h>

#include "ledger/metering.h"
#include "server/core_test_fixture.h"

namespace sluice::server {
namespace {

class SlaTest : public TrustTest {
 protected:
  void SetUp() override {
    opt_.settle_interval_ms = 0;  // settled by hand below
    opt_.reverify_interval_ms = 0;
    ServerCoreTest::SetUp();
  }
  // A verified 1-GPU node at $36/h (a cent a second) running one job; returns the attempt.
  std::string RunOnGpuNode() {
    link_ = std::make_shared<RecordingLink>();
    h_ = GpuHello();
    h_.price_per_gpu_hour = 36;
    auto node = Hello(link_, h_);
    EXPECT_TRUE(node.ok()) << node.status().ToString();
    node_ = node.ok() ? *node : "";
    auto job = core_->SubmitJob(Spec(1, 1), "");
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    job_ = job.ok() ? job->id : "";
    return StartLastAssigned(node_, *link_);
  }
  JobCost Cost() {
    EXPECT_TRUE(core_->SettleMeters().ok());
    auto c = core_->CostOfJob(job_);
    EXPECT_TRUE(c.ok());
    return c.ok() ? *c : JobCost{};
  }
  std::shared_ptr<RecordingLink> link_;
  proto::Hello h_;
  std::string node_, job_;
};

TEST_F(SlaTest, AnAttemptOnANodeThatFailsVerificationWhileRunningItIsCreditedInFull) {
  const std::string att = RunOnGpuNode();
  Live(20'000, node_, link_);
  JobCost before = Cost();
  ASSERT_EQ(before.charged_micros, 200'000);  // 20 s at a cent a second
  EXPECT_EQ(before.credited_micros, 0);

  // The provider asks for a run of the suite; the GPU now measures a fifth of its speed.
  ASSERT_TRUE(core_->VerifyNode("box").ok());
  conformance::Report r = testing::PassingReport(h_.inventory);
  for (auto& c : r.checks) {
    if (c.name == "gpu-perf.0") c.measurements["matmul_tflops"] = 50;
  }
  ASSERT_TRUE(Report(node_, link_, r).ok());
  ASSERT_EQ(core_->ListNodes()[0].node.verification, "deverified");
  JobCost at_once = Cost();
  EXPECT_EQ(at_once.credited_micros, 200'000) << "what it was charged until then, at once";

  // Every later second is credited as it is billed, and at the end the bill nets to zero.
  Live(10'000, node_, link_);
  ASSERT_TRUE(
      core_->AgentMessage(node_, link_.get(), proto::ToJson(proto::Exited{att, 0, 0, ""})).ok());
  JobCost end = Cost();
  EXPECT_EQ(end.charged_micros, 300'000);
  EXPECT_EQ(end.credited_micros, 300'000);
  ASSERT_EQ(end.meters.size(), 1u);
  EXPECT_NE(end.meters[0].credit_reason.find("failed verification while running it"),
            std::string::npos)
      << end.meters[0].credit_reason;
  // Visible to the user (an event) and the provider (its earnings), and the ledger balances.
  auto detail = core_->GetJob(job_);
  ASSERT_TRUE(detail.ok());
  int credits = 0;
  for (const auto& e : detail->events) credits += e.type == "sla-credit";
  EXPECT_GE(credits, 2);
  store::CostQuery q;
  q.by = "provider";
  auto rows = core_->Costs(q);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].charged_micros - (*rows)[0].credited_micros - (*rows)[0].fee_micros, 0)
      << "the provider earns nothing for it";
  auto check = core_->CheckLedger();
  ASSERT_TRUE(check.ok());
  EXPECT_TRUE(check->problems.empty()) << check->problems.front();
  EXPECT_EQ(check->check.credited_by_entries, 300'000);
}

TEST_F(SlaTest, AnAttemptLostWithItsNodeIsCreditedTheTimeAfterItsLastCheckpoint) {
  const std::string att = RunOnGpuNode();
  Live(30'000, node_, link_);
  ASSERT_TRUE(
      core_
          ->AgentMessage(
              node_, link_.get(),
              Json{{"type", "checkpoint"}, {"attempt_id", att}, {"manifest", std::string(64, 'a')}})
          .ok());
  Live(20'000, node_, link_);
  // The machine dies: no heartbeat; the lease (and so the bill) ends lease_ms after the last.
  for (int i = 0; i < 30; ++i) {
    clock_.Advance(1000);
    core_->Tick();
  }
  auto detail = core_->GetJob(job_);
  ASSERT_TRUE(detail.ok());
  ASSERT_EQ(detail->attempts[0].state, store::AttemptState::kLost);
  JobCost c = Cost();
  ASSERT_EQ(c.meters.size(), 1u);
  const store::MeterRecord& m = c.meters[0];
  // Billed from start to the lease's end; credited from the checkpoint (at 30 s) on.
  EXPECT_EQ(c.charged_micros, ledger::ChargeFor(36'000'000, m.end_ms - m.start_ms));
  EXPECT_EQ(c.credited_micros, c.charged_micros - 300'000);
  EXPECT_GT(c.credited_micros, 0);
  EXPECT_NE(m.credit_reason.find("lost with its node"), std::string::npos) << m.credit_reason;
  auto check = core_->CheckLedger();
  ASSERT_TRUE(check.ok());
  EXPECT_TRUE(check->problems.empty()) << check->problems.front();
}

}  // namespace
}  // namespace sluice::server
