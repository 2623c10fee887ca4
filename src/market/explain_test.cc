#include "market/explain.h"

#include <gtest/gtest.h>

namespace sluice::market {
namespace {

Offer MakeOffer(std::string id, std::string label, int gpus, double price) {
  Offer o;
  o.id = id;
  o.gpu_label = label;
  o.gpu_model = label.substr(0, label.find('-'));
  o.gpus = o.gpus_available = gpus;
  o.price_per_gpu_hour = price;
  return o;
}

TEST(ExplainTest, CountsWhatEachTermEliminatesAndFindsNearMisses) {
  std::vector<Offer> offers = {MakeOffer("a", "h100-80gb", 8, 3.0),
                               MakeOffer("b", "h100-80gb", 4, 2.0),
                               MakeOffer("c", "a100-80gb", 8, 1.0)};
  auto q = ParseQuery("gpu=h100 gpus>=8 price<2.5");
  ASSERT_TRUE(q.ok());
  Explanation e = Explain(*q, offers, 2);
  EXPECT_EQ(e.offers, 3u);
  ASSERT_EQ(e.per_term.size(), 3u);
  EXPECT_EQ(e.per_term[0].eliminated, 1u);  // c is an a100
  EXPECT_EQ(e.per_term[1].eliminated, 1u);  // b has 4
  EXPECT_EQ(e.per_term[2].eliminated, 1u);  // a costs 3
  // Every offer fails exactly one term: the cheapest near misses come first.
  ASSERT_EQ(e.nearest.size(), 2u);
  EXPECT_EQ(e.nearest[0].offer.id, "c");
  ASSERT_EQ(e.nearest[0].failed.size(), 1u);
  EXPECT_NE(e.nearest[0].failed[0].find("gpu"), std::string::npos);
  EXPECT_EQ(e.nearest[1].offer.id, "b");
}

TEST(ExplainTest, SummaryNamesWhatRulesOutAndTheNearestMiss) {
  std::vector<Offer> offers = {MakeOffer("a", "h100-80gb", 8, 3.0),
                               MakeOffer("b", "h100-80gb", 4, 2.0)};
  auto q = ParseQuery("gpu=h100 gpus>=8 price<2.5");
  ASSERT_TRUE(q.ok());
  // The gpu term rules out nothing, so it is not mentioned.
  EXPECT_EQ(
      Summary(Explain(*q, offers, 1)),
      "of 2 offers, `gpus>=8` rules out 1, `price<2.5` rules out 1; nearest: b lacks gpus>=8");
}

TEST(ExplainTest, AgreesWithMatches) {
  std::vector<Offer> offers = {MakeOffer("a", "h100-80gb", 8, 3.0),
                               MakeOffer("b", "l4-24gb", 1, 0.5)};
  auto q = ParseQuery("gpu=l4 price<1");
  ASSERT_TRUE(q.ok());
  Explanation e = Explain(*q, offers, 5);
  for (const auto& n : e.nearest) EXPECT_EQ(n.failed.empty(), Matches(*q, n.offer));
}

}  // namespace
}  // namespace sluice::market
