#include "server/live_job_index.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace sluice::server {
namespace {

using store::JobState;

store::JobRecord Job(const std::string& id, const std::string& owner, const std::string& team = "",
                     int64_t submitted_ms = 0, JobState state = JobState::kQueued) {
  store::JobRecord j;
  j.id = id;
  j.owner = owner;
  j.team = team;
  j.submitted_ms = submitted_ms;
  j.state = state;
  return j;
}

std::vector<std::string> Listed(const LiveJobIndex::Ids* ids) {
  if (ids == nullptr) return {};
  std::vector<std::string> out;
  for (const auto& key : *ids) out.emplace_back(key.id);
  return out;
}

TEST(LiveJobIndexTest, CountsEachJobOnceUntilItFinishes) {
  LiveJobIndex u;
  u.Update(Job("j1", "alice"));
  u.Update(Job("j2", "alice"));
  u.Update(Job("j3", "bob"));
  u.Update(Job("j1", "alice", "", 0, JobState::kRunning));  // a change between unfinished states
  EXPECT_EQ(u.Of("alice"), 2);
  EXPECT_EQ(u.Of("bob"), 1);
  EXPECT_EQ(u.Of("carol"), 0);
  EXPECT_EQ(u.size(), 3u);

  u.Update(Job("j1", "alice", "", 0, JobState::kSucceeded));  // finished
  u.Drop("j1");                                               // and retired: nothing to drop
  EXPECT_EQ(u.Of("alice"), 1);
  u.Drop("j3");  // deleted
  EXPECT_EQ(u.Of("bob"), 0);
  // An owner with nothing unfinished is not kept.
  EXPECT_EQ(u.CountByOwner().count("bob"), 0u);
  EXPECT_EQ(u.CountByOwner().at("alice"), 1);
  EXPECT_EQ(u.OwnedBy("bob"), nullptr);
  EXPECT_EQ(Listed(&u.All()), std::vector<std::string>{"j2"});
  EXPECT_EQ(u.size(), 1u);
}

TEST(LiveJobIndexTest, AJobNeverKeptIsNoOnesAndAChangedOwnerMovesIt) {
  LiveJobIndex u;
  u.Update(Job("ghost", "alice", "", 0, JobState::kCancelled));
  u.Drop("never");
  EXPECT_EQ(u.Of("alice"), 0);
  EXPECT_TRUE(u.CountByOwner().empty());
  EXPECT_TRUE(u.All().empty());
  u.Update(Job("j", "alice", "ml"));
  u.Update(Job("j", "", "ops"));  // the admin's now (owners do not change; nothing must drift)
  EXPECT_EQ(u.Of("alice"), 0);
  EXPECT_EQ(u.Of(""), 1);
  EXPECT_EQ(u.SharedWith("ml"), nullptr);
  EXPECT_EQ(Listed(u.SharedWith("ops")), std::vector<std::string>{"j"});
  EXPECT_EQ(Listed(&u.All()), std::vector<std::string>{"j"});
  EXPECT_EQ(u.size(), 1u);
}

// The map's jobs by state, finished ones that wait in it included, as the sluice_jobs gauge
// reads them.
TEST(LiveJobIndexTest, CountsTheMapsJobsByStateUntilTheyLeaveIt) {
  LiveJobIndex u;
  using Counts = std::map<JobState, int64_t>;
  u.Update(Job("j1", "alice"));
  u.Update(Job("j2", "alice"));
  EXPECT_EQ(u.CountByState(), (Counts{{JobState::kQueued, 2}}));
  u.Update(Job("j1", "alice", "", 0, JobState::kRunning));
  u.Update(Job("j1", "alice", "", 0, JobState::kRunning));  // said twice, counted once
  EXPECT_EQ(u.CountByState(), (Counts{{JobState::kQueued, 1}, {JobState::kRunning, 1}}));
  u.Update(Job("j1", "alice", "", 0, JobState::kCancelled));  // finished, still in the map
  EXPECT_EQ(u.CountByState(), (Counts{{JobState::kQueued, 1}, {JobState::kCancelled, 1}}));
  EXPECT_EQ(u.Of("alice"), 1);
  u.Drop("j1");  // retired
  u.Drop("j2");  // deleted
  EXPECT_TRUE(u.CountByState().empty());
  EXPECT_EQ(u.size(), 0u);
}

// Each owner's and each team's unfinished jobs, and all of them, newest first (submission time,
// then the later id), as the job list reads them.
TEST(LiveJobIndexTest, ListsEachOwnersAndEachTeamsUnfinishedJobsNewestFirst) {
  LiveJobIndex u;
  u.Update(Job("j1", "alice", "ml", 100));
  u.Update(Job("j2", "bob", "ml", 300));
  u.Update(Job("j3", "bob", "", 200));
  u.Update(Job("j4", "alice", "", 300));  // j2's time: the later id first
  EXPECT_EQ(Listed(u.OwnedBy("alice")), (std::vector<std::string>{"j4", "j1"}));
  EXPECT_EQ(Listed(u.OwnedBy("bob")), (std::vector<std::string>{"j2", "j3"}));
  EXPECT_EQ(Listed(u.SharedWith("ml")), (std::vector<std::string>{"j2", "j1"}));
  EXPECT_EQ(Listed(&u.All()), (std::vector<std::string>{"j4", "j2", "j3", "j1"}));
  EXPECT_EQ(u.SharedWith(""), nullptr) << "no job is shared with the empty team";
  u.Update(Job("j2", "bob", "ml", 300, JobState::kFailed));
  EXPECT_EQ(Listed(u.SharedWith("ml")), std::vector<std::string>{"j1"});
  EXPECT_EQ(Listed(u.OwnedBy("bob")), std::vector<std::string>{"j3"});
  u.Drop("j1");
  EXPECT_EQ(u.SharedWith("ml"), nullptr);
  EXPECT_EQ(u.ToJson(), (Json{{"by_owner", {{"alice", {"j4"}}, {"bob", {"j3"}}}},
                              {"by_team", Json::object()},
                              {"by_state", {{"queued", 2}, {"failed", 1}}}}));
  // The views stay valid as other jobs come and go (they view the kept ids, not the callers').
  for (int i = 0; i < 1000; ++i) u.Update(Job("x" + std::to_string(i), "carol", "", 50));
  EXPECT_EQ(Listed(u.OwnedBy("alice")), std::vector<std::string>{"j4"});
  EXPECT_EQ(u.Of("carol"), 1000);
  EXPECT_EQ(u.All().size(), 1002u);
}

}  // namespace
}  // namespace sluice::server
