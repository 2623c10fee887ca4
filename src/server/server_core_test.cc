#include "server/server_core.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "audit/bundle.h"
#include "common/crypto.h"
#include "market/gpu_identity.h"
#include "market/gpu_labels.h"
#include "server/test_agent_link.h"
#include "server/test_reports.h"

namespace sluice::server {
namespace {

using testing::RecordingLink;

class ServerCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("sluice-core-" + RandomHex(6));
    std::filesystem::create_directories(dir_);
    Open();
  }
  void TearDown() override {
    core_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  // (Re)opens store and core on the same database: a server restart.
  void Open() {
    core_.reset();
    store_.reset();
    auto s = store::OpenSqliteStore((dir_ / "sluice.db").string());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    core_ = std::make_unique<ServerCore>(store_.get(), &clock_, opt_);
    ASSERT_TRUE(core_->Load().ok());
  }
  // A GPU machine needs a driver to be verified.
  static void AddDriver(proto::Hello& h) {
    h.inventory.driver_version = "550.54.15";
    h.inventory.cuda_version = "12.4";
  }
  proto::Hello CpuHello(std::string node_id = "") {
    proto::Hello h;
    h.node_id = node_id;
    h.name = "box";
    h.inventory.hostname = "box";
    h.inventory.cpu_cores = 4;
    h.inventory.memory_mib = 8192;
    h.inventory.gpu_source = "none";
    return h;
  }
  spec::JobSpec Spec(int cpus = 1, int gpus = 0) {
    spec::JobSpec s;
    s.name = "t";
    s.run = "echo hi";
    s.resources.cpus = cpus;
    s.resources.gpus = gpus;
    s.resources.memory_gb = 1;
    return s;
  }
  // Registers like a real agent: hello, then, when the server asks for it (a node verified and
  // unchanged is not asked), the conformance report that gets it verified.
  Result<std::string> Hello(const std::shared_ptr<AgentLink>& link, const proto::Hello& h) {
    auto node = core_->AgentHello(link, h);
    if (!node.ok()) return node;
    auto* rec = dynamic_cast<RecordingLink*>(link.get());
    if (rec == nullptr || rec->Nonce().empty()) return node;
    Status s = core_->AgentMessage(*node, link.get(),
                                   Json{{"type", "conformance"},
                                        {"report", ToJson(testing::PassingReport(h.inventory))},
                                        {"nonce", rec->Nonce()}});
    if (!s.ok()) return s;
    return node;
  }
  Json Msg(std::string type, std::string attempt) {
    return Json{{"type", type}, {"attempt_id", attempt}};
  }

  CoreOptions opt_ = [] {
    CoreOptions o;
    o.heartbeat_grace_ms = 10'000;
    return o;
  }();
  FakeClock clock_;
  std::filesystem::path dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<ServerCore> core_;
};

TEST_F(ServerCoreTest, JobRunsToCompletionWithLogs) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  ASSERT_TRUE(node.ok());
  ASSERT_EQ(link->OfType("welcome").size(), 1u);

  auto job = core_->SubmitJob(Spec(), "");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto assigns = link->OfType("assign");
  ASSERT_EQ(assigns.size(), 1u);
  std::string att = assigns[0]["attempt_id"];
  EXPECT_EQ(assigns[0]["run"], "echo hi");

  ASSERT_TRUE(core_->AgentMessage(*node, link.get(), Msg("started", att)).ok());
  Json log = proto::LogMessage(att, {{1, "stdout", 0, "hello"}, {2, "stderr", 0, "warn"}});
  ASSERT_TRUE(core_->AgentMessage(*node, link.get(), log).ok());
  // A resend of the same lines is not stored twice.
  ASSERT_TRUE(core_->AgentMessage(*node, link.get(), log).ok());
  Json exited = proto::ToJson(proto::Exited{att, 0, 0, ""});
  ASSERT_TRUE(core_->AgentMessage(*node, link.get(), exited).ok());

  auto d = core_->GetJob(job->id);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->job.state, store::JobState::kSucceeded);
  EXPECT_EQ(d->job.exit_code, 0);
  auto logs = core_->ReadLogs(job->id, 0, 100);
  ASSERT_TRUE(logs.ok());
  ASSERT_EQ(logs->size(), 2u);
  EXPECT_EQ((*logs)[0].text, "hello");
  EXPECT_EQ((*logs)[1].stream, "stderr");
  EXPECT_EQ(link->OfType("exit_ack").size(), 1u);
}

// What a node sells is cached between changes (issue 12 item 3); every change shows at once.
TEST_F(ServerCoreTest, OffersFollowTheNodeThroughEveryChange) {
  auto link = std::make_shared<RecordingLink>();
  proto::Hello h = CpuHello();
  h.price_per_cpu_hour = 0.10;
  auto node = Hello(link, h);
  ASSERT_TRUE(node.ok());
  auto price = [&] {
    auto offers = core_->ListOffers();
    return offers.empty() ? -1.0 : offers[0].price_per_cpu_hour;
  };
  EXPECT_DOUBLE_EQ(price(), 0.10);
  h.node_id = *node;
  h.price_per_cpu_hour = 0.20;  // the provider reprices: a new hello
  ASSERT_TRUE(core_->AgentHello(link, h).ok());
  EXPECT_DOUBLE_EQ(price(), 0.20);
  // A job takes 1 of its 4 CPUs: the offer shows what is free, not the cached idle node.
  auto job = core_->SubmitJob(Spec(1), "");
  ASSERT_TRUE(job.ok());
  ASSERT_EQ(core_->ListOffers().size(), 1u);
  EXPECT_EQ(core_->ListOffers()[0].cpus, 3);
  core_->AgentDisconnected(*node, link.get());
  EXPECT_TRUE(core_->ListOffers().empty()) << "a disconnected node's offers are withdrawn";
}

TEST_F(ServerCoreTest, NonZeroExitFailsJob) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  auto job = core_->SubmitJob(Spec(), "");
  std::string att = link->OfType("assign")[0]["attempt_id"];
  ASSERT_TRUE(
      core_->AgentMessage(*node, link.get(), proto::ToJson(proto::Exited{att, 3, 0, ""})).ok());
  auto d = core_->GetJob(job->id);
  EXPECT_EQ(d->job.state, store::JobState::kFailed);
  EXPECT_EQ(d->job.exit_code, 3);
}

