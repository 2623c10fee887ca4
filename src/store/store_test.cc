#include "store/store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "store/sqlite_store.h"
#include "store/store_test_util.h"

namespace sluice::store {
namespace {

using testing::SampleAttempt;
using testing::SampleJob;
using testing::ScratchDir;

class SqliteStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { store_ = Open(); }

  std::unique_ptr<Store> Open() {
    auto s = OpenSqliteStore(path_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  static LogLine Log(const std::string& job, const std::string& attempt, int64_t seq,
                     const std::string& text) {
    LogLine l;
    l.job_id = job;
    l.attempt_id = attempt;
    l.seq = seq;
    l.stream = seq % 2 ? "stdout" : "stderr";
    l.ts_ms = 5000 + seq;
    l.text = text;
    return l;
  }

  static JobEvent Event(const std::string& job, const std::string& type, int64_t ts) {
    return JobEvent{.id = 0, .job_id = job, .ts_ms = ts, .type = type, .message = type + " msg"};
  }

  ScratchDir dir_;
  std::string path_ = dir_.path() + "/sluice.db";
  std::unique_ptr<Store> store_;
};

TEST_F(SqliteStoreTest, EveryRecordTypeRoundTrips) {
  TokenRecord token{
      .id = "adm-1", .kind = "admin", .sha256 = std::string(64, 'f'), .created_ms = 42};
  NodeRecord node;
  node.id = "node-1";
  node.name = "gpu-host";
  node.inventory = Json{{"hostname", "gpu-host"}, {"gpus", Json::array({{{"index", 0}}})}};
  node.state = NodeState::kOffline;
  node.registered_ms = 10;
  node.last_seen_ms = 20;
  node.price_per_gpu_hour = 2.1;
  node.price_per_cpu_hour = 0.035;
  node.region = "us-west";
  node.verification = "deverified";
  node.verification_reasons = Json::array({"driver changed: re-verifying"});
  node.hardware_fingerprint = std::string(64, 'b');
  node.software_fingerprint = std::string(64, 'c');
  node.verified_ms = 15;
  node.conformance = Json{{"trigger", "registration"}, {"checks", Json::array()}};
  JobRecord running = SampleJob("job-1", 100);
  JobRecord done = SampleJob("job-2", 200);
  done.state = JobState::kFailed;
  done.exit_code = 137;  // a set exit code must come back distinct from "none"
  done.finished_ms = 300;
  running.cancel_requested = true;  // a pending cancel must survive a restart
  done.reason = "exit code 137 \xE2\x80\x94 killed";
  AttemptRecord attempt = SampleAttempt("att-1", "job-1", AttemptState::kSucceeded, 150);
  attempt.exit_code = 0;
  attempt.cause = "exited";
  attempt.gpus = {};  // an empty allocation (CPU-only) must not read back as something else
  attempt.node_snapshot = std::string(64, 'd');

  WriteBatch b;
  b.tokens = {token};
  b.nodes = {node};
  b.jobs = {running, done};
  b.attempts = {attempt};
  b.events = {Event("job-1", "submitted", 100)};
  b.logs = {Log("job-1", "att-1", 1, std::string("nul\0inside", 10))};
  ASSERT_TRUE(store_->Write(b).ok());

  auto tokens = store_->LoadTokens();
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(*tokens, std::vector<TokenRecord>{token});
  auto nodes = store_->LoadNodes();
  ASSERT_TRUE(nodes.ok());
  EXPECT_EQ(*nodes, std::vector<NodeRecord>{node});
  auto jobs = store_->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(*jobs, (std::vector<JobRecord>{running, done}));
  auto got = store_->GetJob("job-2");
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, done);
  auto missing = store_->GetJob("job-none");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
  auto attempts = store_->AttemptsForJob("job-1");
  ASSERT_TRUE(attempts.ok());
  EXPECT_EQ(*attempts, std::vector<AttemptRecord>{attempt});

  auto events = store_->ReadEvents("job-1", 0, 10);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  JobEvent want_event = b.events[0];
  want_event.id = (*events)[0].id;  // assigned by the store
  EXPECT_GT(want_event.id, 0);
  EXPECT_EQ((*events)[0], want_event);
  auto logs = store_->ReadLogs("job-1", 0, 10);
  ASSERT_TRUE(logs.ok());
  ASSERT_EQ(logs->size(), 1u);
  LogLine want_log = b.logs[0];
  want_log.id = (*logs)[0].id;
  EXPECT_GT(want_log.id, 0);
  EXPECT_EQ((*logs)[0], want_log);
  EXPECT_EQ((*logs)[0].text.size(), 10u);

  // And all of it survives closing and reopening the file.
  store_.reset();
  store_ = Open();
  ASSERT_NE(store_, nullptr);
  EXPECT_EQ(*store_->LoadJobs(), (std::vector<JobRecord>{running, done}));
  EXPECT_EQ(*store_->LoadNodes(), std::vector<NodeRecord>{node});
}

TEST_F(SqliteStoreTest, SnapshotsUptimeAndAuditRoundTrip) {
  WriteBatch b;
  b.snapshots = {{std::string(64, 'e'), R"({"inventory":{}})"}};
  b.uptime = {{"node-1", 1000, 2000}, {"node-2", 500, 900}};
  b.audit = {{.id = 0,
              .ts_ms = 100,
              .actor = "adm-1",
              .source = "127.0.0.1:1",
              .action = "POST /v1/jobs",
              .target = "job-1",
              .params = Json{{"name", "train"}},
              .status = 201},
             {.id = 0,
              .ts_ms = 300,
              .actor = "agent:node-1",
              .source = "",
              .action = "agent.hello",
              .target = "",
              .params = Json::object(),
              .status = 200}};
  ASSERT_TRUE(store_->Write(b).ok());
  // The same snapshot again is not an error (content-addressed); an open span grows in place.
  WriteBatch again;
  again.snapshots = b.snapshots;
  again.uptime = {{"node-1", 1000, 5000}};
  ASSERT_TRUE(store_->Write(again).ok());

  auto snap = store_->GetSnapshot(std::string(64, 'e'));
  ASSERT_TRUE(snap.ok());
  ASSERT_TRUE(snap->has_value());
  EXPECT_EQ((*snap)->json, R"({"inventory":{}})");
  EXPECT_FALSE(store_->GetSnapshot(std::string(64, 'f'))->has_value());

  auto uptime = store_->LoadUptime(1000);  // node-2's span ended before the window
  ASSERT_TRUE(uptime.ok());
  EXPECT_EQ(*uptime, (std::vector<UptimeSpan>{{"node-1", 1000, 5000}}));

  auto audit = store_->ReadAudit(0, 0, 10);
  ASSERT_TRUE(audit.ok());
  ASSERT_EQ(audit->size(), 2u);
  EXPECT_EQ((*audit)[0].action, "POST /v1/jobs");
  EXPECT_EQ((*audit)[0].params, (Json{{"name", "train"}}));
  EXPECT_EQ((*audit)[0].status, 201);
  auto later = store_->ReadAudit(200, 0, 10);
  ASSERT_TRUE(later.ok());
  ASSERT_EQ(later->size(), 1u);
  EXPECT_EQ((*later)[0].actor, "agent:node-1");
  auto after = store_->ReadAudit(0, (*audit)[0].id, 10);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->size(), 1u);

