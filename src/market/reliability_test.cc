#include "market/reliability.h"

#include <gtest/gtest.h>

namespace sluice::market {
namespace {

TEST(ReliabilityTest, NewNodeWithFullUptimeScoresOne) {
  Reliability r = ComputeReliability({.window_ms = 1000, .online_ms = 1000});
  EXPECT_DOUBLE_EQ(r.score, 1.0);
}

TEST(ReliabilityTest, FollowsThePublishedFormula) {
  // U = 0.9, S = 9, F = 1, P = 2: 0.9 × 9/10 × 8/10.
  Reliability r = ComputeReliability(
      {.window_ms = 1000, .online_ms = 900, .starts = 9, .start_failures = 1, .preemptions = 2});
  EXPECT_DOUBLE_EQ(r.uptime, 0.9);
  EXPECT_DOUBLE_EQ(r.start_success, 0.9);
  EXPECT_DOUBLE_EQ(r.preemption_free, 0.8);
  EXPECT_NEAR(r.score, 0.648, 1e-12);
  EXPECT_EQ(Explain(r).substr(0, 4), "0.65");
}

TEST(ReliabilityTest, OneFailureWeighsLessWithMoreHistory) {
  double young =
      ComputeReliability({.window_ms = 1, .online_ms = 1, .starts = 1, .start_failures = 1}).score;
  double old =
      ComputeReliability({.window_ms = 1, .online_ms = 1, .starts = 100, .start_failures = 1})
          .score;
  EXPECT_LT(young, old);
  EXPECT_DOUBLE_EQ(young, 0.5);
}

TEST(ReliabilityTest, InputsOutOfRangeAreClamped) {
  Reliability r = ComputeReliability({.window_ms = 100,
                                      .online_ms = 500,  // more online than observed
                                      .starts = 2,
                                      .start_failures = 5,
                                      .preemptions = -1});
  EXPECT_DOUBLE_EQ(r.uptime, 1.0);
  EXPECT_DOUBLE_EQ(r.start_success, 1.0 / 3);
  EXPECT_DOUBLE_EQ(r.preemption_free, 1.0);
  EXPECT_DOUBLE_EQ(ComputeReliability({.window_ms = 0}).uptime, 1.0);
}

}  // namespace
}  // namespace sluice::market
