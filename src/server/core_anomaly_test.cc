// Cost anomalies (issue 15 item 2): a job whose charges run 20 % over the estimate its attempt
// was placed on gets one `cost-anomaly` event naming the cause, and none before.
#include <gtest/gtest.h>

#include "server/core_test_fixture.h"

namespace sluice::server {
namespace {

class AnomalyTest : public ServerCoreTest {
 protected:
  void SetUp() override {
    opt_.settle_interval_ms = 5'000;
    opt_.preempt_cooldown_ms = 0;
    opt_.reclaim_cooldown_ms = 0;  // a reclaimed node takes the job back at once
    ServerCoreTest::SetUp();
    link_ = std::make_shared<RecordingLink>();
    proto::Hello h = CpuHello();
    h.price_per_cpu_hour = 0.9;  // 4 CPUs: $3.60/h, a tenth of a cent a second
    auto node = Hello(link_, h);
    ASSERT_TRUE(node.ok());
    node_ = *node;
  }
  std::string Start() {
    spec::JobSpec s = Spec(4);
    s.expected_hours = 0.01;  // 36 s: an estimate of $0.036
    auto job = core_->SubmitJob(s, "");
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? job->id : "";
  }
  std::string StartAttempt() { return StartLastAssigned(node_, *link_); }
  void Live(int seconds) {
    for (int s = 1; s <= seconds; ++s) AgentSecond(s, node_, *link_);
  }
  std::vector<std::string> Anomalies(const std::string& job) {
    std::vector<std::string> out;
    auto d = core_->GetJob(job);
    if (!d.ok()) return out;
    for (const auto& e : d->events) {
      if (e.type == "cost-anomaly") out.push_back(e.message);
    }
    return out;
  }
  std::shared_ptr<RecordingLink> link_;
  std::string node_;
};

TEST_F(AnomalyTest, AJobThatRunsLongerThanExpectedIsFlaggedOnceWithTheCause) {
  const std::string job = Start();
  StartAttempt();
  Live(40);  // $0.040: 11 % over, within the tolerance
  EXPECT_TRUE(Anomalies(job).empty());
  Live(20);  // $0.060: 67 % over
  auto seen = Anomalies(job);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_NE(seen[0].find("over the estimate $0.036"), std::string::npos) << seen[0];
  EXPECT_NE(seen[0].find("ran longer than expected"), std::string::npos) << seen[0];
  Live(60);
  EXPECT_EQ(Anomalies(job).size(), 1u) << "once per attempt";
}

TEST_F(AnomalyTest, RestartsAreNamedAsTheCause) {
  const std::string job = Start();
  const std::string first = StartAttempt();
  Live(30);  // $0.030 on attempt 1
  ASSERT_TRUE(core_->ReclaimNode("box", {}, "provider needs it").ok());
  ASSERT_TRUE(
      core_->AgentMessage(node_, link_.get(), proto::ToJson(proto::Exited{first, 143, 15, ""}))
          .ok());
  Live(1);
  ASSERT_EQ(link_->OfType("assign").size(), 2u);
  StartAttempt();
  Live(20);  // $0.020 more: $0.050 in all, 39 % over; attempt 2 alone is within its estimate
  auto seen = Anomalies(job);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_NE(seen[0].find("restarts: $0.03"), std::string::npos) << seen[0];
  EXPECT_EQ(seen[0].find("ran longer"), std::string::npos) << seen[0];
}

// The anomaly is raised in the commit of the charge that crossed the estimate: a failed commit
// leaves memory as it was (nothing marked raised, so the next commit raises it), and the mark
// leaves memory with the job.
TEST_F(AnomalyTest, AFailedCommitRaisesNothingAndTheMarkLeavesWithTheJob) {
  const std::string job = Start();
  const std::string attempt = StartAttempt();
  Live(40);  // within the tolerance
  // Only a commit that carries a cost anomaly fails.
  failing_->fail_if = [](const store::WriteBatch& b) {
    for (const auto& e : b.events) {
      if (e.type == "cost-anomaly") return true;
    }
    return false;
  };
  Live(20);  // the settlements that would raise it fail
  EXPECT_GT(failing_->failed, 0);
  const Json before = core_->StateDump();
  EXPECT_TRUE(before["anomalies_raised"].empty()) << before["anomalies_raised"];
  EXPECT_FALSE(core_->SettleMeters().ok());
  EXPECT_EQ(core_->StateDump(), before);
  EXPECT_TRUE(Anomalies(job).empty());

  failing_->fail_if = nullptr;
  ASSERT_TRUE(core_->SettleMeters().ok());
  EXPECT_EQ(Anomalies(job).size(), 1u);
  EXPECT_EQ(core_->StateDump()["anomalies_raised"], (Json{{job, attempt}}));
  Live(10);
  EXPECT_EQ(Anomalies(job).size(), 1u) << "once per attempt";

  // The job ends and leaves memory at the next tick: so does its mark.
  ASSERT_TRUE(
      core_->AgentMessage(node_, link_.get(), proto::ToJson(proto::Exited{attempt, 0, 0, ""}))
          .ok());
  core_->Tick();
  const Json after = core_->StateDump();
  EXPECT_FALSE(after["jobs"].contains(job)) << "retired";
  EXPECT_TRUE(after["anomalies_raised"].empty()) << after["anomalies_raised"];
}

}  // namespace
}  // namespace sluice::server
