// Fencing (issue 11 item 2): leases on running attempts, renewed by the server's replies to
// heartbeats. Real server and agents on loopback; a network partition is a paused proxy.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/text.h"
#include "harness.h"
#include "pausable_proxy.h"

namespace sluice::testing {
namespace {

namespace fs = std::filesystem;

bool Contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

// The freezer state of an attempt's cgroup, v1 or v2: "frozen", "thawed", or "" when it has
// none (gone, or no cgroups on this host).
std::string Freezer(const std::string& attempt_id) {
  std::string v1 = ReadAll("/sys/fs/cgroup/freezer/sluice/" + attempt_id + "/freezer.state");
  if (!v1.empty()) return Trim(v1) == "FROZEN" ? "frozen" : "thawed";
  std::string v2 = ReadAll("/sys/fs/cgroup/sluice/" + attempt_id + "/cgroup.events");
  if (!v2.empty()) return Contains(v2, "frozen 1") ? "frozen" : "thawed";
  return "";
}

// Processes left in an attempt's cgroup (any tree); 0 when it is gone.
size_t CgroupProcs(const std::string& attempt_id) {
  for (const std::string root : {"/sys/fs/cgroup/pids/sluice/", "/sys/fs/cgroup/sluice/"}) {
    std::string procs = ReadAll(root + attempt_id + "/cgroup.procs");
    if (!procs.empty()) return Split(Trim(procs), '\n').size();
  }
  return 0;
}

class FencingE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The test reads the attempt's freezer: the agent must be able to make cgroups.
    if (geteuid() != 0) GTEST_SKIP() << "the agent makes job cgroups only as root";
    cluster_.StartServer(ServerFlags());
  }
  // A short lease against a long grace: the agent freezes long before the server would
  // declare its node lost, which keeps the test's timing far from any edge.
  virtual std::vector<std::string> ServerFlags() const {
    return {"--heartbeat-interval", "0.3", "--heartbeat-grace", "10", "--lease", "2",
            "--cancel-grace",       "1"};
  }
  void TearDown() override {
    if (!HasFailure()) return;
    std::cerr << "---- server log ----\n" << cluster_.ServerLog() << "\n";
    // What the attempts' supervisors said: they act on their own when the agent is silent.
    std::error_code ec;
    for (const auto& agent : fs::directory_iterator(cluster_.dir(), ec)) {
      for (const auto& d : fs::directory_iterator(agent.path() / "attempts", ec)) {
        std::string said = ReadAll((d.path() / "supervisor.log").string());
        if (!said.empty()) std::cerr << "---- " << d.path().string() << " ----\n" << said;
      }
    }
  }

  // A job that ticks into its work dir until the test drops a `release` file there, and says
  // `noted` once it sees a `note` file.
  std::string Submit() {
    std::string spec = cluster_.WriteFile("tick.yaml", R"(name: tick
run: |
  echo started
  while [ ! -f release ]; do
    date +%s%N > tick
    if [ -f note ] && [ ! -f noted ]; then echo noted; touch noted; fi
    sleep 0.05
  done
  echo finished
)");
    return Trim(cluster_.Cli({"run", spec, "--detach"}).out);
  }
  Json Job(const std::string& id) { return cluster_.CliJson({"job", id}); }
  std::string AttemptId(const std::string& job, size_t i) {
    Json j = Job(job);
    if (!j.is_object() || j["attempts"].size() <= i) return "";
    return j["attempts"][i].value("id", "");
  }
  std::string WorkDir(const std::string& agent, const std::string& attempt) {
    return cluster_.dir() + "/agent-" + agent + "/work/" + attempt;
  }
  // The id of attempt `i` of `job` once it runs on `agent` and ticks; "" if it never does.
  std::string TickingAttempt(const std::string& job, size_t i, const std::string& agent) {
    std::string att;
    bool ticking = WaitUntil([&] {
      att = AttemptId(job, i);
      return !att.empty() && fs::exists(WorkDir(agent, att) + "/tick");
    });
    return ticking ? att : "";
  }
  // Agent a1 runs a job that ticks, then is killed (SIGKILL) under it: the job's supervisor is
  // left running it with no agent. The job's id and its attempt's ("" if it never ticked, and
  // then the agent is left running).
  std::pair<std::string, std::string> KillAgentUnderTickingJob() {
    Daemon* agent = cluster_.StartAgent("a1");
    const std::string job = Submit();
    const std::string att = TickingAttempt(job, 0, "a1");
    if (att.empty()) return {job, att};
    agent->Signal(SIGKILL);
    agent->Wait(std::chrono::seconds(5));
    return {job, att};
  }
  std::string State(const std::string& job) {
    Json j = Job(job);
    return j.is_object() ? j["job"].value("state", "") : "";
  }