  AttemptRecord old = SampleAttempt("att-old", "job-1", AttemptState::kFailed, 10);
  AttemptRecord recent = SampleAttempt("att-new", "job-1", AttemptState::kRunning, 5000);
  WriteBatch atts;
  atts.jobs = {SampleJob("job-1", 5)};
  atts.attempts = {old, recent};
  ASSERT_TRUE(store_->Write(atts).ok());
  auto since = store_->AttemptsSince(1000);
  ASSERT_TRUE(since.ok());
  EXPECT_EQ(*since, std::vector<AttemptRecord>{recent});
}

TEST_F(SqliteStoreTest, UpsertOverwrites) {
  JobRecord job = SampleJob("job-1");
  AttemptRecord att = SampleAttempt("att-1", "job-1", AttemptState::kStarting, 10);
  ASSERT_TRUE(store_->Write({.jobs = {job}, .attempts = {att}}).ok());
  job.state = JobState::kSucceeded;
  job.exit_code = 0;
  job.reason = "done";
  Json renamed = job.spec.Parse();
  renamed["name"] = "renamed";
  job.spec = renamed;
  att.state = AttemptState::kSucceeded;
  att.exit_code = 0;
  att.ended_ms = 99;
  ASSERT_TRUE(store_->Write({.jobs = {job}, .attempts = {att}}).ok());
  EXPECT_EQ(*store_->LoadJobs(), std::vector<JobRecord>{job});
  EXPECT_EQ(*store_->AttemptsForJob("job-1"), std::vector<AttemptRecord>{att});

  // Clearing an exit code back to "none" must store NULL, not keep the old value.
  job.exit_code = std::nullopt;
  ASSERT_TRUE(store_->Write({.jobs = {job}}).ok());
  EXPECT_FALSE((*store_->GetJob("job-1"))->exit_code.has_value());
}

// The upserts leave a job's submission time and an attempt's job and creation time out of their
// SET (they never change, and naming them costs index rewrites). A record that changes one
// anyway is an error that fails its whole batch, not a write that half happens.
TEST_F(SqliteStoreTest, ChangingAColumnThatNeverChangesFailsTheBatch) {
  JobRecord job = SampleJob("job-1");
  JobRecord other = SampleJob("job-2");
  AttemptRecord att = SampleAttempt("att-1", "job-1", AttemptState::kStarting, 10);
  ASSERT_TRUE(store_->Write({.jobs = {job, other}, .attempts = {att}}).ok());

  JobRecord moved_job = job;
  moved_job.submitted_ms += 1;
  moved_job.reason = "should not land";
  AttemptRecord later = att;
  later.state = AttemptState::kRunning;  // a legitimate change in the same batch
  Status st = store_->Write({.jobs = {moved_job}, .attempts = {later}});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.ToString().find("submitted_ms"), std::string::npos) << st.ToString();

