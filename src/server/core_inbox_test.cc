// The inbox with its own thread, as the server runs it: heartbeats answered on the thread that
// read them when nothing of their node waits, and in their node's order when something does
// (docs/design-notes.md "Agent messages: one commit for many").
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <set>
#include <thread>

#include "server/core_test_fixture.h"

namespace sluice::server {
namespace {

using namespace std::chrono_literals;

class CoreInboxThreadTest : public ServerCoreTest {
 protected:
  void SetUp() override {
    ServerCoreTest::SetUp();
    core_->StartInbox();
  }
  struct Agent {
    std::shared_ptr<RecordingLink> link = std::make_shared<RecordingLink>();
    std::string node, job, attempt;
  };
  // A verified 4-CPU node running a job that takes all of it.
  Agent RunningAgent(const std::string& name) {
    Agent a;
    auto node = Hello(a.link, CpuHello(name));
    EXPECT_TRUE(node.ok()) << node.status().ToString();
    a.node = node.ok() ? *node : "";
    auto job = core_->SubmitJob(Spec(4), "");
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    a.job = job.ok() ? job->id : "";
    a.attempt = StartLastAssigned(a.node, *a.link);
    EXPECT_FALSE(a.attempt.empty()) << "the new node is the only one free";
    return a;
  }
  // Where and with what a message's `done` was called.
  struct Outcome {
    std::promise<void> called;
    std::optional<Status> status;
    std::thread::id thread;
  };
  Status Post(const Agent& a, proto::AgentMessage m, Outcome& out) {
    return core_->PostAgentMessage(a.node, a.link, std::move(m), [&out](const Status& s) {
      out.status = s;
      out.thread = std::this_thread::get_id();
      out.called.set_value();
    });
  }
  // Positions of the messages of `type` in what `link` was sent, oldest first.
  static std::vector<size_t> Positions(const RecordingLink& link, const std::string& type) {
    std::lock_guard<std::mutex> lock(link.mu);
    std::vector<size_t> at;
    for (size_t i = 0; i < link.sent.size(); ++i) {
      if (link.sent[i].value("type", "") == type) at.push_back(i);
    }
    return at;
  }
};

TEST_F(CoreInboxThreadTest, AHeartbeatIsAnsweredByTheThreadThatReadItWhenNothingOfItsNodeWaits) {
  Agent a = RunningAgent("a");
  Outcome out;
  ASSERT_TRUE(Post(a, proto::Heartbeat{7}, out).ok());
  // Answered before the post returned, on this thread: no hand-off to the inbox thread.
  ASSERT_TRUE(out.status.has_value());
  EXPECT_TRUE(out.status->ok()) << out.status->ToString();
  EXPECT_EQ(out.thread, std::this_thread::get_id());
  auto leases = a.link->OfType("lease");
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases[0]["seq"], 7);
  EXPECT_EQ(leases[0]["attempts"], Json::array({a.attempt}));
}

TEST_F(CoreInboxThreadTest, AHeartbeatWaitsBehindItsNodesEarlierMessages) {
  Agent a = RunningAgent("a"), b = RunningAgent("b");
  // Hold the inbox thread in b's `done`, which runs with the core's lock free: the lock is then
  // free for the heartbeat, and a's `exited` waits in the inbox.
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  ASSERT_TRUE(core_
                  ->PostAgentMessage(b.node, b.link,
                                     proto::LogBatch{b.attempt, {{1, "stdout", 0, "epoch 1"}}},
                                     [&entered, released](const Status&) {
                                       entered.set_value();
                                       released.wait();
                                     })
                  .ok());
  ASSERT_EQ(entered.get_future().wait_for(30s), std::future_status::ready);

  Outcome exited, beat;
  ASSERT_TRUE(Post(a, proto::Exited{a.attempt, 0, 0, ""}, exited).ok());
  ASSERT_TRUE(Post(a, proto::Heartbeat{8}, beat).ok());
  EXPECT_FALSE(beat.status.has_value()) << "answered before the node's `exited` was handled";
  EXPECT_TRUE(a.link->OfType("lease").empty());

  release.set_value();
  ASSERT_EQ(beat.called.get_future().wait_for(30s), std::future_status::ready);
  ASSERT_EQ(exited.called.get_future().wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(exited.status->ok()) << exited.status->ToString();
  EXPECT_TRUE(beat.status->ok()) << beat.status->ToString();
  EXPECT_NE(beat.thread, std::this_thread::get_id());
  // The lease follows the exit's acknowledgement and no longer lists the attempt.
  auto acks = Positions(*a.link, "exit_ack"), leases = Positions(*a.link, "lease");
  ASSERT_EQ(acks.size(), 1u);
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_LT(acks[0], leases[0]);
  EXPECT_EQ(a.link->OfType("lease")[0]["attempts"], Json::array());
}

TEST_F(CoreInboxThreadTest, AHeartbeatOnAReplacedLinkIsRefusedAsBefore) {
  Agent a = RunningAgent("a");
  // The agent reconnects: the old link no longer speaks for the node.
  auto fresh = std::make_shared<RecordingLink>();
  ASSERT_TRUE(core_->AgentHello(fresh, CpuHello(a.node)).ok());
  Outcome out;
  ASSERT_TRUE(Post(a, proto::Heartbeat{9}, out).ok());
  ASSERT_EQ(out.called.get_future().wait_for(30s), std::future_status::ready);
  EXPECT_EQ(out.status->code(), StatusCode::kFailedPrecondition) << out.status->ToString();
  EXPECT_TRUE(a.link->OfType("lease").empty());
  EXPECT_TRUE(fresh->OfType("lease").empty());
}

// The names `top -H`, `perf` and bench/swarm tell the core's threads apart by.
TEST_F(CoreInboxThreadTest, TheInboxAndSchedulerThreadsCarryTheirNames) {
  core_->StartScheduler();
  auto names = [] {
    std::set<std::string> out;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
      std::ifstream comm(task.path() / "comm");
      std::string name;
      if (std::getline(comm, name)) out.insert(name);
    }
    return out;
  };
  // A thread names itself once it runs: wait for both, with a deadline.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  std::set<std::string> seen = names();
  while (!(seen.count("sluice-inbox") && seen.count("sluice-sched")) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
    seen = names();
  }
  EXPECT_TRUE(seen.count("sluice-inbox"));
  EXPECT_TRUE(seen.count("sluice-sched"));
}

}  // namespace
}  // namespace sluice::server
