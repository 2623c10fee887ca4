// Uptime rounds (docs/design-notes.md "Reliability"): once a minute the tick extends the stored
// uptime span of every online node to now, uptime_slice nodes a tick, so a fleet of 10,000 is
// never one commit that holds the core's lock for a tenth of a second; every online node's span
// is extended once a round, and a slice that fails to commit leaves memory and disk as they were.
#include <algorithm>
#include <map>
#include <vector>

#include "server/core_test_fixture.h"

namespace sluice::server {
namespace {

constexpr int kNodes = 5;

class UptimeRoundsTest : public ServerCoreTest {
 protected:
  void SetUp() override {
    opt_.uptime_slice = 2;
    ServerCoreTest::SetUp();
    for (int i = 0; i < kNodes; ++i) {
      auto link = std::make_shared<RecordingLink>();
      auto node = Hello(link, testing::CpuHello("box-" + std::to_string(i)));
      ASSERT_TRUE(node.ok()) << node.status().ToString();
      nodes_.push_back(*node);
      links_[*node] = link;
    }
    std::sort(nodes_.begin(), nodes_.end());  // a round goes in id order
    start_ms_ = clock_.NowMillis();
    // How many spans each round's commit extended: uptime rows without a node record (a hello
    // or a disconnect writes the node's record with its span).
    failing_->on_write = [this](const store::WriteBatch& b) {
      if (!b.uptime.empty() && b.nodes.empty()) slices_.push_back(b.uptime.size());
    };
  }
  // Runs the server to second `until`: every connected node heartbeats every 5 s, a tick every
  // second.
  void RunTo(int until) {
    for (; second_ < until; ++second_) {
      clock_.Advance(1000);
      if ((second_ + 1) % 5 == 0) {
        for (const auto& [node, link] : links_) {
          ASSERT_TRUE(core_->AgentMessage(node, link.get(), Json{{"type", "heartbeat"}}).ok());
        }
      }
      core_->Tick();
    }
  }
  // Second `s` of the run as wall-clock milliseconds.
  int64_t At(int s) const { return start_ms_ + s * 1000LL; }
  // Each node's latest stored span end, in node id order.
  std::vector<int64_t> StoredEnds() {
    auto spans = store_->LoadUptime(0);
    EXPECT_TRUE(spans.ok()) << spans.status().ToString();
    std::map<std::string, int64_t> end;
    if (spans.ok()) {
      for (const auto& u : *spans) end[u.node_id] = std::max(end[u.node_id], u.end_ms);
    }
    std::vector<int64_t> out;
    for (const auto& n : nodes_) out.push_back(end[n]);
    return out;
  }

  std::vector<std::string> nodes_;
  std::map<std::string, std::shared_ptr<RecordingLink>> links_;
  std::vector<size_t> slices_;
  int64_t start_ms_ = 0;
  int second_ = 0;
};

TEST_F(UptimeRoundsTest, ARoundExtendsASliceATickAndEveryOnlineNodeOnce) {
  const std::vector<int64_t> enrolled = StoredEnds();
  RunTo(3);  // the first tick begins a round: 2, 2 and 1 nodes on three ticks
  EXPECT_EQ(slices_, (std::vector<size_t>{2, 2, 1}));
  EXPECT_EQ(StoredEnds(), (std::vector<int64_t>{At(1), At(1), At(2), At(2), At(3)}));
  RunTo(60);
  EXPECT_EQ(slices_.size(), 3u) << "nothing more until a minute after the round began";
  EXPECT_EQ(StoredEnds(), (std::vector<int64_t>{At(1), At(1), At(2), At(2), At(3)}));
  // A node that goes offline has its span closed then, and is left out of the next round.
  const std::string gone = nodes_[1];
  core_->AgentDisconnected(gone, links_[gone].get());
  links_.erase(gone);
  RunTo(63);
  EXPECT_EQ(slices_, (std::vector<size_t>{2, 2, 1, 2, 2}));
  const std::vector<int64_t> ends = StoredEnds();
  EXPECT_EQ(ends[0], At(61));
  EXPECT_EQ(ends[1], At(60)) << "closed when it went offline, not extended since";
  EXPECT_EQ(ends[2], At(61));
  EXPECT_EQ(ends[3], At(62));
  EXPECT_EQ(ends[4], At(62));
  for (size_t i = 0; i < enrolled.size(); ++i) EXPECT_LT(enrolled[i], ends[i]);
}

TEST_F(UptimeRoundsTest, AFailedSliceChangesNothingAndTheNextRoundBeginsAgain) {
  RunTo(1);  // the round's first slice is stored
  ASSERT_EQ(slices_.size(), 1u);
  const Json memory = core_->StateDump();
  const std::vector<int64_t> stored = StoredEnds();
  failing_->fail_if = [](const store::WriteBatch& b) {
    return !b.uptime.empty() && b.nodes.empty();
  };
  RunTo(2);  // the second slice fails to commit
  EXPECT_EQ(failing_->failed, 1);
  EXPECT_EQ(core_->StateDump(), memory) << "a failed slice changed memory";
  EXPECT_EQ(StoredEnds(), stored) << "a failed slice changed the store";
  EXPECT_EQ(core_->DegradedCounts()["uptime"], 1) << "the failure is counted, not silent";
  failing_->fail_if = nullptr;
  RunTo(60);  // the failure ended the round: nothing more until the next one
  EXPECT_EQ(slices_, (std::vector<size_t>{2, 2}));  // the failed slice was counted too
  EXPECT_EQ(StoredEnds(), stored);
  RunTo(63);  // the next round begins from the first node
  EXPECT_EQ(slices_, (std::vector<size_t>{2, 2, 2, 2, 1}));
  EXPECT_EQ(StoredEnds(), (std::vector<int64_t>{At(61), At(61), At(62), At(62), At(63)}));
}

}  // namespace
}  // namespace sluice::server
