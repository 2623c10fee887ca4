#include "common/agent_protocol.h"

#include <gtest/gtest.h>

namespace sluice::proto {
namespace {

// What one end writes, the other reads back the same, through JSON text as on the wire.
template <typename T, typename Parse>
T RoundTrip(const Json& j, Parse parse) {
  auto parsed = ParseJson(DumpJson(j));
  EXPECT_TRUE(parsed.ok());
  auto m = parse(*parsed);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : T{};
}

TEST(AgentProtocolTest, ServerMessagesRoundTrip) {
  Welcome w{"node-1", 2000, 10000, 15000, "secret"};
  Welcome w2 = RoundTrip<Welcome>(ToJson(w), WelcomeFromJson);
  EXPECT_EQ(w2.node_id, "node-1");
  EXPECT_EQ(w2.heartbeat_interval_ms, 2000);
  EXPECT_EQ(w2.lease_ms, 10000);
  EXPECT_EQ(w2.heartbeat_grace_ms, 15000);
  EXPECT_EQ(w2.credential, "secret");
  EXPECT_FALSE(ToJson(Welcome{"n", 1, 0, 0, ""}).contains("credential"));

  Lease l{7, 10000, {"att-a", "att-b"}};
  Lease l2 = RoundTrip<Lease>(ToJson(l), LeaseFromJson);
  EXPECT_EQ(l2.seq, 7);
  EXPECT_EQ(l2.attempts, (std::vector<std::string>{"att-a", "att-b"}));

  Json preempt = PreemptMessage({"att-1", 5000, "spot notice"});
  EXPECT_EQ(preempt["type"], "preempt");
  Stop s = RoundTrip<Stop>(preempt, StopFromJson);
  EXPECT_EQ(s.grace_ms, 5000);
  EXPECT_EQ(s.cause, "spot notice");
  EXPECT_EQ(CancelMessage({"att-1", 3000})["type"], "cancel");
  EXPECT_EQ(RoundTrip<Kill>(ToJson(Kill{"att-1", "moved"}), KillFromJson).reason, "moved");
  EXPECT_EQ(RoundTrip<LogAck>(ToJson(LogAck{"att-1", 42}), LogAckFromJson).seq, 42);
  EXPECT_EQ(RoundTrip<ExitAck>(ToJson(ExitAck{"att-1"}), ExitAckFromJson).attempt_id, "att-1");
  EXPECT_EQ(RoundTrip<Reverify>(ToJson(Reverify{"scheduled", "n1"}), ReverifyFromJson).nonce, "n1");
  EXPECT_EQ(RoundTrip<ErrorMessage>(ToJson(ErrorMessage{"NOT_FOUND", "no"}), ErrorFromJson).code,
            "NOT_FOUND");
}

TEST(AgentProtocolTest, AgentMessagesAreReadByTheirType) {
  auto read = [](const Json& j) {
    auto m = AgentMessageFromJson(j);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? *m : AgentMessage{};
  };
  EXPECT_EQ(std::get<Heartbeat>(read(ToJson(Heartbeat{9}))).seq, 9);
  EXPECT_EQ(std::get<Started>(read(ToJson(Started{"att-1"}))).attempt_id, "att-1");
  auto cp = std::get<CheckpointSaved>(read(ToJson(CheckpointSaved{"att-1", "abc"})));
  EXPECT_EQ(cp.manifest, "abc");
  auto notice = std::get<PreemptNotice>(read(ToJson(PreemptNotice{"att-1", "reclaimed"})));
  EXPECT_EQ(notice.cause, "reclaimed");
  auto conf = std::get<ConformanceMessage>(
      read(ToJson(ConformanceMessage{Json{{"checks", Json::array()}}, "n1"})));
  EXPECT_EQ(conf.nonce, "n1");
  auto log = std::get<LogBatch>(read(LogMessage("att-1", {{1, "stdout", 5, "hi"}})));
  ASSERT_EQ(log.lines.size(), 1u);
  EXPECT_EQ(log.lines[0].text, "hi");
  auto ex = std::get<Exited>(read(ToJson(Exited{"att-1", 3, 0, ""})));
  EXPECT_EQ(ex.exit_code, 3);
}

// What a hostile peer might send is refused with the field named, never thrown.
TEST(AgentProtocolTest, MalformedMessagesNameTheField) {
  auto err = [](const Json& j) {
    auto m = AgentMessageFromJson(j);
    return m.ok() ? std::string("accepted") : m.status().message();
  };
  EXPECT_NE(err(Json::array()).find("object"), std::string::npos);
  EXPECT_NE(err(Json{{"type", 5}}).find("type"), std::string::npos);
  EXPECT_NE(err(Json{{"type", "launch_missiles"}}).find("unknown message type"), std::string::npos);
  EXPECT_NE(err(Json{{"type", "started"}}).find("attempt_id"), std::string::npos);
  EXPECT_NE(
      err(Json{{"type", "checkpoint"}, {"attempt_id", "a"}, {"manifest", 1}}).find("manifest"),
      std::string::npos);
  EXPECT_NE(err(Json{{"type", "conformance"}}).find("report"), std::string::npos);
  // A heartbeat whose seq is not a number still counts as a sign of life.
  EXPECT_EQ(err(Json{{"type", "heartbeat"}, {"seq", "x"}}), "accepted");

  auto lease = LeaseFromJson(Json{{"type", "lease"}, {"attempts", Json{{"a", 1}}}});
  EXPECT_FALSE(lease.ok());
  auto lease2 = LeaseFromJson(Json{{"type", "lease"}, {"attempts", Json::array({"a", 2})}});
  ASSERT_FALSE(lease2.ok());
  EXPECT_NE(lease2.status().message().find("attempts[1]"), std::string::npos);
  auto welcome = WelcomeFromJson(Json{{"node_id", "n"}, {"lease_ms", -5}});
  ASSERT_FALSE(welcome.ok());
  EXPECT_NE(welcome.status().message().find("lease_ms"), std::string::npos);
  EXPECT_FALSE(StopFromJson(Json{{"attempt_id", "a"}, {"grace_ms", "soon"}}).ok());
  // A long cause is cut, not stored whole.
  auto notice = PreemptNoticeFromJson(Json{{"attempt_id", "a"}, {"cause", std::string(5000, 'x')}});
  ASSERT_TRUE(notice.ok());
  EXPECT_EQ(notice->cause.size(), 300u);
}

}  // namespace
}  // namespace sluice::proto
