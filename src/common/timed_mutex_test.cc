#include "common/timed_mutex.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/clock.h"

namespace sluice {
namespace {

TEST(DurationHistogramTest, BucketsByUpperBoundAndSums) {
  DurationHistogram h;
  h.Add(100);         // on a bound: that bucket (le is inclusive)
  h.Add(101);         // just past it: the next
  h.Add(30'000);      // 25 ms < 30 ms <= 50 ms
  h.Add(60'000'000);  // past the last bound: +Inf
  h.Add(-5);          // a clock that stepped back: no time
  const auto s = h.Read();
  EXPECT_EQ(s.buckets[0], 2u);  // 100 and the negative one
  EXPECT_EQ(s.buckets[1], 1u);
  EXPECT_EQ(s.buckets[5], 1u);
  EXPECT_EQ(s.buckets[DurationHistogram::kBuckets - 1], 1u);
  EXPECT_EQ(s.count(), 5u);
  EXPECT_EQ(s.sum_micros, 100 + 101 + 30'000 + 60'000'000);
}

TEST(DurationHistogramTest, PrometheusTextIsCumulativeInSeconds) {
  DurationHistogram h;
  h.Add(50);
  h.Add(2'000);
  h.Add(2'000);
  const std::string text = PrometheusHistogram("x_seconds", "What x took.", {{"", h.Read()}});
  EXPECT_NE(text.find("# HELP x_seconds What x took.\n# TYPE x_seconds histogram\n"),
            std::string::npos);
  EXPECT_NE(text.find("x_seconds_bucket{le=\"0.0001\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_bucket{le=\"0.001\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_bucket{le=\"0.005\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_bucket{le=\"15\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_sum 0.00405\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_count 3\n"), std::string::npos) << text;
}

TEST(DurationHistogramTest, PrometheusTextLabelsEachSeries) {
  DurationHistogram a, b;
  a.Add(50);
  b.Add(20'000);
  b.Add(20'000);
  const std::string text = PrometheusHistogram(
      "y_seconds", "Y.", {{"holder=\"a\"", a.Read()}, {"holder=\"b\"", b.Read()}});
  EXPECT_EQ(text.find("# TYPE y_seconds histogram\n"), text.rfind("# TYPE"));  // said once
  EXPECT_NE(text.find("y_seconds_bucket{holder=\"a\",le=\"0.0001\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("y_seconds_bucket{holder=\"b\",le=\"0.01\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("y_seconds_bucket{holder=\"b\",le=\"0.025\"} 2\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("y_seconds_count{holder=\"b\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("y_seconds_sum{holder=\"a\"} 5e-05\n"), std::string::npos) << text;
}

TEST(TimedMutexTest, HoldsAreKeptPerHolder) {
  FakeClock clock;
  TimedMutex mu(&clock, {"other", "pass"});
  {
    std::lock_guard<TimedMutex> lock(mu);
    mu.HoldingFor(1);
    clock.Advance(7);
  }
  {
    std::lock_guard<TimedMutex> lock(mu);  // not named: the first holder
    clock.Advance(1);
  }
  {
    std::lock_guard<TimedMutex> lock(mu);
    mu.HoldingFor(9);  // no such holder: the first
  }
  EXPECT_EQ(mu.holders(), (std::vector<std::string>{"other", "pass"}));
  EXPECT_EQ(mu.Holds(1).count(), 1u);
  EXPECT_EQ(mu.Holds(1).sum_micros, 7'000);
  EXPECT_EQ(mu.Holds(0).count(), 2u);
  EXPECT_EQ(mu.Holds(0).sum_micros, 1'000);
  EXPECT_EQ(mu.Holds().count(), 3u);
  EXPECT_EQ(mu.Holds().sum_micros, 8'000);
}

TEST(TimedMutexTest, MeasuresHoldsOnTheClock) {
  FakeClock clock;
  TimedMutex mu(&clock);
  {
    std::lock_guard<TimedMutex> lock(mu);
    clock.Advance(30);  // a 30 ms commit under the lock
  }
  {
    std::lock_guard<TimedMutex> lock(mu);  // a quick one
  }
  const auto holds = mu.Holds();
  EXPECT_EQ(holds.count(), 2u);
  EXPECT_EQ(holds.sum_micros, 30'000);
  EXPECT_EQ(holds.buckets[0], 1u);  // the quick one
  EXPECT_EQ(holds.buckets[5], 1u);  // 25-50 ms
  const auto waits = mu.Waits();
  EXPECT_EQ(waits.count(), 2u);  // uncontended: waited no time on the fake clock
  EXPECT_EQ(waits.sum_micros, 0);
}

TEST(TimedMutexTest, AWaiterIsMeasuredFromItsAskToItsTurn) {
  FakeClock clock;
  TimedMutex mu(&clock);
  std::unique_lock<TimedMutex> held(mu);
  const int64_t reads = clock.micros_reads();
  std::thread waiter([&] { std::lock_guard<TimedMutex> lock(mu); });
  // The waiter's lock() reads the clock once, then blocks: from here it is waiting.
  while (clock.micros_reads() == reads) std::this_thread::yield();
  clock.Advance(40);
  held.unlock();
  waiter.join();
  const auto holds = mu.Holds();
  EXPECT_EQ(holds.count(), 2u);
  EXPECT_EQ(holds.sum_micros, 40'000);  // the holder's 40 ms; the waiter's own hold took none
  const auto waits = mu.Waits();
  EXPECT_EQ(waits.count(), 2u);
  EXPECT_EQ(waits.sum_micros, 40'000);  // asked before the clock moved, let in after
}

TEST(TimedMutexTest, TryLockRecordsAHoldButNoWait) {
  FakeClock clock;
  TimedMutex mu(&clock);
  ASSERT_TRUE(mu.try_lock());
  clock.Advance(2);
  std::thread other([&] { EXPECT_FALSE(mu.try_lock()); });  // held: refused, nothing recorded
  other.join();
  mu.unlock();
  EXPECT_EQ(mu.Waits().count(), 0u);
  EXPECT_EQ(mu.Holds().count(), 1u);
  EXPECT_EQ(mu.Holds().sum_micros, 2'000);
}

TEST(TimedMutexTest, WorksWithAConditionVariable) {
  FakeClock clock;
  TimedMutex mu(&clock);
  std::condition_variable_any cv;
  bool ready = false;
  std::thread t([&] {
    std::lock_guard<TimedMutex> lock(mu);
    ready = true;
    cv.notify_one();
  });
  {
    std::unique_lock<TimedMutex> lock(mu);
    cv.wait(lock, [&] { return ready; });
  }
  t.join();
  // Each side's stretches under the lock are holds; the wait released it in between.
  EXPECT_GE(mu.Holds().count(), 2u);
  EXPECT_EQ(mu.Holds().count(), mu.Waits().count());
}

}  // namespace
}  // namespace sluice