  for (auto change : {+[](AttemptRecord& a) { a.job_id = "job-2"; },
                      +[](AttemptRecord& a) { a.created_ms += 1; }}) {
    AttemptRecord moved = att;
    change(moved);
    moved.state = AttemptState::kRunning;
    JobRecord touched = job;
    touched.reason = "should not land either";
    st = store_->Write({.jobs = {touched}, .attempts = {moved}});
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.ToString().find("att-1"), std::string::npos) << st.ToString();
  }

  // Nothing of the failed batches landed; the rows are as first written.
  EXPECT_EQ(*store_->GetJob("job-1"), job);
  EXPECT_EQ(*store_->AttemptsForJob("job-1"), std::vector<AttemptRecord>{att});
  EXPECT_TRUE(store_->AttemptsForJob("job-2")->empty());
}

// The metrics page's store counters: commits and refused batches counted apart, and the pages a
// commit writes to the WAL (an empty batch is no commit).
TEST_F(SqliteStoreTest, CountsCommitsRefusedBatchesAndPagesWritten) {
  const StoreCounters before = store_->Counters();
  ASSERT_TRUE(store_->Write({}).ok());
  JobRecord job = SampleJob("job-1");
  ASSERT_TRUE(store_->Write({.jobs = {job}}).ok());
  const StoreCounters one = store_->Counters();
  EXPECT_EQ(one.commits, before.commits + 1);
  EXPECT_EQ(one.failed_commits, before.failed_commits);
  EXPECT_GT(one.pages_written, before.pages_written);

  JobRecord moved = job;
  moved.submitted_ms += 1;  // refused: see ChangingAColumnThatNeverChangesFailsTheBatch
  ASSERT_FALSE(store_->Write({.jobs = {moved}}).ok());
  const StoreCounters two = store_->Counters();
  EXPECT_EQ(two.commits, one.commits);
  EXPECT_EQ(two.failed_commits, one.failed_commits + 1);
  EXPECT_EQ(two.pages_written, one.pages_written);  // rolled back: nothing reached the WAL

  // Refused before it began: another connection holds the write lock past the busy timeout.
  auto impatient = OpenSqliteStore(
      path_, SqliteStoreOptions{.busy_timeout_ms = 1, .background_checkpoints = false});
  ASSERT_TRUE(impatient.ok()) << impatient.status().ToString();
  sqlite3* holder = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &holder), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(holder, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  EXPECT_FALSE((*impatient)->Write({.jobs = {SampleJob("job-2")}}).ok());
  sqlite3_exec(holder, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(holder);
  EXPECT_EQ((*impatient)->Counters().failed_commits, 1);
  EXPECT_EQ((*impatient)->Counters().commits, 0);
}

// A batch may change one record more than once (a job placed, started and finished in one
// commit); the store writes only the last of each id, and that one must decide the row, for
// records first written in the batch and for those already stored.
TEST_F(SqliteStoreTest, TheLastRecordOfAnIdInABatchDecidesItsRow) {
  JobRecord stored = SampleJob("job-0");
  ASSERT_TRUE(store_->Write({.jobs = {stored}}).ok());
  WriteBatch b;
  for (const std::string id : {"job-0", "job-1"}) {
    JobRecord job = SampleJob(id);
    job.state = JobState::kStarting;
    b.jobs.push_back(job);
    b.attempts.push_back(SampleAttempt("att-" + id, id, AttemptState::kStarting, 10));
  }
  for (const std::string id : {"job-0", "job-1"}) {
    JobRecord& job = b.jobs.emplace_back(SampleJob(id));
    job.state = JobState::kSucceeded;
    job.exit_code = 0;
    job.finished_ms = 99;
    AttemptRecord& att =
        b.attempts.emplace_back(SampleAttempt("att-" + id, id, AttemptState::kSucceeded, 10));
    att.ended_ms = 99;
    att.exit_code = 0;
  }
  NodeRecord node;
  node.id = "node-1";
  node.name = "before";
  node.inventory = Json::object();
  node.conformance = Json::object();
  b.nodes.push_back(node);
  node.name = "after";
  node.last_seen_ms = 77;
  b.nodes.push_back(node);
  ASSERT_TRUE(store_->Write(b).ok());
  EXPECT_EQ(*store_->LoadNodes(), std::vector<NodeRecord>{node});
  EXPECT_EQ(*store_->LoadJobs(), (std::vector<JobRecord>{b.jobs[2], b.jobs[3]}));
  EXPECT_EQ(*store_->AttemptsForJob("job-0"), std::vector<AttemptRecord>{b.attempts[2]});
  EXPECT_EQ(*store_->AttemptsForJob("job-1"), std::vector<AttemptRecord>{b.attempts[3]});
}

TEST_F(SqliteStoreTest, FailedBatchLeavesNothingBehind) {
  WriteBatch b;
  b.tokens = {TokenRecord{.id = "join-1", .kind = "join", .sha256 = "x", .created_ms = 1}};
  b.jobs = {SampleJob("job-1")};
  b.events = {Event("job-1", "submitted", 1)};
  b.logs = {Log("job-1", "att-1", 1, "hello")};
  // Fails the foreign key to jobs, after the token, job, events were already inserted.
  b.attempts = {SampleAttempt("att-1", "job-missing", AttemptState::kStarting, 1)};
  Status st = store_->Write(b);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();

  EXPECT_TRUE(store_->LoadTokens()->empty());
  EXPECT_TRUE(store_->LoadJobs()->empty());
  EXPECT_TRUE(store_->ReadEvents("job-1", 0, 10)->empty());
  EXPECT_TRUE(store_->ReadLogs("job-1", 0, 10)->empty());
  EXPECT_EQ(*store_->MaxLogSeq("att-1"), 0);
  // The rows were inserted before the failure, and rolled back: the batch keeps no id of them.
  EXPECT_EQ(b.events[0].id, 0);
  EXPECT_EQ(b.logs[0].id, 0);

  // A state outside the enum is caught by the schema's CHECK, also rolling back the batch.
  WriteBatch bad_state;
  bad_state.jobs = {SampleJob("job-2"), SampleJob("job-3")};
  bad_state.jobs[1].state = static_cast<JobState>(99);
  EXPECT_FALSE(store_->Write(bad_state).ok());
  EXPECT_TRUE(store_->LoadJobs()->empty());

  // The connection is usable again after the rollback.
  b.attempts[0].job_id = "job-1";
  ASSERT_TRUE(store_->Write(b).ok());
  EXPECT_EQ(store_->LoadJobs()->size(), 1u);
  EXPECT_EQ(store_->AttemptsForJob("job-1")->size(), 1u);
  ASSERT_EQ(store_->ReadLogs("job-1", 0, 10)->size(), 1u);
  // Committed: the batch holds the ids a reader of the store sees.
  EXPECT_EQ(b.events[0].id, (*store_->ReadEvents("job-1", 0, 10))[0].id);
  EXPECT_EQ(b.logs[0].id, (*store_->ReadLogs("job-1", 0, 10))[0].id);
  EXPECT_GT(b.logs[0].id, 0);
}

TEST_F(SqliteStoreTest, LogsDedupOnAttemptAndSeqAndPage) {
  WriteBatch first;
  for (int seq = 1; seq <= 5; ++seq) first.logs.push_back(Log("job-1", "att-1", seq, "a"));
  first.logs.push_back(Log("job-2", "att-9", 1, "other job"));
  ASSERT_TRUE(store_->Write(first).ok());
  // The agent resends 3..5 after a reconnect and continues with 6, 7.
  WriteBatch resend;
  for (int seq = 3; seq <= 7; ++seq) resend.logs.push_back(Log("job-1", "att-1", seq, "b"));
  ASSERT_TRUE(store_->Write(resend).ok());
  // The lines it already held get no id (nothing was appended); the new ones theirs, in order.
  EXPECT_EQ(resend.logs[0].id, 0);
  EXPECT_EQ(resend.logs[2].id, 0);
  EXPECT_GT(resend.logs[3].id, first.logs.back().id);
  EXPECT_EQ(resend.logs[4].id, resend.logs[3].id + 1);

  EXPECT_EQ(*store_->MaxLogSeq("att-1"), 7);
  EXPECT_EQ(*store_->MaxLogSeq("att-9"), 1);
  EXPECT_EQ(*store_->MaxLogSeq("att-unknown"), 0);

  std::vector<LogLine> all;
  int64_t cursor = 0;
  std::vector<size_t> page_sizes;
  for (;;) {
    auto page = store_->ReadLogs("job-1", cursor, 3);
    ASSERT_TRUE(page.ok());
    if (page->empty()) break;
    page_sizes.push_back(page->size());
    for (const LogLine& l : *page) {
      EXPECT_GT(l.id, cursor);
      cursor = l.id;
      all.push_back(l);
    }
  }
  EXPECT_EQ(page_sizes, (std::vector<size_t>{3, 3, 1}));
  ASSERT_EQ(all.size(), 7u);
  EXPECT_EQ(all[4].id, first.logs[4].id);
  EXPECT_EQ(all[6].id, resend.logs[4].id);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(all[i].seq, i + 1);
    EXPECT_EQ(all[i].job_id, "job-1");
    // The first copy of a resent line wins; the resend is ignored, not applied twice.
    EXPECT_EQ(all[i].text, i < 5 ? "a" : "b");
  }
  EXPECT_TRUE(store_->ReadLogs("job-1", 0, 0)->empty());
  EXPECT_FALSE(store_->ReadLogs("job-1", 0, -1).ok());
}

