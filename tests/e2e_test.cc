// End-to-end tests: the real `sluice server`, `sluice agent` and CLI processes on loopback.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "common/text.h"
#include "harness.h"

namespace sluice::testing {
namespace {

bool Contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

std::string JobId(const CommandResult& r) { return Trim(r.out); }

Json GetJob(Cluster& c, const std::string& id) { return c.CliJson({"job", id}); }

std::string JobState(Cluster& c, const std::string& id) {
  Json j = GetJob(c, id);
  return j.is_object() ? j["job"].value("state", "") : "";
}

// Live (not zombie) processes on this host with `arg` among their arguments. A sandboxed job
// sees its own PID namespace, so it cannot tell us its host pids: tests give its processes a
// unique argument (`sleep 300.25`) and look for that instead.
std::vector<pid_t> LivePidsWithArg(const std::string& arg) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string all = ReadAll(e.path() / "cmdline");
    bool has = false;
    for (const auto& a : Split(all, '\0')) has = has || a == arg;
    if (!has) continue;
    const std::string st = ReadAll(e.path() / "stat");
    if (st.empty()) continue;  // exited since the listing
    size_t paren = st.rfind(')');
    if (paren != std::string::npos && paren + 2 < st.size() && st[paren + 2] == 'Z') continue;
    out.push_back(std::stoi(name));
  }
  return out;
}

class E2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A grace with room for a loaded machine (the sanitized suite on 2 cores): a node wrongly
    // declared lost would fail a test for the wrong reason.
    cluster_.StartServer(
        {"--heartbeat-interval", "0.3", "--heartbeat-grace", "6", "--cancel-grace", "1"});
  }
  void TearDown() override {
    if (HasFailure()) {
      std::cerr << "---- server log ----\n" << cluster_.ServerLog() << "\n";
    }
  }
  std::string Spec(const std::string& name, const std::string& body) {
    return cluster_.WriteFile(name + ".yaml", body);
  }
  // `sluice catalog import` of one of the shipped catalogs (data/catalog/NAME); its exit code.
  int ImportCatalog(const std::string& name) {
    return cluster_
        .Cli(
            {"catalog", "import", std::string(SLUICE_SOURCE_DIR_DEFAULT) + "/data/catalog/" + name})
        .exit_code;
  }
  Cluster cluster_;
};

// Preemption, checkpoint and recovery tests (issue 4), grouped under their own name.
class RecoveryE2ETest : public E2ETest {};

TEST_F(E2ETest, JobOutputAndExitCodeComeBack) {
  // An agent in a CUDA container image, which names the driver's libraries only in
  // LD_LIBRARY_PATH: its jobs need the same, or their PyTorch finds no GPU.
  cluster_.StartAgent("a1", {}, true, {{"LD_LIBRARY_PATH", "/usr/local/nvidia/lib64"}});
  std::string spec = Spec("hello", R"(name: hello
resources: {cpus: 1, memory_gb: 0.5}
env: {GREETING: bonjour}
run: |
  echo "$GREETING from $SLUICE_JOB_ID"
  echo "visible=[$CUDA_VISIBLE_DEVICES] libraries=[$LD_LIBRARY_PATH]"
  echo to-stderr >&2
)");
  CommandResult r = cluster_.Cli({"run", spec, "--follow"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "bonjour from job-")) << r.out;
  // A CPU job sees no GPU; the agent's library path comes with the job.
  EXPECT_TRUE(Contains(r.out, "visible=[] libraries=[/usr/local/nvidia/lib64]")) << r.out;
  EXPECT_TRUE(Contains(r.err, "to-stderr")) << r.err;
  EXPECT_FALSE(Contains(r.out, "to-stderr"));
  EXPECT_TRUE(Contains(r.err, "succeeded")) << r.err;
}

