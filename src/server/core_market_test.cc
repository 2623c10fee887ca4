// The server core's market: offers from agents and catalogs, preemption for on-demand work,
// interruptible fallback, checkpoint retention.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include "audit/bundle.h"
#include "common/crypto.h"
#include "market/gpu_identity.h"
#include "market/gpu_labels.h"
#include "server/core_test_fixture.h"

namespace sluice::server {
namespace {

using testing::RecordingLink;

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

// The tick asks the queued jobs that may still fall back (may_fall_back_) whether one may now,
// between its full-search renewals: here the last renewal was 6 s before the fallback is due, so
// only that question starts the pass that places the job on on-demand capacity.
TEST_F(ServerCoreTest, TheTickFallsBackAJobBetweenItsFullSearches) {
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());  // sells no interruptible capacity
  ASSERT_TRUE(node.ok());
  spec::JobSpec s = Spec(1);
  s.lifecycle.capacity = spec::Capacity::kInterruptibleThenOnDemand;
  s.lifecycle.fallback_after_s = 60;
  auto job = core_->SubmitJob(s, "");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto live = [&](int64_t ms) {
    clock_.Advance(ms);
    ASSERT_TRUE(core_->AgentMessage(*node, link.get(), Json{{"type", "heartbeat"}}).ok());
    core_->Tick();
  };
  live(55'000);  // the tick's full search: too early to fall back
  const ServerCore::PassCounts renewed = core_->PlacementPasses();
  EXPECT_TRUE(link->OfType("assign").empty());
  live(6'000);  // 61 s: due, and 6 s after the renewal
  ASSERT_EQ(link->OfType("assign").size(), 1u);
  const ServerCore::PassCounts after = core_->PlacementPasses();
  EXPECT_EQ(after.full + after.incremental, renewed.full + renewed.incremental + 1);
  EXPECT_FALSE(core_->GetJob(job->id)->attempts[0].interruptible);
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

// What the blobs are used by is counted as jobs change (server/blob_refs.h), not rebuilt at each
// collection: the counts must be the ones a restart rebuilds from the store, and a blob shared by
// two jobs (a workdir, a checkpoint's chunk) must go with the last job that uses it, finished
// (out of the job map) or not.
TEST_F(ServerCoreTest, BlobsSharedByJobsGoWithTheLastAndTheirCountsSurviveARestart) {
  store::BlobStore blobs((dir_ / "blobs").string());
  Open(&blobs);
  const std::string workdir = Sha256Hex("the workdir");
  ASSERT_TRUE(blobs.PutVerified(workdir, "the workdir").ok());
  auto link = std::make_shared<RecordingLink>();
  auto node = Hello(link, CpuHello());
  ASSERT_TRUE(node.ok());
  auto a = core_->SubmitJob(Spec(), workdir);
  auto b = core_->SubmitJob(Spec(), workdir);
  ASSERT_TRUE(a.ok() && b.ok());
  auto assigns = link->OfType("assign");
  ASSERT_EQ(assigns.size(), 2u);
  std::map<std::string, std::string> att;  // job -> attempt
  for (const auto& as : assigns) att[as["job_id"]] = as["attempt_id"];
  auto save = [&](const std::string& job, const std::string& manifest) {
    clock_.Advance(1000);
    Json msg{{"type", "checkpoint"}, {"attempt_id", att[job]}, {"manifest", manifest}};
    ASSERT_TRUE(core_->AgentMessage(*node, link.get(), msg).ok());
  };
  // a keeps the newest 3 of 4 (the first is dropped); every one shares "common" with b's.
  std::vector<std::string> ma;
  for (int i = 0; i < 4; ++i) {
    ma.push_back(StoreCheckpoint(blobs, {"common", "a-" + std::to_string(i)}));
    save(a->id, ma.back());
  }
  const std::string mb = StoreCheckpoint(blobs, {"common", "b-only"});
  save(b->id, mb);
  EXPECT_FALSE(blobs.Has(ma[0]));
  EXPECT_FALSE(blobs.Has(Sha256Hex("a-0")));
  EXPECT_TRUE(blobs.Has(Sha256Hex("a-1")));
  for (const auto& job : {a->id, b->id}) {
    ASSERT_TRUE(
        core_->AgentMessage(*node, link.get(), proto::ToJson(proto::Exited{att[job], 0, 0, ""}))
            .ok());
  }
  core_->Tick();  // both finished jobs leave the job map; their blobs stay theirs
  ASSERT_FALSE(core_->StateDump()["jobs"].contains(a->id));
  const Json counted = core_->StateDump()["blob_refs"];
  EXPECT_EQ(counted["workdirs"][workdir], 2);
  EXPECT_EQ(counted["chunks"][Sha256Hex("common")], 4);  // a's three kept manifests and b's
  Open(&blobs);  // a restart rebuilds them from the store and the blobs
  EXPECT_EQ(core_->StateDump()["blob_refs"], counted);

  ASSERT_TRUE(core_->DeleteJob(a->id).ok());
  for (size_t i = 1; i < ma.size(); ++i) {
    EXPECT_FALSE(blobs.Has(ma[i]));
    EXPECT_FALSE(blobs.Has(Sha256Hex("a-" + std::to_string(i))));
  }
  EXPECT_TRUE(blobs.Has(workdir));              // b's too
  EXPECT_TRUE(blobs.Has(Sha256Hex("common")));  // b's checkpoint lists it
  // A job that only waits names the workdir too, from its submission on.
  SubmitOptions waits;
  waits.queue_unschedulable = true;
  auto c = core_->SubmitJob(Spec(1000), workdir, waits);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(core_->DeleteJob(b->id).ok());
  EXPECT_TRUE(blobs.Has(workdir));
  EXPECT_FALSE(blobs.Has(Sha256Hex("common")));
  EXPECT_FALSE(blobs.Has(mb));
  ASSERT_TRUE(core_->CancelJob(c->id).ok());
  ASSERT_TRUE(core_->DeleteJob(c->id).ok());
  EXPECT_FALSE(blobs.Has(workdir));
  EXPECT_EQ(core_->StateDump()["blob_refs"], (Json{{"workdirs", Json::object()},
                                                   {"manifests", Json::object()},
                                                   {"chunks", Json::object()}}));
}

}  // namespace
}  // namespace sluice::server