TEST_F(SqliteStoreTest, TheWalIsCheckpointedBesideTheCommitsAndCounted) {
  // About 100 pages of log lines a commit, 1,000 pages past the checkpointer's default mark.
  const int wake = SqliteStoreOptions{}.wal_checkpoint_pages;
  const std::string text(8000, 'x');
  int64_t seq = 0;
  for (int commit = 0; commit < wake / 100 + 10; ++commit) {
    WriteBatch b;
    for (int i = 0; i < 50; ++i) b.logs.push_back(Log("job-1", "att-1", ++seq, text));
    ASSERT_TRUE(store_->Write(b).ok());
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (store_->Counters().background_checkpoints == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  StoreCounters c = store_->Counters();
  EXPECT_GT(c.background_checkpoints, 0);
  EXPECT_EQ(c.inline_checkpoints, 0);
  EXPECT_EQ(c.checkpoint_failures, 0);
  // Copied for real: most of the pages are in the database file now, not only in the WAL.
  std::error_code ec;
  EXPECT_GT(std::filesystem::file_size(path_, ec), uintmax_t(wake / 2) * 4096);
  EXPECT_EQ(*store_->MaxLogSeq("att-1"), seq);
  // Without the thread, nothing is counted (and SQLite checkpoints inside the commits).
  store_.reset();
  auto plain = OpenSqliteStore(path_, SqliteStoreOptions{.background_checkpoints = false});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ((*plain)->Counters().background_checkpoints, 0);
}

TEST_F(SqliteStoreTest, EventsPageInArrivalOrder) {
  for (int i = 0; i < 5; ++i) {
    WriteBatch b;
    b.events = {Event("job-1", "e" + std::to_string(i), i), Event("job-2", "x", i)};
    ASSERT_TRUE(store_->Write(b).ok());
  }
  auto p1 = store_->ReadEvents("job-1", 0, 2);
  ASSERT_TRUE(p1.ok());
  ASSERT_EQ(p1->size(), 2u);
  EXPECT_EQ((*p1)[0].type, "e0");
  EXPECT_EQ((*p1)[1].type, "e1");
  auto p2 = store_->ReadEvents("job-1", p1->back().id, 10);
  ASSERT_TRUE(p2.ok());
  ASSERT_EQ(p2->size(), 3u);
  EXPECT_EQ((*p2)[0].type, "e2");
  EXPECT_EQ((*p2)[2].type, "e4");
  EXPECT_TRUE(store_->ReadEvents("job-1", p2->back().id, 10)->empty());
  EXPECT_EQ(store_->ReadEvents("job-2", 0, 100)->size(), 5u);
}

TEST_F(SqliteStoreTest, LoadActiveAttemptsOnlyStartingAndRunning) {
  WriteBatch b;
  b.jobs = {SampleJob("job-1"), SampleJob("job-2")};
  b.attempts = {
      SampleAttempt("att-run", "job-1", AttemptState::kRunning, 30),
      SampleAttempt("att-ok", "job-1", AttemptState::kSucceeded, 10),
      SampleAttempt("att-start", "job-2", AttemptState::kStarting, 20),
      SampleAttempt("att-lost", "job-2", AttemptState::kLost, 5),
      SampleAttempt("att-fail", "job-2", AttemptState::kFailed, 6),
      SampleAttempt("att-cxl", "job-2", AttemptState::kCancelled, 7),
  };
  ASSERT_TRUE(store_->Write(b).ok());
  auto active = store_->LoadActiveAttempts();
  ASSERT_TRUE(active.ok());
  ASSERT_EQ(active->size(), 2u);
  EXPECT_EQ((*active)[0].id, "att-start");  // oldest first
  EXPECT_EQ((*active)[1].id, "att-run");

  auto of_job2 = store_->AttemptsForJob("job-2");
  ASSERT_TRUE(of_job2.ok());
  ASSERT_EQ(of_job2->size(), 4u);
  EXPECT_EQ((*of_job2)[0].id, "att-lost");
  EXPECT_EQ((*of_job2)[3].id, "att-start");
}

TEST_F(SqliteStoreTest, LoadJobsOldestSubmissionFirst) {
  ASSERT_TRUE(store_->Write({.jobs = {SampleJob("job-c", 300), SampleJob("job-a", 100)}}).ok());
  ASSERT_TRUE(store_->Write({.jobs = {SampleJob("job-b", 200)}}).ok());
  auto jobs = store_->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[0].id, "job-a");
  EXPECT_EQ((*jobs)[1].id, "job-b");
  EXPECT_EQ((*jobs)[2].id, "job-c");
}

// The ids of the jobs listed, or the error.
std::vector<std::string> IdsOf(const Result<std::vector<JobRecord>>& jobs) {
  if (!jobs.ok()) return {jobs.status().ToString()};
  std::vector<std::string> out;
  for (const auto& j : *jobs) out.push_back(j.id);
  return out;
}

TEST_F(SqliteStoreTest, FinishedJobsPageNewestFirstAfterACursor) {
  auto job = [](const std::string& id, int64_t ms, JobState state) {
    JobRecord j = SampleJob(id, ms);
    j.state = state;
    return j;
  };
  ASSERT_TRUE(store_
                  ->Write({.jobs = {job("job-a", 100, JobState::kSucceeded),
                                    job("job-b", 200, JobState::kFailed),
                                    job("job-c", 200, JobState::kSucceeded),
                                    job("job-d", 300, JobState::kRunning),
                                    job("job-e", 400, JobState::kBudgetExhausted),
                                    job("job-f", 500, JobState::kCancelled)}})
                  .ok());
  using V = std::vector<std::string>;
  // Unfinished jobs (running, budget-exhausted) are not listed; ties on submitted_ms by id.
  EXPECT_EQ(IdsOf(store_->ListFinishedJobs(std::nullopt, std::nullopt, 10, nullptr)),
            (V{"job-f", "job-c", "job-b", "job-a"}));
  EXPECT_EQ(IdsOf(store_->ListFinishedJobs(std::nullopt, std::nullopt, 2, nullptr)),
            (V{"job-f", "job-c"}));
  // After a cursor inside a tie: the rest of the tie, then older ones.
  EXPECT_EQ(IdsOf(store_->ListFinishedJobs(std::nullopt, JobCursor{200, "job-c"}, 10, nullptr)),
            (V{"job-b", "job-a"}));
  EXPECT_EQ(IdsOf(store_->ListFinishedJobs(std::nullopt, JobCursor{100, "job-a"}, 10, nullptr)),
            V{});
  EXPECT_EQ(IdsOf(store_->ListFinishedJobs(JobState::kSucceeded, std::nullopt, 10, nullptr)),
            (V{"job-c", "job-a"}));
  EXPECT_EQ(IdsOf(store_->ListFinishedJobs(JobState::kRunning, std::nullopt, 10, nullptr)), V{});
  EXPECT_EQ(IdsOf(store_->ListFinishedJobs(std::nullopt, std::nullopt, 0, nullptr)), V{});
  // The whole record comes back.
  auto one = store_->ListFinishedJobs(JobState::kFailed, std::nullopt, 1, nullptr);
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ(one->front(), job("job-b", 200, JobState::kFailed));
}

// A tenant's list (JobScope) reads only its own and its teams' finished jobs, in the same order
// and with the same cursor as the whole list; a job both owned and shared comes once.
TEST_F(SqliteStoreTest, FinishedJobsOfOneScopeComeInOrderOnceEach) {
  auto job = [](const std::string& id, int64_t ms, const std::string& owner,
                const std::string& team, JobState state = JobState::kSucceeded) {
    JobRecord j = SampleJob(id, ms);
    j.state = state;
    j.owner = owner;
    j.team = team;
    return j;
  };
  ASSERT_TRUE(store_
                  ->Write({.jobs = {job("job-a", 100, "alice", ""), job("job-b", 200, "bob", "ml"),
                                    job("job-c", 200, "alice", "ml", JobState::kFailed),
                                    job("job-d", 300, "bob", ""),
                                    job("job-e", 400, "alice", "", JobState::kRunning),
                                    job("job-f", 500, "carol", "ops"), job("job-g", 600, "", "")}})
                  .ok());
  using V = std::vector<std::string>;
  const JobScope alice{{"alice"}, {}};
  const JobScope alice_in_ml{{"alice"}, {"ml"}};
  EXPECT_EQ(IdsOf(store_->ListFinishedJobs(std::nullopt, std::nullopt, 10, &alice)),
            (V{"job-c", "job-a"}));
  // job-c is alice's and ml's: once. bob's job-d is not shared.
  EXPECT_EQ(IdsOf(store_->ListFinishedJobs(std::nullopt, std::nullopt, 10, &alice_in_ml)),
            (V{"job-c", "job-b", "job-a"}));
  EXPECT_EQ(IdsOf(store_->ListFinishedJobs(std::nullopt, std::nullopt, 2, &alice_in_ml)),
            (V{"job-c", "job-b"}));
  EXPECT_EQ(
      IdsOf(store_->ListFinishedJobs(std::nullopt, JobCursor{200, "job-c"}, 10, &alice_in_ml)),
      (V{"job-b", "job-a"}));
  EXPECT_EQ(IdsOf(store_->ListFinishedJobs(JobState::kSucceeded, std::nullopt, 10, &alice_in_ml)),
            (V{"job-b", "job-a"}));
  // "" as an owner is the jobs from before accounts; "" as a team matches nothing.
  const JobScope legacy{{""}, {""}};
  EXPECT_EQ(IdsOf(store_->ListFinishedJobs(std::nullopt, std::nullopt, 10, &legacy)), V{"job-g"});
  const JobScope nobody{{"mallory"}, {"red"}};
  EXPECT_EQ(IdsOf(store_->ListFinishedJobs(std::nullopt, std::nullopt, 10, &nobody)), V{});
  const JobScope empty;
  EXPECT_EQ(IdsOf(store_->ListFinishedJobs(std::nullopt, std::nullopt, 10, &empty)), V{});
  // A job's owner and team are fixed once written: a record that changes one is refused.
  JobRecord moved = job("job-a", 100, "bob", "");
  EXPECT_FALSE(store_->Write({.jobs = {moved}}).ok());
  EXPECT_EQ(IdsOf(store_->ListFinishedJobs(std::nullopt, std::nullopt, 10, &alice)),
            (V{"job-c", "job-a"}));
}

TEST_F(SqliteStoreTest, CommittedBatchSurvivesKillDashNine) {
  store_.reset();  // a connection must not be carried across fork()
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: no gtest assertions here; the exit status tells the parent what happened.
    auto s = OpenSqliteStore(path_);
    if (!s.ok()) ::_exit(2);
    WriteBatch b;
    b.jobs = {SampleJob("job-durable")};
    b.events = {Event("job-durable", "submitted", 1)};
    if (!(*s)->Write(b).ok()) ::_exit(3);
    ::raise(SIGKILL);  // no destructor, no close, no checkpoint
    ::_exit(4);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "child exited with " << WEXITSTATUS(wstatus);
  EXPECT_EQ(WTERMSIG(wstatus), SIGKILL);

  store_ = Open();
  ASSERT_NE(store_, nullptr);
  auto job = store_->GetJob("job-durable");
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(job->has_value());
  EXPECT_EQ(**job, SampleJob("job-durable"));
  EXPECT_EQ(store_->ReadEvents("job-durable", 0, 10)->size(), 1u);
}

TEST_F(SqliteStoreTest, ConcurrentWritersLoseNothing) {
  constexpr int kThreads = 4, kBatches = 50;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kBatches; ++i) {
        std::string id = "job-" + std::to_string(t) + "-" + std::to_string(i);
        WriteBatch b;
        b.jobs = {SampleJob(id, t * 1000 + i)};
        b.events = {Event(id, "submitted", i)};
        b.logs = {Log(id, "att-" + id, 1, "l1"), Log(id, "att-" + id, 2, "l2")};
        if (!store_->Write(b).ok()) ++failures[t];
        // Reads interleave with other threads' writes.
        if (!store_->GetJob(id).ok()) ++failures[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, std::vector<int>(kThreads, 0));
  EXPECT_EQ(store_->LoadJobs()->size(), static_cast<size_t>(kThreads * kBatches));
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kBatches; ++i) {
      std::string id = "job-" + std::to_string(t) + "-" + std::to_string(i);
      ASSERT_EQ(store_->ReadLogs(id, 0, 10)->size(), 2u) << id;
      ASSERT_EQ(store_->ReadEvents(id, 0, 10)->size(), 1u) << id;
    }
  }
}

