#include "spec/yaml_reader.h"

#include <gtest/gtest.h>

namespace sluice::spec {
namespace {

TEST(YamlReader, TypesScalarsLikeTheCoreSchema) {
  auto r = ReadYaml("a: 1\nb: \"1\"\nc: true\nd: ~\ne: 1.5e3\nf: hello\ng: !!str 2\n", "t.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->kind, SpecValue::Kind::kMap);
  const auto& e = r->entries;
  ASSERT_EQ(e.size(), 7u);
  EXPECT_EQ(e[0].second.kind, SpecValue::Kind::kNumber);
  EXPECT_EQ(e[1].second.kind, SpecValue::Kind::kString);
  EXPECT_EQ(e[2].second.kind, SpecValue::Kind::kBool);
  EXPECT_EQ(e[3].second.kind, SpecValue::Kind::kNull);
  EXPECT_EQ(e[4].second.kind, SpecValue::Kind::kNumber);
  EXPECT_EQ(e[4].second.text, "1.5e3");
  EXPECT_EQ(e[5].second.kind, SpecValue::Kind::kString);
  EXPECT_EQ(e[6].second.kind, SpecValue::Kind::kString);
  EXPECT_EQ(e[1].first.pos.line, 2);
  EXPECT_EQ(e[1].second.pos.col, 4);
}

TEST(YamlReader, KeepsDuplicateKeysForTheValidator) {
  auto r = ReadYaml("a: 1\na: 2\n", "t.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->entries.size(), 2u);
}

TEST(NestingBound, CountsBlockFlowAndDashes) {
  EXPECT_EQ(FindExcessiveNesting("a:\n  b:\n    c: 1\n", 3).line, 0);
  EXPECT_EQ(FindExcessiveNesting("a:\n  b:\n    c: 1\n", 2).line, 3);
  EXPECT_EQ(FindExcessiveNesting("a: [[1]]\n", 3).line, 0);
  EXPECT_EQ(FindExcessiveNesting("a: [[[1]]]\n", 3).line, 1);
  EXPECT_EQ(FindExcessiveNesting("- - - x\n", 2).line, 1);
  EXPECT_EQ(FindExcessiveNesting("a: [\n [\n  [\n   [x]]]]\n", 3).line, 3);
}

TEST(NestingBound, IgnoresQuotesCommentsAndBlockScalars) {
  EXPECT_EQ(FindExcessiveNesting("a: \"[[[[[[\"\nb: '{{{{{{'\n", 2).line, 0);
  EXPECT_EQ(FindExcessiveNesting("a: 1 # [[[[[[[[\n", 2).line, 0);
  EXPECT_EQ(FindExcessiveNesting("a: |\n  [[[[[[[[\n  {{{{{{\nb: 1\n", 2).line, 0);
  EXPECT_EQ(FindExcessiveNesting("a: echo x[0] [[[[[[\n", 2).line, 0);
  EXPECT_EQ(FindExcessiveNesting("a: [\"]]]]\", [[[x]]]]\n", 3).line, 1);
}

}  // namespace
}  // namespace sluice::spec
