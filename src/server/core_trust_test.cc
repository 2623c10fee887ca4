// The server core's trust (issue 5): claims, verification, re-verification, speed (issue 13),
// reliability, audit bundles, and storm-proof verification (issue 12 item 5).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include "audit/bundle.h"
#include "common/crypto.h"
#include "market/gpu_identity.h"
#include "market/gpu_labels.h"
#include "market/perf.h"
#include "server/core_test_fixture.h"
#include "server/node_trust.h"

namespace sluice::server {
namespace {

using testing::RecordingLink;

TEST_F(TrustTest, AClaimTheProbeContradictsIsRejectedWithTheReason) {
  proto::Hello h = CpuHello();  // no GPUs
  h.claims = {{"h100-80gb", 8}};
  auto link = std::make_shared<RecordingLink>();
  auto node = core_->AgentHello(link, h);
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(node.status().message().find("advertises 8 x h100-80gb but its probe shows 0"),
            std::string::npos)
      << node.status().message();
  EXPECT_TRUE(core_->ListNodes().empty());  // nothing was registered

  // A claim the probe backs is accepted; more than the probe found is not.
  proto::Hello g = GpuHello();
  g.claims = {{"h100-80gb", 1}};
  EXPECT_TRUE(core_->AgentHello(std::make_shared<RecordingLink>(), g).ok());
  g.claims = {{"h100-80gb", 2}};
  auto two = core_->AgentHello(std::make_shared<RecordingLink>(), g);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("probe found: 1 x h100-80gb"), std::string::npos);
}

TEST_F(TrustTest, AnUnverifiedNodeTakesNoWorkAndAFailedReportSaysWhy) {
  auto link = std::make_shared<RecordingLink>();
  auto node = core_->AgentHello(link, CpuHello());
  ASSERT_TRUE(node.ok());
  // Registration asks for the suite; until it reports, the node is unverified and sells nothing.
  ASSERT_EQ(link->OfType("reverify").size(), 1u);
  EXPECT_EQ(link->OfType("reverify")[0]["reason"], "registration");
  EXPECT_EQ(core_->ListNodes()[0].node.verification, "unverified");
  EXPECT_TRUE(core_->ListOffers().empty());
  // A job may still be queued for it: verification is under way.
  auto queued = core_->SubmitJob(Spec(), "");
  ASSERT_TRUE(queued.ok()) << queued.status().ToString();
  EXPECT_TRUE(link->OfType("assign").empty());

  // The agent says its disk passed, but the numbers say otherwise: the server decides.
  conformance::Report r = testing::PassingReport(CpuHello().inventory);
  for (auto& c : r.checks) {
    if (c.name == "disk") c.measurements["write_mib_s"] = 2;
  }
  ASSERT_TRUE(Report(*node, link, r).ok());
  NodeView v = core_->ListNodes()[0];
  EXPECT_EQ(v.node.verification, "unverified");
  ASSERT_FALSE(v.node.verification_reasons.empty());
  EXPECT_NE(DumpJson(v.node.verification_reasons).find("disk"), std::string::npos)
      << DumpJson(v.node.verification_reasons);
  EXPECT_TRUE(link->OfType("assign").empty());
  // A new job is refused, and the refusal names the node and why it takes no work.
  auto refused = core_->SubmitJob(Spec(), "");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("node box is unverified and takes no work: "),
            std::string::npos)
      << refused.status().message();

  // A passing report (answering a new request: each report answers one) verifies it, and the
  // queued job is placed.
  ASSERT_TRUE(core_->VerifyNode(*node).ok());
  ASSERT_TRUE(Report(*node, link, testing::PassingReport(CpuHello().inventory)).ok());
  EXPECT_EQ(core_->ListNodes()[0].node.verification, "verified");
  EXPECT_EQ(link->OfType("assign").size(), 1u);
  ASSERT_EQ(core_->ListOffers().size(), 1u);
  EXPECT_EQ(core_->ListOffers()[0].verified, market::VerifiedState::kVerified);
}