TEST_F(SqliteStoreTest, FullSyncOptionWorks) {
  store_.reset();
  auto s = OpenSqliteStore(path_, SqliteStoreOptions{.sync_on_every_commit = true});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE((*s)->Write({.jobs = {SampleJob("job-1")}}).ok());
  EXPECT_EQ((*s)->LoadJobs()->size(), 1u);
}

// A commit that touches more pages than SQLite's default cache (2 MiB) holds reads them back
// from the kernel when the next commit touches them again; --db-cache-mib's cache keeps them.
// The counter behind sluice_store_pages_read_total shows which.
TEST(SqliteStoreOpenTest, ALargerWriterCacheReadsFewerPagesBack) {
  auto pages_read_rewriting = [](int cache_mib) -> int64_t {
    ScratchDir dir;
    auto s = OpenSqliteStore(dir.path() + "/db", SqliteStoreOptions{.page_cache_mib = cache_mib});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return -1;
    WriteBatch b;
    for (int i = 0; i < 2000; ++i) {  // rows of 2 KiB: about 4 MiB of pages
      JobRecord j = SampleJob("job-" + std::to_string(100000 + i));
      j.reason = std::string(2048, 'r');
      b.jobs.push_back(std::move(j));
    }
    EXPECT_TRUE((*s)->Write(b).ok());
    const int64_t before = (*s)->Counters().pages_read;
    for (JobRecord& j : b.jobs) j.priority = 8;  // every page again
    EXPECT_TRUE((*s)->Write(b).ok());
    return (*s)->Counters().pages_read - before;
  };
  const int64_t default_cache = pages_read_rewriting(0);
  const int64_t large_cache = pages_read_rewriting(16);
  EXPECT_GT(default_cache, 500);  // most of the ~1,000 pages came back from the kernel
  EXPECT_LT(large_cache * 10, default_cache) << large_cache << " against " << default_cache;
}

