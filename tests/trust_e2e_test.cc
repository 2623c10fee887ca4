// End-to-end tests of trust (issue 5): verification by conformance, claims checked against the
// probe, re-verification after a driver change, the audit log and signed audit bundles checked
// by `sluice audit verify` and by plain openssl. Real server, agents and CLI on loopback.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "common/text.h"
#include "harness.h"

namespace sluice::testing {
namespace {

bool Contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

std::string Fixture(const std::string& name) {
  return std::string(SLUICE_SOURCE_DIR_DEFAULT) + "/tests/fixtures/nvidia-smi/" + name;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class TrustE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.StartServer(
        {"--heartbeat-interval", "0.3", "--heartbeat-grace", "6", "--cancel-grace", "1"});
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "---- server log ----\n" << cluster_.ServerLog() << "\n";
  }
  // The node as `sluice nodes` lists it; an empty object until it has registered (callers read
  // it with value(), which throws on null).
  Json Node(const std::string& name) {
    Json nodes = cluster_.CliJson({"nodes"});
    if (!nodes.is_array()) return Json::object();
    for (const auto& n : nodes) {
      if (n.value("name", "") == name) return n;
    }
    return Json::object();
  }
  std::string RunToEnd(const std::string& spec) {
    CommandResult r = cluster_.Cli({"run", spec, "--follow"});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    Json jobs = cluster_.CliJson({"jobs"});
    return jobs.is_array() && !jobs.empty() ? jobs[0].value("id", "") : "";
  }
  Cluster cluster_;
};

TEST_F(TrustE2ETest, ACpuNodeIsVerifiedByItsConformanceSuiteAndOnDemand) {
  cluster_.StartAgent("cpu1");  // waits for "verified"
  CommandResult status = cluster_.Cli({"node", "status", "cpu1"});
  EXPECT_EQ(status.exit_code, 0) << status.out << status.err;
  EXPECT_TRUE(Contains(status.out, "verification verified")) << status.out;
  for (const char* check : {"PASS cpu", "PASS memory", "PASS disk", "PASS link", "SKIP gpu"}) {
    EXPECT_TRUE(Contains(status.out, check)) << check << "\n" << status.out;
  }
  Json n = Node("cpu1");
  EXPECT_EQ(n["hardware_fingerprint"].get<std::string>().size(), 64u);
  EXPECT_EQ(n["software_fingerprint"].get<std::string>().size(), 64u);
  int64_t first = n.value("verified_ms", int64_t{0});
  // On demand: the suite runs again and a new verdict arrives.
  CommandResult verify = cluster_.Cli({"node", "verify", "cpu1", "--timeout", "60"});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  EXPECT_GT(Node("cpu1").value("verified_ms", int64_t{0}), first);
  Json offers = cluster_.CliJson({"offers", "verified=verified"});
  ASSERT_TRUE(offers.is_array());
  EXPECT_EQ(offers.size(), 1u);
}

TEST_F(TrustE2ETest, ANodeAdvertisingAGpuItsProbeDoesNotShowIsRejected) {
  Daemon* agent = cluster_.StartAgent("liar", {"--advertise-gpu", "h100-80gb:8"}, false);
  int rc = agent->Wait(std::chrono::seconds(30));
  EXPECT_EQ(rc, 1) << agent->Log();
  EXPECT_TRUE(Contains(agent->Log(), "advertises 8 x h100-80gb but its probe shows 0"))
      << agent->Log();
  EXPECT_TRUE(Node("liar").empty());
  // The refusal is in the audit log.
  CommandResult log = cluster_.Cli({"audit-log", "--csv"});
  EXPECT_TRUE(Contains(log.out, "agent.hello")) << log.out;
  EXPECT_TRUE(Contains(log.out, "claim rejected")) << log.out;
}

// The recorded H100 machine, its GPU checks run on the fake CUDA driver. A driver upgrade
// (the same recording with another driver version) deverifies the node and withdraws its offers;
// while its GPU check fails it stays out of the market, with the reason; once it passes it is
// back.
TEST_F(TrustE2ETest, ADriverChangeIsReverifiedAndOffersAreWithdrawnUntilItPasses) {
  Cluster::FakeGpus fake = cluster_.FakeGpuAgent(Fixture("h100-sxm5-80gb-1.txt"));
  Daemon* agent = cluster_.StartAgent("h100", fake.args, true, fake.env);
  ASSERT_EQ(cluster_.CliJson({"offers", "gpu=h100"}).size(), 1u);
  Json before = Node("h100");
  std::string driver = before["inventory"].value("driver_version", "");
  ASSERT_FALSE(driver.empty());

  // Upgrade: the same recording with a newer driver, and (for now) a GPU that fails its check.
  std::string recorded = ReadAll(Fixture("h100-sxm5-80gb-1.txt"));
  std::string upgraded = std::regex_replace(recorded, std::regex(driver), "560.35.03");
  ASSERT_NE(upgraded, recorded);
  std::string path = cluster_.WriteFile("h100-upgraded.txt", upgraded);
  agent->Signal(SIGTERM);
  ASSERT_EQ(agent->Wait(std::chrono::seconds(30)), 0);
  Cluster::FakeGpus broken = cluster_.FakeGpuAgent(path);
  broken.env["FAKE_CUDA_FAIL"] = "wrong-result";
  cluster_.StartAgent("h100", broken.args, false, broken.env);
  ASSERT_TRUE(WaitUntil([&] {
    Json n = Node("h100");
    return n.value("state", "") == "online" && n.value("verification", "") == "deverified" &&
           !n.value("verifying", true);
  })) << cluster_.Cli({"node", "status", "h100"}).out;
  Json n = Node("h100");
  EXPECT_EQ(n["hardware_fingerprint"], before["hardware_fingerprint"]);
  EXPECT_NE(n["software_fingerprint"], before["software_fingerprint"]);
  CommandResult status = cluster_.Cli({"node", "status", "h100"});
  EXPECT_EQ(status.exit_code, 2);
  EXPECT_TRUE(Contains(status.out, "gpu-compute.0")) << status.out;
  EXPECT_TRUE(cluster_.CliJson({"offers", "gpu=h100"}).empty());
  // A job for it is refused with the reason.
  std::string spec =
      cluster_.WriteFile("g.yaml", "name: g\nresources: {gpu: h100, gpus: 1}\nrun: true\n");
  CommandResult refused = cluster_.Cli({"run", spec});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_TRUE(Contains(refused.err, "node h100 is deverified and takes no work")) << refused.err;

  // The GPU is fixed: the next run passes and the offers are back.
  cluster_.agent("h100")->Signal(SIGTERM);
  ASSERT_EQ(cluster_.agent("h100")->Wait(std::chrono::seconds(30)), 0);
  Cluster::FakeGpus fixed = cluster_.FakeGpuAgent(path);
  cluster_.StartAgent("h100", fixed.args, true, fixed.env);
  EXPECT_EQ(cluster_.CliJson({"offers", "gpu=h100"}).size(), 1u);
  EXPECT_EQ(Node("h100")["inventory"].value("driver_version", ""), "560.35.03");
}

// The driver changes under a running agent (here: its recorded nvidia-smi output is rewritten).
// The next verification probes again, the agent registers anew, and the server deverifies the
// node, re-runs the suite and verifies it with the new software fingerprint.
TEST_F(TrustE2ETest, ASoftwareChangeUnderARunningAgentIsCaughtAtTheNextVerification) {
  std::string recorded = ReadAll(Fixture("h100-sxm5-80gb-1.txt"));
  std::string path = cluster_.WriteFile("h100-live.txt", recorded);
  Cluster::FakeGpus fake = cluster_.FakeGpuAgent(path);
  cluster_.StartAgent("h100", fake.args, true, fake.env);
  Json before = Node("h100");
  std::string driver = before["inventory"].value("driver_version", "");
  ASSERT_FALSE(driver.empty());
  cluster_.WriteFile("h100-live.txt",
                     std::regex_replace(recorded, std::regex(driver), "560.35.03"));

  CommandResult verify = cluster_.Cli({"node", "verify", "h100", "--timeout", "90"});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  Json after = Node("h100");
  EXPECT_EQ(after["inventory"].value("driver_version", ""), "560.35.03");
  EXPECT_EQ(after["hardware_fingerprint"], before["hardware_fingerprint"]);
  EXPECT_NE(after["software_fingerprint"], before["software_fingerprint"]);
  EXPECT_EQ(after.value("verification", ""), "verified");
  EXPECT_TRUE(Contains(cluster_.agent("h100")->Log(), "registering it again"))
      << cluster_.agent("h100")->Log();
  // The server's side of it is on record: a second hello, and the suite's verdict after it.
  CommandResult log = cluster_.Cli({"audit-log", "--csv"});
  EXPECT_TRUE(Contains(log.out, "560.35.03")) << log.out;
}

// Speed measured on the node (issue 13 item 3). Two recorded A100 machines on the fake CUDA
// driver: one plays a healthy A100 (its spec: 312 TFLOPS, 2000 GB/s), the other one at 120
// TFLOPS, 38 % of its spec (a loaded machine can only make a run look slower, and the margin to
// the 25 % floor allows for that). Both are verified; the slow one is flagged, its offer carries
// what it measured, and `sluice estimate` ranks it after the healthy one at the same price.
// Below the floor a GPU is not verified, with the reason; a counterfeit is not verified either.
TEST_F(TrustE2ETest, AGpuIsJudgedByTheSpeedItMeasures) {
  auto start = [&](const std::string& name, const std::map<std::string, std::string>& play,
                   bool wait_verified) {
    Cluster::FakeGpus fake = cluster_.FakeGpuAgent(Fixture("a100-sxm4-80gb-1.txt"));
    fake.args.insert(fake.args.end(), {"--price-per-gpu-hour", "1.5"});
    for (const auto& [k, v] : play) fake.env[k] = v;
    return cluster_.StartAgent(name, fake.args, wait_verified, fake.env);
  };
  start("healthy", {{"FAKE_CUDA_TFLOPS", "290"}, {"FAKE_CUDA_GBPS", "1900"}}, true);
  start("throttled", {{"FAKE_CUDA_TFLOPS", "120"}, {"FAKE_CUDA_GBPS", "1900"}}, true);

  Json offers = cluster_.CliJson({"offers", "gpu=a100-80gb"});
  ASSERT_EQ(offers.size(), 2u) << offers.dump();
  Json healthy, throttled;
  for (const auto& o : offers) (o.value("provider", "") == "healthy" ? healthy : throttled) = o;
  EXPECT_DOUBLE_EQ(healthy.value("spec_perf", 0.0), 1.0);
  EXPECT_DOUBLE_EQ(healthy.value("perf_score", 0.0), 1.0);  // ranked by its spec
  EXPECT_GT(healthy.value("measured_perf", 0.0), 0.5);
  EXPECT_LE(healthy.value("measured_perf", 0.0), 290.0 / 312 * 1.01);
  EXPECT_EQ(healthy.value("perf_flag", "x"), "");
  // The fake only ever takes longer than it plays, so the measured figure is at most 120/312.
  EXPECT_LE(throttled.value("perf_score", 0.0), 120.0 / 312 * 1.01);
  EXPECT_GE(throttled.value("perf_score", 0.0), 0.25);  // still above the floor
  EXPECT_DOUBLE_EQ(throttled.value("perf_score", 0.0), throttled.value("measured_perf", 0.0));
  EXPECT_TRUE(Contains(throttled.value("perf_flag", ""), "of the a100-80gb spec (matrix multiply"))
      << throttled.dump();
  CommandResult table = cluster_.Cli({"offers", "gpu=a100-80gb"});
  EXPECT_TRUE(Contains(table.out, "(measured)")) << table.out;
  EXPECT_TRUE(Contains(table.out, "slow: ")) << table.out;
  CommandResult slow_status = cluster_.Cli({"node", "status", "throttled"});
  EXPECT_TRUE(Contains(slow_status.out, "flagged")) << slow_status.out;
  // The provider sees what each GPU measured against its spec.
  EXPECT_TRUE(Contains(slow_status.out, "speed        GPU 0: ")) << slow_status.out;
  EXPECT_TRUE(Contains(slow_status.out, "TFLOPS FP16 tensor (")) << slow_status.out;
  EXPECT_TRUE(Contains(slow_status.out, "% of its spec 312)")) << slow_status.out;
  EXPECT_TRUE(Contains(slow_status.out, "FLAGGED: ranked by what it measured")) << slow_status.out;
  Json speeds = Node("healthy")["gpu_speeds"];
  ASSERT_EQ(speeds.size(), 4u) << speeds.dump();
  EXPECT_EQ(speeds[0]["matmul_mode"], "fp16-tensor");
  EXPECT_EQ(speeds[0]["spec_tflops"], 312);
  EXPECT_FALSE(speeds[0]["flagged"].get<bool>());

  std::string spec = cluster_.WriteFile(
      "a100.yaml", "name: t\nresources: {gpu: a100-80gb, gpus: 4}\nexpected_hours: 10\nrun: x\n");
  Json est = cluster_.CliJson({"estimate", spec});
  ASSERT_TRUE(est.is_object()) << cluster_.Cli({"estimate", spec}).err;
  ASSERT_EQ(est["offers"].size(), 2u);
  EXPECT_EQ(est["offers"][0]["offer"].value("provider", ""), "healthy");
  EXPECT_EQ(est["offers"][1]["offer"].value("provider", ""), "throttled");
  EXPECT_GT(est["offers"][1]["estimate"].value("expected_hours", 0.0),
            2 * est["offers"][0]["estimate"].value("expected_hours", 0.0));
  CommandResult text = cluster_.Cli({"estimate", spec});
  EXPECT_TRUE(Contains(text.out, "perf is what the node measured")) << text.out;

  // Below the floor (a fifth of the spec): not verified, and the reason says why.
  start("broken", {{"FAKE_CUDA_TFLOPS", "60"}, {"FAKE_CUDA_GBPS", "1900"}}, false);
  // A counterfeit: fast and wrong.
  start("fake", {{"FAKE_CUDA_FAIL", "counterfeit"}}, false);
  for (const char* name : {"broken", "fake"}) {
    ASSERT_TRUE(WaitUntil([&] {
      Json n = Node(name);
      return n.value("state", "") == "online" && n.value("verification", "") == "unverified" &&
             !n.value("verifying", true);
    })) << name
        << "\n"
        << cluster_.Cli({"node", "status", name}).out;
  }
  CommandResult broken = cluster_.Cli({"node", "status", "broken"});
  EXPECT_TRUE(Contains(broken.out, "of the a100-80gb spec")) << broken.out;
  EXPECT_TRUE(Contains(broken.out, "the floor is 25%")) << broken.out;
  CommandResult fake = cluster_.Cli({"node", "status", "fake"});
  EXPECT_TRUE(Contains(fake.out, "gpu-perf.0: mismatches")) << fake.out;
  EXPECT_EQ(cluster_.CliJson({"offers", "gpu=a100-80gb"}).size(), 2u);
}

TEST_F(TrustE2ETest, AuditLogRecordsMutationsWithoutSecrets) {
  cluster_.StartAgent("a1");
  std::string spec = cluster_.WriteFile(
      "s.yaml", "name: s\nresources: {cpus: 1}\nenv: {WANDB_API_KEY: s3cr3t-value}\nrun: true\n");
  RunToEnd(spec);
  CommandResult csv = cluster_.Cli({"audit-log", "--csv", "--since", "1h"});
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_TRUE(Contains(csv.out, "id,ts_ms,actor,source,action,target,status,params")) << csv.out;
  EXPECT_TRUE(Contains(csv.out, ",POST /v1/jobs,job-")) << csv.out;
  EXPECT_TRUE(Contains(csv.out, "127.0.0.1:")) << csv.out;
  EXPECT_TRUE(Contains(csv.out, "admin (tok-")) << csv.out;  // the account and its token id
  EXPECT_TRUE(Contains(csv.out, "WANDB_API_KEY")) << csv.out;
  EXPECT_FALSE(Contains(csv.out, "s3cr3t-value")) << csv.out;
  EXPECT_FALSE(Contains(csv.out, "GET /v1/")) << "reads are not mutations";
  // Nothing since a minute in the future.
  CommandResult none = cluster_.Cli({"audit-log", "--since", "2999-01-01"});
  EXPECT_TRUE(Contains(none.out, "no audit entries")) << none.out;
  CommandResult bad = cluster_.Cli({"audit-log", "--since", "yesterday-ish"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(Contains(bad.err, "--since")) << bad.err;
}

TEST_F(TrustE2ETest, AuditBundleVerifiesWithSluiceAndOpensslAndAnyChangeIsCaught) {
  Cluster::FakeGpus fake = cluster_.FakeGpuAgent(Fixture("h100-sxm5-80gb-1.txt"));
  fake.args.insert(fake.args.end(), {"--price-per-gpu-hour", "2.5"});
  cluster_.StartAgent("h100", fake.args, true, fake.env);
  std::string spec =
      cluster_.WriteFile("j.yaml", "name: j\nresources: {gpu: h100, gpus: 1}\nrun: echo trained\n");
  std::string id = RunToEnd(spec);
  ASSERT_FALSE(id.empty());
  std::string zip = cluster_.dir() + "/report.zip";
  CommandResult written = cluster_.Cli({"audit", id, "-o", zip});
  ASSERT_EQ(written.exit_code, 0) << written.err;
  CommandResult ok = cluster_.Cli({"audit", "verify", zip});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_TRUE(Contains(ok.out, "bundle verified")) << ok.out;

  // Plain openssl, with the certificate the server publishes.
  std::string cert = cluster_.dir() + "/cert.pem";
  // Published without a token, and the same file the server keeps.
  CommandResult pem = RunCommand(
      {"/usr/bin/python3", "-c",
       "import sys,urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read()"
       ".decode())",
       cluster_.url() + "/v1/audit/certificate"});
  ASSERT_EQ(pem.exit_code, 0) << pem.err;
  EXPECT_EQ(pem.out, ReadAll(cluster_.server_data_dir() + "/audit-signing.crt"));
  std::ofstream(cert) << pem.out;
  std::string x = cluster_.dir() + "/x";
  std::filesystem::create_directories(x);
  ASSERT_EQ(RunCommand({"/usr/bin/python3", "-c",
                        "import sys,zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])",
                        zip, x})
                .exit_code,
            0);
  auto openssl_ok = [&] {
    return RunCommand({"/usr/bin/openssl", "cms", "-verify", "-binary", "-inform", "DER", "-in",
                       x + "/signature.p7s", "-content", x + "/manifest.sha256", "-CAfile", cert,
                       "-out", "/dev/null"})
                   .exit_code == 0 &&
           RunCommand({"/bin/sh", "-c", "cd '" + x + "' && sha256sum --strict -c manifest.sha256"})
                   .exit_code == 0;
  };
  EXPECT_TRUE(openssl_ok());
  // What the job ran on is in the bundle: the recorded H100's serials and the verdict.
  std::string hw = ReadAll(x + "/hardware-inventory.json");
  EXPECT_TRUE(Contains(hw, "NVIDIA H100 80GB HBM3")) << hw;
  EXPECT_TRUE(Contains(ReadAll(x + "/conformance-log.txt"), "PASS gpu-compute.0"));
  EXPECT_TRUE(
      Contains(ReadAll(x + "/environment-fingerprint.json"), "\"verification\": \"verified\""));
  // And what it cost: the attempt's meter at its locked price (issue 14).
  auto statement = ParseJson(ReadAll(x + "/cost-statement.json"));
  ASSERT_TRUE(statement.ok());
  ASSERT_EQ((*statement)["meters"].size(), 1u) << statement->dump();
  EXPECT_EQ((*statement)["meters"][0].value("price_micros_per_hour", int64_t{0}), 2'500'000);

  // One byte of events.jsonl changed: sluice and sha256sum both refuse it.
  std::string events = ReadAll(x + "/events.jsonl");
  events[events.size() / 2] ^= 1;
  std::ofstream(x + "/events.jsonl", std::ios::binary | std::ios::trunc) << events;
  EXPECT_FALSE(openssl_ok());
  std::string tampered = cluster_.dir() + "/tampered.zip";
  ASSERT_EQ(
      RunCommand(
          {"/usr/bin/python3", "-c",
           "import os,sys,zipfile\n"
           "z=zipfile.ZipFile(sys.argv[1],'w')\n"
           "[z.write(os.path.join(sys.argv[2],f),f) for f in sorted(os.listdir(sys.argv[2]))]\n"
           "z.close()",
           tampered, x})
          .exit_code,
      0);
  CommandResult bad = cluster_.Cli({"audit", "verify", tampered, "--cert", cert});
  EXPECT_EQ(bad.exit_code, 1) << bad.out << bad.err;
  EXPECT_TRUE(Contains(bad.out, "MODIFIED  events.jsonl")) << bad.out;
}

TEST_F(TrustE2ETest, DryRunExplainsWhichRuntimeFactFailsOnWhichOffers) {
  cluster_.StartAgent("cpu1");
  std::string fits = cluster_.WriteFile("fits.yaml", "name: f\nresources: {cpus: 1}\nrun: true\n");
  CommandResult ok = cluster_.Cli({"run", "--dry-run", fits});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_TRUE(Contains(ok.out + ok.err, "cpu1")) << ok.out << ok.err;
  std::string needs = cluster_.WriteFile(
      "needs.yaml",
      "name: n\nresources: {cpus: 1}\nruntime: {driver: \">=535\", cuda: \"12.1\"}\nrun: true\n");
  CommandResult no = cluster_.Cli({"run", "--dry-run", needs});
  EXPECT_NE(no.exit_code, 0);
  std::string all = no.out + no.err;
  EXPECT_TRUE(Contains(all, "driver>=535")) << all;
  EXPECT_TRUE(Contains(all, "sha256")) << all;
  // Nothing was submitted.
  Json jobs = cluster_.CliJson({"jobs"});
  ASSERT_TRUE(jobs.is_array());
  EXPECT_TRUE(jobs.empty());
}

}  // namespace
}  // namespace sluice::testing

namespace sluice::testing {
namespace {

// Storm-proof verification (issue 12 item 5) with real agents: one suite at a time, three
// agents started together; each waits its turn and all end verified.
TEST(VerificationStormE2ETest, AgentsStartedTogetherAreVerifiedOneAtATime) {
  Cluster cluster;
  cluster.StartServer({"--heartbeat-interval", "0.3", "--heartbeat-grace", "6",
                       "--max-concurrent-verifications", "1"});
  for (const char* name : {"s1", "s2", "s3"}) cluster.StartAgent(name, {}, false);
  bool saw_queue = false;
  bool all_verified = WaitUntil(
      [&] {
        Json nodes = cluster.CliJson({"nodes"});
        if (!nodes.is_array() || nodes.size() != 3u) return false;
        int verified = 0, admitted = 0;
        for (const auto& n : nodes) {
          verified += n.value("verification", "") == "verified";
          bool queued = n.value("verification_queued", false);
          saw_queue = saw_queue || queued;
          admitted += n.value("verifying", false) && !queued;
        }
        EXPECT_LE(admitted, 1) << nodes.dump();
        return verified == 3;
      },
      std::chrono::seconds(90));
  EXPECT_TRUE(all_verified) << cluster.CliJson({"nodes"}).dump() << cluster.ServerLog();
  // Whether a node was seen waiting depends on how the three registrations interleaved.
  std::cout << "a queued node was " << (saw_queue ? "" : "not ") << "observed\n";
}

}  // namespace
}  // namespace sluice::testing
