// The server core: jobs, attempts, nodes and streams (server_core.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "audit/bundle.h"
#include "common/crypto.h"
#include "market/gpu_identity.h"
#include "market/gpu_labels.h"
#include "server/core_test_fixture.h"

namespace sluice::server {
namespace {

using testing::RecordingLink;

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
  auto listed = core_->ListJobs(std::nullopt, 10);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_TRUE(listed->empty());
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
  // Its provider brings the node back at once (a whole-node reclaim pauses it, issue 15 item 5);
  // the preempted job itself still avoids it for its cooldown.
  ASSERT_TRUE(core_->ResumeNode(*node).ok());
  EXPECT_EQ(link->OfType("assign").size(), 1u);  // the job is cooling down on this node
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

// Attempt ids are made in order (TimeOrderedIds), so another provider's agent can guess one. A
// node may speak only for its own attempts: `started`, log lines, a checkpoint and `exited` for
// an attempt placed on another node change nothing, and the owner's own messages still count.
TEST_F(ServerCoreTest, ANodeCannotSpeakForAnotherNodesAttempt) {
  auto owner = std::make_shared<RecordingLink>();
  auto node = Hello(owner, CpuHello());
  ASSERT_TRUE(node.ok());
  auto job = core_->SubmitJob(Spec(), "");
  ASSERT_TRUE(job.ok());
  const std::string att = owner->Last("assign", "attempt_id");
  ASSERT_FALSE(att.empty());
  auto intruder = std::make_shared<RecordingLink>();
  proto::Hello h = CpuHello();
  h.name = h.inventory.hostname = "box2";
  auto other = Hello(intruder, h);
  ASSERT_TRUE(other.ok());
  ASSERT_NE(*other, *node);

  EXPECT_EQ(core_->AgentMessage(*other, intruder.get(), Msg("started", att)).code(),
            StatusCode::kNotFound);
  (void)core_->AgentMessage(*other, intruder.get(),
                            proto::LogMessage(att, {{1, "stdout", 0, "forged"}}));
  (void)core_->AgentMessage(*other, intruder.get(),
                            Json{{"type", "checkpoint"},
                                 {"attempt_id", att},
                                 {"manifest", "sha256:" + std::string(64, 'a')}});
  (void)core_->AgentMessage(*other, intruder.get(), proto::ToJson(proto::Exited{att, 0, 0, ""}));
  auto d = core_->GetJob(job->id);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->job.state, store::JobState::kStarting) << "another node started or ended it";
  EXPECT_EQ(d->job.attempt_id, att);
  EXPECT_TRUE(d->job.checkpoint.empty());
  auto logs = core_->ReadLogs(job->id, 0, 100);
  ASSERT_TRUE(logs.ok());
  EXPECT_TRUE(logs->empty()) << (*logs)[0].text;

  ASSERT_TRUE(core_->AgentMessage(*node, owner.get(), Msg("started", att)).ok());
  ASSERT_TRUE(
      core_->AgentMessage(*node, owner.get(), proto::ToJson(proto::Exited{att, 0, 0, ""})).ok());
  d = core_->GetJob(job->id);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->job.state, store::JobState::kSucceeded);
}

TEST_F(ServerCoreTest, UnknownGpuLabelIsRejectedWithSuggestion) {
  spec::JobSpec s = Spec(1, 1);
  s.resources.gpu = "a1000";
  auto r = core_->SubmitJob(s, "");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("a100"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace sluice::server