  void PartitionThenHeal(bool reconnect);

  Cluster cluster_;
};

// The server stops answering for longer than the lease (SIGSTOP: an outage, or a server stuck
// on its disk): the running job is frozen, not killed, and thawed once the server is back; it
// then finishes, once.
TEST_F(FencingE2ETest, AServerOutageFreezesTheRunningJobAndNeverKillsIt) {
  Daemon* agent = cluster_.StartAgent("a1");
  std::string job = Submit();
  std::string att = TickingAttempt(job, 0, "a1");
  ASSERT_FALSE(att.empty()) << Job(job).dump();
  EXPECT_EQ(Freezer(att), "thawed");
  cluster_.server()->Signal(SIGSTOP);
  EXPECT_TRUE(WaitUntil([&] { return Freezer(att) == "frozen"; }, std::chrono::seconds(15)))
      << agent->Log();
  // The agent writes its line just after the freeze took effect.
  EXPECT_TRUE(WaitUntil([&] { return Contains(agent->Log(), "lease of " + att + " ran out"); }))
      << agent->Log();
  cluster_.server()->Signal(SIGCONT);
  EXPECT_TRUE(WaitUntil([&] { return Freezer(att) == "thawed"; }, std::chrono::seconds(15)))
      << agent->Log();
  std::ofstream(WorkDir("a1", att) + "/release") << "go";
  EXPECT_TRUE(WaitUntil([&] { return State(job) == "succeeded"; })) << Job(job).dump();
  EXPECT_EQ(Job(job)["attempts"].size(), 1u);
  EXPECT_EQ(cluster_.Cli({"logs", job}).out, "started\nfinished\n");
}

// A server that is down for longer than the heartbeat grace (killed, restarted later): its
// running job freezes, and once the server is back it is thawed and finishes, once. The server
// counts the lease and the grace from its restart, not from the node's last heartbeat.
TEST_F(FencingE2ETest, AServerRestartLongerThanTheGraceLosesAndDuplicatesNothing) {
  Daemon* agent = cluster_.StartAgent("a1");
  std::string job = Submit();
  std::string att = TickingAttempt(job, 0, "a1");
  ASSERT_FALSE(att.empty()) << Job(job).dump();
  cluster_.KillServer(SIGKILL);
  EXPECT_TRUE(WaitUntil([&] { return Freezer(att) == "frozen"; }, std::chrono::seconds(15)))
      << agent->Log();
  // The outage itself is this test's input, not a wait for a condition: longer than the 10 s
  // grace, counted from the freeze (itself 2 s after the last heartbeat).
  std::this_thread::sleep_for(std::chrono::seconds(11));
  cluster_.StartServer();
  EXPECT_TRUE(WaitUntil([&] { return Freezer(att) == "thawed"; }, std::chrono::seconds(20)))
      << agent->Log();
  std::ofstream(WorkDir("a1", att) + "/release") << "go";
  EXPECT_TRUE(WaitUntil([&] { return State(job) == "succeeded"; })) << Job(job).dump();
  Json j = Job(job);
  EXPECT_EQ(j["attempts"].size(), 1u) << j.dump();
  EXPECT_EQ(cluster_.Cli({"logs", job}).out, "started\nfinished\n");
}

