// Reclaimed nodes leave the market (issue 15 item 5): a node its provider took back whole, or one
// under a spot-termination notice, takes no new job until its provider resumes it or the
// cool-down passes; a job that would have gone there waits and says why. The pause is durable.
#include <gtest/gtest.h>

#include "server/core_test_fixture.h"

namespace sluice::server {
namespace {

class PauseTest : public ServerCoreTest {
 protected:
  void SetUp() override {
    opt_.reclaim_cooldown_ms = 120'000;
    ServerCoreTest::SetUp();
  }
  std::string Submit() {
    auto job = core_->SubmitJob(Spec(4), "");
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? job->id : "";
  }
  std::string StateOf(const std::string& job) {
    auto d = core_->GetJob(job);
    return d.ok() ? std::string(store::Name(d->job.state)) : "?";
  }
  std::string ReasonOf(const std::string& job) {
    auto d = core_->GetJob(job);
    return d.ok() ? d->job.reason : "?";
  }
  // Keeps the node alive while the clock moves.
  void Live(int64_t ms, const std::string& node, const std::shared_ptr<RecordingLink>& link) {
    for (int64_t t = 0; t < ms; t += 5000) {
      clock_.Advance(5000);
      ASSERT_TRUE(core_->AgentMessage(node, link.get(), Json{{"type", "heartbeat"}}).ok());
      core_->Tick();
    }
  }
};

TEST_F(PauseTest, AReclaimedNodeTakesNoNewJobUntilResumedOrCooledDown) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  ASSERT_TRUE(node.ok());
  const std::string first = Submit();
  const std::string att = link->Last("assign", "attempt_id");
  ASSERT_FALSE(att.empty());
  ASSERT_TRUE(core_->AgentMessage(*node, link.get(), Msg("started", att)).ok());

  auto preempted = core_->ReclaimNode("box", {}, "maintenance");
  ASSERT_TRUE(preempted.ok()) << preempted.status().ToString();
  ASSERT_EQ(preempted->size(), 1u);
  ASSERT_TRUE(
      core_->AgentMessage(*node, link.get(), proto::ToJson(proto::Exited{att, 143, 15, ""})).ok());
  EXPECT_EQ(StateOf(first), "queued");

  // A new job would fit the idle node, but the node is out of the market: it waits and says so.
  const size_t assigned = link->OfType("assign").size();
  const std::string second = Submit();
  EXPECT_EQ(StateOf(second), "queued");
  EXPECT_NE(ReasonOf(second).find("box"), std::string::npos) << ReasonOf(second);
  EXPECT_NE(ReasonOf(second).find("reclaimed by its provider (maintenance)"), std::string::npos)
      << ReasonOf(second);
  EXPECT_EQ(link->OfType("assign").size(), assigned);
  auto nodes = core_->ListNodes();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_GT(nodes[0].node.paused_until_ms, clock_.NowMillis());

  // The pause is durable: a restarted server keeps the node out.
  Open();
  link = std::make_shared<RecordingLink>();
  proto::Hello again = CpuHello();
  again.node_id = *node;
  ASSERT_TRUE(core_->AgentHello(link, again).ok());
  core_->Tick();
  EXPECT_TRUE(link->OfType("assign").empty());

  // Its provider brings it back: the waiting job runs there.
  auto resumed = core_->ResumeNode("box");
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ(resumed->paused_until_ms, 0);
  ASSERT_FALSE(link->OfType("assign").empty());
}

TEST_F(PauseTest, TheCoolDownEndsThePause) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  ASSERT_TRUE(node.ok());
  ASSERT_TRUE(core_->ReclaimNode("box", {}, "maintenance").ok());  // idle: nothing to preempt
  const std::string job = Submit();
  Live(60'000, *node, link);
  EXPECT_EQ(StateOf(job), "queued") << "still cooling down";
  EXPECT_TRUE(link->OfType("assign").empty());
  Live(70'000, *node, link);
  EXPECT_EQ(StateOf(job), "starting") << ReasonOf(job);
  ASSERT_EQ(link->OfType("assign").size(), 1u);
}

TEST_F(PauseTest, ASpotNoticeTakesTheNodeOutOfTheMarket) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  ASSERT_TRUE(node.ok());
  Submit();
  const std::string att = link->Last("assign", "attempt_id");
  ASSERT_TRUE(core_->AgentMessage(*node, link.get(), Msg("started", att)).ok());
  ASSERT_TRUE(core_
                  ->AgentMessage(*node, link.get(),
                                 Json{{"type", "preempt_notice"},
                                      {"attempt_id", att},
                                      {"cause", "spot termination in 2 minutes"}})
                  .ok());
  ASSERT_TRUE(
      core_->AgentMessage(*node, link.get(), proto::ToJson(proto::Exited{att, 143, 15, ""})).ok());
  const std::string next = Submit();
  EXPECT_EQ(StateOf(next), "queued");
  EXPECT_NE(ReasonOf(next).find("termination notice"), std::string::npos) << ReasonOf(next);
  // Reclaiming some GPUs only (here: none named) does not pause; resuming a node not paused is
  // harmless.
  ASSERT_TRUE(core_->ResumeNode("box").ok());
  ASSERT_TRUE(core_->ResumeNode("box").ok());
  EXPECT_EQ(StateOf(next), "starting");
}

}  // namespace
}  // namespace sluice::server
