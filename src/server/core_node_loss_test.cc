// Node loss and leases (issue 11 item 2, issue 12): a silent node is lost after the grace, its
// attempts' leases come with heartbeats' replies, and a restart or the server's own stall never
// makes a node look silent.
#include <gtest/gtest.h>

#include "server/core_test_fixture.h"

namespace sluice::server {
namespace {

using testing::RecordingLink;

TEST_F(ServerCoreTest, SilentNodeIsLostAfterGrace) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  auto job = core_->SubmitJob(Spec(), "");
  clock_.Advance(9'000);
  core_->Tick();
  EXPECT_EQ(core_->ListNodes()[0].node.state, store::NodeState::kOnline);
  clock_.Advance(2'000);
  core_->Tick();
  EXPECT_EQ(core_->ListNodes()[0].node.state, store::NodeState::kLost);
  EXPECT_TRUE(link->closed);
  // The attempt is lost; the job is requeued to run again (from its last checkpoint).
  auto d = core_->GetJob(job->id);
  EXPECT_EQ(d->attempts[0].state, store::AttemptState::kLost);
  EXPECT_EQ(d->job.state, store::JobState::kQueued);
  EXPECT_EQ(d->job.preemptions, 1);
  std::string requeued;
  for (const auto& e : d->events) {
    if (e.type == "requeued") requeued = e.message;
  }
  EXPECT_NE(requeued.find("no heartbeat"), std::string::npos) << requeued;
  // It now waits for a node, and says so.
  EXPECT_NE(d->job.reason.find("no node can take work: none is registered, online and verified"),
            std::string::npos)
      << d->job.reason;
  EXPECT_TRUE(core_->ListOffers().empty());
}

// Fencing (issue 11 item 2): every heartbeat's reply renews the leases of the node's attempts.
TEST_F(ServerCoreTest, AHeartbeatsReplyLeasesTheNodesRunningAttempts) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  ASSERT_TRUE(node.ok());
  auto job = core_->SubmitJob(Spec(), "");
  ASSERT_TRUE(job.ok());
  std::string att = link->OfType("assign")[0]["attempt_id"];
  ASSERT_TRUE(core_->AgentMessage(*node, link.get(), Json{{"type", "heartbeat"}, {"seq", 7}}).ok());
  auto leases = link->OfType("lease");
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases[0]["seq"], 7);
  EXPECT_EQ(leases[0]["lease_ms"], opt_.lease_ms);
  EXPECT_EQ(leases[0]["attempts"], Json::array({att}));
  // A malformed seq from a hostile agent is answered with 0, which renews nothing there.
  ASSERT_TRUE(
      core_->AgentMessage(*node, link.get(), Json{{"type", "heartbeat"}, {"seq", "x"}}).ok());
  EXPECT_EQ(link->OfType("lease").back()["seq"], 0);
  // Once the attempt is over it is no longer listed: the agent must not keep it running.
  ASSERT_TRUE(
      core_->AgentMessage(*node, link.get(), proto::ToJson(proto::Exited{att, 0, 0, ""})).ok());
  ASSERT_TRUE(core_->AgentMessage(*node, link.get(), Json{{"type", "heartbeat"}, {"seq", 8}}).ok());
  EXPECT_EQ(link->OfType("lease").back()["attempts"], Json::array());
}

// After a restart every node has a lease and the whole grace to come back: a server outage
// alone never loses a node or requeues its work.
TEST_F(ServerCoreTest, AfterARestartNoNodeIsLostBeforeLeasePlusGrace) {
  auto link = std::make_shared<RecordingLink>();
  ASSERT_TRUE(Hello(link, CpuHello()).ok());
  Open();  // the restart
  clock_.Advance(opt_.heartbeat_grace_ms + opt_.lease_ms - 100);
  core_->Tick();
  EXPECT_NE(core_->ListNodes()[0].node.state, store::NodeState::kLost);
  clock_.Advance(200);
  core_->Tick();
  EXPECT_EQ(core_->ListNodes()[0].node.state, store::NodeState::kLost);
}

// A server that stalls (SIGSTOP, swap, a slow disk) heard nobody meanwhile: the stall is not
// the nodes' silence. Silence while it runs still loses a node.
TEST_F(ServerCoreTest, TheServersOwnStallIsNotCountedAsANodesSilence) {
  opt_.stall_credit_after_ms = 1000;
  Open();
  auto link = std::make_shared<RecordingLink>();
  ASSERT_TRUE(Hello(link, CpuHello()).ok());
  core_->Tick();
  clock_.Advance(30'000);  // three graces without a tick
  core_->Tick();
  EXPECT_EQ(core_->ListNodes()[0].node.state, store::NodeState::kOnline);
  for (int i = 0; i < 21 && core_->ListNodes()[0].node.state == store::NodeState::kOnline; ++i) {
    clock_.Advance(500);
    core_->Tick();
  }
  EXPECT_EQ(core_->ListNodes()[0].node.state, store::NodeState::kLost);
}

// Io threads starved of CPU read a heartbeat seconds after it came while the ticks keep time:
// their lag beyond read_lag_credit_after_ms is not the node's silence. The credit is bounded by
// the lag: silence past grace + credit still loses the node, and so does any once the lag falls.
TEST_F(ServerCoreTest, SilenceTheIoThreadsHaveNotReadYetIsNotCountedAgainstANode) {
  int64_t lag_ms = 0;
  opt_.read_lag_ms = [&lag_ms] { return lag_ms; };
  opt_.read_lag_credit_after_ms = 1000;
  for (const bool lag_falls : {false, true}) {
    Open();
    auto link = std::make_shared<RecordingLink>();
    ASSERT_TRUE(Hello(link, CpuHello()).ok());
    std::string id;  // the node just joined (the first round's node is lost by the second)
    for (const auto& n : core_->ListNodes()) {
      if (n.node.state != store::NodeState::kLost) id = n.node.id;
    }
    ASSERT_FALSE(id.empty());
    auto state = [&] {
      for (const auto& n : core_->ListNodes()) {
        if (n.node.id == id) return n.node.state;
      }
      return store::NodeState::kLost;
    };
    core_->Tick();
    lag_ms = 8000;  // a credit of 7 s
    clock_.Advance(opt_.heartbeat_grace_ms + 5000);
    core_->Tick();
    EXPECT_EQ(state(), store::NodeState::kOnline) << "5 s past the grace, 7 s of credit";
    EXPECT_GE(core_->DegradedCounts()["read_lag"], 1) << "the held-back loss is counted";
    if (lag_falls) {
      lag_ms = 900;  // caught up: under the threshold, no credit
      clock_.Advance(200);
    } else {
      clock_.Advance(2500);  // 7.5 s past the grace: more than the credit
    }
    core_->Tick();
    EXPECT_EQ(state(), store::NodeState::kLost) << (lag_falls ? "the lag fell" : "lag exceeded");
    lag_ms = 0;
  }
}

// Only the excess over the threshold is credited: a server slow on every tick (2.5 s apart
// here) still declares a silent node lost, a little late, never not at all.
TEST_F(ServerCoreTest, AServerSlowOnEveryTickStillLosesASilentNode) {
  opt_.stall_credit_after_ms = 1000;
  Open();
  auto link = std::make_shared<RecordingLink>();
  ASSERT_TRUE(Hello(link, CpuHello()).ok());
  core_->Tick();
  int ticks = 0;
  while (core_->ListNodes()[0].node.state != store::NodeState::kLost && ticks < 100) {
    clock_.Advance(2500);
    core_->Tick();
    ++ticks;
  }
  EXPECT_EQ(core_->ListNodes()[0].node.state, store::NodeState::kLost);
  // Silence grows 1 s per 2.5 s tick: lost after the 10 s grace, within 11 ticks.
  EXPECT_LE(ticks, 11);
  EXPECT_GE(ticks, 10);
}

TEST_F(ServerCoreTest, LostNodeFailsTheJobOnceRestartsAreUsedUp) {
  auto link = std::make_shared<RecordingLink>();
  ASSERT_TRUE(Hello(link, CpuHello()).ok());
  spec::JobSpec s = Spec();
  s.lifecycle.max_restarts = 0;
  auto job = core_->SubmitJob(s, "");
  clock_.Advance(11'000);
  core_->Tick();
  auto d = core_->GetJob(job->id);
  EXPECT_EQ(d->job.state, store::JobState::kFailed);
  EXPECT_NE(d->job.reason.find("max_restarts (0) exhausted"), std::string::npos) << d->job.reason;
}

}  // namespace
}  // namespace sluice::server