TEST_F(ServerCoreTest, JobThatCanNeverFitIsRefusedWithWhyUnlessQueued) {
  auto link = std::make_shared<RecordingLink>();
  ASSERT_TRUE(Hello(link, CpuHello()).ok());
  // Refused, with the explanation, and nothing stored.
  auto refused = core_->SubmitJob(Spec(1, 2), "");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("`gpus>=2` rules out 1"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("sluice run --queue"), std::string::npos);
  EXPECT_TRUE(core_->ListJobs(std::nullopt, 10).empty());
  // Asked to queue anyway: it waits with the reason.
  auto job = core_->SubmitJob(Spec(1, 2), "", /*queue_unschedulable=*/true);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state, store::JobState::kQueued);
  EXPECT_NE(job->reason.find("can ever run"), std::string::npos) << job->reason;
  EXPECT_TRUE(link->OfType("assign").empty());
}

TEST_F(ServerCoreTest, RefusalNamesMatchingCatalogCapacity) {
  ASSERT_TRUE(Hello(std::make_shared<RecordingLink>(), CpuHello()).ok());
  ASSERT_TRUE(core_
                  ->ImportCatalog("lam.csv",
                                  "cloud,instance_type,accelerator_name,accelerator_count,"
                                  "gpu_memory_gib,vcpus,memory_gib,price,spot_price,region,zone\n"
                                  "lambda,gpu_8x_h100,H100,8,80,208,1600,23.92,,us-east-1,\n")
                  .ok());
  spec::JobSpec s = Spec(1, 8);
  s.resources.gpu = "h100";
  auto refused = core_->SubmitJob(s, "");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(
                "1 catalog offer match it (listed for comparison, not launchable); the cheapest "
                "is lambda gpu_8x_h100 in us-east-1 at $2.99/GPU-h"),
            std::string::npos)
      << refused.status().message();
}

// Two GPU nodes: a cheap slow one and a dearer fast one. The scheduler and the estimate agree
// on the ranking, and the `placed` event says why.
TEST_F(ServerCoreTest, PlacementAndEstimateRankByExpectedCostToComplete) {
  auto gpu_hello = [&](std::string name, std::string gpu, uint64_t mib, double price) {
    proto::Hello h = CpuHello();
    h.name = name;
    h.inventory.hostname = name;
    h.price_per_gpu_hour = price;
    GpuInfo g;
    g.name = gpu;
    g.memory_mib = mib;
    g.uuid = "GPU-" + name;
    h.inventory.gpus.push_back(g);
    AddDriver(h);
    return h;
  };
  // T4: FP16 65 TFLOPS vs A100's BF16 312 → perf ≈ 0.21; at $0.5/h a 10 h job costs ≈ $24.
  // H100 SXM: ≈ 3.2× the A100 at $3/h → ≈ $9.5. Cheapest per hour is not cheapest to complete.
  auto t4 = std::make_shared<RecordingLink>();
  auto h100 = std::make_shared<RecordingLink>();
  ASSERT_TRUE(Hello(t4, gpu_hello("t4box", "Tesla T4", 15360, 0.5)).ok());
  ASSERT_TRUE(Hello(h100, gpu_hello("h100box", "NVIDIA H100 80GB HBM3", 81559, 3.0)).ok());
  spec::JobSpec s = Spec(1, 1);
  s.expected_hours = 10;

  auto est = core_->Estimate(s, std::nullopt, std::nullopt, 10);
  ASSERT_TRUE(est.ok()) << est.status().ToString();
  ASSERT_EQ(est->ranked.size(), 2u);
  EXPECT_EQ(est->ranked[0].offer.gpu_label, "h100-80gb");
  EXPECT_LT(est->ranked[0].estimate.expected_cost, est->ranked[1].estimate.expected_cost);
  EXPECT_FALSE(est->request.hours_assumed);
  auto by_price = core_->Estimate(s, std::nullopt, market::Objective::kPrice, 10);
  EXPECT_EQ(by_price->ranked[0].offer.gpu_label, "t4-16gb");
  // --hours overrides the spec; cost scales with it.
  auto longer = core_->Estimate(s, 20.0, std::nullopt, 10);
  EXPECT_NEAR(longer->ranked[0].estimate.expected_cost, 2 * est->ranked[0].estimate.expected_cost,
              1e-9);

  auto job = core_->SubmitJob(s, "");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(h100->OfType("assign").size(), 1u);
  EXPECT_TRUE(t4->OfType("assign").empty());
  auto detail = core_->GetJob(job->id);
  bool said_why = false;
  for (const auto& ev : detail->events) {
    if (ev.type == "placed")
      said_why = ev.message.find("best by cost: $3.00/h") != std::string::npos;
  }
  EXPECT_TRUE(said_why);
  // The job ends; with both nodes free again, a job that asks for the lowest hourly price
  // goes to the T4.
  std::string att = h100->OfType("assign")[0]["attempt_id"];
  ASSERT_TRUE(core_
                  ->AgentMessage(est->ranked[0].offer.node, h100.get(),
                                 proto::ToJson(proto::Exited{att, 0, 0, ""}))
                  .ok());
  ASSERT_EQ(core_->GetJob(job->id)->job.state, store::JobState::kSucceeded);
  s.objective = "price";
  auto cheap = core_->SubmitJob(s, "");
  ASSERT_TRUE(cheap.ok());
  EXPECT_EQ(t4->OfType("assign").size(), 1u);
  EXPECT_EQ(h100->OfType("assign").size(), 1u);
}

TEST_F(ServerCoreTest, EstimateExplainsAnEmptyResultAndCountsOverBudget) {
  proto::Hello h = CpuHello();
  h.price_per_cpu_hour = 0.1;
  ASSERT_TRUE(Hello(std::make_shared<RecordingLink>(), h).ok());
  spec::JobSpec s = Spec(2, 0);
  s.max_price_per_hour = 0.1;  // 2 CPUs × $0.1 = $0.2/h: over budget
  auto over = core_->Estimate(s, std::nullopt, std::nullopt, 10);
  ASSERT_TRUE(over.ok());
  EXPECT_EQ(over->matched, 0u);
  EXPECT_EQ(over->over_budget, 1u);
  s.max_price_per_hour.reset();
  s.resources.cpus = 64;
  auto none = core_->Estimate(s, std::nullopt, std::nullopt, 10);
  ASSERT_TRUE(none.ok());
  ASSERT_TRUE(none->explanation.has_value());
  EXPECT_EQ(market::Summary(*none->explanation), "of 1 offer, `cpus>=64` rules out 1; nearest: " +
                                                     none->explanation->nearest[0].offer.id +
                                                     " lacks cpus>=64");
  EXPECT_TRUE(none->request.hours_assumed);
  s.resources.gpu = "a10o";
  auto typo = core_->Estimate(s, std::nullopt, std::nullopt, 10);
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("did you mean"), std::string::npos);
}

