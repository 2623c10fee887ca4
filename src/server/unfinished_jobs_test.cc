#include "server/unfinished_jobs.h"

#include <gtest/gtest.h>

namespace sluice::server {
namespace {

TEST(UnfinishedJobsTest, CountsEachJobOnceUntilItFinishes) {
  UnfinishedJobs u;
  u.Set("j1", "alice", true);
  u.Set("j2", "alice", true);
  u.Set("j3", "bob", true);
  u.Set("j1", "alice", true);  // said again (a state change between two unfinished states)
  EXPECT_EQ(u.Of("alice"), 2);
  EXPECT_EQ(u.Of("bob"), 1);
  EXPECT_EQ(u.Of("carol"), 0);
  EXPECT_EQ(u.size(), 3u);

  u.Set("j1", "alice", false);  // finished
  u.Set("j1", "alice", false);  // and deleted: nothing more to drop
  EXPECT_EQ(u.Of("alice"), 1);
  u.Set("j3", "bob", false);
  EXPECT_EQ(u.Of("bob"), 0);
  // An owner with nothing unfinished is not kept.
  EXPECT_EQ(u.ByOwner().count("bob"), 0u);
  EXPECT_EQ(u.ByOwner().at("alice"), 1);
  EXPECT_EQ(u.size(), 1u);
}

TEST(UnfinishedJobsTest, AJobNeverCountedIsNoOnesAndAChangedOwnerMovesTheCount) {
  UnfinishedJobs u;
  u.Set("ghost", "alice", false);
  EXPECT_EQ(u.Of("alice"), 0);
  EXPECT_TRUE(u.ByOwner().empty());
  u.Set("j", "alice", true);
  u.Set("j", "", true);  // the admin's now (owners do not change; the count must not drift)
  EXPECT_EQ(u.Of("alice"), 0);
  EXPECT_EQ(u.Of(""), 1);
  EXPECT_EQ(u.size(), 1u);
}

}  // namespace
}  // namespace sluice::server
