// Budgets that stop safely (issue 15 item 1; README "Budgets"): a job's max_total_cost and its
// account's credit stop its running attempt through the preemption path before they would be
// passed, the job waits budget-exhausted with its checkpoint, its bill never exceeds the budget
// (even when the agent ignores the stop), and raising the budget or adding credit resumes it from
// the checkpoint. A failed commit of a budget change leaves memory as it was.
#include <gtest/gtest.h>

#include "ledger/metering.h"
#include "server/accounts.h"
#include "server/core_test_fixture.h"
#include "server/test_failing_store.h"

namespace sluice::server {
namespace {

// $0.90 per CPU-hour: the 4-CPU jobs below cost $3.60/h, a tenth of a cent a second.
constexpr double kCpuPrice = 0.9;
constexpr int64_t kMicrosPerSecond = 1000;
const std::string kCheckpoint(64, 'c');

class BudgetTest : public ServerCoreTest {
 protected:
  void SetUp() override {
    opt_.settle_interval_ms = 10'000;
    ServerCoreTest::SetUp();
    Reopen();
  }
  // The core over a store whose writes can be made to fail, with accounts (a restart too).
  void Reopen() {
    core_.reset();
    failing_ = std::make_unique<testing::FailingStore>(store_.get());
    core_ = std::make_unique<ServerCore>(failing_.get(), &clock_, opt_);
    ASSERT_TRUE(core_->Load().ok());
    if (!accounts_) {
      auto a = Accounts::Bootstrap(store_.get(), dir_.string(), &clock_);
      ASSERT_TRUE(a.ok()) << a.status().ToString();
      accounts_ = std::move(*a);
    }
    core_->SetAccounts(accounts_.get());
  }
  void TearDown() override {
    core_.reset();
    accounts_.reset();
    ServerCoreTest::TearDown();
  }
  void Connect() {
    link_ = std::make_shared<RecordingLink>();
    proto::Hello h = CpuHello(node_);
    h.price_per_cpu_hour = kCpuPrice;
    auto node = Hello(link_, h);
    ASSERT_TRUE(node.ok()) << node.status().ToString();
    node_ = *node;
  }
  spec::JobSpec BudgetSpec(double budget) {
    spec::JobSpec s = Spec(4);
    s.max_total_cost = budget;
    s.expected_hours = 0.01;  // $0.036 expected
    s.lifecycle.grace_period_s = 10;
    s.lifecycle.checkpoint_interval_s = 5;
    return s;
  }
  // Places and starts the job; returns its attempt.
  std::string Run(const std::string& job) {
    core_->Tick();
    EXPECT_FALSE(link_->Last("assign", "attempt_id").empty()) << Reason(job);
    return StartLastAssigned(node_, *link_);
  }
  // Moves the clock a second at a time, the agent heartbeating every 5 s, until the server
  // asks it to stop `att` (true) or `max_s` passed (false).
  bool RunUntilStopped(const std::string& att, int max_s, int* took_s) {
    for (int s = 1; s <= max_s; ++s) {
      Second(s);
      for (const auto& m : link_->OfType("preempt")) {
        if (m.value("attempt_id", "") == att) {
          *took_s = s;
          return true;
        }
      }
    }
    return false;
  }
  void Second(int s) { AgentSecond(s, node_, *link_); }
  void Exit(const std::string& att, std::string checkpoint = kCheckpoint) {
    proto::Exited ex{att, 0, 0, ""};
    ex.checkpoint = std::move(checkpoint);
    Status st = core_->AgentMessage(node_, link_.get(), proto::ToJson(ex));
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  std::string State(const std::string& job) {
    auto d = core_->GetJob(job);
    return d.ok() ? std::string(store::Name(d->job.state)) : "?";
  }
  std::string Reason(const std::string& job) {
    auto d = core_->GetJob(job);
    return d.ok() ? d->job.reason : "?";
  }
  int64_t Charged(const std::string& job) {
    EXPECT_TRUE(core_->SettleMeters().ok());
    auto c = core_->CostOfJob(job);
    EXPECT_TRUE(c.ok());
    return c.ok() ? c->charged_micros - c->storage_micros : -1;
  }

  std::unique_ptr<testing::FailingStore> failing_;
  std::unique_ptr<Accounts> accounts_;
  std::shared_ptr<RecordingLink> link_;
  std::string node_;
};

TEST_F(BudgetTest, AJobIsStoppedBeforeItsBudgetAndResumesWhenItIsRaised) {
  Connect();
  auto job = core_->SubmitJob(BudgetSpec(0.10), "");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const std::string att = Run(job->id);
  int took = 0;
  ASSERT_TRUE(RunUntilStopped(att, 200, &took)) << "never stopped";
  // $0.10 at $0.001/s is 100 s; the stop keeps the 10 s grace period and the 5 s margin (twice:
  // the look ahead and the reserve) free, so it comes at 80 s.
  EXPECT_GE(took, 78);
  EXPECT_LE(took, 81);
  EXPECT_EQ(State(job->id), "running");     // until the attempt has stopped
  for (int s = 1; s <= 10; ++s) Second(s);  // the job saves its checkpoint in its grace period
  Exit(att);
  EXPECT_EQ(State(job->id), "budget-exhausted");
  EXPECT_NE(Reason(job->id).find("max_total_cost reached"), std::string::npos) << Reason(job->id);
  EXPECT_NE(Reason(job->id).find("sluice budget " + job->id), std::string::npos);
  EXPECT_NE(Reason(job->id).find("kept"), std::string::npos);
  const int64_t charged = Charged(job->id);
  EXPECT_LE(charged, 100 * kMicrosPerSecond);
  EXPECT_GE(charged, 85 * kMicrosPerSecond);
  auto detail = core_->GetJob(job->id);
  ASSERT_TRUE(detail.ok());
  EXPECT_EQ(detail->job.preemptions, 0) << "a budget stop uses none of the job's restarts";

  // It stays stopped, across a restart too, and takes no node meanwhile.
  const size_t assigned = link_->OfType("assign").size();
  Reopen();
  Connect();
  for (int s = 1; s <= 30; ++s) Second(s);
  EXPECT_EQ(State(job->id), "budget-exhausted");
  EXPECT_EQ(link_->OfType("assign").size(), 0u);
  (void)assigned;

  // Raising it queues it again, resuming from its checkpoint.
  auto raised = core_->SetJobBudget(job->id, 0.30);
  ASSERT_TRUE(raised.ok()) << raised.status().ToString();
  core_->Tick();
  EXPECT_EQ(State(job->id), "starting") << Reason(job->id);
  ASSERT_EQ(link_->OfType("assign").size(), 1u);
  EXPECT_EQ(link_->Last("assign", "checkpoint"), kCheckpoint);
}

// The per-second check works from what Load rebuilt: a restarted server still stops a running
// job at its budget, with the seconds before the restart counted, and a finished job deleted
// meanwhile leaves nothing behind for it to trip on.
TEST_F(BudgetTest, ARestartedServerStillStopsARunningJobAtItsBudget) {
  Connect();
  auto done = core_->SubmitJob(Spec(4), "");
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  const std::string first = Run(done->id);
  Exit(first);
  ASSERT_EQ(State(done->id), "succeeded");
  auto job = core_->SubmitJob(BudgetSpec(0.10), "");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const std::string att = Run(job->id);
  for (int s = 1; s <= 30; ++s) Second(s);
  Reopen();  // the server restarts with the attempt running
  link_ = std::make_shared<RecordingLink>();
  proto::Hello h = CpuHello(node_);
  h.price_per_cpu_hour = kCpuPrice;
  h.attempts.push_back({att, true, std::nullopt, 0, "", false});  // still running here
  // As the node it was (its credential proves it), unchanged: no suite is asked for.
  auto again = core_->AgentHello(link_, h, AgentIdentity{"", "", node_});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_EQ(*again, node_);
  ASSERT_TRUE(core_->DeleteJob(done->id).ok());
  int took = 0;
  ASSERT_TRUE(RunUntilStopped(att, 200, &took)) << "never stopped after the restart";
  // 80 s of budget in all (as in the test above), 30 of them before the restart.
  EXPECT_GE(took, 48);
  EXPECT_LE(took, 51);
}

// The check finds a job's budget through an index of the budgeted jobs (money_.budgeted_jobs),
// not a lookup of every running attempt's job: a budget removed from a running job, and one set
// on it again, are seen by the next check.
TEST_F(BudgetTest, ABudgetRemovedOrSetWhileAJobRunsIsSeenByTheNextCheck) {
  Connect();
  auto job = core_->SubmitJob(BudgetSpec(0.10), "");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const std::string att = Run(job->id);
  ASSERT_TRUE(core_->SetJobBudget(job->id, std::nullopt).ok());
  int took = 0;
  EXPECT_FALSE(RunUntilStopped(att, 120, &took)) << "stopped at " << took << " s, with no budget";
  // $0.12 spent in 120 s; $0.20 leaves 80 s, less the 20 s a stop keeps (as above).
  ASSERT_TRUE(core_->SetJobBudget(job->id, 0.20).ok());
  ASSERT_TRUE(RunUntilStopped(att, 200, &took)) << "never stopped once its budget was set";
  EXPECT_GE(took, 58);
  EXPECT_LE(took, 61);
}

TEST_F(BudgetTest, TheBillNeverPassesTheBudgetEvenWhenTheAgentIgnoresTheStop) {
  Connect();
  auto job = core_->SubmitJob(BudgetSpec(0.10), "");
  ASSERT_TRUE(job.ok());
  const std::string att = Run(job->id);
  for (int s = 1; s <= 300; ++s) Second(s);  // heartbeating, and never stopping
  ASSERT_FALSE(link_->OfType("preempt").empty());
  Exit(att, "");
  EXPECT_EQ(State(job->id), "budget-exhausted");
  EXPECT_EQ(Charged(job->id), 100 * kMicrosPerSecond) << "billed to the budget and no further";
  auto check = core_->CheckLedger();
  ASSERT_TRUE(check.ok());
  EXPECT_TRUE(check->problems.empty()) << check->problems.front();
}

TEST_F(BudgetTest, ABudgetTooSmallForTheExpectedCostIsNeverPlacedAndSaysWhy) {
  Connect();
  spec::JobSpec s = BudgetSpec(0.04);  // $0.036 expected + $0.015 to stop safely
  auto refused = core_->SubmitJob(s, "");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("max_total_cost"), std::string::npos)
      << refused.status().message();
  EXPECT_TRUE(link_->OfType("assign").empty());
}

TEST_F(BudgetTest, AnAccountAtItsCreditLimitHasItsJobsStoppedAndResumedByATopUp) {
  Connect();
  auto alice = accounts_->CreateAccount("alice", Role::kUser, "");
  ASSERT_TRUE(alice.ok()) << alice.status().ToString();
  ASSERT_EQ(alice->credit_limit_micros, 0);  // prepaid
  ASSERT_TRUE(core_->TopUp(alice->id, 50 * kMicrosPerSecond, "test").ok());
  spec::JobSpec s = Spec(4);
  s.lifecycle.grace_period_s = 10;
  SubmitOptions as_alice;
  as_alice.owner = alice->id;
  auto job = core_->SubmitJob(s, "", as_alice);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const std::string att = Run(job->id);
  int took = 0;
  ASSERT_TRUE(RunUntilStopped(att, 200, &took));
  EXPECT_GE(took, 28);  // $0.05 is 50 s; 15 s reserved and 5 s looked ahead
  EXPECT_LE(took, 31);
  for (int sec = 1; sec <= 10; ++sec) Second(sec);
  Exit(att);
  EXPECT_EQ(State(job->id), "budget-exhausted");
  EXPECT_NE(Reason(job->id).find("credit limit reached: account alice"), std::string::npos)
      << Reason(job->id);
  EXPECT_GE(core_->BalanceOf(alice->id), 0) << "the stop did not overshoot the credit";

  ASSERT_TRUE(core_->TopUp(alice->id, 1'000'000, "more").ok());
  core_->Tick();
  EXPECT_EQ(State(job->id), "starting") << Reason(job->id);
  EXPECT_EQ(link_->Last("assign", "checkpoint"), kCheckpoint);
}

// A queue of one account's jobs waits for credit together and is released together
// (docs/design-notes.md "Placement at scale": a refused group is answered as a group, and
// debug builds check after every pass that each job holds its group's answer).
TEST_F(BudgetTest, AnAccountsQueuedJobsWaitForCreditTogetherAndATopUpReleasesThem) {
  Connect();
  auto alice = accounts_->CreateAccount("alice", Role::kUser, "");
  ASSERT_TRUE(alice.ok()) << alice.status().ToString();
  ASSERT_TRUE(core_->TopUp(alice->id, 20 * kMicrosPerSecond, "test").ok());
  spec::JobSpec s = Spec(4);
  SubmitOptions as_alice;
  as_alice.owner = alice->id;
  auto first = core_->SubmitJob(s, "", as_alice);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string att = Run(first->id);
  std::vector<std::string> queued;  // behind it: the node has room for one
  for (int i = 0; i < 6; ++i) {
    auto job = core_->SubmitJob(s, "", as_alice);
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    queued.push_back(job->id);
  }
  for (const auto& id : queued) EXPECT_EQ(State(id), "queued");
  for (int sec = 1; sec <= 60; ++sec) Second(sec);  // stopped at once, but it ignores the stop
  ASSERT_FALSE(link_->OfType("preempt").empty());
  Exit(att);
  ASSERT_EQ(State(first->id), "budget-exhausted");
  ASSERT_TRUE(core_->SettleMeters().ok());
  ASSERT_LT(core_->BalanceOf(alice->id), 0);
  // The node is free, but alice has no credit: every queued job says so, none is placed.
  core_->Tick();
  for (const auto& id : queued) {
    EXPECT_EQ(State(id), "queued");
    EXPECT_EQ(Reason(id).rfind("waiting for credit: account alice has no credit left", 0), 0u)
        << Reason(id);
  }
  ASSERT_TRUE(core_->TopUp(alice->id, 1'000'000, "more").ok());
  core_->Tick();
  // The stopped job resumes first (it was submitted first); the rest wait for the node again.
  EXPECT_EQ(State(first->id), "starting") << Reason(first->id);
  for (const auto& id : queued) {
    EXPECT_EQ(State(id), "queued");
    EXPECT_EQ(Reason(id), "waiting for capacity: every node that can run it is busy");
  }
}

// An agent that keeps running past its stop drives the balance below the limit (credit has no
// backstop: the provider's time was used); a top-up that brings it back above still resumes it.
TEST_F(BudgetTest, ATopUpResumesAJobEvenFromBelowTheCreditLimit) {
  Connect();
  auto bob = accounts_->CreateAccount("bob", Role::kUser, "");
  ASSERT_TRUE(bob.ok());
  ASSERT_TRUE(core_->TopUp(bob->id, 20 * kMicrosPerSecond, "test").ok());
  SubmitOptions as_bob;
  as_bob.owner = bob->id;
  auto job = core_->SubmitJob(Spec(4), "", as_bob);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const std::string att = Run(job->id);
  for (int s = 1; s <= 60; ++s) Second(s);  // stopped at once, but it ignores the stop
  ASSERT_FALSE(link_->OfType("preempt").empty());
  Exit(att);
  ASSERT_EQ(State(job->id), "budget-exhausted");
  ASSERT_TRUE(core_->SettleMeters().ok());
  ASSERT_LT(core_->BalanceOf(bob->id), 0);
  ASSERT_TRUE(core_->TopUp(bob->id, 1'000'000, "more").ok());
  core_->Tick();
  EXPECT_EQ(State(job->id), "starting") << Reason(job->id);
}

TEST_F(BudgetTest, AFailedCommitOfABudgetChangeLeavesMemoryAsItWas) {
  Connect();
  auto job = core_->SubmitJob(BudgetSpec(0.10), "");
  ASSERT_TRUE(job.ok());
  const std::string att = Run(job->id);
  int took = 0;
  ASSERT_TRUE(RunUntilStopped(att, 200, &took));
  Exit(att);
  ASSERT_EQ(State(job->id), "budget-exhausted");
  const Json before = core_->StateDump();
  failing_->fail = true;
  EXPECT_FALSE(core_->SetJobBudget(job->id, 1.0).ok());
  EXPECT_EQ(core_->StateDump(), before);
  failing_->fail = false;
  ASSERT_TRUE(core_->SetJobBudget(job->id, 1.0).ok());
  EXPECT_EQ(State(job->id), "starting");
}

}  // namespace
}  // namespace sluice::server