TEST_F(ServerCoreTest, QueuedJobStartsWhenCapacityFrees) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  auto a = core_->SubmitJob(Spec(4), "");
  auto b = core_->SubmitJob(Spec(4), "");
  ASSERT_EQ(link->OfType("assign").size(), 1u);
  EXPECT_EQ(core_->GetJob(b->id)->job.state, store::JobState::kQueued);
  std::string att = link->OfType("assign")[0]["attempt_id"];
  ASSERT_TRUE(
      core_->AgentMessage(*node, link.get(), proto::ToJson(proto::Exited{att, 0, 0, ""})).ok());
  ASSERT_EQ(link->OfType("assign").size(), 2u);
  EXPECT_EQ(link->OfType("assign")[1]["job_id"], b->id);
}

// The server runs its passes on the scheduler thread: an exit only marks a pass due, and the
// thread places the waiting job (DESIGN notes "Placement at scale").
TEST_F(ServerCoreTest, OnTheSchedulerThreadAQueuedJobStartsWhenCapacityFrees) {
  core_->StartScheduler();
  auto link = std::make_shared<RecordingLink>();
  auto assigned = [&](size_t n) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (link->OfType("assign").size() < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return link->OfType("assign").size() == n;
  };
  auto node = Hello(link, CpuHello());
  ASSERT_TRUE(node.ok());
  auto a = core_->SubmitJob(Spec(4), "");
  ASSERT_TRUE(a.ok());
  // Placed by the submit itself, or by the pass the verdict made due.
  ASSERT_TRUE(assigned(1));
  auto b = core_->SubmitJob(Spec(4), "");
  ASSERT_TRUE(b.ok());
  std::string att = link->OfType("assign")[0]["attempt_id"];
  ASSERT_TRUE(
      core_->AgentMessage(*node, link.get(), proto::ToJson(proto::Exited{att, 0, 0, ""})).ok());
  // The second by the thread, once the first has freed the node.
  ASSERT_TRUE(assigned(2));
  EXPECT_EQ(link->OfType("assign")[1]["job_id"], b->id);
  EXPECT_EQ(core_->GetJob(b->id)->job.state, store::JobState::kStarting);
}

TEST_F(ServerCoreTest, CancelQueuedAndRunning) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  auto running = core_->SubmitJob(Spec(4), "");
  auto queued = core_->SubmitJob(Spec(4), "");
  auto c = core_->CancelJob(queued->id);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->state, store::JobState::kCancelled);
  c = core_->CancelJob(running->id);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->cancel_requested);
  ASSERT_EQ(link->OfType("cancel").size(), 1u);
  std::string att = link->OfType("assign")[0]["attempt_id"];
  ASSERT_TRUE(
      core_->AgentMessage(*node, link.get(), proto::ToJson(proto::Exited{att, 143, 15, ""})).ok());
  EXPECT_EQ(core_->GetJob(running->id)->job.state, store::JobState::kCancelled);
  EXPECT_FALSE(core_->CancelJob(running->id).ok());  // already terminal
}

TEST_F(ServerCoreTest, SilentNodeIsLostAfterGrace) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  auto job = core_->SubmitJob(Spec(), "");
  clock_.Advance(9'000);
  core_->Tick();
  EXPECT_EQ(core_->ListNodes()[0].node.state, store::NodeState::kOnline);
  clock_.Advance(2'000);
  core_->Tick();
  EXPECT_EQ(core_->ListNodes()[0].node.state, store::NodeState::kLost);
  EXPECT_TRUE(link->closed);
  // The attempt is lost; the job is requeued to run again (from its last checkpoint).
  auto d = core_->GetJob(job->id);
  EXPECT_EQ(d->attempts[0].state, store::AttemptState::kLost);
  EXPECT_EQ(d->job.state, store::JobState::kQueued);
  EXPECT_EQ(d->job.preemptions, 1);
  std::string requeued;
  for (const auto& e : d->events) {
    if (e.type == "requeued") requeued = e.message;
  }
  EXPECT_NE(requeued.find("no heartbeat"), std::string::npos) << requeued;
  // It now waits for a node, and says so.
  EXPECT_NE(d->job.reason.find("no nodes are registered"), std::string::npos) << d->job.reason;
  EXPECT_TRUE(core_->ListOffers().empty());
}

// Fencing (issue 11 item 2): every heartbeat's reply renews the leases of the node's attempts.
TEST_F(ServerCoreTest, AHeartbeatsReplyLeasesTheNodesRunningAttempts) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  ASSERT_TRUE(node.ok());
  auto job = core_->SubmitJob(Spec(), "");
  ASSERT_TRUE(job.ok());
  std::string att = link->OfType("assign")[0]["attempt_id"];
  ASSERT_TRUE(core_->AgentMessage(*node, link.get(), Json{{"type", "heartbeat"}, {"seq", 7}}).ok());
  auto leases = link->OfType("lease");
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases[0]["seq"], 7);
  EXPECT_EQ(leases[0]["lease_ms"], opt_.lease_ms);
  EXPECT_EQ(leases[0]["attempts"], Json::array({att}));
  // A malformed seq from a hostile agent is answered with 0, which renews nothing there.
  ASSERT_TRUE(
      core_->AgentMessage(*node, link.get(), Json{{"type", "heartbeat"}, {"seq", "x"}}).ok());
  EXPECT_EQ(link->OfType("lease").back()["seq"], 0);
  // Once the attempt is over it is no longer listed: the agent must not keep it running.
  ASSERT_TRUE(
      core_->AgentMessage(*node, link.get(), proto::ToJson(proto::Exited{att, 0, 0, ""})).ok());
  ASSERT_TRUE(core_->AgentMessage(*node, link.get(), Json{{"type", "heartbeat"}, {"seq", 8}}).ok());
  EXPECT_EQ(link->OfType("lease").back()["attempts"], Json::array());
}

// After a restart every node has a lease and the whole grace to come back: a server outage
// alone never loses a node or requeues its work.
TEST_F(ServerCoreTest, AfterARestartNoNodeIsLostBeforeLeasePlusGrace) {
  auto link = std::make_shared<RecordingLink>();
  ASSERT_TRUE(Hello(link, CpuHello()).ok());
  Open();  // the restart
  clock_.Advance(opt_.heartbeat_grace_ms + opt_.lease_ms - 100);
  core_->Tick();
  EXPECT_NE(core_->ListNodes()[0].node.state, store::NodeState::kLost);
  clock_.Advance(200);
  core_->Tick();
  EXPECT_EQ(core_->ListNodes()[0].node.state, store::NodeState::kLost);
}

