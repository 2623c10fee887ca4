// Storage and transfer billing (issue 14; docs/design-notes.md "Metering and the ledger"): the
// rules beside compute that core_billing_test.cc's random histories leave out.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/crypto.h"
#include "ledger/metering.h"
#include "server/server_core.h"
#include "server/test_agent_link.h"
#include "server/test_reports.h"
#include "store/blob_store.h"

namespace sluice::server {
namespace {

using testing::RecordingLink;

// Storage and transfer (the second rule): a job's workdir and kept checkpoints are billed
// per hour at the storage rate, the bytes moved for it at the transfer rate, both to the
// platform, each a balanced transaction beside the compute.
TEST(CoreBilling, StorageAndTransferAreChargedToThePlatform) {
  auto dir = std::filesystem::temp_directory_path() / ("sluice-storage-" + RandomHex(6));
  std::filesystem::create_directories(dir);
  {
    auto s = store::OpenSqliteStore((dir / "sluice.db").string());
    ASSERT_TRUE(s.ok());
    store::BlobStore blobs((dir / "blobs").string());
    FakeClock clock;
    CoreOptions opt;
    opt.settle_interval_ms = 0;
    opt.platform_fee_bps = 500;                       // 5 %
    opt.transfer_price_per_gb = 1.0;                  // 1 micro-dollar per 1,000 bytes
    opt.cost_model.storage_price_per_gb_month = 730;  // $1 per GB-hour: 1 micro per 1,000 B-h
    ServerCore core(s->get(), &clock, opt);
    core.SetBlobStore(&blobs);
    ASSERT_TRUE(core.Load().ok());
    auto link = std::make_shared<RecordingLink>();
    proto::Hello h;
    h.name = "n";
    h.inventory.hostname = "n";
    h.inventory.cpu_cores = 4;
    h.inventory.memory_mib = 8192;
    h.inventory.gpu_source = "none";
    h.price_per_cpu_hour = 1.0;
    auto node = core.AgentHello(link, h);
    ASSERT_TRUE(node.ok());
    ASSERT_TRUE(core.AgentMessage(*node, link.get(),
                                  Json{{"type", "conformance"},
                                       {"report", ToJson(testing::PassingReport(h.inventory))},
                                       {"nonce", link->Nonce()}})
                    .ok());
    auto workdir = blobs.Put(std::string(1'000'000, 'w'));
    ASSERT_TRUE(workdir.ok());
    spec::JobSpec spec;
    spec.name = "t";
    spec.run = "train";
    spec.resources.cpus = 1;
    spec.resources.memory_gb = 1;
    auto job = core.SubmitJob(spec, *workdir);
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    const std::string att = link->Last("assign", "attempt_id");
    ASSERT_TRUE(
        core.AgentMessage(*node, link.get(), Json{{"type", "started"}, {"attempt_id", att}}).ok());
    // The workdir went to the node: 1,000,000 bytes at $1 per GB.
    auto by = [&](const std::string& resource) {
      store::CostQuery q;
      q.job_id = job->id;
      q.by = "resource";
      auto rows = core.Costs(q);
      EXPECT_TRUE(rows.ok());
      for (const auto& r : *rows) {
        if (r.key == resource) return r.charged_micros;
      }
      return int64_t{0};
    };
    EXPECT_EQ(by("transfer"), 1'000);
    // Stored for an hour: 1 MB at $1 per GB-hour.
    ASSERT_TRUE(core.SettleMeters().ok());
    clock.Advance(3'600'000);
    ASSERT_TRUE(core.SettleMeters().ok());
    EXPECT_EQ(by("storage"), 1'000);
    // A checkpoint of 2,000,000 bytes is uploaded and kept: moved once, then stored beside it.
    auto chunk = blobs.Put(std::string(2'000'000, 'c'));
    ASSERT_TRUE(chunk.ok());
    const std::string manifest_text =
        DumpJson(Json{{"files", Json::array({Json{{"path", "ckpt"}, {"chunks", {*chunk}}}})}});
    auto manifest = blobs.Put(manifest_text);
    ASSERT_TRUE(manifest.ok());
    ASSERT_TRUE(core.AgentMessage(
                        *node, link.get(),
                        Json{{"type", "checkpoint"}, {"attempt_id", att}, {"manifest", *manifest}})
                    .ok());
    const int64_t ckpt_bytes = 2'000'000 + static_cast<int64_t>(manifest_text.size());
    EXPECT_EQ(by("transfer"), 1'000 + ckpt_bytes / 1'000);
    ASSERT_TRUE(core.SettleMeters().ok());  // what it keeps changed: a new storage segment
    clock.Advance(3'600'000);
    ASSERT_TRUE(core.SettleMeters().ok());
    EXPECT_EQ(by("storage"), 1'000 + (1'000'000 + ckpt_bytes) / 1'000);
    // The platform holds what it stored and moved; the ledger adds up.
    auto check = core.CheckLedger();
    ASSERT_TRUE(check.ok());
    EXPECT_TRUE(check->problems.empty()) << ::testing::PrintToString(check->problems);
    auto cost = core.CostOfJob(job->id);
    ASSERT_TRUE(cost.ok());
    EXPECT_EQ(cost->storage_micros, by("storage"));
    EXPECT_EQ(cost->transfer_micros, by("transfer"));
    EXPECT_EQ(cost->charged_micros,
              cost->compute_micros + cost->storage_micros + cost->transfer_micros);
    EXPECT_EQ(core.BalanceOf(ledger::kPlatformAccount),
              by("storage") + by("transfer") + cost->fee_micros);
    EXPECT_EQ(core.BalanceOf("admin"), -cost->charged_micros);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice::server