TEST_F(E2ETest, NonZeroExitPropagatesToRun) {
  cluster_.StartAgent("a1");
  std::string spec = Spec("fail", "name: fail\nrun: echo about to fail; exit 7\n");
  CommandResult r = cluster_.Cli({"run", spec, "--follow"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_TRUE(Contains(r.out, "about to fail"));
  CommandResult jobs = cluster_.Cli({"jobs"});
  EXPECT_TRUE(Contains(jobs.out, "failed")) << jobs.out;
}

TEST_F(E2ETest, DetachThenLogsAndJobShowTheRun) {
  cluster_.StartAgent("a1");
  std::string spec = Spec("d", "name: detached\nrun: for i in 1 2 3; do echo line$i; done\n");
  CommandResult r = cluster_.Cli({"run", spec, "--detach"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = JobId(r);
  ASSERT_TRUE(Contains(id, "job-")) << id;
  ASSERT_TRUE(WaitUntil([&] { return JobState(cluster_, id) == "succeeded"; }));
  CommandResult logs = cluster_.Cli({"logs", id});
  EXPECT_EQ(logs.out, "line1\nline2\nline3\n");
  CommandResult follow = cluster_.Cli({"logs", "-f", id});  // a finished job: replay and end
  EXPECT_EQ(follow.exit_code, 0);
  EXPECT_EQ(follow.out, "line1\nline2\nline3\n");
  CommandResult job = cluster_.Cli({"job", id});
  EXPECT_TRUE(Contains(job.out, "succeeded"));
  EXPECT_TRUE(Contains(job.out, "placed on a1"));
}

TEST_F(E2ETest, WorkdirIsUploadedAndUnpacked) {
  cluster_.StartAgent("a1");
  cluster_.WriteFile("proj/compute.sh", "#!/bin/bash\necho \"sum=$((40 + 2))\"\n");
  std::filesystem::permissions(cluster_.dir() + "/proj/compute.sh",
                               std::filesystem::perms::owner_all);
  std::string spec = Spec("wd", "name: wd\nworkdir: proj\nrun: ./compute.sh\n");
  CommandResult r = cluster_.Cli({"run", spec, "--follow"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "sum=42")) << r.out << r.err;
}

// libarchive (and the twelve libraries it pulls in) is loaded only when an archive is packed or
// unpacked, as above: every other command starts without it (common/libarchive.h says why).
TEST(StartUpTest, TheBinaryDoesNotLoadLibarchiveAtStart) {
  // The dynamic loader lists what it would load and exits (what ldd does).
  CommandResult r = RunCommand({SluiceBinary(), "--version"}, {{"LD_TRACE_LOADED_OBJECTS", "1"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "libc.so")) << r.out;  // the listing is live
  EXPECT_FALSE(Contains(r.out, "libarchive")) << r.out;
}

// Issue 11 item 4: a job is held to the memory it was allocated (its cgroup); going over kills
// it with a reason that says so, and the node carries on.
TEST_F(E2ETest, AJobOverItsMemoryFailsWithOutOfMemoryAndTheNodeStaysUp) {
  Daemon* agent = cluster_.StartAgent("a1");
  if (Contains(agent->Log(), "job limits: none")) {
    GTEST_SKIP() << "no usable cgroups on this host: " << agent->Log();
  }
  std::string hog = Spec("hog",
                         "name: hog\nresources: {cpus: 1, memory_gb: 0.1}\n"
                         "run: /usr/bin/python3 -c 'b = bytearray(1 << 30); print(len(b))'\n");
  std::string id = JobId(cluster_.Cli({"run", hog, "--detach"}));
  ASSERT_TRUE(WaitUntil([&] { return JobState(cluster_, id) == "failed"; }))
      << GetJob(cluster_, id).dump(2);
  Json j = GetJob(cluster_, id);
  EXPECT_EQ(j["job"]["state"], "failed") << j.dump(2);
  std::string cause = j["attempts"][0].value("cause", "");
  EXPECT_TRUE(Contains(cause, "out of memory")) << cause;
  EXPECT_TRUE(Contains(cause, "0.1 GB")) << cause;
  // The node is fine and takes the next job.
  std::string ok = Spec("fine", "name: fine\nrun: echo still here\n");
  CommandResult f = cluster_.Cli({"run", ok, "--follow"});
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_TRUE(Contains(f.out, "still here"));
}

TEST_F(E2ETest, CancelKillsTheWholeProcessTree) {
  cluster_.StartAgent("a1");
  // One child, one grandchild and one that left the job's session: all sandboxed, all found on
  // the host by their unique argument.
  std::string spec = Spec("tree", R"(name: tree
run: |
  sleep 300.25 &
  (sleep 300.25 & wait) &
  setsid sleep 300.25 &
  trap 'echo got-term; exit 143' TERM
  echo ready
  wait
)");
  CommandResult r = cluster_.Cli({"run", spec, "--detach"});
  std::string id = JobId(r);
  std::string out;
  ASSERT_TRUE(WaitUntil([&] {
    out = cluster_.Cli({"logs", id}).out;
    return Contains(out, "ready") && LivePidsWithArg("300.25").size() == 3u;
  })) << out
      << LivePidsWithArg("300.25").size();
  CommandResult c = cluster_.Cli({"cancel", id});
  EXPECT_EQ(c.exit_code, 0) << c.err;
  ASSERT_TRUE(WaitUntil([&] { return JobState(cluster_, id) == "cancelled"; }));
  EXPECT_TRUE(
      WaitUntil([&] { return LivePidsWithArg("300.25").empty(); }, std::chrono::seconds(5)));
  EXPECT_TRUE(Contains(cluster_.Cli({"logs", id}).out, "got-term"));
}

TEST_F(E2ETest, ServerKilledMidJobKeepsStateAndJobCompletesOnce) {
  // The test releases the job with a file outside its work dir, which the sandbox hides.
  cluster_.StartAgent("a1", {"--no-sandbox"});
  std::string marker = cluster_.dir() + "/go";
  std::string spec = Spec("long", "name: long\nenv: {MARKER: " + marker + R"(}
run: |
  echo started
  while [ ! -f "$MARKER" ]; do sleep 0.05; done
  echo finished
  exit 3
)");
  std::string id = JobId(cluster_.Cli({"run", spec, "--detach"}));
  ASSERT_TRUE(WaitUntil([&] { return Contains(cluster_.Cli({"logs", id}).out, "started"); }));
  cluster_.KillServer(SIGKILL);
  // The job keeps running and finishes while the server is down.
  std::ofstream(marker) << "go";
  cluster_.StartServer();
  EXPECT_TRUE(WaitUntil([&] { return JobState(cluster_, id) == "failed"; }))
      << JobState(cluster_, id);
  Json j = GetJob(cluster_, id);
  EXPECT_EQ(j["job"]["exit_code"], 3);
  ASSERT_EQ(j["attempts"].size(), 1u);  // it ran once
  EXPECT_EQ(cluster_.Cli({"logs", id}).out, "started\nfinished\n");
}

// `sluice logs -f` follows a job across its server killed and started again: it says it lost the
// server, reconnects to the restarted one and goes on after the last event and line it showed
// (by their ids, which the store keeps), so each line shows once, the one printed while the
// server was down included.
TEST_F(E2ETest, AFollowerGoesOnAcrossAServerRestartShowingEachLineOnce) {
  cluster_.StartAgent("a1", {"--no-sandbox"});  // the marker is outside the job's work dir
  const std::string marker = cluster_.dir() + "/go";
  const std::string spec = Spec("follow", "name: follow\nenv: {MARKER: " + marker + R"(}
run: |
  echo one
  echo two
  while [ ! -f "$MARKER" ]; do sleep 0.05; done
  echo three
)");
  const std::string id = JobId(cluster_.Cli({"run", spec, "--detach"}));
  ASSERT_TRUE(Contains(id, "job-")) << id;
  Daemon follower({SluiceBinary(), "logs", id, "-f"},
                  {{"SLUICE_SERVER", cluster_.url()}, {"SLUICE_TOKEN", cluster_.admin_token()}},
                  cluster_.dir() + "/follow.log");
  ASSERT_TRUE(WaitUntil([&] { return Contains(follower.Log(), "two\n"); })) << follower.Log();
  cluster_.KillServer(SIGKILL);
  std::ofstream(marker) << "go";  // the job prints its last line and ends while no server runs
  cluster_.StartServer();
  ASSERT_EQ(follower.Wait(std::chrono::seconds(60)), 0) << follower.Log();
  const std::string log = follower.Log();
  EXPECT_TRUE(Contains(log, "reconnecting")) << log;
  for (const char* line : {"one\n", "two\n", "three\n"}) {
    const size_t at = log.find(line);
    EXPECT_NE(at, std::string::npos) << line << " missing in\n" << log;
    EXPECT_EQ(at, log.rfind(line)) << line << " shown twice in\n" << log;
  }
  EXPECT_LT(log.find("two\n"), log.find("three\n")) << log;
  EXPECT_TRUE(Contains(log, "succeeded")) << log;
}

// What the supervisors of an agent's attempts logged, for a failure message.
std::string SupervisorLogs(const std::string& agent_dir) {
  std::string out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(agent_dir + "/attempts", ec)) {
    const std::filesystem::path log = e.path() / "supervisor.log";
    if (!std::filesystem::exists(log, ec)) continue;
    out += "---- " + log.string() + " ----\n" + ReadAll(log);
  }
  return out;
}

// Issue 11's double run: the job's grandchildren, one of which left its session, must be gone
// after the agent is killed, before the job's next attempt can start elsewhere.
TEST_F(RecoveryE2ETest, KilledAgentIsMarkedLostAndItsJobRunsAgainElsewhere) {
  Daemon* agent = cluster_.StartAgent("a1");
  std::string spec =
      Spec("sleepy", "name: sleepy\nrun: echo up; sleep 300.5 & (setsid sleep 300.5 &); wait\n");
  std::string id = JobId(cluster_.Cli({"run", spec, "--detach"}));
  std::string out;
  ASSERT_TRUE(WaitUntil([&] {
    out = cluster_.Cli({"logs", id}).out;
    return Contains(out, "up") && LivePidsWithArg("300.5").size() == 2u;
  })) << out;
  agent->Signal(SIGKILL);
  agent->Wait(std::chrono::seconds(5));
  // The job's supervisor outlives the agent. With no agent to renew the lease it freezes the
  // job when the lease runs out and kills it (its whole cgroup, or its PID namespace) half-way
  // from there to the heartbeat grace: everything of attempt 1 is gone by the time the server
  // declares the node lost, which is the earliest attempt 2 can start.
  ASSERT_TRUE(WaitUntil(
      [&] {
        Json nodes = cluster_.CliJson({"nodes"});
        return nodes.is_array() && !nodes.empty() && nodes[0].value("state", "") == "lost";
      },
      std::chrono::seconds(15)));
  EXPECT_TRUE(LivePidsWithArg("300.5").empty())
      << LivePidsWithArg("300.5").size() << " processes of attempt 1 outlived the node\n"
      << SupervisorLogs(cluster_.dir() + "/agent-a1");
  // The attempt is lost; the job is requeued, and a new agent picks it up as attempt 2.
  EXPECT_TRUE(WaitUntil([&] { return JobState(cluster_, id) == "queued"; }));
  Json j = GetJob(cluster_, id);
  ASSERT_EQ(j["attempts"].size(), 1u) << j.dump();
  EXPECT_EQ(j["attempts"][0]["state"], "lost");
  EXPECT_TRUE(Contains(j["attempts"][0].value("cause", ""), "lost")) << j.dump();
  cluster_.StartAgent("a2");
  ASSERT_TRUE(WaitUntil([&] {
    Json k = GetJob(cluster_, id);
    return k.is_object() && k["attempts"].size() == 2u && k["job"]["state"] == "running";
  })) << GetJob(cluster_, id).dump();
  EXPECT_EQ(GetJob(cluster_, id)["attempts"][1]["number"], 2);
  // The first agent comes back to a job that is placed elsewhere, and leaves it alone.
  cluster_.StartAgent("a1");
  EXPECT_TRUE(WaitUntil([&] { return LivePidsWithArg("300.5").size() == 2u; }));
  Json after = GetJob(cluster_, id);
  EXPECT_EQ(after["attempts"].size(), 2u);
  EXPECT_EQ(after["job"]["state"], "running");
}

// Issue 11's token thief, against the real agent: it is handed the agent's pid, the join token
// and node credential files, the server's admin token (same machine here) and another job's
// work dir. Returns what it printed.
std::string RunTokenThief(Cluster& cluster, const std::vector<std::string>& agent_args) {
  Daemon* agent = cluster.StartAgent("a1", agent_args);
  auto write = [&](const std::string& name, const std::string& body) {
    return cluster.WriteFile(name + ".yaml", body);
  };
  std::string victim = JobId(
      cluster.Cli({"run",
                   write("victim",
                         "name: victim\nrun: echo other-tenants-weights > weights.txt; echo up; "
                         "sleep 300.75\n"),
                   "--detach"}));
  EXPECT_TRUE(WaitUntil([&] { return Contains(cluster.Cli({"logs", victim}).out, "up"); }));
  Json vj = GetJob(cluster, victim);
  std::string other = cluster.dir() + "/agent-a1/work/" + vj["attempts"][0].value("id", "");
  EXPECT_TRUE(std::filesystem::exists(other + "/weights.txt")) << other;
  std::string thief = write(
      "thief", "name: thief\nenv: {AGENT_PID: '" + std::to_string(agent->pid()) + "', TOKEN: " +
                   cluster.server_data_dir() + "/join.token, ADMIN: " + cluster.server_data_dir() +
                   "/admin.token, CRED: " + cluster.dir() +
                   "/agent-a1/node.credential, OTHER: " + other +
                   "}\nrun: |\n"
                   "  echo \"cmdline: $(tr '\\0' ' ' < /proc/$AGENT_PID/cmdline)\"\n"
                   "  echo \"token: $(cat $TOKEN)\"\n"
                   "  echo \"admin: $(cat $ADMIN)\"\n"
                   "  echo \"cred: $(cat $CRED)\"\n"
                   "  echo \"other: $(cat $OTHER/weights.txt)\"\n"
                   "  echo \"ls: $(ls $(dirname $OTHER))\"\n"
                   "  echo \"user: $(python3 -c 'import getpass; print(getpass.getuser())')\"\n");
  CommandResult r = cluster.Cli({"run", thief, "--follow"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  cluster.Cli({"cancel", victim});
  return r.out;
}

// What the thief of RunTokenThief must not have found under the sandbox.
void ExpectTheThiefReadNothing(Cluster& cluster, const std::string& out) {
  std::string cred = Trim(ReadAll(cluster.dir() + "/agent-a1/node.credential"));
  ASSERT_FALSE(cred.empty());
  EXPECT_FALSE(Contains(out, "sluice agent")) << out;  // the agent's command line
  EXPECT_FALSE(Contains(out, cluster.join_token())) << out;
  EXPECT_FALSE(Contains(out, cluster.admin_token())) << out;
  EXPECT_FALSE(Contains(out, cred)) << out;
  EXPECT_FALSE(Contains(out, "other-tenants-weights")) << out;
  EXPECT_TRUE(Contains(out, "other: \n")) << out;
  // Its uid has no passwd entry, yet tools that want a user name get one.
  EXPECT_TRUE(Contains(out, "user: sluice-job\n")) << out;
  EXPECT_FALSE(Contains(cluster.Cli({"offers"}).out, "sandbox: none"));
}

// The agent keeps a sandbox built and waiting (a warm box): CPU jobs run in one.
TEST_F(E2ETest, ASandboxedTokenThiefReadsNothingOfTheAgentServerOrOtherJobs) {
  std::string out = RunTokenThief(cluster_, {});
  ExpectTheThiefReadNothing(cluster_, out);
  EXPECT_TRUE(Contains(cluster_.agent("a1")->Log(), "runs in warm sandbox"))
      << cluster_.agent("a1")->Log();
}

// A warm box waits as long as it takes for a job: its supervisor hears from the agent all the
// while (a box whose agent goes silent for 5 s kills itself).
TEST_F(E2ETest, AWarmSandboxOutlastsAnIdleSpellAndTakesTheNextJob) {
  Daemon* agent = cluster_.StartAgent("a1");
  // Longer than the supervisors' 5 s silence limit: the wait is what is tested.
  std::this_thread::sleep_for(std::chrono::seconds(7));
  std::string spec = Spec("idle", "name: idle\nrun: echo \"in $PWD\"\n");
  CommandResult r = cluster_.Cli({"run", spec, "--follow"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "/work/warm-")) << r.out;
  EXPECT_TRUE(Contains(agent->Log(), "runs in warm sandbox")) << agent->Log();
  EXPECT_FALSE(Contains(agent->Log(), "ended before")) << agent->Log();
}

// The same with every box built for its job (no warm ones): the other way a job is boxed.
TEST_F(E2ETest, AThiefInASandboxBuiltForItReadsNothingEither) {
  std::string out = RunTokenThief(cluster_, {"--warm-boxes", "0"});
  ExpectTheThiefReadNothing(cluster_, out);
  EXPECT_FALSE(Contains(cluster_.agent("a1")->Log(), "warm sandbox"))
      << cluster_.agent("a1")->Log();
}

// The same thief on an agent started with --no-sandbox reads everything: the test above is live.
TEST_F(E2ETest, WithoutTheSandboxTheSameThiefReadsEverything) {
  std::string out = RunTokenThief(cluster_, {"--no-sandbox"});
  std::string cred = Trim(ReadAll(cluster_.dir() + "/agent-a1/node.credential"));
  EXPECT_TRUE(Contains(out, "agent")) << out;
  EXPECT_TRUE(Contains(out, cluster_.join_token())) << out;
  EXPECT_TRUE(Contains(out, cluster_.admin_token())) << out;
  EXPECT_TRUE(Contains(out, cred)) << out;
  EXPECT_TRUE(Contains(out, "other-tenants-weights")) << out;
  // And the market says so to everyone who might place a job there.
  EXPECT_TRUE(Contains(cluster_.Cli({"offers"}).out, "agent (sandbox: none)"));
  // Unboxed jobs, too, start under a supervisor made ready ahead.
  EXPECT_TRUE(Contains(cluster_.agent("a1")->Log(), "runs under warm supervisor"))
      << cluster_.agent("a1")->Log();
}

// A sandboxed job may use the network, but not the cloud metadata address (the provider's cloud
// credentials) nor the server's port on this machine; without the sandbox it reaches the port.
TEST_F(E2ETest, ASandboxedJobCannotReachTheMetadataAddressOrTheServersLocalPort) {
  // The filter is the host's netfilter: where this machine has none (a container without
  // CAP_NET_ADMIN), the agent says "NOT filtered" at start and there is nothing to test here.
  if (RunCommand({"/usr/sbin/iptables", "-w", "-L", "OUTPUT", "-n"}).exit_code != 0) {
    GTEST_SKIP() << "iptables is not usable on this machine";
  }
  const std::string port = cluster_.url().substr(cluster_.url().rfind(':') + 1);
  const std::string probe =
      "name: net\nrun: |\n"
      "  try() { timeout 5 bash -c \"exec 3<>/dev/tcp/$1/$2\" 2>&1 && "
      "echo \"$1:$2 open\" || echo \"$1:$2 closed\"; }\n"
      "  try 127.0.0.1 " +
      port +
      "\n"
      "  try 169.254.169.254 80\n";
  // Its own uid range, so its chain is its own even when other agents run on this host.
  Daemon* agent = cluster_.StartAgent("a1", {"--first-job-uid", "2100400000"});
  CommandResult boxed = cluster_.Cli({"run", Spec("net", probe), "--follow"});
  EXPECT_TRUE(Contains(agent->Log(), "jobs may not reach 169.254.169.254")) << agent->Log();
  EXPECT_TRUE(Contains(boxed.out, "127.0.0.1:" + port + " closed")) << boxed.out;
  EXPECT_TRUE(Contains(boxed.out, "Connection refused")) << boxed.out;
  EXPECT_TRUE(Contains(boxed.out, "169.254.169.254:80 closed")) << boxed.out;
  EXPECT_TRUE(
      Contains(RunCommand({"/usr/sbin/iptables", "-w", "-S"}).out, "SLUICE-JOBS-2100400000"));
  agent->Signal(SIGTERM);
  agent->Wait(std::chrono::seconds(20));
  // A clean stop takes its rules with it.
  EXPECT_FALSE(
      Contains(RunCommand({"/usr/sbin/iptables", "-w", "-S"}).out, "SLUICE-JOBS-2100400000"));
  cluster_.StartAgent("a2", {"--no-sandbox"});
  CommandResult bare = cluster_.Cli({"run", Spec("net", probe), "--follow"});
  EXPECT_TRUE(Contains(bare.out, "127.0.0.1:" + port + " open")) << bare.out;
}

// Where the filter cannot be installed (a lent H200 machine's image had no iptables), a
// sandboxing agent refuses to start, since strangers' jobs could read the machine's cloud
// credentials; with --allow-unfiltered-network it starts and its offers say so. The agent runs
// in a mount namespace of its own in which iptables is /bin/false.
TEST_F(E2ETest, AnAgentThatCannotFilterItsJobsNetworkStartsOnlyWhenAllowedAndSaysSo) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a mount namespace";
  // A container may forbid mount namespaces: then there is no way to take iptables away here.
  if (RunCommand({"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                  "mount --bind /bin/false /usr/sbin/iptables && ! /usr/sbin/iptables -L"})
          .exit_code != 0) {
    GTEST_SKIP() << "cannot bind-mount over iptables in a mount namespace here";
  }
  cluster_.agent_launcher = {"/usr/bin/unshare",
                             "--mount",
                             "--propagation",
                             "private",
                             "/bin/sh",
                             "-c",
                             "mount --bind /bin/false /usr/sbin/iptables && exec \"$0\" \"$@\""};
  cluster_.allow_unfiltered_network = false;
  Daemon* refused = cluster_.StartAgent("strict", {}, /*wait_online=*/false);
  EXPECT_EQ(refused->Wait(std::chrono::seconds(60)), 1) << refused->Log();
  EXPECT_TRUE(Contains(refused->Log(), "cannot filter the jobs' network here")) << refused->Log();
  EXPECT_TRUE(Contains(refused->Log(), "169.254.169.254")) << refused->Log();
  EXPECT_FALSE(Contains(cluster_.Cli({"nodes"}).out, "strict"));

  cluster_.allow_unfiltered_network = true;
  Daemon* open = cluster_.StartAgent("open");
  EXPECT_TRUE(Contains(open->Log(), "job network: NOT filtered")) << open->Log();
  EXPECT_TRUE(Contains(cluster_.Cli({"offers"}).out, "agent (sandbox: bwrap-open-network)"))
      << cluster_.Cli({"offers"}).out;
  // Still boxed: its jobs run.
  CommandResult r = cluster_.Cli({"run", Spec("ok", "name: ok\nrun: echo boxed\n"), "--follow"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "boxed")) << r.out;
}

TEST_F(E2ETest, JobThatCanNeverFitSaysWhy) {
  cluster_.StartAgent("a1");
  std::string spec = Spec("big", "name: big\nresources: {gpus: 4}\nrun: nvidia-smi\n");
  // Refused with the explanation instead of queuing forever; nothing is left queued.
  CommandResult refused = cluster_.Cli({"run", spec, "--detach"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(Contains(refused.err, "no registered node can ever run this job")) << refused.err;
  EXPECT_TRUE(Contains(refused.err, "gpus>=4: 1 offers")) << refused.err;
  EXPECT_TRUE(Contains(refused.err, "lacks gpus>=4")) << refused.err;
  EXPECT_TRUE(cluster_.CliJson({"jobs"}).empty());
  // A misspelt GPU is caught before anything is sent, with a suggestion.
  std::string typo = Spec("typo", "name: typo\nresources: {gpu: a10o}\nrun: nvidia-smi\n");
  CommandResult t = cluster_.Cli({"run", typo, "--detach"});
  EXPECT_EQ(t.exit_code, 2);
  EXPECT_TRUE(Contains(t.err, "did you mean")) << t.err;
  // --queue waits, with the reason, for a node that can run it.
  std::string id = JobId(cluster_.Cli({"run", spec, "--detach", "--queue"}));
  ASSERT_TRUE(WaitUntil([&] {
    Json j = GetJob(cluster_, id);
    return j.is_object() && Contains(j["job"].value("reason", ""), "gpus>=4");
  }));
  EXPECT_EQ(JobState(cluster_, id), "queued");
  EXPECT_TRUE(Contains(cluster_.Cli({"job", id}).out, "can ever run"));
}

TEST_F(E2ETest, EstimateRanksAgentAndCatalogOffersByExpectedCost) {
  std::string fixture =
      std::string(SLUICE_SOURCE_DIR_DEFAULT) + "/tests/fixtures/nvidia-smi/h100-sxm5-80gb-1.txt";
  Cluster::FakeGpus fake = cluster_.FakeGpuAgent(fixture);
  fake.args.insert(fake.args.end(), {"--price-per-gpu-hour", "2.5"});
  cluster_.StartAgent("gpu", fake.args, true, fake.env);
  ASSERT_EQ(ImportCatalog("lambda.csv"), 0);
  std::string spec =
      Spec("train", "name: train\nresources: {gpu: h100, gpus: 8}\nexpected_hours: 24\nrun: x\n");
  Json est = cluster_.CliJson({"estimate", spec, "--limit", "50"});
  ASSERT_TRUE(est.is_object()) << cluster_.Cli({"estimate", spec}).err;
  // h100 covers every H100 variant the registry knows (the 64/94/96 GB ones by PCI id).
  EXPECT_EQ(est["query"], "gpu in [h100-64gb,h100-80gb,h100-94gb,h100-96gb] gpus>=8");
  EXPECT_EQ(est["hours"], 24.0);
  const Json& offers = est["offers"];
  ASSERT_GE(offers.size(), 2u);
  bool saw_agent = false;
  double last = 0;
  for (const auto& r : offers) {
    double cost = r["estimate"]["expected_cost"].get<double>();
    EXPECT_GE(cost, last) << "ranked by expected cost";
    last = cost;
    saw_agent |= r["launchable"].get<bool>();
    // On-demand: cost = 8 GPUs × price × 24 h ÷ perf, recomputed here from the offer.
    const Json& o = r["offer"];
    EXPECT_NEAR(
        cost, 8 * o["price_per_gpu_hour"].get<double>() * 24 / o["perf_score"].get<double>(), 1e-6);
  }
  EXPECT_TRUE(saw_agent);
  // --objective time and --hours are honoured; the table says why.
  CommandResult text = cluster_.Cli({"estimate", spec, "--objective", "time", "--hours", "2"});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(Contains(text.out, "ranked by expected time to complete for 2.00 h")) << text.out;
  EXPECT_TRUE(Contains(text.out, "2 h ÷ perf")) << text.out;
  // The job itself is placed on the agent (the only launchable offer) and the event says why.
  std::string id = JobId(cluster_.Cli({"run", spec, "--detach"}));
  ASSERT_TRUE(WaitUntil([&] {
    return Contains(cluster_.Cli({"job", id}).out, "best by cost: $20.00/h on-demand");
  })) << cluster_.Cli({"job", id}).out;
}

// The cost gate for CI (issue 14 item 4): `sluice estimate --fail-over USD` exits 3 when the
// best offer's expected cost to complete is over the threshold or unknown, 0 within it, and
// prints the offer and the arithmetic either way.
TEST_F(E2ETest, EstimateFailOverIsACostGateForCi) {
  ASSERT_EQ(ImportCatalog("lambda.csv"), 0);
  std::string spec =
      Spec("gate", "name: gate\nresources: {gpu: h100, gpus: 8}\nexpected_hours: 24\nrun: x\n");
  Json est = cluster_.CliJson({"estimate", spec});
  ASSERT_TRUE(est.is_object() && !est["offers"].empty()) << cluster_.Cli({"estimate", spec}).err;
  const double best = est["offers"][0]["estimate"]["expected_cost"].get<double>();
  ASSERT_GT(best, 2);

  auto gate = [&](double limit, bool json = false) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f", limit);
    std::vector<std::string> args = {"estimate", spec, "--fail-over", text};
    if (json) args.push_back("--json");
    return cluster_.Cli(args);
  };
  CommandResult over = gate(best - 1);
  EXPECT_EQ(over.exit_code, 3) << over.out << over.err;
  EXPECT_TRUE(Contains(over.err, "cost gate failed: the best offer, lambda")) << over.err;
  EXPECT_TRUE(Contains(over.err, "24 h ÷ perf")) << over.err;  // the arithmetic
  EXPECT_TRUE(Contains(over.out, "EXP. COST")) << over.out;    // the ranking as usual
  CommandResult within = gate(best + 1);
  EXPECT_EQ(within.exit_code, 0) << within.out << within.err;
  EXPECT_TRUE(Contains(within.err, "cost gate passed")) << within.err;
  // --json keeps stdout parseable and the exit code.
  CommandResult json = gate(best - 1, true);
  EXPECT_EQ(json.exit_code, 3);
  EXPECT_TRUE(ParseJson(json.out).ok()) << json.out;

  // Nothing matches: an error, not a pass.
  std::string none = Spec("none", "name: none\nresources: {gpu: h100, gpus: 64}\nrun: x\n");
  CommandResult nothing = cluster_.Cli({"estimate", none, "--fail-over", "100"});
  EXPECT_EQ(nothing.exit_code, 1) << nothing.out << nothing.err;
  EXPECT_TRUE(Contains(nothing.err, "no offer matches")) << nothing.err;
  // A GPU without a speed (no spec figure, nothing measured): its cost is unknown, so the gate
  // cannot pass.
  ASSERT_EQ(ImportCatalog("runpod.csv"), 0);
  std::string unknown =
      Spec("unknown",
           "name: unknown\nresources: {gpu: rtx4090, gpus: 1}\nexpected_hours: 1\n"
           "run: x\n");
  CommandResult unknown_cost = cluster_.Cli({"estimate", unknown, "--fail-over", "1000"});
  EXPECT_EQ(unknown_cost.exit_code, 3) << unknown_cost.out << unknown_cost.err;
  EXPECT_TRUE(Contains(unknown_cost.err, "has no expected cost")) << unknown_cost.err;
  // A bad threshold is refused by name.
  CommandResult bad = cluster_.Cli({"estimate", spec, "--fail-over", "-5"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.exit_code, 3);
  EXPECT_TRUE(Contains(bad.err, "--fail-over")) << bad.err;
}

// A local stand-in for a cloud's instance-metadata service (AWS style): python's http.server
// over a directory of the cluster's, answering 404 until a spot-termination notice is announced.
class MetadataService {
 public:
  explicit MetadataService(Cluster& cluster)
      : cluster_(cluster),
        root_(Root(cluster)),
        daemon_({"/usr/bin/python3", "-u", "-m", "http.server", "0", "--bind", "127.0.0.1",
                 "--directory", root_},
                {}, root_ + "/../metadata.log") {}
  // Waits until it listens and learns its port.
  bool WaitReady() {
    return WaitUntil([&] {
      std::string log = daemon_.Log();
      size_t at = log.find(" port ");
      if (at == std::string::npos) return false;
      port_ = std::atoi(log.c_str() + at + 6);
      return port_ != 0;
    });
  }
  std::string Log() const { return daemon_.Log(); }
  // What `sluice agent --spot-metadata-url` polls.
  std::string NoticeUrl() const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/" + kNoticePath;
  }
  void Announce(const std::string& body) {
    cluster_.WriteFile(std::string("meta/") + kNoticePath, body);
  }
  void Withdraw() { std::filesystem::remove(root_ + "/" + kNoticePath); }

 private:
  static constexpr const char* kNoticePath = "latest/meta-data/spot/instance-action";
  static std::string Root(Cluster& cluster) {
    std::string keep = cluster.WriteFile("meta/latest/meta-data/spot/.keep", "");
    return keep.substr(0, keep.find("/latest/"));
  }
  Cluster& cluster_;
  std::string root_;
  Daemon daemon_;
  int port_ = 0;
};

// What `cmd` prints, trimmed; "" when it fails. The test's own view of this machine.
std::string ShellOutput(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (p == nullptr) return out;
  char buf[256];
  while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
  return pclose(p) == 0 ? Trim(out) : "";
}

TEST_F(E2ETest, SoftwareFactsComeFromTheMachine) {
  cluster_.probe_software = true;
  cluster_.StartAgent("sw");
  Json nodes = cluster_.CliJson({"nodes"});
  ASSERT_TRUE(nodes.is_array() && nodes.size() == 1u);
  const Json& inv = nodes[0]["inventory"];
  EXPECT_EQ(inv.value("python_version", ""),
            ShellOutput("python3 -c \"import sys; print('%d.%d.%d' % sys.version_info[:3])\""));
  std::string torch = ShellOutput("python3 -c 'import torch; print(torch.__version__)'");
  Json offers;
  ASSERT_TRUE(WaitUntil([&] {
    offers = cluster_.CliJson({"offers"});
    return offers.is_array() && offers.size() == 1u;
  })) << offers.dump();
  if (torch.empty()) {
    EXPECT_TRUE(offers[0]["torch_builds"].empty());
  } else {
    EXPECT_EQ(offers[0]["torch_builds"], Json::array({torch}));
    // Queryable like any other fact.
    EXPECT_EQ(cluster_.CliJson({"offers", "torch=" + torch}).size(), 1u);
  }
}

TEST_F(E2ETest, GpuInventoryFromRecordedNvidiaSmiShowsInOffers) {
  std::string fixture =
      std::string(SLUICE_SOURCE_DIR_DEFAULT) + "/tests/fixtures/nvidia-smi/h100-sxm5-80gb-1.txt";
  Cluster::FakeGpus fake = cluster_.FakeGpuAgent(fixture);
  fake.args.insert(fake.args.end(), {"--price-per-gpu-hour", "2.5"});
  cluster_.StartAgent("gpu", fake.args, true, fake.env);
  Json offers = cluster_.CliJson({"offers"});
  ASSERT_TRUE(offers.is_array()) << cluster_.Cli({"offers"}).err;
  ASSERT_EQ(offers.size(), 1u);
  EXPECT_EQ(offers[0]["gpu_label"], "h100-80gb");
  EXPECT_EQ(offers[0]["gpus"], 8);
  EXPECT_EQ(offers[0]["source"], "agent");
  EXPECT_DOUBLE_EQ(offers[0]["price_per_gpu_hour"].get<double>(), 2.5);
  // The probed labels are what queries see.
  EXPECT_EQ(cluster_.CliJson({"offers", "gpu=h100 gpus>=8 price<=2.5"}).size(), 1u);
  EXPECT_EQ(cluster_.CliJson({"offers", "gpu=a100"}).size(), 0u);
  // A 2-GPU job gets exactly two GPUs, named by UUID.
  std::string spec = Spec("g",
                          "name: g\nresources: {gpu: h100, gpus: 2}\n"
                          "run: echo \"devs=$CUDA_VISIBLE_DEVICES idx=$SLUICE_GPUS\"\n");
  CommandResult r = cluster_.Cli({"run", spec, "--follow"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "devs=GPU-")) << r.out;
  EXPECT_TRUE(Contains(r.out, "idx=0,1")) << r.out;
}

// The imported catalogs answer realistic questions; expected values come from a scan of the raw
// CSVs in this test, not from the code under test.
TEST_F(E2ETest, CatalogImportAnswersMarketQuestions) {
  std::string dir = std::string(SLUICE_SOURCE_DIR_DEFAULT) + "/data/catalog";
  std::vector<std::string> args = {"catalog", "import"};
  std::vector<std::vector<std::string>>
      rows;  // cloud, instance, accel, count, mem, ..., price, spot
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    args.push_back(entry.path().string());
    std::ifstream in(entry.path());
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      // Minimal CSV split honouring double quotes (Vast regions contain commas).
      std::vector<std::string> cols(1);
      bool quoted = false;
      for (char ch : line) {
        if (ch == '"')
          quoted = !quoted;
        else if (ch == ',' && !quoted)
          cols.emplace_back();
        else
          cols.back() += ch;
      }
      rows.push_back(cols);
    }
  }
  CommandResult imported = cluster_.Cli(args);
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  auto price_of = [](const std::string& v) { return v.empty() ? 0.0 : std::stod(v); };
  // The cheapest 8xH100 (80 GB class) anywhere, per GPU-hour.
  double cheapest_h100x8 = 1e9;
  // A100-80GB with an interruptible price under $1.5/GPU-h.
  int a100_spot_cheap = 0;
  for (const auto& r : rows) {
    ASSERT_EQ(r.size(), 11u);
    int count = std::stoi(r[3]);
    double price = price_of(r[7]) / count, spot = price_of(r[8]) / count;
    if (r[2] == "H100" && count == 8 && price > 0)
      cheapest_h100x8 = std::min(cheapest_h100x8, price);
    if (r[2] == "A100-80GB" && spot > 0 && spot < 1.5 && price > 0) ++a100_spot_cheap;
  }
  Json best = cluster_.CliJson({"offers", "gpu=h100-80gb gpus>=8", "-o", "price", "--limit", "1"});
  ASSERT_EQ(best.size(), 1u);
  EXPECT_NEAR(best[0]["price_per_gpu_hour"].get<double>(), cheapest_h100x8, 1e-6);
  Json spot = cluster_.CliJson({"offers", "gpu=a100-80gb spot_price<1.5", "--limit", "100000"});
  EXPECT_EQ(static_cast<int>(spot.size()), a100_spot_cheap);
  for (const auto& o : spot) EXPECT_LT(o["interruptible_price_per_gpu_hour"].get<double>(), 1.5);
  // A malformed query points at the token.
  CommandResult bad = cluster_.Cli({"offers", "gpu=h100 prce<2"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(Contains(bad.err, "did you mean `price`")) << bad.err;
  // Catalogs survive a restart.
  cluster_.KillServer(SIGKILL);
  cluster_.StartServer();
  Json again = cluster_.CliJson({"offers", "gpu=h100-80gb gpus>=8", "-o", "price", "--limit", "1"});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0]["id"], best[0]["id"]);
}

TEST_F(E2ETest, BadSpecsGetPointedErrors) {
  std::string bad = Spec("bad", "name: x\nresources:\n  gpus: -1\nrun: echo\n");
  CommandResult r = cluster_.Cli({"run", bad});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "bad.yaml:3:")) << r.err;
  EXPECT_TRUE(Contains(r.err, "resources.gpus")) << r.err;

  std::string typo = Spec("typo", "name: x\nresources: {gpu: a1000}\nrun: echo\n");
  r = cluster_.Cli({"run", typo});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "a100")) << r.err;

  std::string unknown = Spec("unknown", "name: x\nrn: echo\n");
  r = cluster_.Cli({"run", unknown});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "unknown.yaml:2:1")) << r.err;
}

