// Grouped placement passes (CoreOptions::group_queue; QueueIndex; docs/design-notes.md
// "Placement at scale") read a deep queue only as far as can matter. Two cores run side by side
// through the same random run: one grouped, one reading every queued job every pass (the
// oracle). After every step each job must be in the same state, with the same reason, on the
// same node.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/crypto.h"
#include "server/server_core.h"
#include "server/test_agent_link.h"
#include "server/test_reports.h"

namespace sluice::server {
namespace {

using testing::RecordingLink;

constexpr int kNodes = 4;

// One core and its fleet; node i is the same machine on both sides (its id differs).
struct Side {
  explicit Side(bool grouped) {
    dir = std::filesystem::temp_directory_path() / ("sluice-queue-" + RandomHex(6));
    std::filesystem::create_directories(dir);
    auto s = store::OpenSqliteStore((dir / "sluice.db").string());
    EXPECT_TRUE(s.ok());
    store = std::move(*s);
    CoreOptions o;
    o.heartbeat_grace_ms = 60'000;
    o.group_queue = grouped;
    core = std::make_unique<ServerCore>(store.get(), &clock, o);
    EXPECT_TRUE(core->Load().ok());
    for (int i = 0; i < kNodes; ++i) {
      proto::Hello h;
      h.name = "box" + std::to_string(i);
      h.inventory.hostname = h.name;
      h.inventory.cpu_cores = 4;
      h.inventory.memory_mib = 8192;
      h.inventory.gpu_source = "none";
      // Distinct prices: the cheapest free node wins, whatever the random node ids.
      h.price_per_cpu_hour = 0.05 + 0.01 * i;
      if (i == kNodes - 1) h.interruptible_price_per_cpu_hour = 0.01;  // spot capacity here
      auto link = std::make_shared<RecordingLink>();
      auto node = core->AgentHello(link, h);
      EXPECT_TRUE(node.ok());
      EXPECT_TRUE(core->AgentMessage(*node, link.get(),
                                     Json{{"type", "conformance"},
                                          {"report", ToJson(testing::PassingReport(h.inventory))},
                                          {"nonce", link->Nonce()}})
                      .ok());
      nodes.push_back(*node);
      links.push_back(link);
    }
  }
  ~Side() {
    core.reset();
    store.reset();
    std::filesystem::remove_all(dir);
  }
  // Job index -> what it is now: state, reason, never-fits, and node index of its attempt.
  std::vector<std::string> Jobs() {
    Json dump = core->StateDump();
    std::map<std::string, int> node_index;
    for (int i = 0; i < kNodes; ++i) node_index[nodes[static_cast<size_t>(i)]] = i;
    std::vector<std::string> out;
    for (const auto& id : jobs) {
      // A finished job has left memory (the tick retires it): its record is the store's.
      Json j = dump["jobs"].contains(id) ? dump["jobs"][id] : StoredJob(id);
      std::string att = j["record"]["attempt_id"].get<std::string>();
      std::string on = "-";
      if (!att.empty() && dump["active_attempts"].contains(att)) {
        on = std::to_string(node_index[dump["active_attempts"][att]["node_id"].get<std::string>()]);
      }
      // Reasons name nodes by id: by index here, as the ids differ between the sides; and the
      // nearest of several equal nodes is the first by id, so not named.
      std::string reason = j["record"]["reason"].get<std::string>();
      reason = reason.substr(0, reason.find("; nearest: "));
      for (int i = 0; i < kNodes; ++i) {
        const std::string& node = nodes[static_cast<size_t>(i)];
        for (size_t at; (at = reason.find(node)) != std::string::npos;) {
          reason.replace(at, node.size(), "node#" + std::to_string(i));
        }
      }
      // Of several paused nodes, the first by id is named (with its pause's end): which one, the
      // ids decide.
      const std::string rest = "; every other node that can run it is busy";
      if (auto at = reason.find(") is paused ("); at != std::string::npos) {
        const size_t from = reason.rfind("waiting for capacity: ", at);
        const size_t to = reason.find(rest, at);
        if (from != std::string::npos && to != std::string::npos) {
          reason.replace(from, to - from, "waiting for capacity: (a paused node)");
        }
      }
      out.push_back(j["record"]["state"].get<std::string>() + " | " + reason + " | " +
                    (j["never_fits"].get<bool>() ? "never" : "-") + " | node " + on);
    }
    return out;
  }
  // A finished job as Jobs() reads one from the dump, from its stored record.
  Json StoredJob(const std::string& id) {
    auto d = core->GetJob(id);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    if (!d.ok()) return Json{{"record", {{"attempt_id", ""}, {"reason", ""}, {"state", "?"}}}};
    EXPECT_TRUE(store::IsTerminal(d->job.state)) << id << " left memory unfinished";
    return Json{{"record",
                 {{"attempt_id", d->job.attempt_id},
                  {"reason", d->job.reason},
                  {"state", store::Name(d->job.state)}}},
                {"never_fits", false}};
  }
  // The active attempt on node i of the earliest submitted job, or "".
  std::string OldestOn(int i) {
    Json dump = core->StateDump();
    for (const auto& id : jobs) {
      if (!dump["jobs"].contains(id)) continue;  // finished, and no attempt of it active
      std::string att = dump["jobs"][id]["record"]["attempt_id"].get<std::string>();
      if (!att.empty() && dump["active_attempts"].contains(att) &&
          dump["active_attempts"][att]["node_id"] == nodes[static_cast<size_t>(i)]) {
        return att;
      }
    }
    return "";
  }

