#include "server/refusal_limiter.h"

#include <gtest/gtest.h>

namespace sluice::server {
namespace {

TEST(RefusalLimiterTest, BurstThenRefillAtTheSustainedRate) {
  FakeClock clock;
  RefusalLimiter limiter(&clock, {.per_second = 2, .burst = 5, .max_addresses = 10});
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(limiter.Allow("10.0.0.1:1000")) << i;
  EXPECT_FALSE(limiter.Allow("10.0.0.1:1001"));  // another port, same address
  EXPECT_EQ(limiter.limited(), 1u);
  clock.Advance(500);  // one token back at 2/s
  EXPECT_TRUE(limiter.Allow("10.0.0.1:1002"));
  EXPECT_FALSE(limiter.Allow("10.0.0.1:1003"));
  EXPECT_EQ(limiter.limited(), 2u);
}

TEST(RefusalLimiterTest, AddressesAreLimitedSeparately) {
  FakeClock clock;
  RefusalLimiter limiter(&clock, {.per_second = 1, .burst = 1, .max_addresses = 10});
  EXPECT_TRUE(limiter.Allow("127.0.0.1:1"));
  EXPECT_FALSE(limiter.Allow("127.0.0.1:2"));
  EXPECT_TRUE(limiter.Allow("127.0.0.2:1"));
  EXPECT_TRUE(limiter.Allow("[::1]:80"));
  EXPECT_FALSE(limiter.Allow("[::1]:81"));
}

TEST(RefusalLimiterTest, ForgetsTheLeastRecentAddressPastItsBound) {
  FakeClock clock;
  RefusalLimiter limiter(&clock, {.per_second = 0, .burst = 1, .max_addresses = 2});
  EXPECT_TRUE(limiter.Allow("a:1"));
  EXPECT_TRUE(limiter.Allow("b:1"));
  EXPECT_TRUE(limiter.Allow("c:1"));  // forgets a
  EXPECT_FALSE(limiter.Allow("c:2"));
  EXPECT_TRUE(limiter.Allow("a:2"));  // a starts afresh (and b is forgotten)
}

TEST(RefusalLimiterTest, HostOf) {
  EXPECT_EQ(RefusalLimiter::HostOf("127.0.0.1:5555"), "127.0.0.1");
  EXPECT_EQ(RefusalLimiter::HostOf("[::1]:5555"), "::1");
  EXPECT_EQ(RefusalLimiter::HostOf("::1"), "::1");
  EXPECT_EQ(RefusalLimiter::HostOf("host"), "host");
}

}  // namespace
}  // namespace sluice::server