// A server that stalls (SIGSTOP, swap, a slow disk) heard nobody meanwhile: the stall is not
// the nodes' silence. Silence while it runs still loses a node.
TEST_F(ServerCoreTest, TheServersOwnStallIsNotCountedAsANodesSilence) {
  opt_.stall_credit_after_ms = 1000;
  Open();
  auto link = std::make_shared<RecordingLink>();
  ASSERT_TRUE(Hello(link, CpuHello()).ok());
  core_->Tick();
  clock_.Advance(30'000);  // three graces without a tick
  core_->Tick();
  EXPECT_EQ(core_->ListNodes()[0].node.state, store::NodeState::kOnline);
  for (int i = 0; i < 21 && core_->ListNodes()[0].node.state == store::NodeState::kOnline; ++i) {
    clock_.Advance(500);
    core_->Tick();
  }
  EXPECT_EQ(core_->ListNodes()[0].node.state, store::NodeState::kLost);
}

// Only the excess over the threshold is credited: a server slow on every tick (2.5 s apart
// here) still declares a silent node lost, a little late, never not at all.
TEST_F(ServerCoreTest, AServerSlowOnEveryTickStillLosesASilentNode) {
  opt_.stall_credit_after_ms = 1000;
  Open();
  auto link = std::make_shared<RecordingLink>();
  ASSERT_TRUE(Hello(link, CpuHello()).ok());
  core_->Tick();
  int ticks = 0;
  while (core_->ListNodes()[0].node.state != store::NodeState::kLost && ticks < 100) {
    clock_.Advance(2500);
    core_->Tick();
    ++ticks;
  }
  EXPECT_EQ(core_->ListNodes()[0].node.state, store::NodeState::kLost);
  // Silence grows 1 s per 2.5 s tick: lost after the 10 s grace, within 11 ticks.
  EXPECT_LE(ticks, 11);
  EXPECT_GE(ticks, 10);
}

TEST_F(ServerCoreTest, LostNodeFailsTheJobOnceRestartsAreUsedUp) {
  auto link = std::make_shared<RecordingLink>();
  ASSERT_TRUE(Hello(link, CpuHello()).ok());
  spec::JobSpec s = Spec();
  s.lifecycle.max_restarts = 0;
  auto job = core_->SubmitJob(s, "");
  clock_.Advance(11'000);
  core_->Tick();
  auto d = core_->GetJob(job->id);
  EXPECT_EQ(d->job.state, store::JobState::kFailed);
  EXPECT_NE(d->job.reason.find("max_restarts (0) exhausted"), std::string::npos) << d->job.reason;
}

// Reclaim → preempt notice to the agent → exit with a final checkpoint → requeued, avoiding the
// reclaimed node → attempt 2 elsewhere restores that checkpoint.
TEST_F(ServerCoreTest, ReclaimPreemptsRequeuesElsewhereAndResumesFromTheCheckpoint) {
  store::BlobStore blobs((dir_ / "blobs").string());
  core_->SetBlobStore(&blobs);
  auto l1 = std::make_shared<RecordingLink>();
  auto l2 = std::make_shared<RecordingLink>();
  proto::Hello h1 = CpuHello();
  h1.name = "one";
  auto n1 = Hello(l1, h1);
  spec::JobSpec s = Spec(4);  // only fits an idle node
  s.lifecycle.grace_period_s = 7;
  s.lifecycle.checkpoint_interval_s = 60;
  auto job = core_->SubmitJob(s, "");
  ASSERT_TRUE(job.ok());
  ASSERT_EQ(l1->OfType("assign").size(), 1u);
  Json first = l1->OfType("assign")[0];
  EXPECT_EQ(first["attempt"], 1);
  EXPECT_EQ(first["checkpoint"], "");
  EXPECT_EQ(first["checkpoint_interval_ms"], 60000);
  std::string att1 = first["attempt_id"];
  ASSERT_TRUE(core_->AgentMessage(*n1, l1.get(), Msg("started", att1)).ok());
  proto::Hello h2 = CpuHello();
  h2.name = "two";
  auto n2 = Hello(l2, h2);

  auto preempted = core_->ReclaimNode("one", {}, "maintenance");
  ASSERT_TRUE(preempted.ok()) << preempted.status().ToString();
  EXPECT_EQ(*preempted, std::vector<std::string>{att1});
  ASSERT_EQ(l1->OfType("preempt").size(), 1u);
  EXPECT_EQ(l1->OfType("preempt")[0]["grace_ms"], 7000);
  EXPECT_EQ(core_->GetJob(job->id)->job.state, store::JobState::kRunning);  // until it exits

  // The agent saved a checkpoint (its blob is in the store) and reports the exit with it.
  const std::string manifest = Sha256Hex("manifest");
  ASSERT_TRUE(blobs.PutVerified(manifest, "manifest").ok());
  proto::Exited ex{att1, 143, 0, ""};
  ex.checkpoint = manifest;
  ASSERT_TRUE(core_->AgentMessage(*n1, l1.get(), proto::ToJson(ex)).ok());
  auto d = core_->GetJob(job->id);
  EXPECT_EQ(d->attempts[0].state, store::AttemptState::kPreempted);
  EXPECT_EQ(d->attempts[0].cause, "preempted: maintenance");
  EXPECT_EQ(d->job.checkpoint, manifest);
  EXPECT_EQ(d->job.preemptions, 1);
  // Placed again at once, on the other node (the reclaimed one is avoided for the cooldown).
  ASSERT_EQ(l2->OfType("assign").size(), 1u);
  EXPECT_EQ(l1->OfType("assign").size(), 1u);
  Json second = l2->OfType("assign")[0];
  EXPECT_EQ(second["attempt"], 2);
  EXPECT_EQ(second["checkpoint"], manifest);
  d = core_->GetJob(job->id);
  EXPECT_EQ(d->attempts[1].number, 2);
  EXPECT_EQ(d->attempts[1].checkpoint_restored, manifest);
  EXPECT_EQ(d->attempts[1].node_id, *n2);
  bool requeued_event = false;
  for (const auto& e : d->events) requeued_event |= e.type == "requeued";
  EXPECT_TRUE(requeued_event);
  // The state survives a restart, attempt numbering too.
  Open();
  d = core_->GetJob(job->id);
  EXPECT_EQ(d->job.checkpoint, manifest);
  EXPECT_EQ(d->attempts.size(), 2u);
}

TEST_F(ServerCoreTest, ACheckpointNotInTheBlobStoreIsRefused) {
  store::BlobStore blobs((dir_ / "blobs").string());
  core_->SetBlobStore(&blobs);
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  auto job = core_->SubmitJob(Spec(), "");
  std::string att = link->OfType("assign")[0]["attempt_id"];
  const std::string good = Sha256Hex("good");
  ASSERT_TRUE(blobs.PutVerified(good, "good").ok());
  Json msg{{"type", "checkpoint"}, {"attempt_id", att}, {"manifest", good}};
  ASSERT_TRUE(core_->AgentMessage(*node, link.get(), msg).ok());
  EXPECT_EQ(core_->GetJob(job->id)->job.checkpoint, good);
  // A half-uploaded one (manifest never stored) does not replace the complete one.
  msg["manifest"] = Sha256Hex("never uploaded");
  ASSERT_TRUE(core_->AgentMessage(*node, link.get(), msg).ok());
  EXPECT_EQ(core_->GetJob(job->id)->job.checkpoint, good);
}

TEST_F(ServerCoreTest, CooldownEndsAndTheJobMayReturnToTheNode) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  auto job = core_->SubmitJob(Spec(), "");
  std::string att = link->OfType("assign")[0]["attempt_id"];
  ASSERT_TRUE(core_->ReclaimNode(*node, {}, "test").ok());
  ASSERT_TRUE(
      core_->AgentMessage(*node, link.get(), proto::ToJson(proto::Exited{att, 143, 0, ""})).ok());
  EXPECT_EQ(core_->GetJob(job->id)->job.state, store::JobState::kQueued);
  EXPECT_EQ(link->OfType("assign").size(), 1u);  // the only node is cooling down
  clock_.Advance(61'000);
  ASSERT_TRUE(core_->AgentMessage(*node, link.get(), Json{{"type", "heartbeat"}}).ok());
  core_->Tick();
  ASSERT_EQ(link->OfType("assign").size(), 2u);
  EXPECT_EQ(link->OfType("assign")[1]["attempt"], 2);
  EXPECT_EQ(core_->ReclaimNode("nope", {}, "x").status().code(), StatusCode::kNotFound);
}

TEST_F(ServerCoreTest, RestartKeepsStateAndReconcilesExitOnce) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  auto job = core_->SubmitJob(Spec(), "");
  std::string att = link->OfType("assign")[0]["attempt_id"];
  ASSERT_TRUE(core_->AgentMessage(*node, link.get(), Msg("started", att)).ok());
  ASSERT_TRUE(
      core_->AgentMessage(*node, link.get(), proto::LogMessage(att, {{1, "stdout", 0, "before"}}))
          .ok());
  Open();  // the server restarts
  EXPECT_EQ(core_->GetJob(job->id)->job.state, store::JobState::kRunning);
  EXPECT_EQ(core_->ListNodes()[0].node.state, store::NodeState::kOffline);

  // The agent reconnects: it finished meanwhile and resends everything unacknowledged.
  auto link2 = std::make_shared<RecordingLink>();
  proto::Hello h = CpuHello(*node);
  proto::AttemptReport rep;
  rep.attempt_id = att;
  rep.running = true;
  h.attempts.push_back(rep);
  ASSERT_EQ(*Hello(link2, h), *node);
  ASSERT_EQ(link2->OfType("log_ack").size(), 1u);
  EXPECT_EQ(link2->OfType("log_ack")[0]["seq"], 1);
  ASSERT_TRUE(core_
                  ->AgentMessage(*node, link2.get(),
                                 proto::LogMessage(
                                     att, {{1, "stdout", 0, "before"}, {2, "stdout", 0, "after"}}))
                  .ok());
  Json exited = proto::ToJson(proto::Exited{att, 0, 0, ""});
  ASSERT_TRUE(core_->AgentMessage(*node, link2.get(), exited).ok());
  ASSERT_TRUE(core_->AgentMessage(*node, link2.get(), exited).ok());  // duplicate: acked only
  EXPECT_EQ(link2->OfType("exit_ack").size(), 2u);
  auto d = core_->GetJob(job->id);
  EXPECT_EQ(d->job.state, store::JobState::kSucceeded);
  EXPECT_EQ(core_->ReadLogs(job->id, 0, 10)->size(), 2u);
  int finished_events = 0;
  for (const auto& e : d->events) finished_events += e.type == "succeeded";
  EXPECT_EQ(finished_events, 1);
}

TEST_F(ServerCoreTest, AgentThatForgotItsAttemptGetsItLostAndStaleOnesKilled) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  auto job = core_->SubmitJob(Spec(), "");
  auto link2 = std::make_shared<RecordingLink>();
  proto::Hello h = CpuHello(*node);
  proto::AttemptReport stale;
  stale.attempt_id = "att-unknown";
  stale.running = true;
  h.attempts.push_back(stale);
  ASSERT_TRUE(Hello(link2, h).ok());
  EXPECT_TRUE(link->closed);  // the older link for the node is replaced
  auto d = core_->GetJob(job->id);
  EXPECT_EQ(d->attempts[0].state, store::AttemptState::kLost);
  // Requeued; the node that lost it is avoided for a cooldown, so it waits.
  EXPECT_EQ(d->job.state, store::JobState::kQueued);
  EXPECT_TRUE(link2->OfType("assign").empty());
  // Not placed here: killed at once, not cancelled (a cancel's grace would thaw a fenced copy).
  EXPECT_TRUE(link2->OfType("cancel").empty());
  auto kills = link2->OfType("kill");
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0]["attempt_id"], "att-unknown");
}

