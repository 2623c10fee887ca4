#include "server/time_ordered_ids.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace sluice::server {
namespace {

uint64_t Ordered(const std::string& id, size_t prefix) {
  return std::stoull(id.substr(prefix, 12), nullptr, 16);
}

TEST(TimeOrderedIdsTest, AnIdIsItsPrefixAndSixteenHexDigits) {
  FakeClock clock;
  TimeOrderedIds ids(&clock);
  const std::string id = ids.Next("job-");
  ASSERT_EQ(id.size(), 4u + 16u);
  EXPECT_EQ(id.substr(0, 4), "job-");
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef", 4), std::string::npos) << id;
  EXPECT_EQ(Ordered(id, 4), static_cast<uint64_t>(clock.NowMillis()) * 16);
}

// A burst within one millisecond: every id distinct, each sorting after the one before, and
// the burst runs ahead of the clock rather than repeat a value.
TEST(TimeOrderedIdsTest, IdsMadeInOrderSortInOrderEvenWithinOneMillisecond) {
  FakeClock clock;
  TimeOrderedIds ids(&clock);
  std::set<std::string> seen;
  std::string last;
  for (int i = 0; i < 10'000; ++i) {
    std::string id = ids.Next("att-");
    EXPECT_LT(last, id) << i;
    EXPECT_TRUE(seen.insert(id).second) << id;
    last = id;
  }
  EXPECT_EQ(Ordered(last, 4), static_cast<uint64_t>(clock.NowMillis()) * 16 + 9'999);
}

TEST(TimeOrderedIdsTest, TheClockMovesTheOrderedPartForwardButNeverBack) {
  FakeClock clock;
  TimeOrderedIds ids(&clock);
  const uint64_t first = Ordered(ids.Next("job-"), 4);
  clock.Advance(1000);
  const uint64_t later = Ordered(ids.Next("job-"), 4);
  EXPECT_EQ(later, first + 1000 * 16);  // from the clock, not one past the last id
  clock.Advance(-5000);                 // the clock steps back
  const uint64_t after_step = Ordered(ids.Next("job-"), 4);
  EXPECT_EQ(after_step, later + 1);
}

}  // namespace
}  // namespace sluice::server
