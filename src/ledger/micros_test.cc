#include "ledger/micros.h"

#include <gtest/gtest.h>

namespace sluice::ledger {
namespace {

TEST(Micros, ParsesDollarsExactly) {
  EXPECT_EQ(*ParseDollars("100", "amount"), 100'000'000);
  EXPECT_EQ(*ParseDollars("0.25", "amount"), 250'000);
  EXPECT_EQ(*ParseDollars("$12.000001", "amount"), 12'000'001);
  EXPECT_EQ(*ParseDollars("-3.5", "amount"), -3'500'000);
  EXPECT_EQ(*ParseDollars(".5", "amount"), 500'000);
  // 0.1 has no exact binary form; parsed as text it is exactly 100,000 micro-dollars.
  EXPECT_EQ(*ParseDollars("0.1", "amount"), 100'000);
}

TEST(Micros, RefusesWhatIsNotAnAmountNamingTheField) {
  for (const char* bad :
       {"", "-", "$", "1.2.3", "12abc", "1e3", "0.0000001", "1000000000001", "."}) {
    auto r = ParseDollars(bad, "credit.amount");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("credit.amount"), std::string::npos) << bad;
  }
}

TEST(Micros, CreditLimitIsPositiveOrUnlimited) {
  EXPECT_EQ(*ParseCreditLimit("unlimited", "limit"), kUnlimited);
  EXPECT_EQ(*ParseCreditLimit("50", "limit"), 50'000'000);
  EXPECT_EQ(*ParseCreditLimit("0", "limit"), 0);
  EXPECT_FALSE(ParseCreditLimit("-5", "limit").ok());
}

TEST(Micros, FormatsCentsAndOnlyTheDigitsThatCount) {
  EXPECT_EQ(FormatMicros(60'000), "$0.06");
  EXPECT_EQ(FormatMicros(12'000'000), "$12.00");
  EXPECT_EQ(FormatMicros(-1'234'567), "-$1.234567");
  EXPECT_EQ(FormatMicros(1), "$0.000001");
  EXPECT_EQ(FormatMicros(0), "$0.00");
  EXPECT_EQ(FormatCreditLimit(kUnlimited), "unlimited");
}

TEST(Micros, LocksAnHourlyPriceToTheMicroDollar) {
  EXPECT_EQ(PricePerHourMicros(36.0), 36'000'000);
  EXPECT_EQ(PricePerHourMicros(0.0425), 42'500);
  EXPECT_EQ(PricePerHourMicros(-1), 0);
}

}  // namespace
}  // namespace sluice::ledger
