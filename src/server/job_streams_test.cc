// Job streams' parts alone (the core's catch-up between them: core_streams_test.cc): the replay
// a page at a time past a cursor, and the live readers: each gets its own job's items of the
// kinds it asked for, an end closes it, a reader that went away is dropped.
#include "server/job_streams.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "store/store_test_util.h"

namespace sluice::server {
namespace {

store::JobEvent Event(const std::string& job, const std::string& type) {
  store::JobEvent e;
  e.job_id = job;
  e.ts_ms = 1;
  e.type = type;
  e.message = type + " of " + job;
  return e;
}

// A line as a committed batch holds it: `id` as the store set it (Store::Write; 0: it already
// held the line). The store sets its own over this one.
store::LogLine Line(const std::string& job, int64_t seq, int64_t id = -1) {
  store::LogLine l;
  l.id = id < 0 ? 100 + seq : id;
  l.job_id = job;
  l.attempt_id = job + "-att";
  l.seq = seq;
  l.stream = "stdout";
  l.ts_ms = 1;
  l.text = "line " + std::to_string(seq);
  return l;
}

// A reader that keeps what it got, and goes away after `accept` items (-1: never).
struct Reader {
  std::vector<Json> got;
  int accept = -1;
  StreamSink Sink() {
    return [this](const Json& item) {
      if (accept >= 0 && static_cast<int>(got.size()) >= accept) return false;
      got.push_back(item);
      return true;
    };
  }
  std::vector<std::string> Types() const {
    std::vector<std::string> out;
    for (const auto& j : got) out.push_back(j.is_null() ? "probe" : j.value("type", ""));
    return out;
  }
};

TEST(JobFollowersTest, EachReaderGetsItsJobsItemsOfTheKindsItAskedForUntilTheEnd) {
  JobFollowers followers;
  Reader both, events_only, logs_only, other_job;
  followers.Follow("job-1", true, true, both.Sink());
  followers.Follow("job-1", true, false, events_only.Sink());
  followers.Follow("job-1", false, true, logs_only.Sink());
  followers.Follow("job-2", true, true, other_job.Sink());
  EXPECT_EQ(followers.size(), 4u);

  store::WriteBatch b;
  b.events = {Event("job-1", "started"), Event("job-2", "placed")};
  b.events[0].id = 7;
  // The second line is one the store already held (a resend): its readers had it.
  b.logs = {Line("job-1", 1), Line("job-1", 1, 0), Line("job-1", 2)};
  followers.Publish(b);
  EXPECT_EQ(both.Types(), (std::vector<std::string>{"event", "log", "log"}));
  EXPECT_EQ(both.got[0].value("event", ""), "started");
  EXPECT_EQ(both.got[0].value("id", int64_t{0}), 7);  // the store's ids: a reader resumes after
  EXPECT_EQ(both.got[1].value("id", int64_t{0}), 101);
  EXPECT_EQ(both.got[2].value("text", ""), "line 2");
  EXPECT_EQ(both.got[2].value("id", int64_t{0}), 102);
  EXPECT_EQ(events_only.Types(), (std::vector<std::string>{"event"}));
  EXPECT_EQ(logs_only.Types(), (std::vector<std::string>{"log", "log"}));
  EXPECT_EQ(other_job.Types(), (std::vector<std::string>{"event"}));
  EXPECT_EQ(other_job.got[0].value("event", ""), "placed");

  // job-1 ends: its readers get the end item after the batch's events and are closed.
  store::JobRecord done;
  done.id = "job-1";
  done.state = store::JobState::kSucceeded;
  store::WriteBatch end;
  end.events = {Event("job-1", "exited")};
  end.jobs = {done};
  followers.Publish(end);
  EXPECT_EQ(both.Types(), (std::vector<std::string>{"event", "log", "log", "event", "end"}));
  EXPECT_EQ(both.got.back()["job"].value("state", ""), "succeeded");
  EXPECT_EQ(logs_only.Types(), (std::vector<std::string>{"log", "log", "end"}));
  EXPECT_EQ(followers.size(), 1u);  // only job-2's
  followers.Publish(b);             // nothing more reaches job-1's readers
  EXPECT_EQ(both.got.size(), 5u);

  // A job record that is not an end (still running) closes nobody.
  store::JobRecord running;
  running.id = "job-2";
  running.state = store::JobState::kRunning;
  followers.Publish(store::WriteBatch{.jobs = {running}});
  EXPECT_EQ(followers.size(), 1u);
}

TEST(JobFollowersTest, AReaderThatWentAwayIsDroppedByAnItemOrAProbe) {
  JobFollowers followers;
  Reader stays, leaves_at_once, idle;
  leaves_at_once.accept = 1;
  followers.Follow("job-1", true, true, stays.Sink());
  followers.Follow("job-1", true, true, leaves_at_once.Sink());
  const uint64_t idle_id = followers.Follow("job-9", true, true, idle.Sink());
  store::WriteBatch b;
  b.events = {Event("job-1", "a"), Event("job-1", "b")};
  followers.Publish(b);
  EXPECT_EQ(stays.got.size(), 2u);
  EXPECT_EQ(leaves_at_once.got.size(), 1u);  // refused the second: dropped
  EXPECT_EQ(followers.size(), 2u);

  idle.accept = 0;  // job-9's reader went away; nothing of job-9 commits
  followers.Probe();
  EXPECT_EQ(followers.size(), 1u);
  EXPECT_EQ(stays.Types(), (std::vector<std::string>{"event", "event", "probe"}));
  followers.Drop(idle_id);  // already gone: no effect
  EXPECT_EQ(followers.size(), 1u);
}

class ReplayStoredTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::OpenSqliteStore(dir_.path() + "/sluice.db");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  void Write(store::WriteBatch& b) { ASSERT_TRUE(store_->Write(b).ok()); }
  store::testing::ScratchDir dir_;
  std::unique_ptr<store::Store> store_;
};

TEST_F(ReplayStoredTest, ReplaysPageByPagePastTheCursorAndResumesFromIt) {
  store::WriteBatch b;
  for (int i = 1; i <= 2'500; ++i) b.logs.push_back(Line("job-1", i));  // three pages
  b.logs.push_back(Line("job-2", 1));
  b.events = {Event("job-1", "submitted"), Event("job-2", "submitted"), Event("job-1", "placed")};
  Write(b);

  Reader r;
  StreamCursor cursor;
  ASSERT_TRUE(ReplayStored(*store_, "job-1", true, true, cursor, r.Sink()).ok());
  ASSERT_EQ(r.got.size(), 2u + 2'500u);
  EXPECT_EQ(r.got[0].value("event", ""), "submitted");
  EXPECT_EQ(r.got[1].value("event", ""), "placed");
  EXPECT_EQ(r.got[2].value("text", ""), "line 1");
  EXPECT_EQ(r.got.back().value("text", ""), "line 2500");
  EXPECT_EQ(cursor.event, r.got[1].value("id", int64_t{0}));
  EXPECT_EQ(cursor.log, r.got.back().value("id", int64_t{0}));
  EXPECT_FALSE(*StoredPast(*store_, "job-1", true, true, cursor));

  // More commits: the store is past the cursor, and a replay from it reads only those.
  store::WriteBatch more_lines{.logs = {Line("job-1", 2'501)}};
  Write(more_lines);
  EXPECT_TRUE(*StoredPast(*store_, "job-1", false, true, cursor));
  EXPECT_FALSE(*StoredPast(*store_, "job-1", true, false, cursor));  // no new event
  Reader more;
  ASSERT_TRUE(ReplayStored(*store_, "job-1", true, true, cursor, more.Sink()).ok());
  ASSERT_EQ(more.got.size(), 1u);
  EXPECT_EQ(more.got[0].value("text", ""), "line 2501");
}

TEST_F(ReplayStoredTest, AReaderThatGoesAwayStopsTheReplayWhereItStood) {
  store::WriteBatch b;
  for (int i = 1; i <= 10; ++i) b.logs.push_back(Line("job-1", i));
  Write(b);
  Reader r;
  r.accept = 4;
  StreamCursor cursor;
  const Status s = ReplayStored(*store_, "job-1", false, true, cursor, r.Sink());
  EXPECT_EQ(s.code(), StatusCode::kCancelled);
  EXPECT_EQ(cursor.log, r.got.back().value("id", int64_t{0}));  // the last one delivered
  Reader rest;
  ASSERT_TRUE(ReplayStored(*store_, "job-1", false, true, cursor, rest.Sink()).ok());
  ASSERT_EQ(rest.got.size(), 6u);
  EXPECT_EQ(rest.got[0].value("text", ""), "line 5");
}

}  // namespace
}  // namespace sluice::server