TEST_F(TrustTest, ADriverChangeDeverifiesAndWithdrawsOffersUntilItPassesAgain) {
  auto link = std::make_shared<RecordingLink>();
  proto::Hello h = GpuHello();
  auto node = Hello(link, h);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(core_->ListNodes()[0].node.verification, "verified");
  std::string hw = core_->ListNodes()[0].node.hardware_fingerprint;
  std::string sw = core_->ListNodes()[0].node.software_fingerprint;
  EXPECT_EQ(hw.size(), 64u);
  ASSERT_EQ(core_->ListOffers().size(), 1u);

  // The same machine reconnects unchanged: it stays verified, no new suite run is needed.
  auto again = std::make_shared<RecordingLink>();
  h.node_id = *node;
  ASSERT_TRUE(core_->AgentHello(again, h).ok());
  EXPECT_TRUE(again->OfType("reverify").empty());
  EXPECT_EQ(core_->ListNodes()[0].node.verification, "verified");

  // The provider upgrades the driver: deverified, offers withdrawn, the suite runs again.
  auto upgraded = std::make_shared<RecordingLink>();
  h.inventory.driver_version = "560.35.03";
  h.inventory.cuda_version = "12.6";
  ASSERT_TRUE(core_->AgentHello(upgraded, h).ok());
  NodeView v = core_->ListNodes()[0];
  EXPECT_EQ(v.node.verification, "deverified");
  EXPECT_EQ(v.node.hardware_fingerprint, hw);
  EXPECT_NE(v.node.software_fingerprint, sw);
  EXPECT_NE(DumpJson(v.node.verification_reasons).find("driver 550.54.15 -> 560.35.03"),
            std::string::npos)
      << DumpJson(v.node.verification_reasons);
  ASSERT_EQ(upgraded->OfType("reverify").size(), 1u);
  EXPECT_TRUE(core_->ListOffers().empty());
  auto queued = core_->SubmitJob(Spec(1, 1), "");
  ASSERT_TRUE(queued.ok()) << queued.status().ToString();
  EXPECT_TRUE(upgraded->OfType("assign").empty());

  ASSERT_TRUE(Report(*node, upgraded, testing::PassingReport(h.inventory)).ok());
  EXPECT_EQ(core_->ListNodes()[0].node.verification, "verified");
  EXPECT_EQ(core_->ListOffers().size(), 1u);
  EXPECT_EQ(upgraded->OfType("assign").size(), 1u);
}

