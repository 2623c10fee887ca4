// Metering and the ledger (issue 14 items 1 and 2; docs/design-notes.md "Metering and the
// ledger"), tested as a property: random job histories (placements, starts, exits, preemptions,
// nodes going silent and lost, nodes coming back, settlements and server crashes) run against the
// core with a fake clock, while an oracle written here computes every account's bill from the
// history alone, by the published rules (README "Bills and earnings"):
//
//   * an attempt is charged from the server's receipt of `started` to the earliest of its end
//     (as the server received it) and its node's last lease renewal plus the lease;
//   * at its locked price, rounded down to the micro-dollar per attempt; the fee
//     (FeeFor of that charge) goes to the platform, the rest to the node's provider;
//   * a server restart forgets renewals it had not settled: a node that never speaks to the
//     restarted server is charged up to the last settlement before the crash;
//   * a job's charges never pass its max_total_cost: an attempt is billed no further than the
//     budget its job's earlier attempts left (issue 15 item 1);
//   * SLA credits (issue 15 item 3): an attempt that never started is charged nothing; an
//     attempt lost with its node is credited what its time after its last saved checkpoint was
//     charged, FeeFor(credit) from the platform and the rest from the provider.
//
// The ledger must equal the oracle to the micro-dollar, every transaction must balance, and
// every history must contain charges (so an empty ledger cannot pass).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "common/crypto.h"
#include "ledger/metering.h"
#include "server/server_core.h"
#include "server/test_agent_link.h"
#include "server/test_failing_store.h"
#include "server/test_reports.h"
#include "store/blob_store.h"

namespace sluice::server {
namespace {

using testing::RecordingLink;

constexpr int kFeeBps = 500;
constexpr int64_t kLeaseMs = 6'000;

// One history: the core under test, the fake agents that drive it, and what the oracle saw.
class History {
 public:
  History(const std::filesystem::path& dir, uint64_t seed) : dir_(dir), rng_(seed) {
    opt_.heartbeat_grace_ms = 10'000;
    opt_.lease_ms = kLeaseMs;
    opt_.platform_fee_bps = kFeeBps;
    opt_.settle_interval_ms = 0;  // settlements are events of the history, chosen below
    opt_.reconnect_window_ms = 20'000;
    auto s = store::OpenSqliteStore((dir_ / "sluice.db").string());
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    Start();
  }

  // --- the events -------------------------------------------------------------------------
  void Step() {
    clock_.Advance(std::uniform_int_distribution<int64_t>(200, 2500)(rng_));
    const int pick = std::uniform_int_distribution<int>(0, 99)(rng_);
    if (pick < 14) {
      Submit();
    } else if (pick < 18) {
      CheckpointOne();
    } else if (pick < 24) {
      ExitOne();
    } else if (pick < 27) {
      KillOne();
    } else if (pick < 31) {
      ReviveOne();
    } else if (pick < 37) {
      Settle();
    } else if (pick < 39) {
      Crash();
    }
    Heartbeats();
    core_->Tick();
    Agents();
  }

