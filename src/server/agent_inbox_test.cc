#include "server/agent_inbox.h"

#include <gtest/gtest.h>

namespace sluice::server {
namespace {

InboxEntry Heartbeat(const std::string& node, int64_t seq) {
  InboxEntry e;
  e.node_id = node;
  e.message = proto::Heartbeat{seq};
  return e;
}

TEST(AgentInboxTest, EntriesComeOutInTheOrderTheyWerePosted) {
  FakeClock clock;
  AgentInbox inbox(&clock, 100);
  for (int i = 1; i <= 5; ++i) ASSERT_TRUE(inbox.Post(Heartbeat(i % 2 ? "a" : "b", i)).ok());
  auto first = inbox.Take(3);
  auto rest = inbox.Take(10);
  ASSERT_EQ(first.size(), 3u);
  ASSERT_EQ(rest.size(), 2u);
  int64_t seq = 0;
  for (const auto* part : {&first, &rest}) {
    for (const auto& e : *part) EXPECT_EQ(std::get<proto::Heartbeat>(e.message).seq, ++seq);
  }
  EXPECT_TRUE(inbox.Take(10).empty());
  EXPECT_EQ(inbox.Waiting(), 0u);
}

TEST(AgentInboxTest, OneNodeCannotQueueMoreThanItsShare) {
  FakeClock clock;
  AgentInbox inbox(&clock, 3);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(inbox.Post(Heartbeat("noisy", i)).ok());
  Status refused = inbox.Post(Heartbeat("noisy", 4));
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("3 messages waiting"), std::string::npos) << refused.message();
  EXPECT_TRUE(inbox.Post(Heartbeat("quiet", 1)).ok()) << "other nodes are not held back";
  InboxEntry bye;
  bye.node_id = "noisy";
  bye.disconnected = true;
  EXPECT_TRUE(inbox.Post(std::move(bye)).ok()) << "the end of a connection is always queued";
  // Taking frees the node's share.
  EXPECT_EQ(inbox.Take(100).size(), 5u);
  EXPECT_TRUE(inbox.Post(Heartbeat("noisy", 5)).ok());
}

TEST(AgentInboxTest, PostingIsTheNodesSignOfLifeAndADisconnectIsNot) {
  FakeClock clock;
  AgentInbox inbox(&clock, 10);
  EXPECT_EQ(inbox.HeardMono("a"), 0);
  ASSERT_TRUE(inbox.Post(Heartbeat("a", 1)).ok());
  const int64_t heard = clock.MonotonicMillis();
  clock.Advance(5000);
  InboxEntry bye;
  bye.node_id = "a";
  bye.disconnected = true;
  ASSERT_TRUE(inbox.Post(std::move(bye)).ok());
  EXPECT_EQ(inbox.HeardMono("a"), heard);
  (void)inbox.Take(10);
  EXPECT_EQ(inbox.HeardMono("a"), heard) << "handled or not, it was heard then";
}

TEST(AgentInboxTest, AHelloWaitingForTheCoreIsASignOfLifeToo) {
  FakeClock clock;
  AgentInbox inbox(&clock, 10);
  clock.Advance(1000);
  inbox.NoteHeard("a");
  EXPECT_EQ(inbox.HeardMono("a"), clock.MonotonicMillis());
  EXPECT_EQ(inbox.Waiting(), 0u) << "nothing is queued for it";
}

TEST(AgentInboxTest, StopReturnsWhatWaitsAndRefusesMore) {
  FakeClock clock;
  AgentInbox inbox(&clock, 10);
  ASSERT_TRUE(inbox.Post(Heartbeat("a", 1)).ok());
  ASSERT_TRUE(inbox.Post(Heartbeat("a", 2)).ok());
  (void)inbox.Take(1);
  auto left = inbox.Stop();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(std::get<proto::Heartbeat>(left[0].message).seq, 2);
  EXPECT_FALSE(inbox.Wait()) << "a stopped inbox never blocks";
  EXPECT_EQ(inbox.Post(Heartbeat("a", 3)).code(), StatusCode::kUnavailable);
}

TEST(AgentInboxTest, ALongQueueIsCompactedAsItIsTaken) {
  FakeClock clock;
  AgentInbox inbox(&clock, 1'000'000);
  for (int i = 0; i < 5000; ++i) ASSERT_TRUE(inbox.Post(Heartbeat("a", i)).ok());
  int64_t expect = 0;
  while (inbox.Waiting() > 0) {
    for (const auto& e : inbox.Take(256)) {
      EXPECT_EQ(std::get<proto::Heartbeat>(e.message).seq, expect++);
    }
    // Posting between takes (as agents do) keeps the order.
    if (expect == 2560) {
      ASSERT_TRUE(inbox.Post(Heartbeat("a", 5000)).ok());
    }
  }
  EXPECT_EQ(expect, 5001);
}

}  // namespace
}  // namespace sluice::server