// A partition: the agent is alive but cut off. Its lease runs out and its job freezes; the
// server declares the node lost after the grace and places the job on another node, while the
// first copy is frozen (zero overlap). When the link heals, the first agent learns the attempt
// is no longer its own and kills it, frozen; it never runs again. The link heals in place (the
// next lease reply disowns the attempt) or by a new connection (the server answers the agent's
// `hello` with `kill`).
void FencingE2ETest::PartitionThenHeal(bool reconnect) {
  const std::string url = cluster_.url();
  PausableProxy proxy(static_cast<uint16_t>(std::stoi(url.substr(url.rfind(':') + 1))));
  cluster_.agent_server_url = "http://127.0.0.1:" + std::to_string(proxy.port());
  Daemon* a1 = cluster_.StartAgent("a1");
  cluster_.agent_server_url.clear();
  std::string job = Submit();
  std::string att1 = TickingAttempt(job, 0, "a1");
  ASSERT_FALSE(att1.empty()) << Job(job).dump();
  proxy.Pause();
  EXPECT_TRUE(WaitUntil([&] { return Freezer(att1) == "frozen"; }, std::chrono::seconds(15)))
      << a1->Log();
  ASSERT_TRUE(WaitUntil([&] { return State(job) == "queued"; }, std::chrono::seconds(30)))
      << Job(job).dump();
  cluster_.StartAgent("a2");
  std::string att2 = TickingAttempt(job, 1, "a2");
  ASSERT_FALSE(att2.empty()) << Job(job).dump();
  // Attempt 2 runs; attempt 1 is frozen, and its tick stands still.
  EXPECT_EQ(Freezer(att1), "frozen");
  std::string tick1 = ReadAll(WorkDir("a1", att1) + "/tick");
  if (reconnect) proxy.Sever();
  proxy.Resume();
  EXPECT_TRUE(WaitUntil([&] { return CgroupProcs(att1) == 0; }, std::chrono::seconds(20)))
      << a1->Log();
  EXPECT_TRUE(Contains(a1->Log(), att1 + " is no longer placed on this node: killed")) << a1->Log();
  // Killed frozen: never thawed (a cancel's grace period would have let it run beside attempt 2).
  EXPECT_FALSE(Contains(a1->Log(), "the server confirmed " + att1 + ": thawed")) << a1->Log();
  // Its work dir goes once the server has its exit; until then its tick must stand still.
  std::string after = ReadAll(WorkDir("a1", att1) + "/tick");
  EXPECT_TRUE(after.empty() || after == tick1) << "attempt 1 ran again";
  std::ofstream(WorkDir("a2", att2) + "/release") << "go";
  EXPECT_TRUE(WaitUntil([&] { return State(job) == "succeeded"; })) << Job(job).dump();
  Json j = Job(job);
  ASSERT_EQ(j["attempts"].size(), 2u);
  EXPECT_EQ(j["attempts"][0]["state"], "lost");
}

TEST_F(FencingE2ETest, APartitionedNodesJobIsFrozenBeforeItRunsElsewhereAndKilledAfter) {
  PartitionThenHeal(/*reconnect=*/false);
}

TEST_F(FencingE2ETest, APartitionedNodeThatReconnectsKillsItsMovedJobWithoutThawingIt) {
  PartitionThenHeal(/*reconnect=*/true);
}

// A lease as long as the grace would let the server place a job elsewhere while the first copy
// still runs: the server refuses to start with one.
// Issue 11 item 1: the agent is killed and restarted while its job runs. The job's supervisor
// keeps it running (and what it prints) meanwhile; the new agent reattaches to it, and the job
// finishes as the one attempt it always was, its output complete and in order.
// The restart must come before the supervisor fences the job: with the fixture's lease (2 s,
// killed 4 s after it ends) a restarted agent that waits on a loaded machine (its probe, the
// xtables lock other tests' agents hold) could miss that window. Here it is 12.5 s.
class FencingRestartE2ETest : public FencingE2ETest {
 protected:
  std::vector<std::string> ServerFlags() const override {
    return {"--heartbeat-interval", "0.3", "--heartbeat-grace", "20", "--lease", "5",
            "--cancel-grace",       "1"};
  }
};