TEST_F(ServerCoreTest, StreamReplaysThenFollowsThenEnds) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  auto job = core_->SubmitJob(Spec(), "");
  std::string att = link->OfType("assign")[0]["attempt_id"];
  ASSERT_TRUE(
      core_->AgentMessage(*node, link.get(), proto::LogMessage(att, {{1, "stdout", 0, "one"}}))
          .ok());
  std::vector<Json> items;
  auto sub = core_->Subscribe(job->id, true, true, [&](const Json& j) {
    items.push_back(j);
    return true;
  });
  ASSERT_TRUE(sub.ok());
  ASSERT_TRUE(
      core_->AgentMessage(*node, link.get(), proto::LogMessage(att, {{2, "stdout", 0, "two"}}))
          .ok());
  ASSERT_TRUE(
      core_->AgentMessage(*node, link.get(), proto::ToJson(proto::Exited{att, 0, 0, ""})).ok());
  std::vector<std::string> logs;
  for (const auto& i : items) {
    if (i["type"] == "log") logs.push_back(i["text"]);
  }
  EXPECT_EQ(logs, (std::vector<std::string>{"one", "two"}));
  ASSERT_FALSE(items.empty());
  EXPECT_EQ(items.back()["type"], "end");
  EXPECT_EQ(items.back()["job"]["state"], "succeeded");
}

