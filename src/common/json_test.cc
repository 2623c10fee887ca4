#include "common/json.h"

#include <gtest/gtest.h>

namespace sluice {

TEST(JsonTest, MalformedNamesPosition) {
  auto r = ParseJson("{\"a\": 1,");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("byte"), std::string::npos);
}

TEST(JsonTest, DeepNestingRejected) {
  std::string deep(10000, '[');
  auto r = ParseJson(deep);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("deeper"), std::string::npos);
}

TEST(JsonTest, TypedAccessNamesField) {
  auto j = ParseJson(R"({"gpus": "two", "n": 3})").value();
  auto r = GetInt(j, "gpus", "resources");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("resources.gpus"), std::string::npos);
  EXPECT_EQ(GetInt(j, "n").value(), 3);
  EXPECT_EQ(GetIntOr(j, "missing", 7).value(), 7);
  EXPECT_FALSE(GetString(j, "missing").ok());
}

TEST(JsonTest, DumpReplacesInvalidUtf8) {
  Json j = std::string("bad\xFF");
  EXPECT_NO_THROW(DumpJson(j));
}

}  // namespace sluice