TEST_F(FencingRestartE2ETest, AKilledAgentRestartedInTimeReattachesToItsJobWhichIsNeverRestarted) {
  const auto orphan = KillAgentUnderTickingJob();
  const std::string& job = orphan.first;
  const std::string& att = orphan.second;
  ASSERT_FALSE(att.empty()) << cluster_.ServerLog();
  const std::string work = WorkDir("a1", att);
  const std::string tick = ReadAll(work + "/tick");
  EXPECT_TRUE(WaitUntil([&] { return ReadAll(work + "/tick") != tick; }))
      << "the job stopped with its agent";
  std::ofstream(work + "/note") << "x";  // printed while no agent listens
  ASSERT_TRUE(WaitUntil([&] { return fs::exists(work + "/noted"); }));
  Daemon* back = cluster_.StartAgent("a1");
  EXPECT_TRUE(Contains(back->Log(), "reattached to the supervisor of " + att)) << back->Log();
  ASSERT_TRUE(WaitUntil([&] {
    return Contains(cluster_.Cli({"logs", job}).out, "noted");
  })) << back->Log();
  EXPECT_EQ(State(job), "running");
  std::ofstream(work + "/release") << "x";
  ASSERT_TRUE(WaitUntil([&] { return State(job) == "succeeded"; })) << Job(job).dump(2);
  Json j = Job(job);
  EXPECT_EQ(j["attempts"].size(), 1u) << j.dump(2);
  EXPECT_EQ(cluster_.Cli({"logs", job}).out, "started\nnoted\nfinished\n");
}

// The same restart, too late: the supervisor fenced the job when its lease ran out (2 s, killed
// 4 s later) with no agent to renew it. The restarted agent neither reattaches nor runs it
// again; it says the supervisor killed it, and reports it lost, so the server places it anew.
TEST_F(FencingE2ETest, AnAgentRestartedAfterItsJobWasFencedSaysSoAndReportsItLost) {
  const auto orphan = KillAgentUnderTickingJob();
  const std::string& job = orphan.first;
  const std::string& att = orphan.second;
  ASSERT_FALSE(att.empty()) << cluster_.ServerLog();
  const std::string end = cluster_.dir() + "/agent-a1/attempts/" + att + ".d/exit.json";
  ASSERT_TRUE(WaitUntil([&] {
    auto j = ParseJson(ReadAll(end));
    return j.ok() && j->value("fenced", false);
  })) << "the supervisor did not fence the job";
  Daemon* back = cluster_.StartAgent("a1");
  EXPECT_TRUE(Contains(back->Log(), "attempt " + att +
                                        " was killed by its supervisor while no agent renewed "
                                        "its lease; reporting it lost"))
      << back->Log();
  EXPECT_FALSE(Contains(back->Log(), "reattached to the supervisor of " + att)) << back->Log();
  EXPECT_TRUE(WaitUntil([&] { return Job(job)["attempts"][0].value("state", "") == "lost"; }))
      << Job(job).dump(2);
}

