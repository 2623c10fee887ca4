#include "agent/attempt_outbox.h"

#include <gtest/gtest.h>

namespace sluice::agent::internal {
namespace {

std::vector<std::string> Types(const std::vector<Json>& msgs) {
  std::vector<std::string> out;
  for (const auto& m : msgs) out.push_back(m["type"].get<std::string>());
  return out;
}

void Print(Attempt& a, int64_t from, int64_t to) {
  for (int64_t seq = from; seq <= to; ++seq) {
    a.lines.push_back({seq, "stdout", 0, "line " + std::to_string(seq)});
  }
}

TEST(AttemptOutboxTest, LinesGoOnceAreDroppedWhenAckedAndUnackedOnesGoAgainAfterAReconnect) {
  Attempt a;
  a.id = "att-1";
  EXPECT_TRUE(TakeUnsent(a, /*launched=*/false).empty()) << "nothing before the process exists";
  Print(a, 1, 3);
  auto first = TakeUnsent(a, true);
  ASSERT_EQ(Types(first), (std::vector<std::string>{"started", "log"}));
  EXPECT_EQ(first[1]["lines"].size(), 3u);
  EXPECT_TRUE(TakeUnsent(a, true).empty()) << "sent once per connection";

  AckLogs(a, 2);
  EXPECT_EQ(a.lines.size(), 1u);
  AckLogs(a, 1);  // an older ack, late: changes nothing
  EXPECT_EQ(a.lines.size(), 1u);
  EXPECT_EQ(a.sent_seq, 3);

  Print(a, 4, 4);
  RewindForReconnect(a);
  auto again = TakeUnsent(a, true);
  ASSERT_EQ(Types(again), (std::vector<std::string>{"started", "log"}));
  ASSERT_EQ(again[1]["lines"].size(), 2u) << "line 3 (never acked) and line 4";
  EXPECT_EQ(again[1]["lines"][0]["seq"], 3);
}

TEST(AttemptOutboxTest, ManyLinesGoInBoundedBatches) {
  Attempt a;
  a.id = "att-1";
  Print(a, 1, static_cast<int64_t>(proto::kMaxLinesPerLogMessage) * 2 + 5);
  auto msgs = TakeUnsent(a, true);
  ASSERT_EQ(Types(msgs), (std::vector<std::string>{"started", "log", "log", "log"}));
  EXPECT_EQ(msgs[1]["lines"].size(), proto::kMaxLinesPerLogMessage);
  EXPECT_EQ(msgs[3]["lines"].size(), 5u);
  EXPECT_EQ(a.sent_seq, static_cast<int64_t>(proto::kMaxLinesPerLogMessage) * 2 + 5);
}

TEST(AttemptOutboxTest, TheExitGoesLastOnceAndAgainAfterAReconnectUntilAcknowledged) {
  Attempt a;
  a.id = "att-1";
  Print(a, 1, 1);
  a.pending_checkpoint = "periodic";
  a.exit = ExitInfo{0, 15};
  a.final_checkpoint = "final";
  auto msgs = TakeUnsent(a, true);
  ASSERT_EQ(Types(msgs), (std::vector<std::string>{"started", "log", "checkpoint", "exited"}));
  EXPECT_EQ(msgs[3]["signal"], 15);
  EXPECT_EQ(msgs[3]["checkpoint"], "final");
  EXPECT_TRUE(TakeUnsent(a, true).empty());
  // Once the exit is out, a late notice or periodic save is not sent: the exit says it all.
  a.notice = "spot";
  a.pending_checkpoint = "late";
  EXPECT_TRUE(TakeUnsent(a, true).empty());
  RewindForReconnect(a);
  auto again = TakeUnsent(a, true);
  EXPECT_EQ(Types(again).back(), "exited");
}

// A job that ends within a millisecond: its exit is recorded before the agent holds its process.
TEST(AttemptOutboxTest, AJobThatEndedBeforeItsProcessWasRecordedSaysStartedBeforeItsExit) {
  Attempt a;
  a.id = "att-1";
  Print(a, 1, 1);
  a.exit = ExitInfo{0, 0};
  auto msgs = TakeUnsent(a, /*launched=*/false);
  ASSERT_EQ(Types(msgs), (std::vector<std::string>{"started", "log", "exited"}));
  EXPECT_TRUE(TakeUnsent(a, /*launched=*/true).empty()) << "started goes once";
}

TEST(AttemptOutboxTest, AnAttemptReportedLostNeverSendsAnExitAndAFailedStartSendsItsError) {
  Attempt lost;
  lost.id = "att-lost";
  lost.lost = true;
  lost.exit = ExitInfo{137, 9};
  for (const auto& t : Types(TakeUnsent(lost, true))) EXPECT_NE(t, "exited");

  Attempt failed;
  failed.id = "att-failed";
  failed.error = "no such image";
  auto msgs = TakeUnsent(failed, /*launched=*/false);
  ASSERT_EQ(Types(msgs), (std::vector<std::string>{"exited"}));
  EXPECT_EQ(msgs[0]["error"], "no such image");
  EXPECT_EQ(msgs[0]["exit_code"], -1);
}

TEST(AttemptOutboxTest, APreemptionThisSideStartedIsToldOnce) {
  Attempt a;
  a.id = "att-1";
  a.notice = "the provider signalled the agent";
  auto msgs = TakeUnsent(a, true);
  ASSERT_EQ(Types(msgs), (std::vector<std::string>{"started", "preempt_notice"}));
  EXPECT_EQ(msgs[1]["cause"], "the provider signalled the agent");
  EXPECT_TRUE(a.notice.empty());
}

}  // namespace
}  // namespace sluice::agent::internal
