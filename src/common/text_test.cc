#include "common/text.h"

#include <gtest/gtest.h>

namespace sluice {

TEST(TextTest, Utf8Validation) {
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(
      IsValidUtf8("gr\xC3\xBC\xC3\x9F"
                  "e \xE2\x82\xAC \xF0\x9F\x9A\x80"));
  EXPECT_FALSE(IsValidUtf8("\xFF"));
  EXPECT_FALSE(IsValidUtf8("ab\xC3"));        // truncated
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));      // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));  // surrogate
  EXPECT_EQ(FirstInvalidUtf8("abc\xFE"), 3u);
}

TEST(TextTest, VersionOrder) {
  EXPECT_GT(CompareVersions("535.104.05", "535.86.05"), 0);
  EXPECT_LT(CompareVersions("12.1", "12.10"), 0);
  EXPECT_EQ(CompareVersions("12.0", "12"), 0);
  EXPECT_LT(CompareVersions("11.8", "12.0"), 0);
}

TEST(TextTest, EditDistance) {
  EXPECT_EQ(EditDistance("a100", "a100"), 0u);
  EXPECT_EQ(EditDistance("a10", "a100"), 1u);
  EXPECT_EQ(EditDistance("h100-80gb", "h10-80gb"), 1u);
}

TEST(TextTest, SplitTrimLower) {
  EXPECT_EQ(Split("a,b,,c", ',').size(), 4u);
  EXPECT_EQ(Trim("  x y \n"), "x y");
  EXPECT_EQ(ToLower("NVIDIA A100"), "nvidia a100");
}

}  // namespace sluice
