#include "store/records.h"

#include <gtest/gtest.h>

namespace sluice::store {
namespace {

TEST(RecordsTest, JobStateNamesRoundTrip) {
  for (JobState s :
       {JobState::kQueued, JobState::kStarting, JobState::kRunning, JobState::kSucceeded,
        JobState::kFailed, JobState::kCancelled, JobState::kLost, JobState::kBudgetExhausted}) {
    auto parsed = ParseJobState(Name(s));
    ASSERT_TRUE(parsed.ok()) << Name(s);
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_EQ(Name(JobState::kSucceeded), "succeeded");
}

TEST(RecordsTest, AttemptAndNodeStateNamesRoundTrip) {
  for (AttemptState s : {AttemptState::kStarting, AttemptState::kRunning, AttemptState::kSucceeded,
                         AttemptState::kFailed, AttemptState::kCancelled, AttemptState::kLost}) {
    auto parsed = ParseAttemptState(Name(s));
    ASSERT_TRUE(parsed.ok()) << Name(s);
    EXPECT_EQ(*parsed, s);
  }
  for (NodeState s : {NodeState::kOnline, NodeState::kOffline, NodeState::kLost}) {
    auto parsed = ParseNodeState(Name(s));
    ASSERT_TRUE(parsed.ok()) << Name(s);
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_EQ(Name(NodeState::kOffline), "offline");
}

TEST(RecordsTest, UnknownNamesAreRejectedWithTheChoices) {
  auto r = ParseJobState("Running");  // case matters: the store writes lowercase only
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("queued"), std::string::npos);
  EXPECT_FALSE(ParseAttemptState("queued").ok());  // attempts are never queued
  EXPECT_FALSE(ParseNodeState("").ok());
}

TEST(RecordsTest, TerminalStates) {
  EXPECT_FALSE(IsTerminal(JobState::kQueued));
  EXPECT_FALSE(IsTerminal(JobState::kStarting));
  EXPECT_FALSE(IsTerminal(JobState::kRunning));
  EXPECT_TRUE(IsTerminal(JobState::kSucceeded));
  EXPECT_TRUE(IsTerminal(JobState::kFailed));
  EXPECT_TRUE(IsTerminal(JobState::kCancelled));
  EXPECT_TRUE(IsTerminal(JobState::kLost));
  EXPECT_FALSE(IsTerminal(AttemptState::kStarting));
  EXPECT_FALSE(IsTerminal(AttemptState::kRunning));
  EXPECT_TRUE(IsTerminal(AttemptState::kSucceeded));
  EXPECT_TRUE(IsTerminal(AttemptState::kLost));
}

}  // namespace
}  // namespace sluice::store
