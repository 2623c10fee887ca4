// The core's lock times (docs/design-notes.md "Lock times"): a commit that is slow because the
// disk is slow shows in the lock's hold histogram, which /v1/metrics publishes, and a caller
// that waited behind it shows in the wait histogram.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "server/server_core.h"
#include "server/test_agent_link.h"
#include "server/test_failing_store.h"
#include "server/test_reports.h"
#include "store/sqlite_store.h"
#include "store/store_test_util.h"

namespace sluice::server {
namespace {

class CoreLockTimesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::OpenSqliteStore(dir_.path() + "/sluice.db");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    slow_ = std::make_unique<testing::FailingStore>(store_.get());
    core_ = std::make_unique<ServerCore>(slow_.get(), &clock_, CoreOptions{});
    ASSERT_TRUE(core_->Load().ok());
  }
  Result<std::string> Hello(const std::string& name) {
    return core_->AgentHello(std::make_shared<testing::RecordingLink>(), testing::CpuHello(name));
  }

  store::testing::ScratchDir dir_;  // destroyed last: after the core and the stores
  FakeClock clock_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<testing::FailingStore> slow_;
  std::unique_ptr<ServerCore> core_;
};

// The bucket a duration falls in (the histogram's upper bounds are inclusive).
size_t BucketOf(int64_t micros) {
  const auto& b = DurationHistogram::kBoundsMicros;
  return static_cast<size_t>(std::lower_bound(b.begin(), b.end(), micros) - b.begin());
}

TEST_F(CoreLockTimesTest, ASlowCommitShowsAsALongHold) {
  const auto before = core_->LockHolds();
  const size_t slow_bucket = BucketOf(30'000);
  slow_->on_write = [this](const store::WriteBatch&) { clock_.Advance(30); };  // a 30 ms disk
  ASSERT_TRUE(Hello("box").ok());  // registers the node: one commit under the lock
  const auto after = core_->LockHolds();
  EXPECT_GT(slow_->writes, 0);
  EXPECT_GE(after.buckets[slow_bucket], before.buckets[slow_bucket] + 1);
  EXPECT_GE(after.sum_micros - before.sum_micros, 30'000 * slow_->writes);
  // The disk is fast again: the next holds are short.
  slow_->on_write = nullptr;
  const auto fast_before = core_->LockHolds();
  ASSERT_TRUE(Hello("box2").ok());
  const auto fast_after = core_->LockHolds();
  EXPECT_GT(fast_after.count(), fast_before.count());
  EXPECT_EQ(fast_after.sum_micros, fast_before.sum_micros);  // no time passed on the clock
  EXPECT_EQ(fast_after.buckets[slow_bucket], fast_before.buckets[slow_bucket]);
}

// Holds are told apart by holder: a hello is a request's, the tick's are the tick's.
TEST_F(CoreLockTimesTest, HoldsAreKeptByHolder) {
  auto count = [this](const std::string& holder) {
    for (const auto& [name, snapshot] : core_->LockHoldsByHolder()) {
      if (name == holder) return snapshot.count();
    }
    ADD_FAILURE() << "no holder " << holder;
    return uint64_t{0};
  };
  const uint64_t requests = count("request"), ticks = count("tick");
  slow_->on_write = [this](const store::WriteBatch&) { clock_.Advance(30); };
  ASSERT_TRUE(Hello("box").ok());
  EXPECT_GT(count("request"), requests);
  EXPECT_EQ(count("tick"), ticks);
  core_->Tick();
  EXPECT_GT(count("tick"), ticks);
  EXPECT_EQ(count("placement"), 0u);  // no scheduler thread here
  uint64_t total = 0;
  for (const auto& [name, snapshot] : core_->LockHoldsByHolder()) total += snapshot.count();
  EXPECT_EQ(total, core_->LockHolds().count());
}

TEST_F(CoreLockTimesTest, ACallerBehindASlowCommitShowsAsALongWait) {
  // The first commit blocks inside the store, with the lock held, until a second caller has
  // asked for the lock; the clock then moves 40 ms before the commit returns.
  std::atomic<bool> in_write{false}, go{false};
  slow_->on_write = [&](const store::WriteBatch&) {
    if (in_write.exchange(true)) return;  // only the first write waits
    while (!go.load()) std::this_thread::yield();
    clock_.Advance(40);
  };
  std::thread first([&] { EXPECT_TRUE(Hello("box").ok()); });
  while (!in_write.load()) std::this_thread::yield();
  const auto waits_before = core_->LockWaits();
  const int64_t reads = clock_.micros_reads();
  std::thread second([&] { EXPECT_TRUE(Hello("box2").ok()); });
  // Its lock() reads the clock once, then blocks: from here it is waiting.
  while (clock_.micros_reads() == reads) std::this_thread::yield();
  go = true;
  first.join();
  second.join();
  const auto waits_after = core_->LockWaits();
  EXPECT_GE(waits_after.count(), waits_before.count() + 1);
  EXPECT_GE(waits_after.sum_micros - waits_before.sum_micros, 40'000);
  EXPECT_GE(waits_after.buckets[BucketOf(40'000)], waits_before.buckets[BucketOf(40'000)] + 1);
  EXPECT_GE(core_->LockHolds().buckets[BucketOf(40'000)], 1u);
}

}  // namespace
}  // namespace sluice::server