TEST(SqliteStoreOpenTest, TheBackgroundCheckpointWaitsForTheStoresNumberOfPages) {
  // The same ~1,100 pages of commits, with the checkpointer's wake-up below and above them.
  auto open_and_write = [](const ScratchDir& dir, int pages) -> std::unique_ptr<Store> {
    auto s = OpenSqliteStore(dir.path() + "/db", SqliteStoreOptions{.wal_checkpoint_pages = pages});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return nullptr;
    WriteBatch b;
    for (int i = 0; i < 2000; ++i) {  // rows of 2 KiB: about 1,000 pages
      JobRecord j = SampleJob("job-" + std::to_string(100000 + i));
      j.reason = std::string(2048, 'r');
      b.jobs.push_back(std::move(j));
    }
    EXPECT_TRUE((*s)->Write(b).ok());
    for (int i = 0; i < 100; ++i) b.jobs[i].priority = 8;
    b.jobs.resize(100);
    EXPECT_TRUE((*s)->Write(b).ok());
    return std::move(*s);
  };
  ScratchDir above, below;
  std::unique_ptr<Store> waits = open_and_write(above, 100000);
  ASSERT_NE(waits, nullptr);
  // Only a commit wakes the thread, and none crossed 100,000 pages: no checkpoint has run.
  EXPECT_EQ(waits->Counters().background_checkpoints, 0);
  EXPECT_EQ(waits->Counters().inline_checkpoints, 0);
  EXPECT_GT(waits->Counters().pages_written, 1000);

  std::unique_ptr<Store> copies = open_and_write(below, 500);
  ASSERT_NE(copies, nullptr);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (copies->Counters().background_checkpoints == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT(copies->Counters().background_checkpoints, 0);
  EXPECT_EQ(copies->Counters().inline_checkpoints, 0);
}

// What the metrics page shows as the settings in effect comes back from SQLite and the
// checkpointer, so an option that does not reach them shows as the default here.
TEST(SqliteStoreOpenTest, ItReportsTheCacheAndCheckpointSpanInEffect) {
  auto settings = [](SqliteStoreOptions options) -> std::pair<int64_t, int64_t> {
    ScratchDir dir;
    auto s = OpenSqliteStore(dir.path() + "/db", options);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return {-1, -1};
    const StoreCounters c = (*s)->Counters();
    return {c.page_cache_bytes, c.wal_checkpoint_pages};
  };
  const int64_t default_span = WalCheckpointerOptions{}.wake_frames;
  // SQLite's own default cache: -2000, that is 2,000 KiB.
  EXPECT_EQ(settings({}), std::make_pair(int64_t{2000 * 1024}, default_span));
  EXPECT_EQ(settings({.page_cache_mib = 16, .wal_checkpoint_pages = 500}),
            std::make_pair(int64_t{16 << 20}, int64_t{500}));
  // A span of 0 or less keeps the default rather than checkpointing after every commit.
  EXPECT_EQ(settings({.wal_checkpoint_pages = 0}).second, default_span);
  EXPECT_EQ(settings({.wal_checkpoint_pages = -5}).second, default_span);
  // Without the background checkpoint there is no span.
  EXPECT_EQ(settings({.background_checkpoints = false}).second, 0);
}

TEST(SqliteStoreOpenTest, UnopenablePathIsAnError) {
  auto s = OpenSqliteStore("/nonexistent-dir-for-sluice/x/y.db");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("/nonexistent-dir-for-sluice/x/y.db"), std::string::npos);
}

