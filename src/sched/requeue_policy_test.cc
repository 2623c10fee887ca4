#include "sched/requeue_policy.h"

#include <gtest/gtest.h>

namespace sluice::sched {
namespace {

TEST(RequeuePolicyTest, LostOrPreemptedWorkRunsAgainAndAvoidsTheNodeForTheCooldown) {
  for (AttemptEnd end : {AttemptEnd::kLost, AttemptEnd::kPreempted}) {
    RequeueDecision d = AfterAttempt(end, false, 0, 3, 1000, 60000);
    EXPECT_TRUE(d.requeue);
    EXPECT_FALSE(d.exhausted);
    EXPECT_EQ(d.avoid_until, 61000);
  }
}

TEST(RequeuePolicyTest, TheJobsOwnEndingsAndCancelledJobsAreNeverRequeued) {
  for (AttemptEnd end : {AttemptEnd::kSucceeded, AttemptEnd::kFailed, AttemptEnd::kCancelled}) {
    RequeueDecision d = AfterAttempt(end, false, 0, 3, 0, 60000);
    EXPECT_FALSE(d.requeue);
    EXPECT_FALSE(d.exhausted);
  }
  RequeueDecision cancelled = AfterAttempt(AttemptEnd::kLost, true, 0, 3, 0, 60000);
  EXPECT_FALSE(cancelled.requeue);
  EXPECT_FALSE(cancelled.exhausted);
}

TEST(RequeuePolicyTest, RestartsRunOutAtMaxRestarts) {
  EXPECT_TRUE(AfterAttempt(AttemptEnd::kPreempted, false, 2, 3, 0, 0).requeue);
  RequeueDecision d = AfterAttempt(AttemptEnd::kPreempted, false, 3, 3, 0, 0);
  EXPECT_FALSE(d.requeue);
  EXPECT_TRUE(d.exhausted);
  EXPECT_TRUE(AfterAttempt(AttemptEnd::kLost, false, 0, 0, 0, 0).exhausted);
}

TEST(RequeuePolicyTest, FallbackComesAfterEnoughPreemptionsOrEnoughWaiting) {
  FallbackRule rule{true, 2, 600000};
  EXPECT_EQ(FallbackReason(rule, 1, 599999), "");
  EXPECT_EQ(FallbackReason(rule, 2, 0), "preempted 2 times (fallback_after_preemptions 2)");
  EXPECT_EQ(FallbackReason(rule, 0, 600000), "no interruptible capacity for 600s (fallback_after)");
  rule.applies = false;
  EXPECT_EQ(FallbackReason(rule, 9, 9999999), "");
}

}  // namespace
}  // namespace sluice::sched
