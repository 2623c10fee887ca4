#include "sched/shape_rankings.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "sched/scheduler.h"

namespace sluice::sched {
namespace {

// A CPU node selling at `price` per CPU-hour.
std::shared_ptr<const NodeCapacity> CpuNode(const std::string& id, double price) {
  auto n = std::make_shared<NodeCapacity>();
  n->node_id = n->name = id;
  n->total_cpus = n->free_cpus = 8;
  n->total_memory_gb = n->free_memory_gb = 32;
  market::Offer o;
  o.id = id + "/cpu";
  o.node = id;
  o.cpus = 8;
  o.memory_gb = 32;
  o.price_per_cpu_hour = price;
  n->offers = std::make_shared<const std::vector<market::Offer>>(std::vector<market::Offer>{o});
  return n;
}

// A shape's entries over `nodes`, counting the nodes it was asked about.
struct Counted {
  const std::vector<std::shared_ptr<const NodeCapacity>>* nodes;
  int* asked;
  void operator()(size_t i, std::vector<ShapeRankings::Entry>* out) const {
    ++*asked;
    const auto& offers = (*nodes)[i]->Offers();
    for (size_t o = 0; o < offers.size(); ++o) {
      market::Workload work;
      out->push_back(ShapeRankings::Entry::Of(i, o, market::EstimateCost(offers[o], work, {})));
    }
  }
};

std::vector<std::string> Order(const std::vector<ShapeRankings::Entry>& entries,
                               const std::vector<std::shared_ptr<const NodeCapacity>>& nodes) {
  std::vector<std::string> ids;
  for (const auto& e : entries) ids.push_back(nodes[e.node]->node_id);
  return ids;
}

// The "cpu" shape asked for twice (a shape is ranked on its second ask): its ranking.
ShapeRankings::Entries RankCpu(ShapeRankings& rankings, const Counted& usable) {
  rankings.Ranked("cpu", market::Objective::kCost, usable);
  return rankings.Ranked("cpu", market::Objective::kCost, usable);
}

TEST(ShapeRankingsTest, AShapeIsRankedOnItsSecondAskBestEstimateFirst) {
  std::vector<std::shared_ptr<const NodeCapacity>> nodes = {CpuNode("a", 0.30), CpuNode("b", 0.10),
                                                            CpuNode("c", 0.20), CpuNode("d", 0.10)};
  ShapeRankings rankings;
  rankings.Sync(nodes, {});
  int asked = 0;
  Counted usable{&nodes, &asked};
  EXPECT_EQ(rankings.Ranked("cpu", market::Objective::kCost, usable), nullptr);
  EXPECT_EQ(asked, 0);  // asked for once: not worth ranking
  const auto entries = rankings.Ranked("cpu", market::Objective::kCost, usable);
  ASSERT_NE(entries, nullptr);
  EXPECT_EQ(Order(*entries, nodes), (std::vector<std::string>{"b", "d", "c", "a"}));
  EXPECT_EQ(rankings.entries(), 4u);
  // Unchanged nodes: asked again, nothing is computed again.
  asked = 0;
  rankings.Sync(nodes, {});
  ASSERT_NE(rankings.Ranked("cpu", market::Objective::kCost, usable), nullptr);
  EXPECT_EQ(asked, 0);
}

TEST(ShapeRankingsTest, OnlyANodeWhoseOffersChangedIsRankedAgain) {
  std::vector<std::shared_ptr<const NodeCapacity>> nodes = {CpuNode("a", 0.30), CpuNode("b", 0.10),
                                                            CpuNode("c", 0.20)};
  ShapeRankings rankings;
  rankings.Sync(nodes, {});
  int asked = 0;
  Counted usable{&nodes, &asked};
  const auto held = RankCpu(rankings, usable);
  ASSERT_NE(held, nullptr);
  // Node a's provider cuts its price; node c's attempts change (a new capacity object, the same
  // offers): only a is asked about again, and it moves first.
  auto c = std::make_shared<NodeCapacity>(*nodes[2]);
  c->free_cpus = 2;
  nodes[2] = c;
  nodes[0] = CpuNode("a", 0.05);
  rankings.Sync(nodes, {});
  asked = 0;
  const auto entries = rankings.Ranked("cpu", market::Objective::kCost, usable);
  ASSERT_NE(entries, nullptr);
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(Order(*entries, nodes), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(rankings.entries(), 3u);
  // A list already handed out is never changed: a pass may still be reading it.
  EXPECT_EQ(Order(*held, nodes), (std::vector<std::string>{"b", "c", "a"}));
}

TEST(ShapeRankingsTest, ANodeJoiningOrAnotherModelRanksAfresh) {
  std::vector<std::shared_ptr<const NodeCapacity>> nodes = {CpuNode("a", 0.30), CpuNode("c", 0.20)};
  ShapeRankings rankings;
  rankings.Sync(nodes, {});
  int asked = 0;
  Counted usable{&nodes, &asked};
  RankCpu(rankings, usable);
  nodes.insert(nodes.begin() + 1, CpuNode("b", 0.10));  // c's position moves
  rankings.Sync(nodes, {});
  asked = 0;
  const auto entries = rankings.Ranked("cpu", market::Objective::kCost, usable);
  ASSERT_NE(entries, nullptr);  // a shape already known is ranked at once
  EXPECT_EQ(asked, 3);
  EXPECT_EQ(Order(*entries, nodes), (std::vector<std::string>{"b", "c", "a"}));
  market::CostModel other;
  other.restart_hours = 0.5;
  rankings.Sync(nodes, other);
  asked = 0;
  ASSERT_NE(rankings.Ranked("cpu", market::Objective::kCost, usable), nullptr);
  EXPECT_EQ(asked, 3);
}

TEST(ShapeRankingsTest, ManyChangedNodesRankAfreshAndAnEntryStaysSmall) {
  std::vector<std::shared_ptr<const NodeCapacity>> nodes;
  for (int i = 0; i < 100; ++i) nodes.push_back(CpuNode("n" + std::to_string(i), 0.1 + i * 0.01));
  ShapeRankings rankings;
  rankings.Sync(nodes, {});
  int asked = 0;
  Counted usable{&nodes, &asked};
  RankCpu(rankings, usable);
  // 10 changed nodes are repaired one by one; 65 more (past max(64, 100 / 4) changes since the
  // last reset) rank every node afresh.
  for (int i = 0; i < 10; ++i) nodes[i] = CpuNode("n" + std::to_string(i), 0.05);
  rankings.Sync(nodes, {});
  asked = 0;
  ASSERT_NE(rankings.Ranked("cpu", market::Objective::kCost, usable), nullptr);
  EXPECT_EQ(asked, 10);
  for (int i = 10; i < 75; ++i) nodes[i] = CpuNode("n" + std::to_string(i), 0.05);
  rankings.Sync(nodes, {});
  asked = 0;
  const auto entries = rankings.Ranked("cpu", market::Objective::kCost, usable);
  ASSERT_NE(entries, nullptr);
  EXPECT_EQ(asked, 100);
  EXPECT_EQ(entries->size(), 100u);
  EXPECT_EQ(rankings.entries(), 100u);
  // What the design notes and the memory bound count on.
  EXPECT_EQ(sizeof(ShapeRankings::Entry), 40u);
}

TEST(ShapeRankingsTest, TheLeastRecentlyAskedShapeGoesFirstWhenFull) {
  std::vector<std::shared_ptr<const NodeCapacity>> nodes = {CpuNode("a", 0.30), CpuNode("b", 0.10),
                                                            CpuNode("c", 0.20)};
  ShapeRankings rankings(/*max_entries=*/5);
  rankings.Sync(nodes, {});
  int asked = 0;
  Counted usable{&nodes, &asked};
  for (const char* key : {"x", "x", "y", "y"})
    rankings.Ranked(key, market::Objective::kCost, usable);
  // Two rankings of 3 entries do not fit in 5: x, asked for least recently, is forgotten.
  EXPECT_EQ(rankings.entries(), 3u);
  EXPECT_EQ(rankings.shapes(), 1u);
  EXPECT_EQ(rankings.Ranked("x", market::Objective::kCost, usable), nullptr);
  EXPECT_NE(rankings.Ranked("y", market::Objective::kCost, usable), nullptr);
  // A shape that can never fit is not ranked, and takes nothing.
  ShapeRankings tiny(/*max_entries=*/2);
  tiny.Sync(nodes, {});
  tiny.Ranked("x", market::Objective::kCost, usable);
  EXPECT_EQ(tiny.Ranked("x", market::Objective::kCost, usable), nullptr);
  EXPECT_EQ(tiny.entries(), 0u);
  // Shapes asked for once count too.
  ShapeRankings few(ShapeRankings::kDefaultMaxEntries, /*max_shapes=*/2);
  few.Sync(nodes, {});
  for (const char* key : {"p", "q", "r"}) few.Ranked(key, market::Objective::kCost, usable);
  EXPECT_EQ(few.shapes(), 2u);
}

TEST(ShapeRankingsTest, AnEstimateThatIsNotANumberLeavesTheShapeUnranked) {
  std::vector<std::shared_ptr<const NodeCapacity>> nodes = {CpuNode("a", 0.30), CpuNode("b", 0.10)};
  ShapeRankings rankings;
  rankings.Sync(nodes, {});
  auto usable = [](size_t i, std::vector<ShapeRankings::Entry>* out) {
    ShapeRankings::Entry e;
    e.node = static_cast<uint32_t>(i);
    e.expected_cost = i == 1 ? std::numeric_limits<double>::quiet_NaN() : 1.0;
    out->push_back(e);
  };
  rankings.Ranked("nan", market::Objective::kCost, usable);
  EXPECT_EQ(rankings.Ranked("nan", market::Objective::kCost, usable), nullptr);
  EXPECT_EQ(rankings.entries(), 0u);
}

}  // namespace
}  // namespace sluice::sched
