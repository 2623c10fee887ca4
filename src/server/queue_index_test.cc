#include "server/queue_index.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace sluice::server {
namespace {

// The jobs' reasons as "memory" holds them, for Settle and FirstAstray.
struct Held {
  std::map<std::string, std::pair<std::string, bool>> reasons;
  QueueIndex::Reasons Get() const {
    return [this](const std::string& id) -> std::pair<std::string_view, bool> {
      const auto& r = reasons.at(id);
      return {r.first, r.second};
    };
  }
};

std::vector<std::string> Ids(const std::map<QueueIndex::Order, std::string>& m) {
  std::vector<std::string> out;
  for (const auto& [order, id] : m) out.push_back(id);
  return out;
}
std::vector<std::string> Ids(const std::map<QueueIndex::Order, QueueIndex::Member>& m) {
  std::vector<std::string> out;
  for (const auto& [order, member] : m) out.push_back(member.id);
  return out;
}

TEST(QueueIndexTest, GroupsHoldTheirJobsInTheOrderAPassConsidersThem) {
  QueueIndex q;
  const int late_job = 0;
  q.File("late", "shape-a", {0, 9}, "", false, &late_job);
  q.File("urgent", "shape-a", {-5, 12}, "", false);  // priority 5: first despite its order
  q.File("early", "shape-a", {0, 3}, "", false);
  q.File("other", "shape-b", {0, 1}, "", false);
  q.File("cooling", "", {0, 2}, "", false);  // no shape: searched on its own
  ASSERT_EQ(q.groups().size(), 2u);
  EXPECT_EQ(q.groups().at("shape-a").members.at({0, 9}).job, &late_job);  // handed back as given
  EXPECT_EQ(Ids(q.groups().at("shape-a").members),
            (std::vector<std::string>{"urgent", "early", "late"}));
  EXPECT_EQ(q.alone(), (std::set<std::string>{"cooling"}));
  EXPECT_EQ(q.size(), 5u);
  // Filed again under another shape (it fell back to on-demand): moved, not copied.
  q.File("early", "shape-b", {0, 3}, "", false);
  EXPECT_EQ(Ids(q.groups().at("shape-a").members), (std::vector<std::string>{"urgent", "late"}));
  EXPECT_EQ(Ids(q.groups().at("shape-b").members), (std::vector<std::string>{"other", "early"}));
  q.File("cooling", "shape-b", {0, 2}, "", false);
  EXPECT_TRUE(q.alone().empty());
  // Dropped (placed): gone, and an emptied group with it.
  q.Drop("urgent");
  q.Drop("late");
  EXPECT_EQ(q.groups().count("shape-a"), 0u);
  EXPECT_FALSE(q.Has("late"));
  EXPECT_EQ(q.size(), 3u);
  q.Drop("never-filed");  // harmless
  EXPECT_EQ(q.size(), 3u);
}

TEST(QueueIndexTest, OnlyMembersThatMayNotHoldTheGroupsAnswerAreListed) {
  QueueIndex q;
  Held held;
  const std::string busy = "waiting for capacity: every node that can run it is busy";
  for (int i = 0; i < 5; ++i) {
    std::string id = "j" + std::to_string(i);
    held.reasons[id] = {"", false};
    q.File(id, "k", {0, i}, "", false);
  }
  // No answer yet: every member is unsettled.
  EXPECT_EQ(q.groups().at("k").unsettled.size(), 5u);
  // Committed to all but j3 (say its write came in a later pass).
  for (auto& [id, r] : held.reasons) {
    if (id != "j3") r = {busy, false};
  }
  q.Settle("k", {busy, false, false}, held.Get());
  EXPECT_EQ(Ids(q.groups().at("k").unsettled), std::vector<std::string>{"j3"});
  EXPECT_EQ(q.FirstAstray(held.Get()), std::nullopt);
  // j3 answered and filed again: settled. A new job with no reason yet: unsettled.
  held.reasons["j3"] = {busy, false};
  q.File("j3", "k", {0, 3}, busy, false);
  held.reasons["j9"] = {"", false};
  q.File("j9", "k", {0, 9}, "", false);
  EXPECT_EQ(Ids(q.groups().at("k").unsettled), std::vector<std::string>{"j9"});
  // The same reason with another never-fits flag is not the answer.
  held.reasons["j1"] = {busy, true};
  q.File("j1", "k", {0, 1}, busy, true);
  EXPECT_EQ(Ids(q.groups().at("k").unsettled), (std::vector<std::string>{"j1", "j9"}));
  // A change memory made without filing the job again is what FirstAstray finds.
  held.reasons["j2"] = {"something else", false};
  EXPECT_EQ(q.FirstAstray(held.Get()), "j2");
}

TEST(QueueIndexTest, ARefusalIsHeldByAnyReasonWithItsPrefix) {
  QueueIndex q;
  Held held;
  held.reasons["a"] = {"waiting for credit: balance -1.20 USD", false};
  held.reasons["b"] = {"waiting for credit: balance -3.00 USD", false};
  held.reasons["c"] = {"waiting for capacity: every node that can run it is busy", false};
  for (const char* id : {"a", "b", "c"}) q.File(id, "k", {0, id[0]}, "", false);
  q.Settle("k", {"waiting for credit: ", false, true}, held.Get());
  EXPECT_EQ(Ids(q.groups().at("k").unsettled), std::vector<std::string>{"c"});
  QueueIndex::Answer credit{"waiting for credit: ", false, true};
  EXPECT_TRUE(credit.HeldBy("waiting for credit: anything", true));
  EXPECT_FALSE(credit.HeldBy("waiting for budget: team", false));
  EXPECT_FALSE(credit.HeldBy("waiting", false));
}

}  // namespace
}  // namespace sluice::server
