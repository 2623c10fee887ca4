// Finished jobs leave memory (issue 12 item 3; docs/design-notes.md "Finished jobs"): the tick
// after a job finishes moves it out of the core's job map, the store keeps it, and every way a
// user reads a job still finds it there, in the same order and with the same answers.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "server/core_test_fixture.h"

namespace sluice::server {
namespace {

using store::JobState;

class CoreFinishedTest : public ServerCoreTest {
 protected:
  void SetUp() override {
    opt_.heartbeat_grace_ms = 3'600'000;  // ticks at will, no heartbeats
    ServerCoreTest::SetUp();
  }
  // A job run to the end on a node: `code` 0 succeeds it.
  std::string Finished(int code = 0) {
    if (node_.empty()) {
      auto node = Hello(link_, CpuHello());
      EXPECT_TRUE(node.ok()) << node.status().ToString();
      node_ = node.ok() ? *node : "";
    }
    auto job = core_->SubmitJob(Spec(4), "");
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    const std::string att = StartLastAssigned(node_, *link_);
    EXPECT_TRUE(
        core_->AgentMessage(node_, link_.get(), proto::ToJson(proto::Exited{att, code, 0, ""}))
            .ok());
    return job.ok() ? job->id : "";
  }
  // A job that waits (no node can run it), then is cancelled: finished without a node.
  std::string Cancelled(const std::string& owner = "", const std::string& workdir = "") {
    SubmitOptions o;
    o.owner = owner;
    o.queue_unschedulable = true;
    auto job = core_->SubmitJob(Spec(4), workdir, o);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    if (!job.ok()) return "";
    EXPECT_TRUE(core_->CancelJob(job->id).ok());
    clock_.Advance(1);  // one submission a millisecond: the list's order is theirs
    return job->id;
  }
  bool InMemory(const std::string& id) { return core_->StateDump()["jobs"].contains(id); }
  std::vector<std::string> Ids(const Result<std::vector<store::JobRecord>>& jobs) {
    EXPECT_TRUE(jobs.ok()) << jobs.status().ToString();
    std::vector<std::string> out;
    for (const auto& j : jobs.ok() ? *jobs : std::vector<store::JobRecord>{}) out.push_back(j.id);
    return out;
  }

