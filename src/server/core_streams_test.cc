// Job streams (core_streams.cc): the stored history is replayed without the core's lock, and
// what is committed meanwhile still reaches the reader once, in order.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "server/core_test_fixture.h"

namespace sluice::server {
namespace {

// A job placed on a fresh CPU node, whose agent logs lines as the tests need.
class CoreStreamsTest : public ServerCoreTest {
 protected:
  void StartJob() {
    link_ = std::make_shared<RecordingLink>();
    auto node = Hello(link_, CpuHello());
    ASSERT_TRUE(node.ok());
    node_ = *node;
    auto job = core_->SubmitJob(Spec(), "");
    ASSERT_TRUE(job.ok());
    job_ = job->id;
    att_ = link_->Last("assign", "attempt_id");
    ASSERT_FALSE(att_.empty());
  }
  Status Log(int64_t seq, const std::string& text) {
    return core_->AgentMessage(node_, link_.get(),
                               proto::LogMessage(att_, {{seq, "stdout", 0, text}}));
  }

  std::shared_ptr<RecordingLink> link_;
  std::string node_, job_, att_;
};

TEST_F(CoreStreamsTest, AStreamsReplayHoldsNoLockAndMissesNothingCommittedMeanwhile) {
  StartJob();
  if (HasFatalFailure()) return;
  // More history than one page of the replay, in a few messages.
  std::vector<std::string> want;
  std::vector<proto::LogEntry> lines;
  for (int64_t seq = 1; seq <= 2500; ++seq) {
    want.push_back("line " + std::to_string(seq));
    lines.push_back({seq, "stdout", 0, want.back()});
    if (lines.size() == 500) {
      ASSERT_TRUE(core_->AgentMessage(node_, link_.get(), proto::LogMessage(att_, lines)).ok());
      lines.clear();
    }
  }

  // While the reader takes its first replayed line, another thread commits a line. Under the
  // lock (as the replay once ran) that commit would wait for the whole replay.
  std::future<Status> during;
  bool launched = false, committed_during_replay = false;
  std::vector<Json> items;
  auto sub = core_->Subscribe(job_, true, true, [&](const Json& item) {
    items.push_back(item);
    if (item.value("type", "") == "log" && !launched) {
      launched = true;
      during = std::async(std::launch::async, [&] { return Log(2501, "during the replay"); });
      committed_during_replay =
          during.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
    }
    return true;
  });
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  ASSERT_TRUE(launched);
  EXPECT_TRUE(during.get().ok());
  EXPECT_TRUE(committed_during_replay) << "the commit waited for the replay";
  want.push_back("during the replay");

  // Then live, and the end.
  ASSERT_TRUE(Log(2502, "after").ok());
  want.push_back("after");
  ASSERT_TRUE(
      core_->AgentMessage(node_, link_.get(), proto::ToJson(proto::Exited{att_, 0, 0, ""})).ok());
  std::vector<std::string> logs;
  for (const auto& i : items) {
    if (i.value("type", "") == "log") logs.push_back(i.value("text", ""));
  }
  EXPECT_EQ(logs, want);  // each line once, in order
  ASSERT_FALSE(items.empty());
  EXPECT_EQ(items.back()["type"], "end");
  EXPECT_EQ(items.back()["job"]["state"], "succeeded");
}

// A job that keeps logging while its reader replays: every round of the replay finds a line
// committed during it, so after kStreamReplayRounds rounds the rest is read under the lock. The
// reader still gets every line once, in order, then follows live.
TEST_F(CoreStreamsTest, AReplayThatNeverCatchesUpFinishesUnderTheLockAndMissesNothing) {
  StartJob();
  if (HasFatalFailure()) return;
  auto log = [&](int64_t seq) { return Log(seq, "line " + std::to_string(seq)); };
  for (int64_t seq = 1; seq <= 3; ++seq) ASSERT_TRUE(log(seq).ok());

  // On the newest line of each round the reader commits one more (no lock is held there): the
  // next round finds it. The line the last round lets in is read under the lock, where the reader
  // commits nothing (it would wait for itself).
  int64_t newest = 3;
  int committed = 0;
  std::vector<std::string> got;
  auto sub = core_->Subscribe(job_, false, true, [&](const Json& item) {
    if (item.value("type", "") != "log") return true;
    got.push_back(item.value("text", ""));
    if (item.value("seq", int64_t{0}) == newest && committed < ServerCore::kStreamReplayRounds) {
      ++committed;
      EXPECT_TRUE(log(++newest).ok());
    }
    return true;
  });
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  EXPECT_EQ(committed, ServerCore::kStreamReplayRounds);
  ASSERT_TRUE(log(++newest).ok());  // live
  std::vector<std::string> want;
  for (int64_t seq = 1; seq <= newest; ++seq) want.push_back("line " + std::to_string(seq));
  EXPECT_EQ(got, want);  // each line once, in order
}

// A reader that lost its connection resumes after the last ids it got (the CLI does,
// docs/api.md "Stream items"): live items carry the ids the store gave them, the same a replay
// gives, and a stream from them holds only what came after, live items included.
TEST_F(CoreStreamsTest, LiveItemsCarryTheStoresIdsAndAReaderResumesAfterThem) {
  StartJob();
  if (HasFatalFailure()) return;
  ASSERT_TRUE(Log(1, "one").ok());
  std::vector<Json> first;
  auto sub = core_->Subscribe(job_, true, true, [&](const Json& item) {
    first.push_back(item);
    return true;
  });
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  ASSERT_TRUE(Log(2, "two").ok());  // live
  ASSERT_TRUE(Log(3, "three").ok());
  core_->Unsubscribe(*sub);  // the connection is lost
  ASSERT_TRUE(Log(4, "four").ok());

  // What the reader got, by kind, with ids as the store holds them.
  StreamCursor cursor;
  std::vector<std::string> texts;
  for (const auto& item : first) {
    const std::string type = item.value("type", "");
    const int64_t id = item.value("id", int64_t{0});
    ASSERT_GT(id, 0) << item.dump();
    if (type == "log") {
      EXPECT_GT(id, cursor.log);
      cursor.log = id;
      texts.push_back(item.value("text", ""));
    } else if (type == "event") {
      EXPECT_GT(id, cursor.event);
      cursor.event = id;
    }
  }
  EXPECT_EQ(texts, (std::vector<std::string>{"one", "two", "three"}));
  auto stored = store_->ReadLogs(job_, 0, 10);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 4u);
  EXPECT_EQ((*stored)[2].id, cursor.log);  // "three", delivered live
  auto events = store_->ReadEvents(job_, 0, 100);
  ASSERT_TRUE(events.ok());
  ASSERT_FALSE(events->empty());
  EXPECT_EQ(events->back().id, cursor.event);

  // Resumed: only "four" is replayed, then "five" live, then the exit's events and the end.
  std::vector<Json> resumed;
  auto again = core_->Subscribe(
      job_, true, true,
      [&](const Json& item) {
        resumed.push_back(item);
        return true;
      },
      cursor);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_TRUE(Log(5, "five").ok());
  ASSERT_TRUE(
      core_->AgentMessage(node_, link_.get(), proto::ToJson(proto::Exited{att_, 0, 0, ""})).ok());
  std::vector<std::string> more;
  for (const auto& item : resumed) {
    const std::string type = item.value("type", "");
    if (type == "log") more.push_back(item.value("text", ""));
    if (type == "event") {
      EXPECT_GT(item.value("id", int64_t{0}), cursor.event) << item.dump();
    }
  }
  EXPECT_EQ(more, (std::vector<std::string>{"four", "five"}));
  ASSERT_FALSE(resumed.empty());
  EXPECT_EQ(resumed.back()["type"], "end");
}

}  // namespace
}  // namespace sluice::server
