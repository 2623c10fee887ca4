// The fixtures of the server core's unit tests (server_core_test.cc, core_market_test.cc,
// core_trust_test.cc): a ServerCore on a fresh SQLite store with a fake clock, and helpers that
// register nodes and run jobs the way agents do. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "common/crypto.h"
#include "server/server_core.h"
#include "server/test_agent_link.h"
#include "server/test_failing_store.h"
#include "server/test_fleet.h"
#include "server/test_reports.h"

namespace sluice::server {

class ServerCoreTest : public ::testing::Test {
 protected:
  using RecordingLink = testing::RecordingLink;

  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("sluice-core-" + RandomHex(6));
    std::filesystem::create_directories(dir_);
    Open();
  }
  void TearDown() override {
    core_.reset();
    failing_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  // (Re)opens store and core on the same database: a server restart. `blobs`, when given, is
  // set before Load, as the server does.
  void Open(store::BlobStore* blobs = nullptr) {
    core_.reset();
    failing_.reset();
    store_.reset();
    auto s = store::OpenSqliteStore((dir_ / "sluice.db").string());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    failing_ = std::make_unique<testing::FailingStore>(store_.get());
    core_ = std::make_unique<ServerCore>(failing_.get(), &clock_, opt_);
    if (blobs != nullptr) core_->SetBlobStore(blobs);
    ASSERT_TRUE(core_->Load().ok());
  }
  // A GPU machine needs a driver to be verified.
  static void AddDriver(proto::Hello& h) {
    h.inventory.driver_version = "550.54.15";
    h.inventory.cuda_version = "12.4";
  }
  proto::Hello CpuHello(std::string node_id = "") {
    proto::Hello h = testing::CpuHello("box");
    h.node_id = std::move(node_id);
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
    auto rec = std::dynamic_pointer_cast<RecordingLink>(link);
    if (rec == nullptr) return core_->AgentHello(link, h);  // a link that cannot answer
    return testing::EnrolNode(*core_, rec, h);
  }
  Json Msg(std::string type, std::string attempt) {
    return Json{{"type", type}, {"attempt_id", attempt}};
  }
  // The agent on `link` starts the attempt last assigned to it; returns its id.
  std::string StartLastAssigned(const std::string& node, RecordingLink& link) {
    const std::string att = link.Last("assign", "attempt_id");
    EXPECT_TRUE(core_->AgentMessage(node, &link, Msg("started", att)).ok());
    return att;
  }
  // Second `s` of a run on the fake clock: the agent on `link` heartbeats every 5 s, then the
  // server ticks.
  void AgentSecond(int s, const std::string& node, RecordingLink& link) {
    clock_.Advance(1000);
    if (s % 5 == 0) {
      EXPECT_TRUE(core_->AgentMessage(node, &link, Json{{"type", "heartbeat"}}).ok());
    }
    core_->Tick();
  }

  CoreOptions opt_ = [] {
    CoreOptions o;
    o.heartbeat_grace_ms = 10'000;
    return o;
  }();
  FakeClock clock_;
  std::filesystem::path dir_;
  std::unique_ptr<store::Store> store_;
  // The core writes through it: a test makes chosen commits fail (it passes everything through
  // until told otherwise).
  std::unique_ptr<testing::FailingStore> failing_;
  std::unique_ptr<ServerCore> core_;
};

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

}  // namespace sluice::server