TEST_F(ServerCoreTest, MessagesFromAReplacedLinkAreRefused) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  auto link2 = std::make_shared<RecordingLink>();
  ASSERT_TRUE(Hello(link2, CpuHello(*node)).ok());
  Status s = core_->AgentMessage(*node, link.get(), Json{{"type", "heartbeat"}});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
}

TEST_F(ServerCoreTest, UnknownGpuLabelIsRejectedWithSuggestion) {
  spec::JobSpec s = Spec(1, 1);
  s.resources.gpu = "a1000";
  auto r = core_->SubmitJob(s, "");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("a100"), std::string::npos) << r.status().message();
}

namespace sluice::server {
namespace {

TEST_F(ServerCoreTest, OffersMergeAgentAndCatalogInOneOrderAndReimportReplaces) {
  auto link = std::make_shared<RecordingLink>();
  proto::Hello h = CpuHello();
  h.price_per_gpu_hour = 2.0;
  for (int i = 0; i < 2; ++i) {
    GpuInfo g;
    g.index = i;
    g.name = "NVIDIA H100 80GB HBM3";
    g.memory_mib = 81559;
    g.uuid = "GPU-" + std::to_string(i);
    h.inventory.gpus.push_back(g);
    AddDriver(h);
  }
  ASSERT_TRUE(Hello(link, h).ok());
  const std::string header =
      "cloud,instance_type,accelerator_name,accelerator_count,gpu_memory_gib,vcpus,memory_gib,"
      "price,spot_price,region,zone\n";
  auto imported =
      core_->ImportCatalog("lam.csv", header +
                                          "lambda,gpu_1x_h100,H100,1,80,26,200,1.5,,us-east-1,\n"
                                          "lambda,gpu_2x_h100,H100,2,80,52,400,5.0,,us-east-1,\n");
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  auto q = market::ParseQuery("gpu=h100");
  auto sort = market::ParseSortKeys("price");
  ASSERT_TRUE(q.ok() && sort.ok());
  OfferPage page = core_->SearchOffers(*q, *sort, 10);
  ASSERT_EQ(page.matched, 3u);
  ASSERT_EQ(page.offers.size(), 3u);
  EXPECT_DOUBLE_EQ(page.offers[0].price_per_gpu_hour, 1.5);       // catalog
  EXPECT_EQ(page.offers[1].source, market::OfferSource::kAgent);  // $2.00
  EXPECT_DOUBLE_EQ(page.offers[2].price_per_gpu_hour, 2.5);       // catalog, 5.0 for 2 GPUs
  EXPECT_EQ(core_->SearchOffers(*q, *sort, 2).offers.size(), 2u);

  // A re-import replaces the provider's offers; nothing of the old file remains.
  ASSERT_TRUE(core_
                  ->ImportCatalog("lam.csv", header + "lambda,gpu_8x_h100,H100,8,80,208,1600,"
                                                      "24,,us-west-1,\n")
                  .ok());
  page = core_->SearchOffers(*q, *sort, 10);
  ASSERT_EQ(page.matched, 2u);
  EXPECT_EQ(page.offers[0].source, market::OfferSource::kAgent);
  EXPECT_EQ(page.offers[1].gpus, 8);
  // Nothing matches: the explanation says which term ruled out how many.
  auto none = market::ParseQuery("gpu=h100 price<0.5");
  page = core_->SearchOffers(*none, *sort, 10);
  ASSERT_TRUE(page.explanation.has_value());
  EXPECT_EQ(page.explanation->per_term[1].eliminated, 2u);
  // The catalog survives a restart.
  Open();
  EXPECT_EQ(core_->SearchOffers(*q, *sort, 10).matched, 1u);  // the agent is not connected
}

TEST_F(ServerCoreTest, OnDemandJobPreemptsInterruptibleWorkAndTakesItsPlace) {
  auto link = std::make_shared<RecordingLink>();
  proto::Hello h = CpuHello();
  h.price_per_cpu_hour = 0.10;
  h.interruptible_price_per_cpu_hour = 0.03;
  auto node = Hello(link, h);
  spec::JobSpec spot = Spec(4);
  spot.lifecycle.capacity = spec::Capacity::kInterruptible;
  auto cheap = core_->SubmitJob(spot, "");
  ASSERT_TRUE(cheap.ok()) << cheap.status().ToString();
  ASSERT_EQ(link->OfType("assign").size(), 1u);
  std::string att = link->OfType("assign")[0]["attempt_id"];
  auto d = core_->GetJob(cheap->id);
  EXPECT_TRUE(d->attempts[0].interruptible);
  EXPECT_DOUBLE_EQ(d->attempts[0].price_per_hour, 0.12);  // 4 CPUs × $0.03, locked

  // An on-demand job that only fits by taking those CPUs preempts the interruptible attempt.
  auto urgent = core_->SubmitJob(Spec(4), "");
  ASSERT_TRUE(urgent.ok());
  ASSERT_EQ(link->OfType("preempt").size(), 1u);
  EXPECT_EQ(link->OfType("preempt")[0]["attempt_id"], att);
  EXPECT_NE(link->OfType("preempt")[0]["cause"].get<std::string>().find(urgent->id),
            std::string::npos);
  EXPECT_EQ(core_->GetJob(urgent->id)->job.state, store::JobState::kQueued);
  // Another scheduling round does not preempt again while it stops.
  ASSERT_TRUE(core_->SubmitJob(Spec(1), "", true).ok());
  EXPECT_EQ(link->OfType("preempt").size(), 1u);

  ASSERT_TRUE(
      core_->AgentMessage(*node, link.get(), proto::ToJson(proto::Exited{att, 143, 0, ""})).ok());
  EXPECT_EQ(core_->GetJob(cheap->id)->attempts[0].state, store::AttemptState::kPreempted);
  // The freed room goes to the on-demand job, at the on-demand price; the preempted one waits.
  auto u = core_->GetJob(urgent->id);
  ASSERT_EQ(u->attempts.size(), 1u);
  EXPECT_FALSE(u->attempts[0].interruptible);
  EXPECT_DOUBLE_EQ(u->attempts[0].price_per_hour, 0.40);
  EXPECT_EQ(core_->GetJob(cheap->id)->job.state, store::JobState::kQueued);
}

TEST_F(ServerCoreTest, InterruptibleThenOnDemandFallsBackAfterWaitingAndSaysSo) {
  auto link = std::make_shared<RecordingLink>();
  ASSERT_TRUE(Hello(link, CpuHello()).ok());  // sells no interruptible capacity
  spec::JobSpec s = Spec(1);
  s.lifecycle.capacity = spec::Capacity::kInterruptibleThenOnDemand;
  s.lifecycle.fallback_after_s = 60;
  auto job = core_->SubmitJob(s, "");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->state, store::JobState::kQueued);
  EXPECT_NE(job->reason.find("waiting for interruptible capacity"), std::string::npos)
      << job->reason;
  EXPECT_TRUE(link->OfType("assign").empty());
  clock_.Advance(61'000);
  ASSERT_TRUE(
      core_->AgentMessage(core_->ListNodes()[0].node.id, link.get(), Json{{"type", "heartbeat"}})
          .ok());
  core_->Tick();
  ASSERT_EQ(link->OfType("assign").size(), 1u);
  auto d = core_->GetJob(job->id);
  EXPECT_FALSE(d->attempts[0].interruptible);
  std::string fallback;
  for (const auto& e : d->events) {
    if (e.type == "fallback") fallback = e.message;
  }
  EXPECT_NE(fallback.find("no interruptible capacity for 60s"), std::string::npos) << fallback;
}

TEST_F(ServerCoreTest, InterruptibleThenOnDemandFallsBackAfterPreemptions) {
  auto spot_link = std::make_shared<RecordingLink>();
  proto::Hello h = CpuHello();
  h.name = "spot";
  h.price_per_cpu_hour = 0.1;
  h.interruptible_price_per_cpu_hour = 0.03;
  auto spot_node = Hello(spot_link, h);
  spec::JobSpec s = Spec(1);
  s.lifecycle.capacity = spec::Capacity::kInterruptibleThenOnDemand;
  s.lifecycle.fallback_after_preemptions = 1;
  auto job = core_->SubmitJob(s, "");
  ASSERT_EQ(spot_link->OfType("assign").size(), 1u);
  EXPECT_TRUE(core_->GetJob(job->id)->attempts[0].interruptible);
  std::string att = spot_link->OfType("assign")[0]["attempt_id"];
  ASSERT_TRUE(core_->ReclaimNode("spot", {}, "spot market").ok());
  auto od_link = std::make_shared<RecordingLink>();
  proto::Hello od = CpuHello();
  od.name = "od";
  od.price_per_cpu_hour = 0.2;
  ASSERT_TRUE(Hello(od_link, od).ok());
  ASSERT_TRUE(
      core_
          ->AgentMessage(*spot_node, spot_link.get(), proto::ToJson(proto::Exited{att, 143, 0, ""}))
          .ok());
  // One preemption is the limit: it now runs on on-demand capacity, and the events say so.
  ASSERT_EQ(od_link->OfType("assign").size(), 1u);
  auto d = core_->GetJob(job->id);
  EXPECT_FALSE(d->attempts[1].interruptible);
  bool said = false;
  for (const auto& e : d->events) said |= e.type == "fallback";
  EXPECT_TRUE(said);
}

// Issue 11 item 5: an exit during a preemption is the preemption's end, not the job's, even
// with exit code 0 (a script that saves on SIGTERM and exits 0 has not finished its work).
TEST_F(ServerCoreTest, AJobThatExitsZeroWhileBeingPreemptedIsPreemptedAndRunsAgain) {
  auto l1 = std::make_shared<RecordingLink>();
  proto::Hello h1 = CpuHello();
  h1.name = "one";
  auto n1 = Hello(l1, h1);
  auto job = core_->SubmitJob(Spec(4), "");  // only fits an idle node
  ASSERT_TRUE(job.ok());
  std::string att = l1->OfType("assign")[0]["attempt_id"];
  ASSERT_TRUE(core_->AgentMessage(*n1, l1.get(), Msg("started", att)).ok());
  auto l2 = std::make_shared<RecordingLink>();
  proto::Hello h2 = CpuHello();
  h2.name = "two";
  auto n2 = Hello(l2, h2);
  ASSERT_TRUE(core_->ReclaimNode("one", {}, "maintenance").ok());
  ASSERT_TRUE(core_->AgentMessage(*n1, l1.get(), proto::ToJson(proto::Exited{att, 0, 0, ""})).ok());
  auto d = core_->GetJob(job->id);
  ASSERT_EQ(d->attempts.size(), 2u);
  EXPECT_EQ(d->attempts[0].state, store::AttemptState::kPreempted);
  EXPECT_EQ(d->attempts[0].cause,
            "preempted: maintenance (exited with code 0 while being preempted)");
  EXPECT_EQ(d->job.preemptions, 1);
  // Placed again at once on the other node; there an exit 0 is success.
  ASSERT_EQ(l2->OfType("assign").size(), 1u);
  std::string att2 = l2->OfType("assign")[0]["attempt_id"];
  ASSERT_TRUE(core_->AgentMessage(*n2, l2.get(), Msg("started", att2)).ok());
  ASSERT_TRUE(
      core_->AgentMessage(*n2, l2.get(), proto::ToJson(proto::Exited{att2, 0, 0, ""})).ok());
  EXPECT_EQ(core_->GetJob(job->id)->job.state, store::JobState::kSucceeded);
  EXPECT_EQ(l1->OfType("assign").size(), 1u);  // never again on the reclaimed node
}

// A manifest in agent/checkpoint_sync's format, stored with its chunks; returns its digest.
std::string StoreCheckpoint(store::BlobStore& blobs, const std::vector<std::string>& chunks) {
  Json files = Json::array();
  Json refs = Json::array();
  for (const auto& c : chunks) {
    EXPECT_TRUE(blobs.PutVerified(Sha256Hex(c), c).ok());
    refs.push_back(Sha256Hex(c));
  }
  files.push_back({{"path", "state.pt"}, {"mode", 420}, {"size", 1}, {"chunks", refs}});
  std::string text = DumpJson(Json{{"version", 1}, {"files", files}, {"total_bytes", 1}});
  EXPECT_TRUE(blobs.PutVerified(Sha256Hex(text), text).ok());
  return Sha256Hex(text);
}

TEST_F(ServerCoreTest, CheckpointRetentionDropsTheOldestAndFreesItsOwnChunks) {
  Open();  // options below need a fresh core
  core_.reset();
  CoreOptions opt;
  opt.checkpoint_retention = 2;
  core_ = std::make_unique<ServerCore>(store_.get(), &clock_, opt);
  ASSERT_TRUE(core_->Load().ok());
  store::BlobStore blobs((dir_ / "blobs").string());
  core_->SetBlobStore(&blobs);
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  auto job = core_->SubmitJob(Spec(), "");
  std::string att = link->OfType("assign")[0]["attempt_id"];
  // m1 holds "shared" and "only-m1"; m2 and m3 hold "shared" and their own.
  std::string m1 = StoreCheckpoint(blobs, {"shared", "only-m1"});
  std::string m2 = StoreCheckpoint(blobs, {"shared", "only-m2"});
  std::string m3 = StoreCheckpoint(blobs, {"shared", "only-m3"});
  for (const auto& m : {m1, m2, m3}) {
    clock_.Advance(1000);
    Json msg{{"type", "checkpoint"}, {"attempt_id", att}, {"manifest", m}};
    ASSERT_TRUE(core_->AgentMessage(*node, link.get(), msg).ok());
  }
  EXPECT_EQ(core_->GetJob(job->id)->job.checkpoint, m3);
  EXPECT_FALSE(blobs.Has(m1));
  EXPECT_FALSE(blobs.Has(Sha256Hex("only-m1")));
  EXPECT_TRUE(blobs.Has(Sha256Hex("shared")));  // still used by m2 and m3
  EXPECT_TRUE(blobs.Has(m2));
  EXPECT_TRUE(blobs.Has(m3));
  EXPECT_EQ(store_->LoadCheckpoints()->size(), 2u);
}

TEST_F(ServerCoreTest, DeletingAFinishedJobDeletesItsCheckpointsButNotSharedChunks) {
  store::BlobStore blobs((dir_ / "blobs").string());
  core_->SetBlobStore(&blobs);
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  auto a = core_->SubmitJob(Spec(), "");
  auto b = core_->SubmitJob(Spec(), "");
  auto assigns = link->OfType("assign");
  ASSERT_EQ(assigns.size(), 2u);
  std::string ma = StoreCheckpoint(blobs, {"common", "a-only"});
  std::string mb = StoreCheckpoint(blobs, {"common", "b-only"});
  for (size_t i = 0; i < 2; ++i) {
    Json msg{{"type", "checkpoint"},
             {"attempt_id", assigns[i]["attempt_id"]},
             {"manifest", assigns[i]["job_id"] == a->id ? ma : mb}};
    ASSERT_TRUE(core_->AgentMessage(*node, link.get(), msg).ok());
  }
  // Not while it runs.
  EXPECT_EQ(core_->DeleteJob(a->id).code(), StatusCode::kFailedPrecondition);
  std::string att_a =
      assigns[0]["job_id"] == a->id ? assigns[0]["attempt_id"] : assigns[1]["attempt_id"];
  ASSERT_TRUE(
      core_->AgentMessage(*node, link.get(), proto::ToJson(proto::Exited{att_a, 0, 0, ""})).ok());
  ASSERT_TRUE(core_->DeleteJob(a->id).ok());
  EXPECT_EQ(core_->GetJob(a->id).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(blobs.Has(ma));
  EXPECT_FALSE(blobs.Has(Sha256Hex("a-only")));
  EXPECT_TRUE(blobs.Has(Sha256Hex("common")));  // b's checkpoint still uses it
  EXPECT_TRUE(blobs.Has(mb));
  // Gone for good: a restart does not bring it back.
  Open();
  EXPECT_EQ(core_->GetJob(a->id).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(core_->GetJob(b->id).ok());
}

TEST_F(ServerCoreTest, ReclaimingSomeGpusPreemptsOnlyTheAttemptsUsingThem) {
  auto link = std::make_shared<RecordingLink>();
  proto::Hello h = CpuHello();
  for (int i = 0; i < 2; ++i) {
    GpuInfo g;
    g.index = i;
    g.name = "NVIDIA H100 80GB HBM3";
    g.memory_mib = 81559;
    g.uuid = "GPU-" + std::to_string(i);
    h.inventory.gpus.push_back(g);
    AddDriver(h);
  }
  ASSERT_TRUE(Hello(link, h).ok());
  ASSERT_TRUE(core_->SubmitJob(Spec(1, 1), "").ok());
  ASSERT_TRUE(core_->SubmitJob(Spec(1, 1), "").ok());
  auto assigns = link->OfType("assign");
  ASSERT_EQ(assigns.size(), 2u);
  std::string on_gpu1;
  for (const auto& a : assigns) {
    if (a["gpus"] == Json::array({1})) on_gpu1 = a["attempt_id"];
  }
  ASSERT_FALSE(on_gpu1.empty());
  auto preempted = core_->ReclaimNode("box", {1}, "gpu 1 needed");
  ASSERT_TRUE(preempted.ok()) << preempted.status().ToString();
  EXPECT_EQ(*preempted, std::vector<std::string>{on_gpu1});
  ASSERT_EQ(link->OfType("preempt").size(), 1u);
  EXPECT_EQ(link->OfType("preempt")[0]["attempt_id"], on_gpu1);
}

}  // namespace
}  // namespace sluice::server

// --- trust (issue 5) ---------------------------------------------------------------------

class TrustTest : public ServerCoreTest {
 protected:
  proto::Hello GpuHello() {
    proto::Hello h = CpuHello();
    GpuInfo g;
    g.name = "NVIDIA H100 80GB HBM3";
    g.memory_mib = 81559;
    g.uuid = "GPU-0";
    g.serial = "1650123456789";
    h.inventory.gpus.push_back(g);
    AddDriver(h);
    return h;
  }
  // Lets `ms` pass with the node heartbeating every 5 s and the server ticking.
  void Live(int64_t ms, const std::string& node, const std::shared_ptr<RecordingLink>& link) {
    for (int64_t t = 0; t < ms; t += 5000) {
      clock_.Advance(5000);
      ASSERT_TRUE(core_->AgentMessage(node, link.get(), Json{{"type", "heartbeat"}}).ok());
      core_->Tick();
    }
  }
  Status Report(const std::string& node, const std::shared_ptr<RecordingLink>& link,
                const conformance::Report& r) {
    return core_->AgentMessage(
        node, link.get(),
        Json{{"type", "conformance"}, {"report", ToJson(r)}, {"nonce", link->Nonce()}});
  }
};

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

}  // namespace
}  // namespace sluice::server

namespace sluice::server {
namespace {

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
