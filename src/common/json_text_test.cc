#include "common/json_text.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(JsonTextTest, KeepsTheDocumentAsCompactTextAndGivesItBack) {
  Json doc = {{"gpus", {{{"name", "NVIDIA H100 80GB HBM3"}, {"memory_mib", 81559}}}},
              {"hostname", "n1"}};
  JsonText t = doc;
  EXPECT_EQ(t.text(),
            R"({"gpus":[{"memory_mib":81559,"name":"NVIDIA H100 80GB HBM3"}],"hostname":"n1"})");
  EXPECT_EQ(t.Parse(), doc);
}

TEST(JsonTextTest, DefaultIsNullAndEqualityIsByContent) {
  EXPECT_EQ(JsonText().text(), "null");
  EXPECT_TRUE(JsonText().Parse().is_null());
  EXPECT_EQ(JsonText(Json::object()), JsonText::FromText("{}"));
  EXPECT_FALSE(JsonText(Json::object()) == JsonText(Json::array()));
}

TEST(JsonTextTest, CopiesShareOneText) {
  JsonText a = Json{{"k", std::string(1000, 'x')}};
  JsonText b = a;
  EXPECT_EQ(&a.text(), &b.text());
}

TEST(JsonTextTest, SitsInsideADocumentBeingBuilt) {
  JsonText inv = Json{{"cpu_cores", 4}};
  Json view = {{"id", "node-1"}, {"inventory", inv}};
  EXPECT_EQ(view["inventory"]["cpu_cores"], 4);
}

TEST(JsonTextTest, TextThatIsNotJsonReadsAsNull) {
  EXPECT_TRUE(JsonText::FromText("{not json").Parse().is_null());
}

}  // namespace
}  // namespace sluice
