#include "cli/table.h"

#include <gtest/gtest.h>

#include <sstream>

namespace sluice::cli {

TEST(TableTest, PadsColumnsToWidestCell) {
  Table t({"ID", "STATE"});
  t.Add({"job-1", "running"});
  t.Add({"j", "ok"});
  std::ostringstream out;
  t.Print(out);
  EXPECT_EQ(out.str(), "ID     STATE\njob-1  running\nj      ok\n");
}

TEST(TableTest, HumanDuration) {
  EXPECT_EQ(HumanDuration(3'400), "3s");
  EXPECT_EQ(HumanDuration(252'000), "4m12s");
  EXPECT_EQ(HumanDuration(7'500'000), "2h05m");
  EXPECT_EQ(HumanDuration(-5), "0s");
  EXPECT_EQ(Dollars(2.5), "$2.50");
}

}  // namespace sluice::cli
