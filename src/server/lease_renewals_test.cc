// LeaseRenewals alone (the core's metering up to a lease's end: core_billing_test.cc).
#include "server/lease_renewals.h"

#include <gtest/gtest.h>

namespace sluice::server {
namespace {

// Wall and monotonic time apart, so a wall clock step can be told from elapsed time.
class TwoClocks final : public Clock {
 public:
  int64_t wall = 1'800'000'000'000;
  int64_t mono = 5'000;
  int64_t NowMillis() const override { return wall; }
  int64_t MonotonicMillis() const override { return mono; }
};

TEST(LeaseRenewalsTest, ALeaseEndsItsLengthAfterTheLastRenewalInWallTime) {
  TwoClocks clock;
  LeaseRenewals leases(&clock, 10'000);
  EXPECT_EQ(leases.End("node-1", 42), 42);  // never renewed since the start: the fallback

  leases.Renewed("node-1");
  EXPECT_EQ(leases.End("node-1", 42), clock.wall + 10'000);
  // 4 s later, not renewed: the same end.
  clock.wall += 4'000;
  clock.mono += 4'000;
  EXPECT_EQ(leases.End("node-1", 42), clock.wall - 4'000 + 10'000);
  // A renewal moves it; another node's does not.
  leases.Renewed("node-1");
  leases.Renewed("node-2");
  clock.wall += 1'000;
  clock.mono += 1'000;
  EXPECT_EQ(leases.End("node-1", 42), clock.wall - 1'000 + 10'000);

  // The wall clock steps back an hour: the lease still ends 9 s from now, not in an hour.
  clock.wall -= 3'600'000;
  EXPECT_EQ(leases.End("node-1", 42), clock.wall + 9'000);
  EXPECT_EQ(leases.End("node-3", 7), 7);
}

}  // namespace
}  // namespace sluice::server