  std::shared_ptr<RecordingLink> link_ = std::make_shared<RecordingLink>();
  std::string node_;
};

TEST_F(CoreFinishedTest, AFinishedJobLeavesMemoryAtTheNextTickAndIsStillReadFromTheStore) {
  const std::string job = Finished();
  auto before = core_->GetJob(job);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  ASSERT_EQ(before->job.state, JobState::kSucceeded);
  EXPECT_TRUE(InMemory(job)) << "kept until the tick";
  core_->Tick();
  EXPECT_FALSE(InMemory(job));
  Json dump = core_->StateDump();
  ASSERT_TRUE(dump["finished_jobs"].contains(job));
  EXPECT_EQ(dump["finished_jobs"][job]["state"], "succeeded");
  EXPECT_TRUE(dump["active_attempts_per_job"].empty());
  // Every read a user makes still answers as it did.
  auto after = core_->GetJob(job);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->job, before->job);
  EXPECT_EQ(after->attempts.size(), before->attempts.size());
  EXPECT_EQ(after->events.size(), before->events.size());
  EXPECT_EQ(Ids(core_->ListJobs(std::nullopt, 10)), std::vector<std::string>{job});
  EXPECT_EQ(Ids(core_->ListJobs(JobState::kSucceeded, 10)), std::vector<std::string>{job});
  EXPECT_TRUE(Ids(core_->ListJobs(JobState::kFailed, 10)).empty());
  EXPECT_EQ(core_->JobCounts(), (std::map<JobState, int64_t>{{JobState::kSucceeded, 1}}));
  auto cancel = core_->CancelJob(job);
  EXPECT_EQ(cancel.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(cancel.status().message().find("already succeeded"), std::string::npos);
  auto budget = core_->SetJobBudget(job, 5.0);
  EXPECT_EQ(budget.status().code(), StatusCode::kFailedPrecondition);
  auto access = core_->JobAccessOf(job);
  ASSERT_TRUE(access.ok()) << access.status().ToString();
  EXPECT_EQ(access->owner, "");
  EXPECT_TRUE(core_->ReadLogs(job, 0, 10).ok());
  // A stream of a finished job replays its events and ends at once.
  std::vector<Json> items;
  auto sub = core_->Subscribe(job, true, false, [&](const Json& item) {
    items.push_back(item);
    return true;
  });
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  EXPECT_EQ(*sub, 0u);
  ASSERT_FALSE(items.empty());
  EXPECT_EQ(items.back()["type"], "end");
  EXPECT_EQ(items.size(), before->events.size() + 1);
  // Unknown jobs are still unknown.
  EXPECT_EQ(core_->GetJob("job-none").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(core_->ReadLogs("job-none", 0, 10).status().code(), StatusCode::kNotFound);
}

TEST_F(CoreFinishedTest, ARestartedServerLoadsOnlyUnfinishedJobsIntoMemory) {
  const std::string done = Finished(3);
  SubmitOptions wait;
  wait.queue_unschedulable = true;
  clock_.Advance(1);
  auto queued = core_->SubmitJob(Spec(64), "", wait);  // more CPUs than the node has: it waits
  ASSERT_TRUE(queued.ok()) << queued.status().ToString();
  Open();  // a restart on the same store
  Json dump = core_->StateDump();
  EXPECT_FALSE(dump["jobs"].contains(done));
  EXPECT_TRUE(dump["jobs"].contains(queued->id));
  EXPECT_EQ(dump["finished_jobs"][done]["state"], "failed");
  auto d = core_->GetJob(done);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->job.exit_code, 3);
  // Newest submission first, the finished job read from the store.
  EXPECT_EQ(Ids(core_->ListJobs(std::nullopt, 10)), (std::vector<std::string>{queued->id, done}));
  EXPECT_EQ(Ids(core_->ListJobs(std::nullopt, 1)), std::vector<std::string>{queued->id});
}

TEST_F(CoreFinishedTest, TheJobListPagesThroughFinishedJobsForOneTenant) {
  // More finished jobs than one page of the store (500), two owners taking turns.
  std::vector<std::string> mine;
  for (int i = 0; i < 600; ++i) {
    std::string id = Cancelled(i % 2 == 0 ? "acct-a" : "acct-b");
    if (i % 2 == 0) mine.push_back(id);
  }
  core_->Tick();
  EXPECT_EQ(core_->StateDump()["jobs"].size(), 0u);
  const store::JobScope only_a{{"acct-a"}, {}};
  std::vector<std::string> newest_first(mine.rbegin(), mine.rend());
  EXPECT_EQ(Ids(core_->ListJobs(std::nullopt, 1000, &only_a)), newest_first);
  EXPECT_EQ(Ids(core_->ListJobs(JobState::kCancelled, 3, &only_a)),
            std::vector<std::string>(newest_first.begin(), newest_first.begin() + 3));
  const store::JobScope only_c{{"acct-c"}, {}};
  EXPECT_EQ(Ids(core_->ListJobs(std::nullopt, 1000, &only_c)).size(), 0u);
  EXPECT_EQ(Ids(core_->ListJobs(std::nullopt, SIZE_MAX)).size(), 600u);
  EXPECT_EQ(core_->JobCounts(), (std::map<JobState, int64_t>{{JobState::kCancelled, 600}}));
  // The API's access checks read a retired job's owner from what memory kept: another tenant
  // is still told apart from its owner.
  auto access = core_->JobAccessOf(mine.front());
  ASSERT_TRUE(access.ok()) << access.status().ToString();
  EXPECT_EQ(access->owner, "acct-a");
  EXPECT_TRUE(access->node_owners.empty());
}

TEST_F(CoreFinishedTest, AFinishedJobKeepsItsWorkdirUntilItIsDeleted) {
  const std::string workdir(64, 'd');
  const std::string job = Cancelled("", workdir);
  core_->Tick();
  ASSERT_FALSE(InMemory(job));
  EXPECT_TRUE(core_->ReferencedBlobs().count(workdir));
  // A delete the store refuses changes nothing.
  const Json memory = core_->StateDump();
  failing_->fail = true;
  EXPECT_FALSE(core_->DeleteJob(job).ok());
  failing_->fail = false;
  EXPECT_EQ(core_->StateDump(), memory);
  ASSERT_TRUE(core_->GetJob(job).ok());
  // Deleted: gone from memory and the store, its workdir no longer kept.
  ASSERT_TRUE(core_->DeleteJob(job).ok());
  EXPECT_FALSE(core_->StateDump()["finished_jobs"].contains(job));
  EXPECT_EQ(core_->GetJob(job).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(core_->DeleteJob(job).code(), StatusCode::kNotFound);
  EXPECT_FALSE(core_->ReferencedBlobs().count(workdir));
  EXPECT_TRUE(core_->JobCounts().empty());
}

TEST_F(CoreFinishedTest, AnIdempotentRetryOfAFinishedJobReturnsItsStoredRecord) {
  SubmitOptions o;
  o.owner = "acct-a";
  o.idempotency_key = "k1";
  o.body_sha256 = std::string(64, 'b');
  o.queue_unschedulable = true;
  auto first = core_->SubmitJob(Spec(), "", o);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(core_->CancelJob(first->id).ok());
  core_->Tick();
  ASSERT_FALSE(InMemory(first->id));
  bool replayed = false;
  auto again = core_->SubmitJob(Spec(), "", o, &replayed);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(replayed);
  EXPECT_EQ(again->id, first->id);
  EXPECT_EQ(again->state, JobState::kCancelled);
}

// A tenant's list (a JobScope: its own jobs and its teams') takes its live jobs from the
// per-owner and per-team index and its finished ones from the store, newest first, each once:
// through a job's placement, its end (finished but still in the map), and its retirement.
TEST_F(CoreFinishedTest, ATenantsListShowsItsOwnAndItsTeamsJobsLiveOrFinished) {
  auto node = Hello(link_, CpuHello());
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  auto submit = [&](const std::string& owner, const std::string& team) {
    SubmitOptions o;
    o.owner = owner;
    o.team = team;
    o.queue_unschedulable = true;
    auto job = core_->SubmitJob(Spec(4), "", o);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    clock_.Advance(1);
    return job.ok() ? job->id : "";
  };
  using V = std::vector<std::string>;
  // The sluice_jobs gauge's counts agree with the admin's list (jobs in memory, counted as the
  // map changes, and finished ones read from the store).
  auto counts_agree = [&] {
    auto all = core_->ListJobs(std::nullopt, 100);
    if (!all.ok()) return false;
    std::map<JobState, int64_t> listed;
    for (const auto& j : *all) ++listed[j.state];
    EXPECT_EQ(core_->JobCounts(), listed);
    return core_->JobCounts() == listed;
  };
  const std::string runs = submit("alice", "");  // placed on the node at once
  const std::string shared = submit("bob", "ml");
  const std::string bobs = submit("bob", "");
  const std::string queued = submit("alice", "ml");
  const store::JobScope alice{{"alice"}, {"ml"}};
  const store::JobScope bob{{"bob"}, {}};
  EXPECT_EQ(Ids(core_->ListJobs(std::nullopt, 10, &alice)), (V{queued, shared, runs}));
  EXPECT_EQ(Ids(core_->ListJobs(std::nullopt, 2, &alice)), (V{queued, shared}));
  EXPECT_EQ(Ids(core_->ListJobs(std::nullopt, 10, &bob)), (V{bobs, shared}));
  EXPECT_EQ(Ids(core_->ListJobs(JobState::kStarting, 10, &alice)), V{runs});
  EXPECT_TRUE(counts_agree());
  EXPECT_EQ(core_->JobCounts(),
            (std::map<JobState, int64_t>{{JobState::kQueued, 3}, {JobState::kStarting, 1}}));

  const std::string att = StartLastAssigned(*node, *link_);
  ASSERT_TRUE(
      core_->AgentMessage(*node, link_.get(), proto::ToJson(proto::Exited{att, 0, 0, ""})).ok());
  EXPECT_EQ(Ids(core_->ListJobs(std::nullopt, 10, &alice)), (V{queued, shared, runs}));
  EXPECT_EQ(Ids(core_->ListJobs(JobState::kSucceeded, 10, &alice)), V{runs});
  EXPECT_TRUE(InMemory(runs)) << "finished, kept until the tick";
  EXPECT_TRUE(counts_agree());
  core_->Tick();
  EXPECT_FALSE(InMemory(runs));
  EXPECT_EQ(Ids(core_->ListJobs(std::nullopt, 10, &alice)), (V{queued, shared, runs}));
  EXPECT_EQ(Ids(core_->ListJobs(JobState::kSucceeded, 10, &alice)), V{runs});
  EXPECT_EQ(Ids(core_->ListJobs(std::nullopt, 10, &bob)), (V{bobs, shared}));
  // The admin's list (no scope) has every job.
  EXPECT_EQ(Ids(core_->ListJobs(std::nullopt, 10)), (V{queued, bobs, shared, runs}));
  EXPECT_TRUE(counts_agree());
  EXPECT_EQ(core_->JobCounts()[JobState::kSucceeded], 1);
}

// The submit quota reads each account's unfinished jobs from a count the job map's changes keep
// (LiveJobIndex), not from a walk of every live job: the count follows a job through its
// placement, its end, the tick that retires it, a cancel and a delete, and a server started on
// the same store counts the same. (Debug builds also check each count against the walk.)
TEST_F(CoreFinishedTest, AnAccountsUnfinishedJobsAreCountedThroughEveryChangeAndARestart) {
  auto node = Hello(link_, CpuHello());
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  auto submit = [&](const std::string& owner) {
    SubmitOptions o;
    o.owner = owner;
    o.queue_unschedulable = true;
    auto job = core_->SubmitJob(Spec(4), "", o);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? job->id : "";
  };
  // How many of each owner's jobs the dump lists as unfinished.
  auto dumped = [](ServerCore& core) {
    std::map<std::string, size_t> n;
    const Json dump = core.StateDump();  // kept: the loop walks a part of it
    for (const auto& [owner, ids] : dump["unfinished"]["by_owner"].items()) n[owner] = ids.size();
    return n;
  };
  using Counts = std::map<std::string, size_t>;
  const std::string runs = submit("alice");  // placed on the node at once
  submit("alice");                           // the node is full: queued
  const std::string bobs = submit("bob");
  EXPECT_EQ(core_->ActiveJobsOf("alice"), 2);
  EXPECT_EQ(core_->ActiveJobsOf("bob"), 1);
  EXPECT_EQ(core_->ActiveJobsOf("carol"), 0);
  EXPECT_EQ(dumped(*core_), (Counts{{"alice", 2}, {"bob", 1}}));

  // Started, then succeeded: no longer counted, and still not once the tick retires it.
  const std::string att = StartLastAssigned(*node, *link_);
  EXPECT_EQ(core_->ActiveJobsOf("alice"), 2);
  ASSERT_TRUE(
      core_->AgentMessage(*node, link_.get(), proto::ToJson(proto::Exited{att, 0, 0, ""})).ok());
  EXPECT_EQ(core_->ActiveJobsOf("alice"), 1);
  core_->Tick();
  EXPECT_FALSE(InMemory(runs));
  EXPECT_EQ(core_->ActiveJobsOf("alice"), 1);

  // A server started on the same store counts what this one does.
  {
    ServerCore fresh(store_.get(), &clock_, opt_);
    ASSERT_TRUE(fresh.Load().ok());
    EXPECT_EQ(fresh.ActiveJobsOf("alice"), 1);
    EXPECT_EQ(fresh.ActiveJobsOf("bob"), 1);
    EXPECT_EQ(fresh.StateDump()["unfinished"], core_->StateDump()["unfinished"]);
  }

  // Cancelled (bob's waits behind alice's second, now placed), then deleted.
  ASSERT_TRUE(core_->CancelJob(bobs).ok());
  EXPECT_EQ(core_->ActiveJobsOf("bob"), 0);
  core_->Tick();
  ASSERT_TRUE(core_->DeleteJob(bobs).ok());
  EXPECT_EQ(core_->ActiveJobsOf("bob"), 0);
  EXPECT_EQ(dumped(*core_), (Counts{{"alice", 1}}));
}

}  // namespace
}  // namespace sluice::server
