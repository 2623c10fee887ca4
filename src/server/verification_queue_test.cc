#include "server/verification_queue.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/test_agent_link.h"

namespace sluice::server {
namespace {

using NodeState = VerificationQueue::NodeState;

class VerificationQueueTest : public ::testing::Test {
 protected:
  // A connected node with no request yet.
  NodeState& Node(const std::string& id) {
    NodeState& n = nodes_[id];
    n.record.id = id;
    n.link = std::make_shared<testing::RecordingLink>();
    return n;
  }
  // Admits at `now` with `max` suites at once; returns the nodes admitted, in order.
  std::vector<std::string> Admit(int64_t now, int max) {
    std::vector<std::string> admitted;
    queue_.Admit(
        nodes_, now, max,
        [&](const std::string& id, NodeState& n) {
          admitted.push_back(id);
          n.verify_admitted_mono = now;  // as the core's request does
        },
        [&](const std::string& id) { changed_.push_back(id); });
    return admitted;
  }
  // The node's suite reported: it no longer awaits one.
  void Reported(const std::string& id) { nodes_[id].awaiting_report = false; }

  VerificationQueue::Nodes nodes_;
  VerificationQueue queue_;
  std::vector<std::string> changed_;
};

TEST_F(VerificationQueueTest, AtMostTheLimitRunAndTheRestGoFirstComeFirstServed) {
  for (const char* id : {"c", "a", "d", "b"}) queue_.Enqueue(id, Node(id), "registration");
  for (const auto& [id, n] : nodes_) EXPECT_TRUE(n.awaiting_report) << id << " is under way";
  EXPECT_EQ(Admit(0, 2), (std::vector<std::string>{"c", "a"}));
  EXPECT_TRUE(Admit(1, 2).empty()) << "two run already";
  Reported("a");
  EXPECT_EQ(Admit(2, 2), (std::vector<std::string>{"d"}));
  Reported("c");
  Reported("d");
  EXPECT_EQ(Admit(3, 2), (std::vector<std::string>{"b"}));
  EXPECT_EQ(nodes_["b"].verify_reason, "registration");
  EXPECT_FALSE(nodes_["b"].verify_queued);
}

TEST_F(VerificationQueueTest, ANodeWithoutItsAgentHoldsNoSlotAndKeepsItsTurn) {
  queue_.Enqueue("a", Node("a"), "registration");
  queue_.Enqueue("b", Node("b"), "registration");
  nodes_["a"].link.reset();
  EXPECT_EQ(Admit(0, 1), (std::vector<std::string>{"b"}));
  Reported("b");
  nodes_["a"].link = std::make_shared<testing::RecordingLink>();
  EXPECT_EQ(Admit(1, 1), (std::vector<std::string>{"a"}));
  // An admitted node that loses its agent frees its slot.
  queue_.Enqueue("c", Node("c"), "scheduled");
  nodes_["a"].link.reset();
  EXPECT_EQ(Admit(2, 1), (std::vector<std::string>{"c"}));
}

TEST_F(VerificationQueueTest, ASuiteThatNeverReportsFreesItsSlotAfterAWhile) {
  queue_.Enqueue("hung", Node("hung"), "registration");
  queue_.Enqueue("next", Node("next"), "registration");
  EXPECT_EQ(Admit(1000, 1), (std::vector<std::string>{"hung"}));
  EXPECT_TRUE(Admit(1000 + VerificationQueue::kSlotMs - 1, 1).empty());
  EXPECT_EQ(Admit(1000 + VerificationQueue::kSlotMs, 1), (std::vector<std::string>{"next"}));
}

TEST_F(VerificationQueueTest, ARetryJoinsTheQueueWhenDueBehindEarlierRequests) {
  NodeState& failed = Node("failed");
  failed.verify_failures = 1;
  failed.verify_retry_mono = 5000;  // as the core schedules it after a failed verdict
  queue_.Track("failed", failed);
  EXPECT_TRUE(Admit(4999, 1).empty()) << "not due yet";
  EXPECT_TRUE(changed_.empty());
  queue_.Enqueue("new", Node("new"), "registration");
  EXPECT_EQ(Admit(5000, 1), (std::vector<std::string>{"new"}));
  EXPECT_EQ(changed_, (std::vector<std::string>{"failed"})) << "its flags changed: queued";
  EXPECT_TRUE(nodes_["failed"].awaiting_report);
  EXPECT_EQ(nodes_["failed"].verify_retry_mono, 0);
  Reported("new");
  EXPECT_EQ(Admit(5001, 1), (std::vector<std::string>{"failed"}));
  EXPECT_EQ(nodes_["failed"].verify_reason, "retry 1 after a failed verification");
}

TEST_F(VerificationQueueTest, ARequestReplacesAScheduledRetryAndAQueuedNodeKeepsItsTurn) {
  NodeState& n = Node("a");
  n.verify_retry_mono = 5000;
  queue_.Track("a", n);
  queue_.Enqueue("a", n, "on-demand");
  EXPECT_EQ(n.verify_retry_mono, 0);
  queue_.Enqueue("b", Node("b"), "registration");
  queue_.Enqueue("a", nodes_["a"], "scheduled");  // again, while queued: keeps its place
  EXPECT_EQ(Admit(6000, 1), (std::vector<std::string>{"a"}));
  EXPECT_EQ(nodes_["a"].verify_reason, "scheduled");
  EXPECT_TRUE(changed_.empty()) << "the dropped retry is not brought back";
}

}  // namespace
}  // namespace sluice::server
