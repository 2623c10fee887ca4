#include "agent/lease_book.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(LeaseBookTest, ALeaseCountsFromWhenTheHeartbeatWasSentNotWhenTheReplyCame) {
  LeaseBook book;
  book.SetLeaseLength(4000);
  book.Granted("a", 1000);
  EXPECT_EQ(book.Until("a"), 5000);
  book.Sent(1, 2000);
  // The reply is slow: it arrives at 3900, but the lease runs from 2000.
  auto out = book.Received(1, 4000, {"a"}, {"a"});
  EXPECT_THAT(out.renewed, ElementsAre("a"));
  EXPECT_THAT(out.not_ours, IsEmpty());
  EXPECT_EQ(book.Until("a"), 6000);
  EXPECT_FALSE(book.Expired("a", 5999));
  EXPECT_TRUE(book.Expired("a", 6000));
}

TEST(LeaseBookTest, AnAttemptTheServerNoLongerListsIsNotOursAndKeepsItsOldLease) {
  LeaseBook book;
  book.SetLeaseLength(4000);
  book.Granted("a", 0);
  book.Granted("b", 0);
  book.Sent(7, 1000);
  auto out = book.Received(7, 4000, {"a"}, {"a", "b"});
  EXPECT_THAT(out.renewed, ElementsAre("a"));
  EXPECT_THAT(out.not_ours, ElementsAre("b"));
  EXPECT_EQ(book.Until("b"), 4000);
}

TEST(LeaseBookTest, RepliesToUnknownOrOlderHeartbeatsRenewNothing) {
  LeaseBook book;
  book.SetLeaseLength(4000);
  book.Granted("a", 0);
  // Forged or stale: no heartbeat 99 was sent.
  auto forged = book.Received(99, 1000000, {"a"}, {"a"});
  EXPECT_THAT(forged.renewed, IsEmpty());
  EXPECT_THAT(forged.not_ours, IsEmpty());
  EXPECT_EQ(book.Until("a"), 4000);
  book.Sent(1, 1000);
  book.Sent(2, 2000);
  EXPECT_THAT(book.Received(2, 4000, {"a"}, {"a"}).renewed, ElementsAre("a"));
  EXPECT_EQ(book.Until("a"), 6000);
  // The reply to heartbeat 1 arrives after 2's: it is forgotten and cannot shorten the lease.
  EXPECT_THAT(book.Received(1, 4000, {"a"}, {"a"}).renewed, IsEmpty());
  EXPECT_EQ(book.Until("a"), 6000);
}

TEST(LeaseBookTest, WithoutALeaseFromTheServerNothingExpires) {
  LeaseBook book;  // an older server never says how long a lease is
  book.Granted("a", 0);
  EXPECT_FALSE(book.Expired("a", LeaseBook::kForever - 1));
  book.Sent(1, 0);
  EXPECT_THAT(book.Received(1, 0, {"a"}, {"a"}).renewed, IsEmpty());
  EXPECT_EQ(book.Until("unknown"), LeaseBook::kForever);
}

TEST(LeaseBookTest, OnlyTheNewestHeartbeatsAreRemembered) {
  LeaseBook book;
  book.SetLeaseLength(1000);
  book.Granted("a", 0);
  for (int64_t seq = 1; seq <= 200; ++seq) book.Sent(seq, seq);
  EXPECT_THAT(book.Received(1, 1000, {"a"}, {"a"}).renewed, IsEmpty());
  EXPECT_THAT(book.Received(200, 1000, {"a"}, {"a"}).renewed, ElementsAre("a"));
  EXPECT_EQ(book.Until("a"), 1200);
}

}  // namespace
}  // namespace sluice
