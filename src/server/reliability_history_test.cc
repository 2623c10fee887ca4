// The reliability history's summary (server/reliability_history.h): what the core scores a node
// on, computed off its lock.
#include "server/reliability_history.h"

#include <gtest/gtest.h>

namespace sluice::server {
namespace {

store::AttemptRecord Attempt(const std::string& node, store::AttemptState state, int64_t started,
                             std::string cause = "") {
  store::AttemptRecord a;
  a.node_id = node;
  a.state = state;
  a.started_ms = started;
  a.cause = std::move(cause);
  return a;
}

TEST(ReliabilityHistoryTest, SpansAreClippedToTheWindowAndMergedPerNode) {
  const std::vector<store::UptimeSpan> uptime = {
      {"b", 1500, 1800},                     // inside [1000, 2000]
      {"a", 500, 1200},                      // begins before the window: 1000-1200
      {"a", 1100, 1300},                     // overlaps the one before: 1000-1300 together
      {"a", 1400, 1500}, {"a", 1400, 1450},  // inside the one before
      {"a", 1900, 2500},                     // ends after the window: 1900-2000
      {"c", 100, 900},                       // wholly before the window: not there
  };
  const ReliabilityHistory h = SummarizeHistory(1000, 2000, uptime, {});
  EXPECT_EQ(h.now, 2000);
  EXPECT_EQ(h.since, 1000);
  ASSERT_EQ(h.nodes.count("a"), 1u);
  const NodeHistory& a = h.nodes.at("a");
  EXPECT_EQ(a.online,
            (std::vector<std::pair<int64_t, int64_t>>{{1000, 1300}, {1400, 1500}, {1900, 2000}}));
  EXPECT_EQ(a.online_ms, 300 + 100 + 100);
  EXPECT_EQ(h.nodes.at("b").online_ms, 300);
  EXPECT_EQ(h.nodes.count("c"), 0u);
}

TEST(ReliabilityHistoryTest, AnOpenSpanCountsOnceWhereTheStoredOnesCoverIt) {
  // The open span as last stored (extended to 1600), and a closed span before it.
  const ReliabilityHistory h =
      SummarizeHistory(1000, 2000, {{"a", 1100, 1200}, {"a", 1300, 1600}}, {});
  const NodeHistory* a = &h.nodes.at("a");
  EXPECT_EQ(OnlineMs(h, a, 0), 100 + 300) << "offline: the stored spans only";
  EXPECT_EQ(OnlineMs(h, a, 1300), 100 + 700) << "open since 1300: 1300-2000, once";
  EXPECT_EQ(OnlineMs(h, a, 1150), 900) << "open since 1150: 1100-2000 with the first stored span";
  EXPECT_EQ(OnlineMs(h, a, 500), 1000) << "open since before the window: all of it";
  EXPECT_EQ(OnlineMs(h, nullptr, 1500), 500) << "no stored history: the open span alone";
  EXPECT_EQ(OnlineMs(h, nullptr, 2500), 0) << "an open span that begins after the window's end";
}

TEST(ReliabilityHistoryTest, AttemptsCountStartsFailuresAndPreemptionsNotMoneyStops) {
  using S = store::AttemptState;
  const std::vector<store::AttemptRecord> attempts = {
      Attempt("a", S::kSucceeded, 1100),
      Attempt("a", S::kFailed, 0),     // never started: a start failure
      Attempt("a", S::kLost, 0),       // the same
      Attempt("a", S::kFailed, 1200),  // the job's own failure, once started: neither
      Attempt("a", S::kPreempted, 1300),
      Attempt("a", S::kLost, 1400),
      Attempt("a", S::kPreempted, 1500, "preempted: max_total_cost reached: $1 of $1"),
      Attempt("a", S::kPreempted, 1600, "preempting: credit limit reached"),
      Attempt("b", S::kSucceeded, 1700),
  };
  const ReliabilityHistory h = SummarizeHistory(1000, 2000, {}, attempts);
  const NodeHistory& a = h.nodes.at("a");
  EXPECT_EQ(a.starts, 8);
  EXPECT_EQ(a.start_failures, 2);
  EXPECT_EQ(a.preemptions, 2) << "stops by the job's budget or credit are not the node's doing";
  EXPECT_EQ(a.online_ms, 0);
  EXPECT_EQ(h.nodes.at("b").starts, 1);
}

}  // namespace
}  // namespace sluice::server