TEST_F(E2ETest, RequestsWithoutAValidTokenAreRefused) {
  auto no_token = RunCommand({SluiceBinary(), "jobs"},
                             {{"SLUICE_SERVER", cluster_.url()}, {"SLUICE_TOKEN", "nope"}});
  EXPECT_EQ(no_token.exit_code, 1);
  EXPECT_TRUE(Contains(no_token.err, "token")) << no_token.err;
  auto join = RunCommand({SluiceBinary(), "jobs"}, {{"SLUICE_SERVER", cluster_.url()},
                                                    {"SLUICE_TOKEN", cluster_.join_token()}});
  EXPECT_EQ(join.exit_code, 1);
  EXPECT_TRUE(Contains(join.err, "join token")) << join.err;
  // An agent with a wrong join token is refused and exits.
  std::string bad_token = cluster_.WriteFile("bad.token", "sluice_join_wrong\n");
  Daemon agent({SluiceBinary(), "agent", "--server", cluster_.url(), "--join-token-file", bad_token,
                "--data-dir", cluster_.dir() + "/agent-bad"},
               {}, cluster_.dir() + "/agent-bad.log");
  EXPECT_EQ(agent.Wait(std::chrono::seconds(15)), 1) << agent.Log();
  EXPECT_TRUE(Contains(agent.Log(), "refused")) << agent.Log();
  // Token files are private.
  auto perms = std::filesystem::status(cluster_.server_data_dir() + "/admin.token").permissions();
  EXPECT_EQ(perms & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

// The `final sha256` line of the example run uninterrupted, here, with `args`; "" if it failed.
std::string PyTorchReference(const std::string& example, const std::string& args) {
  return ShellOutput("cd " + example +
                     " && d=$(mktemp -d) && SLUICE_CHECKPOINT_DIR=$d /usr/bin/python3 " + args +
                     " | grep '^final sha256'; rm -rf \"$d\"");
}

// Issue 4's promise, end to end: the example PyTorch job runs on interruptible capacity on
// three agents, is preempted by a cloud spot notice, by its provider's reclaim and by an
// on-demand job's arrival, then loses its agent to SIGKILL, and still finishes with weights
// bit-identical to an uninterrupted run, each attempt resuming from the checkpoint the previous
// one saved to the server.
TEST_F(RecoveryE2ETest, PyTorchJobSurvivesFourInterruptionsBitIdentically) {
  // A short cooldown, so the job may return to a node it left within the test's time.
  cluster_.KillServer(SIGKILL);
  cluster_.StartServer({"--heartbeat-interval", "0.3", "--heartbeat-grace", "6", "--cancel-grace",
                        "1", "--preempt-cooldown", "2", "--reclaim-cooldown", "2"});
  const std::string example = std::string(SLUICE_SOURCE_DIR_DEFAULT) + "/examples/pytorch";
  // Long enough (≥ 60 s at the step delay below) that the job is still training when the last
  // interruption comes, even on a sanitized build on a loaded machine where each agent's start,
  // conformance suite included, takes seconds (at 1,000 steps a loaded ASan run once finished
  // the training in attempt 4, before its agent was killed).
  const std::string args = "train.py --steps 1500 --checkpoint-every 20";
  std::string reference = PyTorchReference(example, args);
  ASSERT_FALSE(reference.empty()) << "the example did not run: is python3-torch installed?";

  // The metadata service of the cloud a1 runs in.
  MetadataService metadata(cluster_);
  ASSERT_TRUE(metadata.WaitReady()) << metadata.Log();
  const std::vector<std::string> prices = {"--price-per-cpu-hour", "0.1",
                                           "--interruptible-price-per-cpu-hour", "0.03"};
  std::vector<std::string> spot_args = prices;
  for (std::string a : std::vector<std::string>{"--spot-metadata-url", metadata.NoticeUrl(),
                                                "--spot-poll-interval", "0.1"}) {
    spot_args.push_back(a);
  }
  cluster_.StartAgent("a1", spot_args);

  std::string spec = Spec("train",
                          "name: train\nresources: {cpus: 1, memory_gb: 0.5}\n"
                          "workdir: " +
                              example +
                              "\n"
                              "run: /usr/bin/python3 " +
                              args +
                              " --step-delay 0.04\n"
                              "lifecycle: {capacity: interruptible, checkpoint_interval: 1s, "
                              "grace_period: 20s, max_restarts: 10}\n");
  std::string id = JobId(cluster_.Cli({"run", spec, "--detach"}));
  ASSERT_TRUE(Contains(id, "job-")) << id;
  auto logs = [&] { return cluster_.Cli({"logs", id}).out; };
  auto attempts = [&] { return GetJob(cluster_, id)["attempts"]; };
  auto node_name = [&](const std::string& node_id) {
    for (const auto& n : cluster_.CliJson({"nodes"})) {
      if (n.value("id", "") == node_id) return n.value("name", "");
    }
    return std::string();
  };
  // Waits until attempt `n` runs and has trained `steps` steps past where it started.
  auto running_and_progressed = [&](size_t n, int steps) {
    return WaitUntil(
        [&] {
          Json a = attempts();
          if (a.size() != n || a[n - 1].value("state", "") != "running") return false;
          std::string l = logs();
          size_t from = n == 1 ? 0 : l.rfind("resumed from step");
          if (from == std::string::npos) return false;
          int start = n == 1 ? 0 : std::atoi(l.c_str() + from + 18);
          // Progress lines come every 10 steps from wherever it resumed.
          for (const auto& line : Split(l.substr(from), '\n')) {
            if (line.rfind("step ", 0) == 0 && std::atoi(line.c_str() + 5) >= start + steps) {
              return true;
            }
          }
          return false;
        },
        std::chrono::seconds(90));
  };
  auto current_node = [&] { return attempts().back().value("node_id", ""); };

  // 1. A spot-termination notice for a1's instance.
  ASSERT_TRUE(running_and_progressed(1, 40)) << logs();
  cluster_.StartAgent("a2", prices);
  cluster_.StartAgent("a3", prices);
  metadata.Announce(R"({"action": "stop"})");
  ASSERT_TRUE(running_and_progressed(2, 40)) << GetJob(cluster_, id).dump(2) << logs();
  metadata.Withdraw();

  // 2. The provider reclaims the node of attempt 2.
  ASSERT_EQ(cluster_.Cli({"node", "reclaim", current_node(), "--cause", "maintenance"}).exit_code,
            0);
  ASSERT_TRUE(running_and_progressed(3, 40)) << GetJob(cluster_, id).dump(2) << logs();

  // 3. An on-demand job arrives that can only run where attempt 3 runs: the other nodes are
  //    full of on-demand work.
  const std::string all =
      std::to_string(cluster_.CliJson({"nodes"})[0]["inventory"].value("cpu_cores", 1));
  std::string filler =
      Spec("filler", "name: filler\nresources: {cpus: " + all + "}\nrun: sleep 300\n");
  std::vector<std::string> fillers;
  for (int i = 0; i < 2; ++i) fillers.push_back(JobId(cluster_.Cli({"run", filler, "--detach"})));
  for (const auto& f : fillers) {
    ASSERT_TRUE(WaitUntil([&] { return JobState(cluster_, f) == "running"; })) << f;
  }
  std::string urgent =
      Spec("urgent", "name: urgent\nresources: {cpus: " + all + "}\nrun: echo urgent done\n");
  CommandResult u = cluster_.Cli({"run", urgent, "--follow"});
  EXPECT_EQ(u.exit_code, 0) << u.err;
  ASSERT_TRUE(running_and_progressed(4, 40)) << GetJob(cluster_, id).dump(2) << logs();

  // 4. The agent running attempt 4 is killed outright; the fillers make room for attempt 5.
  cluster_.agent(node_name(current_node()))->Signal(SIGKILL);
  for (const auto& f : fillers) EXPECT_EQ(cluster_.Cli({"cancel", f}).exit_code, 0);
  ASSERT_TRUE(
      WaitUntil([&] { return JobState(cluster_, id) == "succeeded"; }, std::chrono::seconds(120)))
      << GetJob(cluster_, id).dump(2) << logs();

  Json a = attempts();
  ASSERT_EQ(a.size(), 5u) << GetJob(cluster_, id).dump(2);
  EXPECT_TRUE(Contains(a[0].value("cause", ""), "preempted: spot termination notice")) << a[0];
  EXPECT_EQ(a[1]["cause"], "preempted: maintenance");
  EXPECT_TRUE(Contains(a[2].value("cause", ""), "making room for on-demand job")) << a[2];
  EXPECT_EQ(a[3]["state"], "lost");
  EXPECT_EQ(a[4]["state"], "succeeded");
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(a[i]["number"], static_cast<int>(i + 1));
    EXPECT_TRUE(a[i]["interruptible"].get<bool>()) << a[i];
    if (i > 0) {
      EXPECT_FALSE(a[i].value("checkpoint_restored", "").empty()) << a[i];
    }
  }
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(a[i]["state"], "preempted") << a[i];
  std::string out = logs();
  size_t pos = out.rfind("final sha256");
  ASSERT_NE(pos, std::string::npos) << out;
  EXPECT_EQ(Trim(out.substr(pos, out.find('\n', pos) - pos)), reference);
  std::string shown = cluster_.Cli({"job", id}).out;
  EXPECT_TRUE(Contains(shown, "restarts:  4 of 10")) << shown;
}

// Issue 11 item 5, end to end: a training script that saves on SIGTERM and exits 0 (a common
// pattern) was preempted, not finished: it resumes from its checkpoint on another node and ends
// bit-identical to an uninterrupted run, instead of being recorded as succeeded part-way.
TEST_F(RecoveryE2ETest, PyTorchJobThatExitsZeroOnSigtermIsResumedNotCalledDone) {
  const std::string example = std::string(SLUICE_SOURCE_DIR_DEFAULT) + "/examples/pytorch";
  const std::string args = "train.py --steps 400 --checkpoint-every 20";
  std::string reference = PyTorchReference(example, args);
  ASSERT_FALSE(reference.empty()) << "the example did not run: is python3-torch installed?";
  cluster_.StartAgent("a1");
  std::string spec = Spec("train0",
                          "name: train0\nresources: {cpus: 1, memory_gb: 0.5}\n"
                          "workdir: " +
                              example + "\nrun: /usr/bin/python3 " + args +
                              " --step-delay 0.04 --exit-code-on-sigterm 0\n"
                              "lifecycle: {checkpoint_interval: 1s, grace_period: 20s, "
                              "max_restarts: 3}\n");
  std::string id = JobId(cluster_.Cli({"run", spec, "--detach"}));
  ASSERT_TRUE(Contains(id, "job-")) << id;
  auto logs = [&] { return cluster_.Cli({"logs", id}).out; };
  ASSERT_TRUE(WaitUntil([&] { return Contains(logs(), "\nstep 60 "); }, std::chrono::seconds(90)))
      << logs();
  cluster_.StartAgent("a2");
  Json first = GetJob(cluster_, id)["attempts"][0];
  ASSERT_EQ(cluster_.Cli({"node", "reclaim", first.value("node_id", ""), "--cause", "maintenance"})
                .exit_code,
            0);
  ASSERT_TRUE(
      WaitUntil([&] { return JobState(cluster_, id) == "succeeded"; }, std::chrono::seconds(120)))
      << GetJob(cluster_, id).dump(2) << logs();
  Json a = GetJob(cluster_, id)["attempts"];
  ASSERT_EQ(a.size(), 2u) << a.dump(2);
  EXPECT_EQ(a[0]["state"], "preempted");
  EXPECT_EQ(a[0]["exit_code"], 0) << a[0];
  EXPECT_EQ(a[0]["cause"], "preempted: maintenance (exited with code 0 while being preempted)");
  EXPECT_EQ(a[1]["state"], "succeeded");
  EXPECT_FALSE(a[1].value("checkpoint_restored", "").empty()) << a[1];
  std::string out = logs();
  EXPECT_TRUE(Contains(out, "saved step")) << out;
  size_t pos = out.rfind("final sha256");
  ASSERT_NE(pos, std::string::npos) << out;
  EXPECT_EQ(Trim(out.substr(pos, out.find('\n', pos) - pos)), reference);
}

// The two preemption sources that start on the node: a cloud spot-termination notice (a local
// HTTP server plays the instance-metadata service) and the provider's SIGUSR1 to the agent. Both
// take the same path as a server-side reclaim, and the job resumes from its checkpoint.
TEST_F(RecoveryE2ETest, SpotNoticeAndProviderSignalPreemptAndTheJobResumes) {
  MetadataService metadata(cluster_);
  ASSERT_TRUE(metadata.WaitReady()) << metadata.Log();

  cluster_.StartAgent("spot",
                      {"--spot-metadata-url", metadata.NoticeUrl(), "--spot-poll-interval", "0.1"});
  std::string spec = Spec("count", R"(name: count
lifecycle: {checkpoint_interval: 1s, grace_period: 5s}
run: |
  n=$(cat "$SLUICE_CHECKPOINT_DIR/n" 2>/dev/null || echo 0)
  echo "attempt=$SLUICE_ATTEMPT resumed=${SLUICE_RESUMED:-0} from=$n"
  trap 'echo $n > "$SLUICE_CHECKPOINT_DIR/n.tmp" && mv "$SLUICE_CHECKPOINT_DIR/n.tmp" "$SLUICE_CHECKPOINT_DIR/n"; exit 143' TERM
  while true; do n=$((n+1)); echo $n > "$SLUICE_CHECKPOINT_DIR/n.tmp"; mv "$SLUICE_CHECKPOINT_DIR/n.tmp" "$SLUICE_CHECKPOINT_DIR/n"; sleep 0.02; done
)");
  std::string id = JobId(cluster_.Cli({"run", spec, "--detach"}));
  auto attempts = [&] { return GetJob(cluster_, id)["attempts"]; };
  ASSERT_TRUE(WaitUntil([&] { return Contains(cluster_.Cli({"logs", id}).out, "attempt=1"); }));
  cluster_.StartAgent("b1");
  cluster_.StartAgent("b2");

  // The cloud announces the spot instance's end. Each check reads the answer the wait saw, not
  // a fresh call that a CLI failure on a loaded machine could leave empty (it once failed this
  // test in 5 s, before any wait could have run out).
  metadata.Announce(R"({"action": "terminate", "time": "2026-11-30T01:00:00Z"})");
  Json a;
  ASSERT_TRUE(WaitUntil([&] {
    a = attempts();
    return a.size() == 2u && a[1].value("state", "") == "running";
  })) << GetJob(cluster_, id).dump(2);
  EXPECT_EQ(a[0]["state"], "preempted");
  EXPECT_TRUE(Contains(a[0].value("cause", ""), "preempted: spot termination notice")) << a[0];
  EXPECT_TRUE(Contains(a[0].value("cause", ""), "terminate")) << a[0];
  ASSERT_TRUE(WaitUntil([&] {
    return Contains(cluster_.Cli({"logs", id}).out, "attempt=2 resumed=1");
  })) << cluster_.Cli({"logs", id}).out;

  // The provider signals the agent now running it.
  std::string second;
  ASSERT_TRUE(WaitUntil([&] {
    for (const auto& n : cluster_.CliJson({"nodes"})) {
      if (n.value("id", "") == a[1].value("node_id", "")) second = n.value("name", "");
    }
    return !second.empty();
  })) << a[1];
  ASSERT_NE(cluster_.agent(second), nullptr) << second;
  cluster_.agent(second)->Signal(SIGUSR1);
  ASSERT_TRUE(WaitUntil([&] {
    a = attempts();
    return a.size() == 3u && a[2].value("state", "") == "running";
  })) << GetJob(cluster_, id).dump(2);
  EXPECT_EQ(a[1]["state"], "preempted");
  EXPECT_EQ(a[1]["cause"], "preempted: the provider signalled the agent (SIGUSR1)");
  std::string out;
  ASSERT_TRUE(WaitUntil([&] {
    out = cluster_.Cli({"logs", id}).out;
    return Contains(out, "attempt=3 resumed=1 from=");
  })) << out;
  // It resumed from where it was, not from zero.
  const size_t at = out.find("attempt=3 resumed=1 from=");
  EXPECT_GT(std::atoi(out.c_str() + at + 25), 0) << out;
  EXPECT_EQ(cluster_.Cli({"cancel", id}).exit_code, 0);
}

// Market rule (DESIGN.md §6): an on-demand job that can only run on CPUs held by an
// interruptible attempt preempts it, runs at the on-demand price, and the preempted job resumes
// from its checkpoint once there is room again.
TEST_F(RecoveryE2ETest, OnDemandArrivalPreemptsInterruptibleWork) {
  cluster_.StartAgent(
      "n1", {"--price-per-cpu-hour", "0.1", "--interruptible-price-per-cpu-hour", "0.03"});
  Json nodes = cluster_.CliJson({"nodes"});
  ASSERT_EQ(nodes.size(), 1u);
  const std::string cpus = std::to_string(nodes[0]["inventory"].value("cpu_cores", 1));
  std::string spot =
      Spec("spot", "name: spot\nresources: {cpus: " + cpus +
                       "}\n"
                       "lifecycle: {capacity: interruptible, grace_period: 5s}\n"
                       "run: |\n"
                       "  n=$(cat \"$SLUICE_CHECKPOINT_DIR/n\" 2>/dev/null || echo 0)\n"
                       "  echo \"attempt=$SLUICE_ATTEMPT from=$n\"\n"
                       "  trap 'echo $n > \"$SLUICE_CHECKPOINT_DIR/n\"; exit 143' TERM\n"
                       // 10 s: still running when the on-demand job arrives, even on
                       // a loaded sanitized build (2 s was not always enough).
                       "  while [ $n -lt 200 ]; do n=$((n+1)); sleep 0.05; done\n");
  std::string spot_id = JobId(cluster_.Cli({"run", spot, "--detach"}));
  ASSERT_TRUE(WaitUntil([&] {
    return Contains(cluster_.Cli({"logs", spot_id}).out, "attempt=1");
  }));
  Json first = GetJob(cluster_, spot_id)["attempts"][0];
  EXPECT_EQ(first["interruptible"], true);

  std::string urgent =
      Spec("urgent", "name: urgent\nresources: {cpus: " + cpus + "}\nrun: echo on-demand ran\n");
  CommandResult r = cluster_.Cli({"run", urgent, "--follow"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "on-demand ran")) << r.out;
  Json a = GetJob(cluster_, spot_id)["attempts"];
  ASSERT_GE(a.size(), 1u);
  EXPECT_EQ(a[0]["state"], "preempted");
  EXPECT_TRUE(Contains(a[0].value("cause", ""), "making room for on-demand job")) << a[0];
}

// A job that ignores SIGTERM is killed when its grace period ends, and a server killed right
// after ordering the preemption still finishes it: the preemption survives the restart, and the
// job resumes from its last saved checkpoint.
TEST_F(RecoveryE2ETest, SigtermIgnoredAndServerKilledDuringRecovery) {
  cluster_.StartAgent("a1");
  cluster_.StartAgent("a2");
  std::string spec = Spec("stubborn", R"(name: stubborn
lifecycle: {checkpoint_interval: 1s, grace_period: 1s}
run: |
  trap '' TERM
  n=$(cat "$SLUICE_CHECKPOINT_DIR/n" 2>/dev/null || echo 0)
  echo "attempt=$SLUICE_ATTEMPT from=$n"
  while true; do n=$((n+1)); echo $n > "$SLUICE_CHECKPOINT_DIR/n.tmp"; mv "$SLUICE_CHECKPOINT_DIR/n.tmp" "$SLUICE_CHECKPOINT_DIR/n"; sleep 0.02; done
)");
  std::string id = JobId(cluster_.Cli({"run", spec, "--detach"}));
  // Wait for a periodic checkpoint to reach the server.
  ASSERT_TRUE(WaitUntil([&] {
    return !GetJob(cluster_, id)["job"].value("checkpoint", "").empty();
  })) << GetJob(cluster_, id).dump(2);
  std::string node = GetJob(cluster_, id)["attempts"][0].value("node_id", "");
  ASSERT_EQ(cluster_.Cli({"node", "reclaim", node}).exit_code, 0);
  cluster_.KillServer(SIGKILL);
  cluster_.StartServer(
      {"--heartbeat-interval", "0.3", "--heartbeat-grace", "6", "--cancel-grace", "1"});
  ASSERT_TRUE(WaitUntil(
      [&] {
        Json j = GetJob(cluster_, id);
        return j.is_object() && j["attempts"].size() == 2u &&
               Contains(cluster_.Cli({"logs", id}).out, "attempt=2");
      },
      std::chrono::seconds(30)))
      << GetJob(cluster_, id).dump(2);
  Json a = GetJob(cluster_, id)["attempts"];
  EXPECT_EQ(a[0]["state"], "preempted");
  EXPECT_EQ(a[0]["exit_code"], 137) << a[0];  // SIGKILL after the grace: it ignored SIGTERM
  std::string out = cluster_.Cli({"logs", id}).out;
  size_t at = out.find("attempt=2 from=");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_GT(std::atoi(out.c_str() + at + 15), 0) << out;  // resumed, not restarted from zero
  EXPECT_EQ(cluster_.Cli({"cancel", id}).exit_code, 0);
}

TEST_F(E2ETest, DeleteRemovesAFinishedJobOnly) {
  cluster_.StartAgent("a1");
  std::string quick = Spec("quick", "name: quick\nrun: echo done\n");
  std::string id = JobId(cluster_.Cli({"run", quick, "--detach"}));
  ASSERT_TRUE(WaitUntil([&] { return JobState(cluster_, id) == "succeeded"; }));
  std::string slow = Spec("slow", "name: slow\nrun: sleep 60\n");
  std::string running = JobId(cluster_.Cli({"run", slow, "--detach"}));
  ASSERT_TRUE(WaitUntil([&] { return JobState(cluster_, running) == "running"; }));
  CommandResult refused = cluster_.Cli({"delete", running});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(Contains(refused.err, "cancel it first")) << refused.err;
  EXPECT_EQ(cluster_.Cli({"delete", id}).exit_code, 0);
  CommandResult gone = cluster_.Cli({"job", id});
  EXPECT_NE(gone.exit_code, 0);
  EXPECT_TRUE(Contains(gone.err, "no job")) << gone.err;
  EXPECT_EQ(cluster_.CliJson({"jobs"}).size(), 1u);
  EXPECT_EQ(cluster_.Cli({"cancel", running}).exit_code, 0);
}

// A preemption that lands while the agent is uploading a checkpoint: the job keeps rewriting a
// 16 MiB checkpoint, so periodic uploads run back to back. Whatever the timing, the next attempt
// restores a complete checkpoint (each file's name is its content's SHA-256, checked on resume).
TEST_F(RecoveryE2ETest, PreemptionDuringACheckpointUploadRestoresACompleteOne) {
  cluster_.StartAgent("a1");
  cluster_.StartAgent("a2");
  std::string spec = Spec("big", R"SPEC(name: big
lifecycle: {checkpoint_interval: 1s, grace_period: 5s}
run: |
  d=$SLUICE_CHECKPOINT_DIR
  for f in "$d"/state-*; do
    [ -e "$f" ] || continue
    if [ "$(sha256sum "$f" | cut -d' ' -f1)" = "${f##*/state-}" ]; then echo "restored ok"; else echo "restored CORRUPT $f"; fi
  done
  trap 'exit 143' TERM
  i=0
  while true; do
    i=$((i+1))
    head -c 16777216 /dev/urandom > "$d/tmp"
    sha=$(sha256sum "$d/tmp" | cut -d' ' -f1)
    old=$(ls "$d" | grep '^state-' || true)
    mv "$d/tmp" "$d/state-$sha"
    for o in $old; do rm -f "$d/$o"; done
    echo "wrote $i"
    sleep 0.2
  done
)SPEC");
  std::string id = JobId(cluster_.Cli({"run", spec, "--detach"}));
  // Let a few periodic uploads complete, then preempt in the middle of the next ones.
  ASSERT_TRUE(WaitUntil(
      [&] {
        int saved = 0;
        Json job = GetJob(cluster_, id);
        for (const auto& e : job["events"]) saved += e["event"] == "checkpoint";
        return saved >= 2;
      },
      std::chrono::seconds(60)))
      << GetJob(cluster_, id).dump(2);
  std::string node = GetJob(cluster_, id)["attempts"][0].value("node_id", "");
  ASSERT_EQ(cluster_.Cli({"node", "reclaim", node}).exit_code, 0);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Contains(cluster_.Cli({"logs", id}).out, "restored");
      },
      std::chrono::seconds(60)))
      << GetJob(cluster_, id).dump(2);
  std::string out = cluster_.Cli({"logs", id}).out;
  EXPECT_TRUE(Contains(out, "restored ok")) << out;
  EXPECT_FALSE(Contains(out, "CORRUPT")) << out;
  Json a = GetJob(cluster_, id)["attempts"];
  EXPECT_EQ(a[0]["state"], "preempted");
  EXPECT_FALSE(a[1].value("checkpoint_restored", "").empty());
  EXPECT_EQ(cluster_.Cli({"cancel", id}).exit_code, 0);
}

}  // namespace
}  // namespace sluice::testing
