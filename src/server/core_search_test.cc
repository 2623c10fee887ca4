// Incremental placement passes (docs/design-notes.md "Placement at scale"): after a full search,
// a pass searches only the nodes changed since for the shapes nothing fitted then. What keeps
// the full search fresh, and what counts as a change.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "server/core_test_fixture.h"

namespace sluice::server {
namespace {

using testing::RecordingLink;

// Incremental passes lean on a full search younger than kFullSearchLastsMs (10 s); the tick
// renews it from 8 s on, so a submit's own pass stays incremental however long the queue has
// waited, instead of searching every node (docs/design-notes.md "Placement at scale").
TEST_F(ServerCoreTest, TheTickRenewsTheFullSearchBeforeASubmitWouldNeedOne) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  ASSERT_TRUE(node.ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(core_->SubmitJob(Spec(4), "").ok());
  ASSERT_EQ(link->OfType("assign").size(), 1u);
  // The exit's pass is a full search: it places the second job; the third waits.
  std::string att = link->OfType("assign")[0]["attempt_id"];
  ASSERT_TRUE(
      core_->AgentMessage(*node, link.get(), proto::ToJson(proto::Exited{att, 0, 0, ""})).ok());
  ASSERT_EQ(link->OfType("assign").size(), 2u);
  const ServerCore::PassCounts searched = core_->PlacementPasses();
  auto live = [&](int64_t ms) {
    clock_.Advance(ms);
    ASSERT_TRUE(core_->AgentMessage(*node, link.get(), Json{{"type", "heartbeat"}}).ok());
    core_->Tick();
  };
  live(7000);  // 7 s: the last full search still serves
  EXPECT_EQ(core_->PlacementPasses().full, searched.full);
  live(1000);  // 8 s: renewed by the tick
  EXPECT_EQ(core_->PlacementPasses().full, searched.full + 1);
  live(3000);  // 11 s after the first, 3 s after the renewal
  const ServerCore::PassCounts renewed = core_->PlacementPasses();
  auto waits = core_->SubmitJob(Spec(4), "");
  ASSERT_TRUE(waits.ok());
  EXPECT_EQ(core_->GetJob(waits->id)->job.state, store::JobState::kQueued);
  // The submit's pass searched only what changed since the renewal.
  EXPECT_EQ(core_->PlacementPasses().full, renewed.full);
  EXPECT_EQ(core_->PlacementPasses().incremental, renewed.incremental + 1);
}

// The same when no pass but the submits' own has run: every node holds its job and nothing
// exits, so without the tick no full search would ever find the waiting shapes exhausted, and
// every submit would search every node (as bench/swarm's `sluice_placement_passes_total` showed:
// 48,842 full passes, 0 incremental, while 100,000 jobs were submitted to a full fleet).
TEST_F(ServerCoreTest, TheTickSearchesAQueueOnlySubmitsHaveSearched) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  ASSERT_TRUE(node.ok());
  ASSERT_TRUE(core_->SubmitJob(Spec(4), "").ok());  // runs, and is held
  ASSERT_TRUE(core_->SubmitJob(Spec(4), "").ok());  // waits
  ASSERT_EQ(link->OfType("assign").size(), 1u);
  const ServerCore::PassCounts before = core_->PlacementPasses();
  for (int s = 0; s < 8; ++s) {
    clock_.Advance(1000);
    ASSERT_TRUE(core_->AgentMessage(*node, link.get(), Json{{"type", "heartbeat"}}).ok());
    core_->Tick();
  }
  // One full search by the tick (its first, as none had run), and none more within 8 s.
  EXPECT_EQ(core_->PlacementPasses().full, before.full + 1);
  auto waits = core_->SubmitJob(Spec(4), "");
  ASSERT_TRUE(waits.ok());
  EXPECT_EQ(core_->GetJob(waits->id)->job.state, store::JobState::kQueued);
  EXPECT_EQ(core_->PlacementPasses().full, before.full + 1);
  EXPECT_EQ(core_->PlacementPasses().incremental, before.incremental + 1);
}

// A node is searched again for shapes nothing fitted only when its room may have changed: an
// attempt placed on it or ended. A `started` keeps the attempt's room, so the nodes whose jobs
// just started are not re-ranked for every waiting shape (bench/swarm's release: every pass
// re-ranked each exhausted shape on the nodes of the last pass's placements).
TEST_F(ServerCoreTest, AStartedAttemptLeavesItsNodeOutOfTheNextIncrementalSearch) {
  auto link_a = std::make_shared<RecordingLink>();
  auto link_b = std::make_shared<RecordingLink>();
  auto a = Hello(link_a, CpuHello());
  auto b = Hello(link_b, CpuHello());
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(core_->SubmitJob(Spec(4), "").ok());
  ASSERT_EQ(link_a->OfType("assign").size() + link_b->OfType("assign").size(), 2u);
  // A full search by the tick finds the third job's shape fitting nowhere.
  const ServerCore::PassCounts before = core_->PlacementPasses();
  for (int s = 1; s <= 8; ++s) {
    clock_.Advance(1000);
    ASSERT_TRUE(core_->AgentMessage(*a, link_a.get(), Json{{"type", "heartbeat"}}).ok());
    ASSERT_TRUE(core_->AgentMessage(*b, link_b.get(), Json{{"type", "heartbeat"}}).ok());
    core_->Tick();
  }
  ASSERT_EQ(core_->PlacementPasses().full, before.full + 1);
  StartLastAssigned(*a, *link_a);
  const std::string on_b = StartLastAssigned(*b, *link_b);
  // A submit's pass after the starts: incremental, and no node to search again.
  const ServerCore::PassCounts started = core_->PlacementPasses();
  auto waits = core_->SubmitJob(Spec(4), "");
  ASSERT_TRUE(waits.ok());
  EXPECT_EQ(core_->GetJob(waits->id)->job.state, store::JobState::kQueued);
  EXPECT_EQ(core_->PlacementPasses().incremental, started.incremental + 1);
  EXPECT_EQ(core_->PlacementPasses().rechecked_nodes, started.rechecked_nodes);
  // An exit frees its node: that one node is searched, and the waiting job placed on it.
  const ServerCore::PassCounts exited = core_->PlacementPasses();
  ASSERT_TRUE(
      core_->AgentMessage(*b, link_b.get(), proto::ToJson(proto::Exited{on_b, 0, 0, ""})).ok());
  EXPECT_EQ(core_->PlacementPasses().incremental, exited.incremental + 1);
  EXPECT_EQ(core_->PlacementPasses().rechecked_nodes, exited.rechecked_nodes + 1);
  EXPECT_EQ(link_b->OfType("assign").size(), 2u);
}

}  // namespace
}  // namespace sluice::server
