#include "common/money.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(MoneyTest, AmountsToTheCentAndHourlyPricesToFourDigits) {
  EXPECT_EQ(Dollars(2.5), "$2.50");
  EXPECT_EQ(Dollars(0.004), "$0.00");
  EXPECT_EQ(DollarsPerHour(2.5), "$2.5/h");
  EXPECT_EQ(DollarsPerHour(0.04251), "$0.04251/h");
  EXPECT_EQ(DollarsPerHour(12.3456), "$12.35/h");
}

}  // namespace
}  // namespace sluice