TEST_F(TrustTest, VerifiedNodesAreAskedAgainOnScheduleAndOnDemand) {
  opt_.reverify_interval_ms = 10 * 60'000;
  Open();
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  ASSERT_TRUE(node.ok());
  size_t asked = link->OfType("reverify").size();  // the registration request
  Live(9 * 60'000, *node, link);
  EXPECT_EQ(link->OfType("reverify").size(), asked);
  Live(2 * 60'000, *node, link);
  ASSERT_EQ(link->OfType("reverify").size(), asked + 1);
  EXPECT_EQ(link->OfType("reverify").back()["reason"], "scheduled");
  // Still verified while the new report is on its way.
  EXPECT_EQ(core_->ListNodes()[0].node.verification, "verified");
  EXPECT_TRUE(core_->ListNodes()[0].verifying);
  ASSERT_TRUE(Report(*node, link, testing::PassingReport(CpuHello().inventory)).ok());

  auto verify = core_->VerifyNode("box");
  ASSERT_TRUE(verify.ok()) << verify.status().ToString();
  EXPECT_EQ(link->OfType("reverify").back()["reason"], "on-demand");
  EXPECT_EQ(core_->VerifyNode("nope").status().code(), StatusCode::kNotFound);
}

// A power cap or thermal throttling changes no fingerprint: only the scheduled re-run of the
// suite, speed check included, sees it. The GPU measures a third of its spec at the next
// scheduled verification; the node stays verified, its offer is flagged and ranks by what it
// measured. At a fifth it is deverified with the reason, and its offer withdrawn.
TEST_F(TrustTest, ScheduledReverificationCatchesAGpuThatGotSlower) {
  opt_.reverify_interval_ms = 10 * 60'000;
  Open();
  auto link = std::make_shared<RecordingLink>();
  proto::Hello h = GpuHello();
  auto node = Hello(link, h);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(core_->ListOffers().size(), 1u);
  const market::Offer before = core_->ListOffers()[0];
  EXPECT_GT(before.spec_perf, 3);  // h100-80gb, SXM: 989 of the reference's 312 TFLOPS
  EXPECT_EQ(before.perf_score, before.spec_perf);
  EXPECT_TRUE(before.perf_flag.empty());
  const std::string hw = core_->ListNodes()[0].node.hardware_fingerprint;
  const std::string sw = core_->ListNodes()[0].node.software_fingerprint;

  auto slowed = [&](double tflops) {
    conformance::Report r = testing::PassingReport(h.inventory);
    for (auto& c : r.checks) {
      if (c.name == "gpu-perf.0") c.measurements["matmul_tflops"] = tflops;
    }
    return r;
  };
  size_t asked = link->OfType("reverify").size();
  Live(11 * 60'000, *node, link);
  ASSERT_EQ(link->OfType("reverify").size(), asked + 1);
  EXPECT_EQ(link->OfType("reverify").back()["reason"], "scheduled");
  ASSERT_TRUE(Report(*node, link, slowed(330)).ok());
  ASSERT_EQ(core_->ListNodes()[0].node.verification, "verified");
  EXPECT_EQ(core_->ListNodes()[0].node.hardware_fingerprint, hw);
  EXPECT_EQ(core_->ListNodes()[0].node.software_fingerprint, sw);
  ASSERT_EQ(core_->ListOffers().size(), 1u);
  market::Offer o = core_->ListOffers()[0];
  EXPECT_DOUBLE_EQ(o.spec_perf, before.spec_perf);
  EXPECT_NEAR(o.measured_perf, 330.0 / 312, 1e-9);
  EXPECT_NEAR(o.perf_score, 330.0 / 312, 1e-9);
  EXPECT_NE(o.perf_flag.find("measures 33% of the h100-80gb spec"), std::string::npos)
      << o.perf_flag;

  Live(11 * 60'000, *node, link);
  ASSERT_EQ(link->OfType("reverify").size(), asked + 2);
  ASSERT_TRUE(Report(*node, link, slowed(200)).ok());
  EXPECT_EQ(core_->ListNodes()[0].node.verification, "deverified");
  EXPECT_NE(DumpJson(core_->ListNodes()[0].node.verification_reasons).find("the floor is 25%"),
            std::string::npos)
      << DumpJson(core_->ListNodes()[0].node.verification_reasons);
  EXPECT_TRUE(core_->ListOffers().empty());
}

// A GPU whose label the registry does not know still sells, but the verdict says that no job
// can ask for it by name.
TEST_F(TrustTest, AGpuLabelTheRegistryDoesNotKnowIsNoted) {
  auto link = std::make_shared<RecordingLink>();
  proto::Hello h = GpuHello();
  h.inventory.gpus[0].name = "NVIDIA Quadro P400";
  h.inventory.gpus[0].memory_mib = 2048;
  const std::string label = market::IdentifyGpu(h.inventory.gpus[0]).label;
  const auto known = market::KnownGpuLabels();
  ASSERT_EQ(std::count(known.begin(), known.end(), label), 0) << label;
  auto node = Hello(link, h);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_EQ(core_->ListNodes()[0].node.verification, "verified");
  const std::string reasons = DumpJson(core_->ListNodes()[0].node.verification_reasons);
  EXPECT_NE(reasons.find("note: GPU 0 is labelled " + label + " (from "), std::string::npos)
      << reasons;
  EXPECT_NE(reasons.find("a label the registry does not know"), std::string::npos) << reasons;
  EXPECT_EQ(core_->ListOffers().size(), 1u);  // it still sells

  // A known label gets no such note.
  auto other = std::make_shared<RecordingLink>();
  proto::Hello known_gpu = GpuHello();
  known_gpu.name = known_gpu.inventory.hostname = "box2";
  ASSERT_TRUE(Hello(other, known_gpu).ok());
  int seen = 0;
  for (const auto& n : core_->ListNodes()) {
    if (n.node.name != "box2") continue;
    ++seen;
    EXPECT_EQ(DumpJson(n.node.verification_reasons).find("registry does not know"),
              std::string::npos);
  }
  EXPECT_EQ(seen, 1);
}

// A forged agent on a GPU model the specs do not know reports an absurd but "credible" speed:
// the offer ranks by the measurement, never above the fastest GPU the specs know.
TEST_F(TrustTest, AForgedSpeedOnAnUnknownModelCannotBuyFirstPlace) {
  auto link = std::make_shared<RecordingLink>();
  proto::Hello h = GpuHello();
  h.inventory.gpus[0].name = "NVIDIA Quadro P400";
  h.inventory.gpus[0].memory_mib = 2048;
  auto node = core_->AgentHello(link, h);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  conformance::Report r = testing::PassingReport(h.inventory);
  for (auto& c : r.checks) {
    if (c.name == "gpu-perf.0") c.measurements["matmul_tflops"] = 4900;  // under the 5,000 cap
  }
  ASSERT_TRUE(Report(*node, link, r).ok());
  ASSERT_EQ(core_->ListNodes()[0].node.verification, "verified");
  ASSERT_EQ(core_->ListOffers().size(), 1u);
  const market::Offer o = core_->ListOffers()[0];
  EXPECT_EQ(o.spec_perf, 0);
  EXPECT_NEAR(o.measured_perf, market::PerfFromTflops(4900), 1e-9);
  EXPECT_GT(market::FastestSpecPerf(), 3);  // h100-80gb's 3.17 at least
  EXPECT_DOUBLE_EQ(o.perf_score, market::FastestSpecPerf());
}

TEST_F(TrustTest, ReliabilityFollowsUptimeAndStartFailures) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  ASSERT_TRUE(node.ok());
  Live(3600'000, *node, link);
  EXPECT_DOUBLE_EQ(core_->ListNodes()[0].reliability.score, 1.0);

  // Offline for an hour: uptime 1/2. (Quiet links count as lost only after the grace.)
  core_->AgentDisconnected(*node, link.get());
  clock_.Advance(3600'000);
  auto back = std::make_shared<RecordingLink>();
  proto::Hello h = CpuHello(*node);
  ASSERT_TRUE(core_->AgentHello(back, h).ok());
  Live(60'000, *node, back);
  market::Reliability r = core_->ListNodes()[0].reliability;
  // Scores are refreshed once a minute; whenever that was, the hour offline is what is missing.
  EXPECT_EQ(r.inputs.window_ms - r.inputs.online_ms, 3600'000);
  EXPECT_NEAR(r.uptime, 0.5, 0.01);

  // A job that cannot start on it: one start failure out of one start.
  ASSERT_TRUE(core_->SubmitJob(Spec(), "").ok());
  auto assign = back->OfType("assign");
  ASSERT_EQ(assign.size(), 1u);
  Json exited = Msg("exited", assign[0]["attempt_id"]);
  exited["exit_code"] = 127;
  exited["error"] = "exec failed";
  ASSERT_TRUE(core_->AgentMessage(*node, back.get(), exited).ok());
  Live(60'000, *node, back);
  r = core_->ListNodes()[0].reliability;
  EXPECT_EQ(r.inputs.starts, 1);
  EXPECT_EQ(r.inputs.start_failures, 1);
  EXPECT_DOUBLE_EQ(r.start_success, 0.5);
  EXPECT_LT(r.score, 0.3);
  // The score reaches the market: the node's offer carries it.
  ASSERT_EQ(core_->ListOffers().size(), 1u);
  EXPECT_DOUBLE_EQ(core_->ListOffers()[0].reliability, r.score);
}

TEST_F(TrustTest, ANodeLostForSilenceWasOnlineUntilItsLastHeartbeat) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  ASSERT_TRUE(node.ok());
  Live(600'000, *node, link);
  // Silent: declared lost once the 10 s grace has passed, at the first tick after it.
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(5000);
    core_->Tick();
  }
  ASSERT_EQ(core_->ListNodes()[0].node.state, store::NodeState::kLost);
  clock_.Advance(600'000 - 20'000);
  auto back = std::make_shared<RecordingLink>();
  ASSERT_TRUE(core_->AgentHello(back, CpuHello(*node)).ok());
  Live(120'000, *node, back);
  market::Reliability r = core_->ListNodes()[0].reliability;
  // Ten minutes of silence and absence, not ten minutes minus the grace.
  EXPECT_EQ(r.inputs.window_ms - r.inputs.online_ms, 600'000);
}

TEST_F(TrustTest, AuditBundleIsSignedAndShowsWhatTheJobRanOn) {
  auto identity = CreateSigningIdentity("test signer");
  ASSERT_TRUE(identity.ok()) << identity.status().ToString();
  core_->SetSigningIdentity(*identity);
  auto link = std::make_shared<RecordingLink>();
  proto::Hello h = GpuHello();
  auto node = Hello(link, h);
  ASSERT_TRUE(node.ok());
  auto job = core_->SubmitJob(Spec(1, 1), "");
  ASSERT_TRUE(job.ok());
  auto assign = link->OfType("assign");
  ASSERT_EQ(assign.size(), 1u);
  std::string att = assign[0]["attempt_id"];
  ASSERT_TRUE(core_->AgentMessage(*node, link.get(), Msg("started", att)).ok());
  Json exited = Msg("exited", att);
  exited["exit_code"] = 0;
  ASSERT_TRUE(core_->AgentMessage(*node, link.get(), exited).ok());
  // The node changes afterwards; the bundle must still show what the job ran on.
  proto::Hello later = h;
  later.node_id = *node;
  later.inventory.driver_version = "560.35.03";
  ASSERT_TRUE(core_->AgentHello(std::make_shared<RecordingLink>(), later).ok());

  auto zip = core_->AuditBundle(job->id);
  ASSERT_TRUE(zip.ok()) << zip.status().ToString();
  auto check = VerifyBundle(*zip, identity->cert_pem);
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  EXPECT_TRUE(check->ok) << check->failure;
  auto files = ReadBundleFiles(*zip);
  ASSERT_TRUE(files.ok());
  for (const char* name :
       {"environment-fingerprint.json", "hardware-inventory.json", "conformance-log.txt",
        "events.jsonl", "manifest.sha256", "signature.p7s"}) {
    EXPECT_TRUE(files->count(name)) << name;
  }
  auto env = ParseJson(files->at("environment-fingerprint.json"));
  ASSERT_TRUE(env.ok());
  const Json& a = (*env)["attempts"][0];
  EXPECT_EQ(a["verification"], "verified");
  EXPECT_EQ(a["hardware_fingerprint"].get<std::string>().size(), 64u);
  auto hw = ParseJson(files->at("hardware-inventory.json"));
  ASSERT_TRUE(hw.ok());
  EXPECT_EQ((*hw)["attempts"][0]["inventory"]["driver_version"], "550.54.15");  // not 560
  EXPECT_NE(files->at("conformance-log.txt").find("PASS gpu-compute.0"), std::string::npos)
      << files->at("conformance-log.txt");
  EXPECT_NE(files->at("events.jsonl").find("\"event\":\"placed\""), std::string::npos);

  // Without a signing key there is no bundle, and an unknown job has none either.
  EXPECT_EQ(core_->AuditBundle("job-none").status().code(), StatusCode::kNotFound);
}

// GetJob shows a job's first 10,000 events; its audit bundle holds every one (issue 12).
TEST_F(TrustTest, AnAuditBundleHoldsEveryEventOfALongJob) {
  auto identity = CreateSigningIdentity("test signer");
  ASSERT_TRUE(identity.ok()) << identity.status().ToString();
  core_->SetSigningIdentity(*identity);
  auto job = core_->SubmitJob(Spec(), "", /*queue_unschedulable=*/true);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  store::WriteBatch many;
  for (int i = 0; i < 12'345; ++i) {
    many.events.push_back({0, job->id, 1000 + i, "checkpoint", "event " + std::to_string(i)});
  }
  ASSERT_TRUE(store_->Write(many).ok());
  auto zip = core_->AuditBundle(job->id);
  ASSERT_TRUE(zip.ok()) << zip.status().ToString();
  auto files = ReadBundleFiles(*zip);
  ASSERT_TRUE(files.ok());
  const std::string& events = files->at("events.jsonl");
  // submitted, the waiting reason, and the 12,345 written here, each once and in order.
  EXPECT_EQ(std::count(events.begin(), events.end(), '\n'), 12'345 + 2);
  EXPECT_NE(events.find("\"event 12344\""), std::string::npos);
  EXPECT_LT(events.find("\"event 9999\""), events.find("\"event 10000\""));
}

// Storm-proof verification (issue 12 item 5): a fleet registering at once runs its suites a
// few at a time, and a failed verification is retried with backoff before it settles.
class VerificationStormTest : public TrustTest {
 protected:
  void SetUp() override {
    opt_.max_concurrent_verifications = 2;
    opt_.verify_retries = 2;
    opt_.verify_retry_ms = 10'000;
    TrustTest::SetUp();
  }
  struct Agent {
    std::shared_ptr<RecordingLink> link = std::make_shared<RecordingLink>();
    std::string node;
  };
  Agent Join(const std::string& name) {
    Agent a;
    proto::Hello h = CpuHello();
    h.name = name;
    h.inventory.hostname = name;
    auto node = core_->AgentHello(a.link, h);
    EXPECT_TRUE(node.ok()) << node.status().ToString();
    a.node = node.ok() ? *node : "";
    return a;
  }
  conformance::Report Failing() {
    conformance::Report r = testing::PassingReport(CpuHello().inventory);
    for (auto& c : r.checks) {
      if (c.name == "disk") c.measurements["write_mib_s"] = 2;
    }
    return r;
  }
  std::string Verification(const std::string& node) {
    for (const auto& v : core_->ListNodes()) {
      if (v.node.id == node) return v.node.verification;
    }
    return "";
  }
};

TEST_F(VerificationStormTest, OnlyAFewSuitesRunAtOnceAndTheRestFollowAsTheyReport) {
  std::vector<Agent> fleet;
  for (int i = 0; i < 5; ++i) fleet.push_back(Join("n" + std::to_string(i)));
  auto asked = [&] {
    int n = 0;
    for (const auto& a : fleet) n += a.link->OfType("reverify").empty() ? 0 : 1;
    return n;
  };
  EXPECT_EQ(asked(), 2);
  int queued = 0;
  for (const auto& v : core_->ListNodes()) queued += v.verify_queued ? 1 : 0;
  EXPECT_EQ(queued, 3);
  // Each report frees a slot for the next node in line, in the order they came.
  ASSERT_TRUE(
      Report(fleet[0].node, fleet[0].link, testing::PassingReport(CpuHello().inventory)).ok());
  EXPECT_EQ(asked(), 3);
  EXPECT_FALSE(fleet[2].link->OfType("reverify").empty());
  ASSERT_TRUE(
      Report(fleet[1].node, fleet[1].link, testing::PassingReport(CpuHello().inventory)).ok());
  ASSERT_TRUE(
      Report(fleet[2].node, fleet[2].link, testing::PassingReport(CpuHello().inventory)).ok());
  EXPECT_EQ(asked(), 5);
  EXPECT_EQ(Verification(fleet[0].node), "verified");
}

TEST_F(VerificationStormTest, AFailedVerificationIsAskedAgainWithBackoffThenSettles) {
  Agent a = Join("n0");
  ASSERT_EQ(a.link->OfType("reverify").size(), 1u);
  ASSERT_TRUE(Report(a.node, a.link, Failing()).ok());
  EXPECT_EQ(Verification(a.node), "unverified");
  // First retry after 10 s ± 25 %: not before 7.5 s, asked by 12.5 s.
  Live(5000, a.node, a.link);
  EXPECT_EQ(a.link->OfType("reverify").size(), 1u);
  Live(10000, a.node, a.link);
  ASSERT_EQ(a.link->OfType("reverify").size(), 2u);
  EXPECT_EQ(a.link->OfType("reverify")[1]["reason"], "retry 1 after a failed verification");
  ASSERT_TRUE(Report(a.node, a.link, Failing()).ok());
  // Second retry after 20 s ± 25 %.
  Live(10000, a.node, a.link);
  EXPECT_EQ(a.link->OfType("reverify").size(), 2u);
  Live(20000, a.node, a.link);
  ASSERT_EQ(a.link->OfType("reverify").size(), 3u);
  ASSERT_TRUE(Report(a.node, a.link, Failing()).ok());
  // Retries used up: it stays unverified and is not asked again.
  Live(600'000, a.node, a.link);
  EXPECT_EQ(a.link->OfType("reverify").size(), 3u);
  EXPECT_EQ(Verification(a.node), "unverified");
}

TEST_F(VerificationStormTest, ARetryThatPassesVerifiesTheNode) {
  Agent a = Join("n0");
  ASSERT_TRUE(Report(a.node, a.link, Failing()).ok());
  Live(15000, a.node, a.link);
  ASSERT_EQ(a.link->OfType("reverify").size(), 2u);
  ASSERT_TRUE(Report(a.node, a.link, testing::PassingReport(CpuHello().inventory)).ok());
  EXPECT_EQ(Verification(a.node), "verified");
}

// A suite that never reports (a hung agent) does not hold its slot for ever.
TEST_F(VerificationStormTest, ASuiteThatNeverReportsGivesUpItsSlot) {
  Agent a = Join("n0");
  Agent b = Join("n1");
  Agent c = Join("n2");
  EXPECT_TRUE(c.link->OfType("reverify").empty());
  for (int t = 0; t < 11 * 60; t += 5) {  // eleven minutes, everyone heartbeating
    clock_.Advance(5000);
    for (const Agent* x : {&a, &b, &c}) {
      ASSERT_TRUE(core_->AgentMessage(x->node, x->link.get(), Json{{"type", "heartbeat"}}).ok());
    }
    core_->Tick();
  }
  EXPECT_EQ(c.link->OfType("reverify").size(), 1u);
}

}  // namespace
}  // namespace sluice::server

namespace sluice::server {
namespace {

// Placements reuse a node's snapshot digest until its record is replaced, and debug builds check
// the kept digest against a fresh one: each field a snapshot shows, changed alone, changes the
// digest; fields it does not show leave it alone.
TEST(NodeSnapshotTest, TheDigestChangesWithEveryFieldTheSnapshotShows) {
  store::NodeRecord base;
  base.id = "node-1";
  base.name = "gpu-host";
  base.region = "eu";
  base.inventory = Json{{"hostname", "gpu-host"}};
  base.hardware_fingerprint = "hw";
  base.software_fingerprint = "sw";
  base.verification = "verified";
  base.verification_reasons = Json::array({"ok"});
  base.verified_ms = 5;
  base.conformance = Json{{"checks", Json::array()}};
  const std::vector<std::function<void(store::NodeRecord&)>> changes = {
      [](store::NodeRecord& r) { r.id = "node-2"; },
      [](store::NodeRecord& r) { r.name = "other"; },
      [](store::NodeRecord& r) { r.region = "us"; },
      [](store::NodeRecord& r) {
        r.inventory = Json{{"hostname", "other"}};
      },
      [](store::NodeRecord& r) { r.hardware_fingerprint = "hw2"; },
      [](store::NodeRecord& r) { r.software_fingerprint = "sw2"; },
      [](store::NodeRecord& r) { r.verification = "unverified"; },
      [](store::NodeRecord& r) { r.verification_reasons = Json::array({"slow"}); },
      [](store::NodeRecord& r) { r.verified_ms = 6; },
      [](store::NodeRecord& r) {
        r.conformance = Json{{"checks", Json::array({1})}};
      },
  };
  const std::string digest = Snapshot(base).digest;
  store::NodeRecord copy = base;
  copy.state = store::NodeState::kLost;  // not in a snapshot
  copy.last_seen_ms = 99;
  EXPECT_EQ(Snapshot(copy).digest, digest);
  for (size_t i = 0; i < changes.size(); ++i) {
    store::NodeRecord changed = base;
    changes[i](changed);
    EXPECT_NE(Snapshot(changed).digest, digest) << i;
  }
}

}  // namespace
}  // namespace sluice::server
