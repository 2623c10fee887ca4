#include "server/finished_jobs.h"

#include <gtest/gtest.h>

namespace sluice::server {
namespace {

using store::JobState;

store::JobRecord Job(const std::string& id, JobState state) {
  store::JobRecord j;
  j.id = id;
  j.state = state;
  j.owner = "acct-" + id;
  j.team = "team-x";
  j.workdir_blob = std::string(64, 'a');
  j.checkpoint = std::string(64, 'c');
  j.reason = "a reason that is not kept";
  return j;
}

TEST(FinishedJobsTest, KeepsOwnerBlobsAndStateOfEachJob) {
  FinishedJobs f;
  f.Add(Job("job-1", JobState::kSucceeded));
  f.Add(Job("job-2", JobState::kFailed));
  ASSERT_NE(f.Find("job-1"), nullptr);
  EXPECT_EQ(f.Find("job-1")->state, JobState::kSucceeded);
  EXPECT_EQ(f.Find("job-1")->owner, "acct-job-1");
  EXPECT_EQ(f.Find("job-1")->team, "team-x");
  EXPECT_EQ(f.Find("job-1")->workdir_blob, std::string(64, 'a'));
  EXPECT_EQ(f.Find("job-1")->checkpoint, std::string(64, 'c'));
  EXPECT_EQ(f.Find("job-3"), nullptr);
  EXPECT_EQ(f.size(), 2u);
}

TEST(FinishedJobsTest, CountsByStateFollowAddsReplacementsAndErasures) {
  FinishedJobs f;
  f.Add(Job("job-1", JobState::kSucceeded));
  f.Add(Job("job-2", JobState::kSucceeded));
  f.Add(Job("job-3", JobState::kLost));
  EXPECT_EQ(f.CountByState(),
            (std::map<JobState, int64_t>{{JobState::kSucceeded, 2}, {JobState::kLost, 1}}));
  f.Add(Job("job-2", JobState::kCancelled));  // the same job again: replaced, not counted twice
  EXPECT_EQ(f.CountByState(),
            (std::map<JobState, int64_t>{
                {JobState::kSucceeded, 1}, {JobState::kCancelled, 1}, {JobState::kLost, 1}}));
  EXPECT_TRUE(f.Erase("job-3"));
  EXPECT_FALSE(f.Erase("job-3"));
  EXPECT_EQ(f.CountByState(),
            (std::map<JobState, int64_t>{{JobState::kSucceeded, 1}, {JobState::kCancelled, 1}}));
  EXPECT_EQ(f.size(), 2u);
}

}  // namespace
}  // namespace sluice::server