// A hung agent (stopped, not dead: its sockets stay open) renews nothing and vouches for
// nothing. The supervisor freezes the job at the end of its lease, and kills it once the agent
// has been silent for 5 s and the kill deadline has come, before the server declares the node
// lost and may place the job again. When the agent wakes up it reports the attempt lost.
TEST_F(FencingE2ETest, AHungAgentsJobIsGoneBeforeTheServerCanPlaceItAgain) {
  Daemon* a1 = cluster_.StartAgent("a1");
  std::string job = Submit();
  std::string att1 = TickingAttempt(job, 0, "a1");
  ASSERT_FALSE(att1.empty()) << Job(job).dump();
  ASSERT_GT(CgroupProcs(att1), 0u);
  a1->Signal(SIGSTOP);
  ASSERT_TRUE(WaitUntil(
      [&] {
        Json nodes = cluster_.CliJson({"nodes"});
        return nodes.is_array() && !nodes.empty() && nodes[0].value("state", "") == "lost";
      },
      std::chrono::seconds(30)));
  // The earliest the job can be placed again: nothing of attempt 1 is left by then.
  EXPECT_EQ(CgroupProcs(att1), 0u);
  cluster_.StartAgent("a2");
  std::string att2 = TickingAttempt(job, 1, "a2");
  ASSERT_FALSE(att2.empty()) << Job(job).dump();
  // Awake, the agent finds the attempt fenced by its supervisor and reports it lost.
  a1->Signal(SIGCONT);
  EXPECT_TRUE(WaitUntil([&] { return Contains(a1->Log(), "reporting it lost"); })) << a1->Log();
  std::ofstream(WorkDir("a2", att2) + "/release") << "go";
  EXPECT_TRUE(WaitUntil([&] { return State(job) == "succeeded"; })) << Job(job).dump();
  Json j = Job(job);
  ASSERT_EQ(j["attempts"].size(), 2u) << j.dump(2);
  EXPECT_EQ(j["attempts"][0]["state"], "lost");
}

// The supervisors' control sockets live in the agent's data dir; a unix socket path has at most
// 107 bytes. Refused at start, with the longest that would do, not at each job.
TEST(FencingConfigTest, AnAgentDataDirTooLongForItsSupervisorsSocketsIsRefusedAtStart) {
  const fs::path base = fs::temp_directory_path() / ("sluice-long-" + std::to_string(getpid()));
  const std::string dir = (base / std::string(90, 'd')).string();
  fs::create_directories(base);
  const std::string token = (base / "join.token").string();
  std::ofstream(token) << "sj_notarealtoken\n";
  CommandResult r = RunCommand({SluiceBinary(), "agent", "--server", "http://127.0.0.1:9",
                                "--join-token-file", token, "--data-dir", dir});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(Contains(r.err, "is too long")) << r.err;
  EXPECT_TRUE(Contains(r.err, "use one of at most")) << r.err;
  std::error_code ec;
  fs::remove_all(base, ec);
}

// `--supervisor` names the supervisor binary; one the agent cannot run is refused at start,
// never discovered at the first job.
TEST(FencingConfigTest, ASupervisorTheAgentCannotRunIsRefusedAtStart) {
  const fs::path base = fs::temp_directory_path() / ("sluice-sup-" + std::to_string(getpid()));
  fs::create_directories(base);
  const std::string token = (base / "join.token").string();
  std::ofstream(token) << "sj_notarealtoken\n";
  const std::vector<std::string> agent = {
      SluiceBinary(),      "agent", "--server",   "http://127.0.0.1:9",
      "--join-token-file", token,   "--data-dir", (base / "data").string()};
  auto with = [&](const std::string& supervisor) {
    std::vector<std::string> argv = agent;
    argv.insert(argv.end(), {"--supervisor", supervisor});
    return RunCommand(argv);
  };
  CommandResult missing = with((base / "no-such-supervisor").string());
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_TRUE(Contains(missing.err, "--supervisor")) << missing.err;
  CommandResult not_executable = with(token);  // exists, but is no program
  EXPECT_EQ(not_executable.exit_code, 2) << not_executable.err;
  EXPECT_TRUE(Contains(not_executable.err, token)) << not_executable.err;
  std::error_code ec;
  fs::remove_all(base, ec);
}

TEST(FencingConfigTest, ALeaseNotShorterThanTheGraceIsRefusedAtStart) {
  std::string dir = fs::temp_directory_path() / ("sluice-lease-" + std::to_string(getpid()));
  CommandResult r = RunCommand({SluiceBinary(), "server", "--data-dir", dir, "--listen",
                                "127.0.0.1:0", "--heartbeat-grace", "15", "--lease", "15"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(Contains(r.err, "--lease (15.0 s) must be shorter than --heartbeat-grace")) << r.err;
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace sluice::testing