  std::filesystem::path dir;
  FakeClock clock;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<ServerCore> core;
  std::vector<std::string> nodes;
  std::vector<std::shared_ptr<RecordingLink>> links;
  std::vector<std::string> jobs;  // by submission
};

TEST(QueueOracleTest, GroupedPassesGiveEveryJobWhatReadingTheWholeQueueGives) {
  Side grouped(true), oracle(false);
  std::mt19937 rng(2026);
  int placed = 0, queued_deep = 0;
  for (int step = 0; step < 500; ++step) {
    const unsigned roll = rng() % 100;
    if (roll < 45) {
      spec::JobSpec s;
      s.name = "q" + std::to_string(step);
      s.run = "true";
      const int cpus[] = {1, 1, 2, 4, 8};  // 8: fits no node, ever
      s.resources.cpus = cpus[rng() % 5];
      s.resources.memory_gb = 1;
      s.priority = static_cast<int>(rng() % 4 == 0 ? rng() % 3 : 0);
      const unsigned kind = rng() % 20;
      if (kind < 2) {
        s.lifecycle.capacity = spec::Capacity::kInterruptibleThenOnDemand;
        s.lifecycle.fallback_after_s = 40;
        s.lifecycle.fallback_after_preemptions = 1;
      } else if (kind == 2) {
        s.max_total_cost = 50.0;  // a budget: searched on its own
      }
      for (Side* side : {&grouped, &oracle}) {
        auto job = side->core->SubmitJob(s, "", /*queue_unschedulable=*/true);
        ASSERT_TRUE(job.ok()) << job.status().ToString();
        side->jobs.push_back(job->id);
      }
    } else if (roll < 75) {
      // Node i's oldest attempt starts, if it had not, and exits.
      const int i = static_cast<int>(rng() % kNodes);
      for (Side* side : {&grouped, &oracle}) {
        const std::string att = side->OldestOn(i);
        if (att.empty()) continue;
        const std::string& node = side->nodes[static_cast<size_t>(i)];
        RecordingLink* link = side->links[static_cast<size_t>(i)].get();
        (void)side->core->AgentMessage(node, link, Json{{"type", "started"}, {"attempt_id", att}});
        ASSERT_TRUE(
            side->core->AgentMessage(node, link, proto::ToJson(proto::Exited{att, 0, 0, ""})).ok());
        if (side == &grouped) ++placed;
      }
    } else if (roll < 80 && !grouped.jobs.empty()) {
      const size_t j = rng() % grouped.jobs.size();
      for (Side* side : {&grouped, &oracle}) (void)side->core->CancelJob(side->jobs[j]);
    } else if (roll < 84) {
      // The provider takes node i back (its attempts are preempted; it is paused), or lets it
      // take work again: waiting jobs' answers change with it.
      const int i = static_cast<int>(rng() % kNodes);
      const bool reclaim = rng() % 2 == 0;
      for (Side* side : {&grouped, &oracle}) {
        const std::string& node = side->nodes[static_cast<size_t>(i)];
        if (reclaim) {
          ASSERT_TRUE(side->core->ReclaimNode(node, {}, "maintenance").ok());
        } else {
          ASSERT_TRUE(side->core->ResumeNode(node).ok());
        }
      }
    } else {
      for (Side* side : {&grouped, &oracle}) {
        side->clock.Advance(5000);
        for (int i = 0; i < kNodes; ++i) {
          ASSERT_TRUE(side->core
                          ->AgentMessage(side->nodes[static_cast<size_t>(i)],
                                         side->links[static_cast<size_t>(i)].get(),
                                         Json{{"type", "heartbeat"}})
                          .ok());
        }
        side->core->Tick();
      }
    }
    const std::vector<std::string> got = grouped.Jobs(), want = oracle.Jobs();
    ASSERT_EQ(got.size(), want.size());
    for (size_t j = 0; j < got.size(); ++j) {
      ASSERT_EQ(got[j], want[j]) << "step " << step << ", job " << j;
    }
    int waiting = 0;
    for (const auto& j : got) waiting += j.rfind("queued", 0) == 0 ? 1 : 0;
    queued_deep = std::max(queued_deep, waiting);
  }
  // The run was deep and busy enough for grouped passes to leave jobs unread.
  EXPECT_GT(placed, 60);
  EXPECT_GT(queued_deep, 40);
}

}  // namespace
}  // namespace sluice::server