TEST(SqliteStoreOpenTest, EmptyBatchIsANoOp) {
  ScratchDir dir;
  auto s = OpenSqliteStore(dir.path() + "/db");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE((*s)->Write(WriteBatch{}).ok());
  EXPECT_TRUE((*s)->LoadJobs()->empty());
}

}  // namespace
}  // namespace sluice::store

namespace sluice::store {
namespace {

TEST(CatalogStoreTest, ReimportReplacesAProvidersCatalogAndSurvivesReopen) {
  ScratchDir dir;
  const std::string path = dir.path() + "/sluice.db";
  {
    auto store = OpenSqliteStore(path);
    ASSERT_TRUE(store.ok());
    CatalogFile aws{"aws", "aws.csv", "cloud,...\naws,old\n", 10};
    CatalogFile gcp{"gcp", "gcp.csv", "cloud,...\ngcp,row\n", 11};
    ASSERT_TRUE((*store)->Write({.catalogs = {aws, gcp}}).ok());
    aws.csv = "cloud,...\naws,new\n";
    aws.imported_ms = 20;
    ASSERT_TRUE((*store)->Write({.catalogs = {aws}}).ok());
  }
  auto store = OpenSqliteStore(path);
  ASSERT_TRUE(store.ok());
  auto catalogs = (*store)->LoadCatalogs();
  ASSERT_TRUE(catalogs.ok());
  ASSERT_EQ(catalogs->size(), 2u);
  EXPECT_EQ((*catalogs)[0].provider, "aws");
  EXPECT_EQ((*catalogs)[0].csv, "cloud,...\naws,new\n");
  EXPECT_EQ((*catalogs)[0].imported_ms, 20);
  EXPECT_EQ((*catalogs)[1].provider, "gcp");
}

TEST(SqliteStoreDeleteTest, CheckpointsAreKeptDroppedAndDeletedWithTheirJob) {
  ScratchDir dir;
  auto store = OpenSqliteStore(dir.path() + "/db");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  JobRecord job{.id = "job-1", .name = "j", .spec = Json::object()};
  AttemptRecord att{.id = "att-1", .job_id = "job-1", .node_id = "n"};
  WriteBatch b;
  b.jobs = {job, JobRecord{.id = "job-2", .name = "k", .spec = Json::object()}};
  b.attempts = {att};
  b.events = {JobEvent{.job_id = "job-1", .type = "submitted", .message = "x"}};
  b.logs = {LogLine{.job_id = "job-1", .attempt_id = "att-1", .seq = 1, .text = "hi"}};
  b.checkpoints = {
      {"job-1", "m1", "att-1", 1}, {"job-1", "m2", "att-1", 2}, {"job-2", "m3", "", 3}};
  ASSERT_TRUE((*store)->Write(b).ok());
  EXPECT_EQ((*store)->LoadCheckpoints()->size(), 3u);
  WriteBatch drop;
  drop.dropped_checkpoints = {{"job-1", "m1", "", 0}};
  ASSERT_TRUE((*store)->Write(drop).ok());
  auto kept = (*store)->LoadCheckpoints();
  ASSERT_EQ(kept->size(), 2u);
  EXPECT_EQ((*kept)[0].manifest, "m2");
  WriteBatch del;
  del.deleted_jobs = {"job-1"};
  ASSERT_TRUE((*store)->Write(del).ok());
  EXPECT_FALSE((*store)->GetJob("job-1")->has_value());
  EXPECT_TRUE((*store)->AttemptsForJob("job-1")->empty());
  EXPECT_TRUE((*store)->ReadLogs("job-1", 0, 10)->empty());
  EXPECT_TRUE((*store)->ReadEvents("job-1", 0, 10)->empty());
  ASSERT_EQ((*store)->LoadCheckpoints()->size(), 1u);  // job-2's stays
  EXPECT_TRUE((*store)->GetJob("job-2")->has_value());
}

}  // namespace
}  // namespace sluice::store