  // Ends the history: every node alive, every job finished, everything settled.
  void Finish() {
    for (int round = 0; round < 200 && !Idle(); ++round) {
      // What no budget left room for will never run: cancelled, so the history can end.
      auto queued = core_->ListJobs(store::JobState::kQueued, 100000);
      ASSERT_TRUE(queued.ok()) << queued.status().ToString();
      for (const auto& j : *queued) {
        if (j.reason.find("max_total_cost") != std::string::npos) {
          ASSERT_TRUE(core_->CancelJob(j.id).ok());
        }
      }
      for (auto& [node, n] : nodes_) {
        if (!n.alive && NodeLost(node)) Revive(node);
      }
      for (auto& [node, n] : nodes_) {
        if (!n.alive) continue;  // a dead machine says nothing; the server will lose it
        for (const auto& att : std::set<std::string>(n.running)) Exit(node, att, 0);
      }
      clock_.Advance(1'000);
      Heartbeats();
      core_->Tick();
      Agents();
    }
    ASSERT_TRUE(Idle()) << "the history did not wind down";
    Settle();
  }

  // Every budgeted job's charges (compute and transfer) are within its budget.
  int BudgetedJobsWithinBudget() {
    int checked = 0;
    for (const auto& [job, budget] : budgets_) {
      auto cost = core_->CostOfJob(job);
      EXPECT_TRUE(cost.ok());
      if (!cost.ok()) continue;
      EXPECT_LE(cost->charged_micros - cost->storage_micros, budget) << job;
      checked += cost->charged_micros > 0;
    }
    return checked;
  }

  // --- the oracle ---------------------------------------------------------------------------
  struct Bill {
    std::map<std::string, int64_t> balances;  // account -> micro-dollars
    int64_t charged = 0;
    int64_t credited = 0;
    int attempts = 0;
    int never_started = 0;
  };
  Bill Oracle() {
    Bill bill;
    std::map<std::string, int64_t> spent;  // job -> charged so far, attempts in start order
    std::vector<std::pair<int64_t, std::string>> order;
    for (const auto& [id, a] : started_) order.emplace_back(a.started_ms, id);
    std::sort(order.begin(), order.end());
    for (const auto& [at, id] : order) {
      const Started& a = started_.at(id);
      auto rec = AttemptRecordOf(a.job, id);
      EXPECT_TRUE(rec.has_value()) << id;
      if (!rec) continue;
      EXPECT_TRUE(store::IsTerminal(rec->state)) << id;
      // The end as the server received it: our own exit, or the server's (node lost, ...).
      const int64_t received = a.exited_ms > 0 ? a.exited_ms : rec->ended_ms;
      int64_t end = BilledEnd(a, received);
      const int64_t price = ledger::PricePerHourMicros(rec->price_per_hour);
      if (auto budget = budgets_.find(a.job); budget != budgets_.end() && price > 0) {
        const int64_t room = std::max<int64_t>(0, budget->second - spent[a.job]);
        end = std::min(end, a.started_ms + room * 3'600'000 / price);
      }
      const int64_t charge = ledger::ChargeFor(price, end - a.started_ms);
      spent[a.job] += charge;
      const int64_t fee = ledger::FeeFor(charge, kFeeBps);
      bill.balances[a.owner] -= charge;
      bill.balances[a.provider] += charge - fee;
      bill.balances[ledger::kPlatformAccount] += fee;
      bill.charged += charge;
      ++bill.attempts;
      if (rec->state == store::AttemptState::kLost) {
        // Credited: what the time after its last checkpoint (saved before its end) was charged.
        int64_t saved = a.started_ms;
        for (int64_t c : a.checkpoints) {
          if (c <= rec->ended_ms) saved = std::max(saved, std::min(c, end));
        }
        const int64_t credit = charge - ledger::ChargeFor(price, saved - a.started_ms);
        const int64_t back = ledger::FeeFor(credit, kFeeBps);
        bill.balances[a.owner] += credit;
        bill.balances[a.provider] -= credit - back;
        bill.balances[ledger::kPlatformAccount] -= back;
        bill.credited += credit;
      }
    }
    // Attempts that never started were never charged: no meter, no transaction.
    for (const auto& [id, job] : assigned_) {
      if (started_.count(id)) continue;
      auto cost = core_->CostOfJob(job);
      EXPECT_TRUE(cost.ok());
      if (!cost.ok()) continue;
      for (const auto& m : cost->meters) EXPECT_NE(m.attempt_id, id) << "never started";
      ++bill.never_started;
    }
    for (auto it = bill.balances.begin(); it != bill.balances.end();) {
      it = it->second == 0 ? bill.balances.erase(it) : std::next(it);
    }
    return bill;
  }
  std::map<std::string, int64_t> LedgerBalances() {
    std::map<std::string, int64_t> out;
    auto check = core_->CheckLedger();
    EXPECT_TRUE(check.ok());
    if (!check.ok()) return out;
    EXPECT_TRUE(check->problems.empty()) << ::testing::PrintToString(check->problems);
    for (const auto& [account, b] : check->check.balances) {
      if (b != 0) out[account] = b;
      EXPECT_EQ(core_->BalanceOf(account), b) << account;
    }
    return out;
  }
  int crashes = 0, losses = 0, preemptions = 0, checkpoints = 0;

 private:
  struct NodeAgent {
    std::string provider;
    double price = 0, interruptible_price = 0;
    std::shared_ptr<RecordingLink> link;
    size_t seen = 0;  // messages of link handled
    bool alive = true;
    std::set<std::string> held;     // attempts assigned here and not ended, as the agent knows
    std::set<std::string> running;  // of which started
  };
  struct Started {
    std::string job, node, owner, provider;
    int64_t started_ms = 0;
    int64_t exited_ms = 0;               // when we reported its exit; 0: the server ended it
    std::vector<int64_t> checkpoints{};  // when the server received each checkpoint it saved
  };
  // Renewals (heartbeat replies, hellos), settlements and crashes, in order.
  struct Event {
    enum Kind { kRenew, kSettle, kCrash } kind;
    int64_t ms;
    std::string node;  // kRenew
  };

  void Start() {
    core_ = std::make_unique<ServerCore>(store_.get(), &clock_, opt_);
    ASSERT_TRUE(core_->Load().ok());
  }

  proto::Hello HelloFor(const std::string& name, const NodeAgent& n) const {
    proto::Hello h = testing::CpuHello(name);
    h.price_per_cpu_hour = n.price;
    h.interruptible_price_per_cpu_hour = n.interruptible_price;
    return h;
  }

 public:
  void AddNode(const std::string& name, const std::string& provider, double price,
               double interruptible_price) {
    NodeAgent n;
    n.provider = provider;
    n.price = price;
    n.interruptible_price = interruptible_price;
    n.link = std::make_shared<RecordingLink>();
    proto::Hello h = HelloFor(name, n);
    auto node = core_->AgentHello(n.link, h, AgentIdentity{provider, "join-" + provider, ""});
    ASSERT_TRUE(node.ok()) << node.status().ToString();
    events_.push_back({Event::kRenew, clock_.NowMillis(), *node});
    ASSERT_TRUE(core_
                    ->AgentMessage(*node, n.link.get(),
                                   Json{{"type", "conformance"},
                                        {"report", ToJson(testing::PassingReport(h.inventory))},
                                        {"nonce", n.link->Nonce()}})
                    .ok());
    names_[*node] = name;
    nodes_[*node] = std::move(n);
  }

 private:
  void Submit() {
    spec::JobSpec s;
    s.name = "t";
    s.run = "train";
    s.resources.cpus = 4;
    s.resources.memory_gb = 1;
    s.lifecycle.max_restarts = 1000;
    if (std::uniform_int_distribution<int>(0, 2)(rng_) == 0) {
      s.lifecycle.capacity = spec::Capacity::kInterruptible;
    }
    // A third of the jobs have a budget: from a few seconds' to a few minutes' worth.
    const bool budgeted = std::uniform_int_distribution<int>(0, 2)(rng_) == 0;
    if (budgeted) {
      s.max_total_cost = std::uniform_int_distribution<int>(5, 300)(rng_) / 100.0;
      s.expected_hours = 0.001;
      s.lifecycle.grace_period_s = std::uniform_int_distribution<int>(0, 5)(rng_);
    }
    SubmitOptions o;
    o.owner = std::uniform_int_distribution<int>(0, 1)(rng_) ? "user-a" : "user-b";
    o.queue_unschedulable = true;
    auto job = core_->SubmitJob(s, "", o);
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    owners_[job->id] = o.owner;
    if (s.max_total_cost) budgets_[job->id] = ledger::PricePerHourMicros(*s.max_total_cost);
  }
  // A random running attempt on a live machine, as (node, attempt); none when nothing runs.
  std::optional<std::pair<std::string, std::string>> PickRunning() {
    std::vector<std::pair<std::string, std::string>> all;
    for (const auto& [node, n] : nodes_) {
      if (!n.alive) continue;
      for (const auto& a : n.running) all.emplace_back(node, a);
    }
    if (all.empty()) return std::nullopt;
    return all[std::uniform_int_distribution<size_t>(0, all.size() - 1)(rng_)];
  }
  // A running attempt saves a checkpoint (stored and complete, as agents send them).
  void CheckpointOne() {
    auto picked = PickRunning();
    if (!picked) return;
    auto [node, att] = *picked;
    const std::string manifest = Sha256Hex(att + std::to_string(clock_.NowMillis()));
    ASSERT_TRUE(core_
                    ->AgentMessage(
                        node, nodes_.at(node).link.get(),
                        Json{{"type", "checkpoint"}, {"attempt_id", att}, {"manifest", manifest}})
                    .ok());
    started_.at(att).checkpoints.push_back(clock_.NowMillis());
    ++checkpoints;
  }
  void Exit(const std::string& node, const std::string& att, int code) {
    NodeAgent& n = nodes_.at(node);
    Status s =
        core_->AgentMessage(node, n.link.get(), proto::ToJson(proto::Exited{att, code, 0, ""}));
    ASSERT_TRUE(s.ok()) << s.ToString();
    if (n.running.count(att)) started_.at(att).exited_ms = clock_.NowMillis();
    n.running.erase(att);
    n.held.erase(att);
  }
  void ExitOne() {
    auto picked = PickRunning();
    if (!picked) return;
    auto [node, att] = *picked;
    Exit(node, att, std::uniform_int_distribution<int>(0, 3)(rng_) == 0 ? 1 : 0);
  }
  // The machine dies: its agent says nothing more; its processes are gone.
  void KillOne() {
    std::vector<std::string> alive;
    for (const auto& [node, n] : nodes_) {
      if (n.alive) alive.push_back(node);
    }
    if (alive.size() <= 1) return;
    const std::string node =
        alive[std::uniform_int_distribution<size_t>(0, alive.size() - 1)(rng_)];
    nodes_.at(node).alive = false;
  }
  bool NodeLost(const std::string& node) {
    for (const auto& v : core_->ListNodes()) {
      if (v.node.id == node) return v.node.state == store::NodeState::kLost;
    }
    return false;
  }
  // A dead machine comes back empty, once the server has declared it lost.
  void Revive(const std::string& node) {
    NodeAgent& n = nodes_.at(node);
    n.link = std::make_shared<RecordingLink>();
    n.seen = 0;
    n.held.clear();
    n.running.clear();
    n.alive = true;
    proto::Hello h = HelloFor(names_.at(node), n);
    h.node_id = node;
    auto id = core_->AgentHello(n.link, h, AgentIdentity{n.provider, "join-" + n.provider, ""});
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    events_.push_back({Event::kRenew, clock_.NowMillis(), node});
    ++losses;
  }
  void ReviveOne() {
    for (const auto& [node, n] : nodes_) {
      if (!n.alive && NodeLost(node)) return Revive(node);
    }
  }
  void Settle() {
    ASSERT_TRUE(core_->SettleMeters().ok());
    events_.push_back({Event::kSettle, clock_.NowMillis(), ""});
  }
  // kill -9 of the server: memory is gone, the store stays. Live agents reconnect at once and
  // say what they hold; dead ones stay silent.
  void Crash() {
    core_.reset();
    events_.push_back({Event::kCrash, clock_.NowMillis(), ""});
    Start();
    ++crashes;
    for (auto& [node, n] : nodes_) {
      if (!n.alive) continue;
      n.link = std::make_shared<RecordingLink>();
      n.seen = 0;
      proto::Hello h = HelloFor(names_.at(node), n);
      h.node_id = node;
      for (const auto& a : n.held) h.attempts.push_back({a, true, std::nullopt, 0, "", false});
      auto id = core_->AgentHello(n.link, h, AgentIdentity{n.provider, "join-" + n.provider, ""});
      ASSERT_TRUE(id.ok()) << id.status().ToString();
      events_.push_back({Event::kRenew, clock_.NowMillis(), node});
    }
  }
  void Heartbeats() {
    for (auto& [node, n] : nodes_) {
      if (!n.alive) continue;
      ASSERT_TRUE(core_->AgentMessage(node, n.link.get(), Json{{"type", "heartbeat"}}).ok());
      events_.push_back({Event::kRenew, clock_.NowMillis(), node});
    }
  }
  // Each live agent answers what the server sent it: starts what it was assigned, stops what it
  // is told to preempt, cancel or kill.
  void Agents() {
    for (auto& [node, n] : nodes_) {
      if (!n.alive) continue;
      std::vector<Json> fresh;
      {
        std::lock_guard<std::mutex> lock(n.link->mu);
        fresh.assign(n.link->sent.begin() + static_cast<long>(n.seen), n.link->sent.end());
        n.seen = n.link->sent.size();
      }
      for (const Json& m : fresh) {
        const std::string type = m.value("type", "");
        const std::string att = m.value("attempt_id", "");
        if (type == "assign") {
          assigned_[att] = m.value("job_id", "");
          if (std::uniform_int_distribution<int>(0, 19)(rng_) == 0) {
            // It could not start (its workdir would not unpack, say): never started, never billed.
            ASSERT_TRUE(core_
                            ->AgentMessage(node, n.link.get(),
                                           proto::ToJson(proto::Exited{att, 0, 0, "cannot start"}))
                            .ok());
            continue;
          }
          n.held.insert(att);
          ASSERT_TRUE(
              core_
                  ->AgentMessage(node, n.link.get(), Json{{"type", "started"}, {"attempt_id", att}})
                  .ok());
          n.running.insert(att);
          const std::string job = m.value("job_id", "");
          started_[att] = {job, node, owners_.at(job), n.provider, clock_.NowMillis(), 0};
        } else if ((type == "preempt" || type == "cancel") && n.held.count(att)) {
          preemptions += type == "preempt";
          Exit(node, att, 143);
        } else if (type == "kill") {
          n.held.erase(att);  // not ours here any more: killed without a word
          n.running.erase(att);
        }
      }
    }
  }
  bool Idle() {
    auto jobs = core_->ListJobs(std::nullopt, 100000);
    EXPECT_TRUE(jobs.ok()) << jobs.status().ToString();
    for (const auto& j : jobs.ok() ? *jobs : std::vector<store::JobRecord>{}) {
      // A job its budget stopped waits for a raise that never comes here: it is done.
      if (j.state == store::JobState::kBudgetExhausted) continue;
      if (!store::IsTerminal(j.state) && j.state != store::JobState::kQueued) return false;
      if (j.state == store::JobState::kQueued) return false;
    }
    return true;
  }
  std::optional<store::AttemptRecord> AttemptRecordOf(const std::string& job,
                                                      const std::string& id) {
    auto atts = store_->AttemptsForJob(job);
    if (!atts.ok()) return std::nullopt;
    for (const auto& a : *atts) {
      if (a.id == id) return a;
    }
    return std::nullopt;
  }

  // The rule, applied to the history: settlements advance what is billed up to the node's lease
  // end as the server knows it; a crash forgets renewals; the end is capped by the lease.
  int64_t BilledEnd(const Started& a, int64_t received) const {
    int64_t settled = a.started_ms;
    std::optional<int64_t> renewed;  // the last renewal the (current) server knows
    for (const Event& e : events_) {
      if (e.ms > received) break;
      if (e.kind == Event::kRenew && e.node == a.node) renewed = e.ms;
      if (e.kind == Event::kCrash) renewed.reset();
      if (e.kind == Event::kSettle && e.ms > a.started_ms) {
        const int64_t bound = renewed ? *renewed + kLeaseMs : settled;
        settled = std::max(settled, std::min(e.ms, bound));
      }
    }
    // Renewals at the very moment of the end were made after it (the end is handled first).
    std::optional<int64_t> before;
    bool crashed_since = false;
    for (const Event& e : events_) {
      if (e.ms >= received) break;
      if (e.kind == Event::kRenew && e.node == a.node) {
        before = e.ms;
        crashed_since = false;
      }
      if (e.kind == Event::kCrash) crashed_since = true;
    }
    const int64_t cap = before && !crashed_since ? *before + kLeaseMs : settled;
    return std::max(settled, std::min(received, cap));
  }

  std::filesystem::path dir_;
  std::mt19937_64 rng_;
  FakeClock clock_;
  CoreOptions opt_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<ServerCore> core_;
  std::map<std::string, NodeAgent> nodes_;
  std::map<std::string, std::string> names_;
  std::map<std::string, std::string> owners_;    // job -> account
  std::map<std::string, Started> started_;       // attempt -> what the oracle saw
  std::map<std::string, std::string> assigned_;  // every attempt assigned -> its job
  std::map<std::string, int64_t> budgets_;       // job -> max_total_cost, micro-dollars
  std::vector<Event> events_;
};

TEST(CoreBilling, TheLedgerEqualsTheOracleInRandomHistories) {
  int crashes = 0, losses = 0, preemptions = 0, checkpoints = 0, never_started = 0;
  int budgeted = 0;
  int64_t credited = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto dir = std::filesystem::temp_directory_path() / ("sluice-billing-" + RandomHex(6));
    std::filesystem::create_directories(dir);
    {
      History h(dir, seed);
      h.AddNode("n0", "prov-1", 36.0, 12.0);  // $0.01 per second
      h.AddNode("n1", "prov-1", 18.0, 6.0);
      h.AddNode("n2", "prov-2", 7.2, 3.6);
      for (int i = 0; i < 300 && !::testing::Test::HasFatalFailure(); ++i) h.Step();
      h.Finish();
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
      History::Bill bill = h.Oracle();
      EXPECT_GT(bill.charged, 0) << "a history without charges proves nothing";
      EXPECT_GT(bill.attempts, 0);
      EXPECT_EQ(h.LedgerBalances(), bill.balances);
      budgeted += h.BudgetedJobsWithinBudget();
      credited += bill.credited;
      never_started += bill.never_started;
      checkpoints += h.checkpoints;
      crashes += h.crashes;
      losses += h.losses;
      preemptions += h.preemptions;
    }
    std::filesystem::remove_all(dir);
  }
  // The histories exercised what the rules are about.
  EXPECT_GT(crashes, 0);
  EXPECT_GT(losses, 0);
  EXPECT_GT(preemptions, 0);
  EXPECT_GT(checkpoints, 0);
  EXPECT_GT(never_started, 0);
  EXPECT_GT(budgeted, 0);
  EXPECT_GT(credited, 0) << "no attempt was lost with its node: the SLA rule went untested";
}

}  // namespace
}  // namespace sluice::server
