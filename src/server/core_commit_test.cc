// Commit, then apply (issue 12 item 1; docs/design-notes.md "Commit, then apply"): for every
// kind of state change, a store that refuses the commit must leave memory and disk as they were.
// Each test drives the core to just before the change, dumps memory (ServerCore::StateDump) and
// what a fresh core loads from the store, makes the change fail, and compares; then lets the
// store work again and checks that the same change goes through, so the failure was the only
// thing that stopped it.
#include <gtest/gtest.h>

#include <deque>
#include <filesystem>
#include <optional>

#include "common/crypto.h"
#include "ledger/metering.h"
#include "server/server_core.h"
#include "server/test_agent_link.h"
#include "server/test_failing_store.h"
#include "server/test_fleet.h"
#include "server/test_reports.h"

namespace sluice::server {
namespace {

using testing::FailingStore;
using testing::RecordingLink;

class CoreCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("sluice-commit-" + RandomHex(6));
    std::filesystem::create_directories(dir_);
    auto s = store::OpenSqliteStore((dir_ / "sluice.db").string());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    failing_ = std::make_unique<FailingStore>(store_.get());
    opt_.heartbeat_grace_ms = 10'000;
    core_ = std::make_unique<ServerCore>(failing_.get(), &clock_, opt_);
    ASSERT_TRUE(core_->Load().ok());
    link_ = std::make_shared<RecordingLink>();
  }
  void TearDown() override {
    core_.reset();
    failing_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  // What a 4-CPU machine's agent says at hello.
  static proto::Hello CpuHello(const std::string& name = "box") {
    proto::Hello h = testing::CpuHello(name);
    h.price_per_cpu_hour = 0.05;
    h.interruptible_price_per_cpu_hour = 0.02;
    return h;
  }
  // A verified CPU node, registered as a real agent would (hello, then the conformance report).
  std::string Node(const std::string& name = "box") {
    auto node = testing::EnrolNode(*core_, link_, CpuHello(name));
    EXPECT_TRUE(node.ok()) << node.status().ToString();
    return node.ok() ? *node : "";
  }
  spec::JobSpec Spec(bool interruptible = false) {
    spec::JobSpec s;
    s.name = "t";
    s.run = "train";
    s.resources.cpus = 4;
    s.resources.memory_gb = 1;
    s.lifecycle.max_restarts = 3;
    if (interruptible) s.lifecycle.capacity = spec::Capacity::kInterruptible;
    return s;
  }
  // Submits a job and returns its running attempt on `node`.
  std::string Running(const std::string& node, bool interruptible = false) {
    auto job = core_->SubmitJob(Spec(interruptible), "");
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    job_ = job->id;
    auto assigns = link_->OfType("assign");
    EXPECT_FALSE(assigns.empty());
    std::string att = assigns.empty() ? "" : assigns.back()["attempt_id"].get<std::string>();
    EXPECT_TRUE(core_->AgentMessage(node, link_.get(), Msg("started", att)).ok());
    return att;
  }
  static Json Msg(const std::string& type, const std::string& attempt) {
    return Json{{"type", type}, {"attempt_id", attempt}};
  }

  // What memory holds, and what a server started now would load from the store.
  struct Snapshot {
    Json memory;
    Json disk;
    size_t events = 0;
  };
  Snapshot Take() {
    Snapshot s;
    s.memory = core_->StateDump();
    ServerCore fresh(store_.get(), &clock_, opt_);
    EXPECT_TRUE(fresh.Load().ok());
    s.disk = fresh.StateDump();
    if (!job_.empty()) {
      auto events = store_->ReadEvents(job_, 0, 100000);
      s.events = events.ok() ? events->size() : 0;
    }
    return s;
  }
  void ExpectUnchanged(const Snapshot& before) {
    Snapshot after = Take();
    EXPECT_EQ(before.memory, after.memory) << "memory changed:\n"
                                           << before.memory.dump(1) << "\n---\n"
                                           << after.memory.dump(1);
    EXPECT_EQ(before.disk, after.disk) << "the store changed";
    EXPECT_EQ(before.events, after.events) << "events were written";
  }
  std::string JobState() {
    auto d = core_->GetJob(job_);
    return d.ok() ? std::string(store::Name(d->job.state)) : d.status().ToString();
  }

  CoreOptions opt_;
  FakeClock clock_;
  std::filesystem::path dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<FailingStore> failing_;
  std::unique_ptr<ServerCore> core_;
  std::shared_ptr<RecordingLink> link_;
  std::string job_;
};

TEST_F(CoreCommitTest, AFailedPlacementLeavesNoAttemptAndSendsNoAssignment) {
  std::string node = Node();
  // Every batch that creates an attempt fails: the job is stored, its placement is not.
  failing_->fail_if = [](const store::WriteBatch& b) { return !b.attempts.empty(); };
  auto job = core_->SubmitJob(Spec(), "");
  ASSERT_TRUE(job.ok()) << "the job itself is durably queued: " << job.status().ToString();
  job_ = job->id;
  EXPECT_GE(failing_->failed, 1);
  EXPECT_TRUE(link_->OfType("assign").empty());
  EXPECT_EQ(JobState(), "queued");
  core_->Tick();  // the first tick also refreshes what a tick refreshes once a minute
  Snapshot before = Take();
  EXPECT_TRUE(before.memory["active_attempts"].empty());
  EXPECT_EQ(before.memory["queued"], Json::array({job_}));
  const int failed = failing_->failed;
  core_->Tick();  // the tick retries the failed pass, which fails again
  EXPECT_GT(failing_->failed, failed);
  ExpectUnchanged(before);
  EXPECT_TRUE(link_->OfType("assign").empty());
  EXPECT_GE(core_->DegradedCounts()["schedule"], 1);
  // The store works again: the next tick places it, as attempt 1.
  failing_->fail_if = nullptr;
  core_->Tick();
  ASSERT_EQ(link_->OfType("assign").size(), 1u);
  EXPECT_EQ(link_->OfType("assign")[0]["attempt"], 1);
  EXPECT_EQ(JobState(), "starting");
  EXPECT_TRUE(core_->StateDump()["queued"].empty());
}

TEST_F(CoreCommitTest, AFailedExitLeavesTheAttemptRunningAndUnacknowledged) {
  std::string node = Node();
  std::string att = Running(node);
  Snapshot before = Take();
  failing_->fail = true;
  Json exited = proto::ToJson(proto::Exited{att, 0, 0, ""});
  EXPECT_FALSE(core_->AgentMessage(node, link_.get(), exited).ok());
  ExpectUnchanged(before);
  EXPECT_TRUE(link_->OfType("exit_ack").empty()) << "an exit not stored must not be acknowledged";
  failing_->fail = false;
  ASSERT_TRUE(core_->AgentMessage(node, link_.get(), exited).ok());
  EXPECT_EQ(JobState(), "succeeded");
  EXPECT_EQ(link_->OfType("exit_ack").size(), 1u);
}

// Metering (issue 14): a charge that fails to commit is not half-billed, and once the store
// works again every second is billed exactly once.
TEST_F(CoreCommitTest, AFailedSettlementOrExitBillsEverySecondExactlyOnce) {
  std::string node = Node();
  std::string att = Running(node);
  const int64_t started = clock_.NowMillis();
  clock_.Advance(30'000);
  ASSERT_TRUE(core_->AgentMessage(node, link_.get(), Json{{"type", "heartbeat"}}).ok());
  Snapshot before = Take();
  failing_->fail_if = [](const store::WriteBatch& b) { return !b.ledger.empty(); };
  EXPECT_FALSE(core_->SettleMeters().ok());
  ExpectUnchanged(before);
  Json exited = proto::ToJson(proto::Exited{att, 0, 0, ""});
  EXPECT_FALSE(core_->AgentMessage(node, link_.get(), exited).ok());
  ExpectUnchanged(before);
  EXPECT_EQ(before.memory["balances"], Json::object()) << "nothing was billed yet";
  failing_->fail_if = nullptr;
  ASSERT_TRUE(core_->SettleMeters().ok());
  const int64_t price = 200'000;  // 4 CPUs at $0.05 per CPU-hour
  // Without accounts, jobs are the admin's and nodes the built-in provider's.
  EXPECT_EQ(core_->BalanceOf("admin"), -ledger::ChargeFor(price, 30'000));
  EXPECT_EQ(core_->BalanceOf("provider"), ledger::ChargeFor(price, 30'000));
  auto cost = core_->CostOfJob(job_);
  ASSERT_TRUE(cost.ok());
  EXPECT_EQ(cost->charged_micros, ledger::ChargeFor(price, 30'000));
  clock_.Advance(5'000);
  ASSERT_TRUE(core_->AgentMessage(node, link_.get(), exited).ok());
  cost = core_->CostOfJob(job_);
  ASSERT_TRUE(cost.ok());
  EXPECT_EQ(cost->charged_micros, ledger::ChargeFor(price, clock_.NowMillis() - started));
  EXPECT_EQ(cost->accruing_micros, 0);
  auto check = core_->CheckLedger();
  ASSERT_TRUE(check.ok());
  EXPECT_TRUE(check->problems.empty()) << ::testing::PrintToString(check->problems);
}

TEST_F(CoreCommitTest, AFailedRequeueAfterALostAttemptKeepsItsCooldownAndCountsUnchanged) {
  std::string node = Node();
  std::string att = Running(node);
  Snapshot before = Take();
  failing_->fail = true;
  // The agent restarted and no longer runs the attempt: lost, requeued, the node avoided.
  proto::Hello again = CpuHello();
  again.node_id = node;
  auto second = std::make_shared<RecordingLink>();
  EXPECT_FALSE(core_->AgentHello(second, again).ok());
  ExpectUnchanged(before);
  EXPECT_TRUE(second->OfType("welcome").empty());
  failing_->fail = false;
  ASSERT_TRUE(core_->AgentHello(second, again).ok());
  auto d = core_->GetJob(job_);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->attempts[0].state, store::AttemptState::kLost);
  EXPECT_EQ(d->job.preemptions, 1);
  EXPECT_FALSE(core_->StateDump()["avoid"].empty());
}

TEST_F(CoreCommitTest, AFailedPreemptionSendsNothingAndMarksNothing) {
  std::string node = Node();
  std::string att = Running(node, /*interruptible=*/true);
  Snapshot before = Take();
  failing_->fail = true;
  EXPECT_FALSE(core_->ReclaimNode(node, {}, "provider takes it back").ok());
  ExpectUnchanged(before);
  EXPECT_TRUE(link_->OfType("preempt").empty());
  failing_->fail = false;
  auto preempted = core_->ReclaimNode(node, {}, "provider takes it back");
  ASSERT_TRUE(preempted.ok());
  EXPECT_EQ(*preempted, std::vector<std::string>{att});
  EXPECT_EQ(link_->OfType("preempt").size(), 1u);
}

TEST_F(CoreCommitTest, AFailedNodeLossKeepsTheNodeItsAttemptsAndItsLink) {
  std::string node = Node();
  Running(node);
  core_->Tick();
  clock_.Advance(opt_.heartbeat_grace_ms + 1000);
  Snapshot before = Take();
  failing_->fail = true;
  core_->Tick();
  ExpectUnchanged(before);
  EXPECT_FALSE(link_->closed);
  EXPECT_GE(core_->DegradedCounts()["node_loss"], 1);
  failing_->fail = false;
  core_->Tick();
  EXPECT_TRUE(link_->closed);
  EXPECT_EQ(core_->StateDump()["nodes"][node]["record"]["state"], "lost");
  EXPECT_EQ(JobState(), "queued");
}

TEST_F(CoreCommitTest, AFailedCheckpointKeepsThePreviousOne) {
  std::string node = Node();
  std::string att = Running(node);
  const std::string first = Sha256Hex("checkpoint 1");
  const std::string second = Sha256Hex("checkpoint 2");
  ASSERT_TRUE(
      core_
          ->AgentMessage(node, link_.get(),
                         Json{{"type", "checkpoint"}, {"attempt_id", att}, {"manifest", first}})
          .ok());
  Snapshot before = Take();
  failing_->fail = true;
  EXPECT_FALSE(
      core_
          ->AgentMessage(node, link_.get(),
                         Json{{"type", "checkpoint"}, {"attempt_id", att}, {"manifest", second}})
          .ok());
  ExpectUnchanged(before);
  EXPECT_EQ(before.memory["jobs"][job_]["record"]["checkpoint"], first);
  failing_->fail = false;
  ASSERT_TRUE(
      core_
          ->AgentMessage(node, link_.get(),
                         Json{{"type", "checkpoint"}, {"attempt_id", att}, {"manifest", second}})
          .ok());
  EXPECT_EQ(core_->StateDump()["jobs"][job_]["record"]["checkpoint"], second);
  EXPECT_EQ(core_->StateDump()["checkpoints"][job_].size(), 2u);
}

TEST_F(CoreCommitTest, AFailedCancelLeavesTheJobRunningAndTellsTheAgentNothing) {
  std::string node = Node();
  Running(node);
  Snapshot before = Take();
  failing_->fail = true;
  EXPECT_FALSE(core_->CancelJob(job_).ok());
  ExpectUnchanged(before);
  EXPECT_TRUE(link_->OfType("cancel").empty());
  failing_->fail = false;
  ASSERT_TRUE(core_->CancelJob(job_).ok());
  EXPECT_EQ(link_->OfType("cancel").size(), 1u);
}

TEST_F(CoreCommitTest, AFailedVerdictKeepsTheRequestOpenSoTheSameReportCanBeSentAgain) {
  proto::Hello h = CpuHello();
  auto node = core_->AgentHello(link_, h);
  ASSERT_TRUE(node.ok());
  const Json report{{"type", "conformance"},
                    {"report", ToJson(testing::PassingReport(h.inventory))},
                    {"nonce", link_->Nonce()}};
  Snapshot before = Take();
  failing_->fail = true;
  EXPECT_FALSE(core_->AgentMessage(*node, link_.get(), report).ok());
  ExpectUnchanged(before);
  EXPECT_EQ(before.memory["nodes"][*node]["report_nonces"].size(), 1u);
  failing_->fail = false;
  Status again = core_->AgentMessage(*node, link_.get(), report);
  ASSERT_TRUE(again.ok()) << "the nonce was used up by a verdict that was never stored: "
                          << again.ToString();
  EXPECT_EQ(core_->StateDump()["nodes"][*node]["record"]["verification"], "verified");
}

TEST_F(CoreCommitTest, AFailedRevocationLeavesTheNodeAndItsWork) {
  std::string node = Node();
  Running(node);
  Snapshot before = Take();
  failing_->fail = true;
  EXPECT_FALSE(core_->RevokeNode(node).ok());
  ExpectUnchanged(before);
  EXPECT_FALSE(link_->closed);
  failing_->fail = false;
  ASSERT_TRUE(core_->RevokeNode(node).ok());
  EXPECT_TRUE(link_->closed);
  EXPECT_EQ(JobState(), "queued");
}

// Agent messages: one commit for many (docs/design-notes.md). Posted messages wait, as they do
// on a loaded server, until the test handles them together.
class CoreInboxTest : public CoreCommitTest {
 protected:
  void SetUp() override {
    opt_.hold_agent_messages = true;
    CoreCommitTest::SetUp();
  }
  struct Agent {
    std::shared_ptr<RecordingLink> link = std::make_shared<RecordingLink>();
    std::string node, job, attempt;
  };
  // A verified 4-CPU node on its own link, running a job that takes all of it.
  Agent RunningAgent(const std::string& name) {
    Agent a;
    proto::Hello h = CpuHello(name);
    auto node = core_->AgentHello(a.link, h);
    EXPECT_TRUE(node.ok()) << node.status().ToString();
    a.node = node.ok() ? *node : "";
    EXPECT_TRUE(core_
                    ->AgentMessage(a.node, a.link.get(),
                                   Json{{"type", "conformance"},
                                        {"report", ToJson(testing::PassingReport(h.inventory))},
                                        {"nonce", a.link->Nonce()}})
                    .ok());
    auto job = core_->SubmitJob(Spec(), "");
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    a.job = job.ok() ? job->id : "";
    auto assigns = a.link->OfType("assign");
    EXPECT_EQ(assigns.size(), 1u) << "the new node is the only one free";
    a.attempt = assigns.empty() ? "" : assigns.back()["attempt_id"].get<std::string>();
    EXPECT_TRUE(core_->AgentMessage(a.node, a.link.get(), Msg("started", a.attempt)).ok());
    return a;
  }
  // Queues a message as the agent channel does; its outcome lands in outcomes_.
  void Post(const Agent& a, proto::AgentMessage m) {
    const size_t i = outcomes_.size();
    outcomes_.emplace_back();
    Status posted = core_->PostAgentMessage(a.node, a.link, std::move(m),
                                            [this, i](const Status& s) { outcomes_[i] = s; });
    ASSERT_TRUE(posted.ok()) << posted.ToString();
  }
  std::string StateOf(const std::string& job) {
    auto d = core_->GetJob(job);
    return d.ok() ? std::string(store::Name(d->job.state)) : d.status().ToString();
  }
  std::deque<std::optional<Status>> outcomes_;
};

TEST_F(CoreInboxTest, MessagesWaitingTogetherAreCommittedAsOneWrite) {
  Agent a = RunningAgent("a"), b = RunningAgent("b"), c = RunningAgent("c");
  const int writes = failing_->writes;
  Post(a, proto::Exited{a.attempt, 0, 0, ""});
  Post(b, proto::LogBatch{b.attempt, {{1, "stdout", 0, "epoch 1"}, {2, "stdout", 0, "epoch 2"}}});
  Post(b, proto::Exited{b.attempt, 0, 0, ""});
  Post(c, proto::Exited{c.attempt, 3, 0, ""});
  for (const auto& o : outcomes_) EXPECT_FALSE(o.has_value()) << "handled before its turn";
  EXPECT_EQ(failing_->writes, writes);
  EXPECT_EQ(StateOf(a.job), "running");

  core_->HandleWaitingAgentMessages();
  for (const auto& o : outcomes_) {
    ASSERT_TRUE(o.has_value());
    EXPECT_TRUE(o->ok()) << o->ToString();
  }
  EXPECT_EQ(failing_->writes, writes + 1) << "four messages, one commit";
  EXPECT_EQ(StateOf(a.job), "succeeded");
  EXPECT_EQ(StateOf(b.job), "succeeded");
  EXPECT_EQ(StateOf(c.job), "failed");
  EXPECT_EQ(a.link->OfType("exit_ack").size(), 1u);
  EXPECT_EQ(b.link->OfType("exit_ack").size(), 1u);
  EXPECT_EQ(c.link->OfType("exit_ack").size(), 1u);
  ASSERT_EQ(b.link->OfType("log_ack").size(), 1u);
  EXPECT_EQ(b.link->OfType("log_ack")[0]["seq"], 2);
  auto logs = store_->ReadLogs(b.job, 0, 10);
  ASSERT_TRUE(logs.ok());
  EXPECT_EQ(logs->size(), 2u);
}

TEST_F(CoreInboxTest, AFailedGroupCommitAppliesAndAcknowledgesNoneOfItsMessages) {
  Agent a = RunningAgent("a"), b = RunningAgent("b");
  job_ = a.job;
  Snapshot before = Take();
  failing_->fail = true;
  Post(a, proto::Exited{a.attempt, 0, 0, ""});
  Post(b, proto::LogBatch{b.attempt, {{1, "stdout", 0, "epoch 1"}}});
  Post(b, proto::Exited{b.attempt, 0, 0, ""});
  core_->HandleWaitingAgentMessages();
  EXPECT_EQ(failing_->failed, 1) << "the three were to be one commit";
  for (const auto& o : outcomes_) {
    ASSERT_TRUE(o.has_value());
    EXPECT_FALSE(o->ok()) << "every message of a failed commit fails, and the agent resends it";
  }
  ExpectUnchanged(before);
  EXPECT_TRUE(a.link->OfType("exit_ack").empty()) << "an exit not stored must not be acknowledged";
  EXPECT_TRUE(b.link->OfType("exit_ack").empty());
  EXPECT_TRUE(b.link->OfType("log_ack").empty());

  // The store works again and the agents resend: everything goes through, once.
  failing_->fail = false;
  outcomes_.clear();
  Post(a, proto::Exited{a.attempt, 0, 0, ""});
  Post(b, proto::LogBatch{b.attempt, {{1, "stdout", 0, "epoch 1"}}});
  Post(b, proto::Exited{b.attempt, 0, 0, ""});
  core_->HandleWaitingAgentMessages();
  for (const auto& o : outcomes_) EXPECT_TRUE(o.has_value() && o->ok());
  EXPECT_EQ(StateOf(a.job), "succeeded");
  EXPECT_EQ(StateOf(b.job), "succeeded");
  auto logs = store_->ReadLogs(b.job, 0, 10);
  ASSERT_TRUE(logs.ok());
  EXPECT_EQ(logs->size(), 1u);
}

TEST_F(CoreInboxTest, AnExitResentInTheSameBatchIsAppliedOnceAndAcknowledgedTwice) {
  Agent a = RunningAgent("a");
  Post(a, proto::Exited{a.attempt, 0, 0, ""});
  Post(a, proto::Exited{a.attempt, 0, 0, ""});
  core_->HandleWaitingAgentMessages();
  for (const auto& o : outcomes_) EXPECT_TRUE(o.has_value() && o->ok());
  auto d = core_->GetJob(a.job);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->job.state, store::JobState::kSucceeded);
  ASSERT_EQ(d->attempts.size(), 1u);
  int succeeded_events = 0;
  for (const auto& ev : d->events) succeeded_events += ev.type == "succeeded";
  EXPECT_EQ(succeeded_events, 1);
  EXPECT_EQ(a.link->OfType("exit_ack").size(), 2u);
}

TEST_F(CoreInboxTest, AMessageWaitingBehindABusyServerIsASignOfLife) {
  Agent a = RunningAgent("a"), b = RunningAgent("b");
  // a's heartbeat arrives just inside the grace and waits; b says nothing.
  clock_.Advance(opt_.heartbeat_grace_ms - 1000);
  Post(a, proto::Heartbeat{7});
  clock_.Advance(3000);
  core_->Tick();
  Json nodes = core_->StateDump()["nodes"];
  EXPECT_EQ(nodes[b.node]["record"]["state"], "lost") << "silence past the grace is still loss";
  EXPECT_EQ(nodes[a.node]["record"]["state"], "online")
      << "a node is not lost for the server's own backlog";
  EXPECT_EQ(StateOf(a.job), "running");
  ASSERT_FALSE(outcomes_[0].has_value()) << "the heartbeat is still waiting";
  core_->HandleWaitingAgentMessages();
  ASSERT_TRUE(outcomes_[0].has_value() && outcomes_[0]->ok());
  ASSERT_EQ(a.link->OfType("lease").size(), 1u);
  EXPECT_EQ(a.link->OfType("lease")[0]["seq"], 7);
}

TEST_F(CoreInboxTest, ASilenceIsCountedFromTheLastArrivalNotFromABacklogsEnd) {
  Agent a = RunningAgent("a"), b = RunningAgent("b");
  // Both heartbeat, then a falls silent; their heartbeats wait 6 s behind a burst.
  Post(a, proto::Heartbeat{1});
  Post(b, proto::Heartbeat{1});
  clock_.Advance(6000);
  core_->HandleWaitingAgentMessages();
  ASSERT_TRUE(outcomes_[0].has_value() && outcomes_[0]->ok());
  // b keeps speaking; a does not. A grace after a's heartbeat arrived, a is lost.
  clock_.Advance(opt_.heartbeat_grace_ms - 6000 - 1000);
  Post(b, proto::Heartbeat{2});
  core_->HandleWaitingAgentMessages();
  clock_.Advance(2000);
  core_->Tick();
  Json nodes = core_->StateDump()["nodes"];
  EXPECT_EQ(nodes[a.node]["record"]["state"], "lost")
      << "silent for the grace since its last message arrived, however late it was handled";
  EXPECT_EQ(nodes[b.node]["record"]["state"], "online");
}

TEST_F(CoreInboxTest, ANodeIsNotLostWhileItsMessageStillWaits) {
  Agent a = RunningAgent("a");
  Post(a, proto::Heartbeat{1});
  // A backlog longer than the grace: the heartbeat has not been read by the core yet.
  clock_.Advance(opt_.heartbeat_grace_ms + 2000);
  core_->Tick();
  EXPECT_EQ(core_->StateDump()["nodes"][a.node]["record"]["state"], "online")
      << "what the node sent is read before its silence is judged";
  core_->HandleWaitingAgentMessages();
  core_->Tick();
  EXPECT_EQ(core_->StateDump()["nodes"][a.node]["record"]["state"], "lost")
      << "read, it says nothing newer than a grace ago";
}

TEST_F(CoreInboxTest, ADisconnectIsHandledAfterTheMessagesBeforeIt) {
  Agent a = RunningAgent("a");
  Post(a, proto::Exited{a.attempt, 0, 0, ""});
  core_->PostAgentDisconnected(a.node, a.link);
  core_->HandleWaitingAgentMessages();
  ASSERT_TRUE(outcomes_[0].has_value() && outcomes_[0]->ok());
  EXPECT_EQ(StateOf(a.job), "succeeded") << "the exit came before the connection closed";
  EXPECT_EQ(core_->StateDump()["nodes"][a.node]["record"]["state"], "offline");
  // A message on the closed link after that is refused, as one from a replaced link is.
  Post(a, proto::Heartbeat{1});
  core_->HandleWaitingAgentMessages();
  ASSERT_TRUE(outcomes_[1].has_value());
  EXPECT_EQ(outcomes_[1]->code(), StatusCode::kFailedPrecondition);
}

TEST_F(CoreInboxTest, AHelloWaitingForTheLockAfterARestartKeepsItsNodeFromBeingLost) {
  Agent a = RunningAgent("a"), b = RunningAgent("b");
  // The server restarts: both nodes are offline, with the lease and the grace to come back.
  core_.reset();
  core_ = std::make_unique<ServerCore>(failing_.get(), &clock_, opt_);
  ASSERT_TRUE(core_->Load().ok());
  // a's hello came (its credential proved it) but waits behind the storm; b's did not come.
  clock_.Advance(opt_.lease_ms + opt_.heartbeat_grace_ms - 1000);
  core_->NoteAgentHello(a.node);
  clock_.Advance(2000);
  core_->Tick();
  Json nodes = core_->StateDump()["nodes"];
  EXPECT_EQ(nodes[b.node]["record"]["state"], "lost");
  EXPECT_EQ(nodes[a.node]["record"]["state"], "offline") << "waiting for its hello, not lost";
  EXPECT_EQ(StateOf(a.job), "running");
  EXPECT_EQ(StateOf(b.job), "queued") << "b's job is requeued; a's stays where it runs";
}

TEST_F(CoreInboxTest, AfterARestartNodesStillReconnectingAreNotLostWhileTheStormGoesOn) {
  Agent a = RunningAgent("a"), b = RunningAgent("b");
  core_.reset();
  core_ = std::make_unique<ServerCore>(failing_.get(), &clock_, opt_);
  ASSERT_TRUE(core_->Load().ok());
  const int64_t deadline = opt_.lease_ms + opt_.heartbeat_grace_ms;
  // b comes back just before lease + grace; a's turn in the storm has not come yet.
  clock_.Advance(deadline - 2000);
  proto::Hello again = CpuHello("b");
  again.node_id = b.node;
  proto::AttemptReport running;
  running.attempt_id = b.attempt;
  running.running = true;
  again.attempts.push_back(running);
  ASSERT_TRUE(core_->AgentHello(b.link, again).ok());
  clock_.Advance(3000);  // past lease + grace for a
  core_->Tick();
  EXPECT_EQ(core_->StateDump()["nodes"][a.node]["record"]["state"], "offline")
      << "hellos still arrive: a is queued behind them, not dead";
  EXPECT_EQ(StateOf(a.job), "running");
  // No hello for a whole grace: the storm is over, and a did not come back.
  clock_.Advance(opt_.heartbeat_grace_ms);
  ASSERT_TRUE(
      core_->AgentMessage(b.node, b.link.get(), proto::AgentMessage{proto::Heartbeat{1}}).ok());
  core_->Tick();
  EXPECT_EQ(core_->StateDump()["nodes"][a.node]["record"]["state"], "lost");
  EXPECT_EQ(core_->StateDump()["nodes"][b.node]["record"]["state"], "online");
}

}  // namespace
}  // namespace sluice::server
