// Money end to end (issue 14): a real server and agent on loopback bill a job per second at its
// locked price, pay the provider that less the platform's fee, keep the bill exact across a
// kill -9 of the server, and stop an account without credit from starting work.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <utility>

#include "common/json.h"
#include "harness.h"
#include "ledger/metering.h"

namespace sluice::testing {
namespace {

bool Contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

class BillingE2ETest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) std::cerr << "---- server log ----\n" << cluster_.ServerLog() << "\n";
  }
  // Submits `spec` detached and returns the job id.
  std::string Submit(const std::string& name, const std::string& run) {
    std::string spec = cluster_.WriteFile(
        name + ".yaml", "name: " + name + "\nresources: {cpus: 1}\nrun: " + run + "\n");
    CommandResult r = cluster_.Cli({"run", spec, "--detach"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string id = Trim(r.out);
    EXPECT_EQ(id.rfind("job-", 0), 0u) << r.out;
    return id;
  }
  Json Job(const std::string& id) { return cluster_.CliJson({"job", id}); }
  bool Finished(const std::string& id) {
    Json j = Job(id);
    return j.is_object() && j["job"].value("state", "") == "succeeded";
  }
  static std::string Trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }
  Cluster cluster_;
};

// The check: $36 per CPU-hour is $0.01 a second; a job of about 6 s is billed its
// seconds (6 s ± 1 s) and the provider earns that less the 5 % fee, to the micro-dollar.
TEST_F(BillingE2ETest, AJobIsBilledPerSecondAtItsLockedPrice) {
  cluster_.StartServer({"--platform-fee-percent", "5", "--settle-interval", "1"});
  cluster_.StartAgent("n1", {"--price-per-cpu-hour", "36"});
  const std::string id = Submit("six", "sleep 6");
  ASSERT_TRUE(WaitUntil([&] { return Finished(id); }, std::chrono::seconds(60))) << Job(id).dump();

  Json cost = cluster_.CliJson({"costs", "--job", id});
  ASSERT_TRUE(cost.is_object()) << cluster_.Cli({"costs", "--job", id}).err;
  const int64_t charged = cost.value("charged_micros", int64_t{0});
  EXPECT_GE(charged, 50'000) << cost.dump();
  EXPECT_LE(charged, 70'000) << cost.dump();
  EXPECT_EQ(cost.value("accruing_micros", int64_t{-1}), 0) << "a finished job accrues nothing";
  // The meter is the attempt, from the server's receipt of `started` to that of its exit.
  ASSERT_EQ(cost["meters"].size(), 1u) << cost.dump();
  const Json& m = cost["meters"][0];
  Json attempt = Job(id)["attempts"][0];
  EXPECT_EQ(m.value("start_ms", int64_t{0}), attempt.value("started_ms", int64_t{1}));
  EXPECT_EQ(m.value("end_ms", int64_t{0}), attempt.value("ended_ms", int64_t{1}));
  EXPECT_EQ(m.value("price_micros_per_hour", int64_t{0}), 36'000'000);
  EXPECT_EQ(charged, ledger::ChargeFor(36'000'000, m.value("end_ms", int64_t{0}) -
                                                       m.value("start_ms", int64_t{0})));

  // The provider's earnings: the same seconds less the fee.
  Json earnings = cluster_.CliJson({"earnings", "--provider", "provider"});
  ASSERT_TRUE(earnings.is_object());
  const Json& total = earnings["total"];
  EXPECT_EQ(total.value("charged_micros", int64_t{0}), charged);
  EXPECT_EQ(total.value("fee_micros", int64_t{0}), ledger::FeeFor(charged, 500));
  EXPECT_EQ(total.value("earnings_micros", int64_t{0}), charged - ledger::FeeFor(charged, 500));

  // What people read: the job's bill beside its estimate, and a ledger that adds up.
  CommandResult shown = cluster_.Cli({"job", id});
  EXPECT_TRUE(Contains(shown.out, "cost:")) << shown.out;
  CommandResult check = cluster_.Cli({"ledger", "check"});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  EXPECT_TRUE(Contains(check.out, "ok: every transaction sums to zero")) << check.out;
  CommandResult by_day = cluster_.Cli({"costs", "--by", "resource", "--csv"});
  ASSERT_EQ(by_day.exit_code, 0) << by_day.err;
  EXPECT_TRUE(Contains(by_day.out, "RESOURCE,charged_usd")) << by_day.out;
  EXPECT_TRUE(Contains(by_day.out, "\ncpu,")) << by_day.out;
}

// kill -9 of the server while a job is being metered: after the restart the bill is exactly the
// seconds between the server's receipt of `started` and of the exit, none lost, none doubled.
TEST_F(BillingE2ETest, AServerKilledWhileMeteringBillsEverySecondOnce) {
  cluster_.StartServer({"--settle-interval", "1"});
  cluster_.StartAgent("n1", {"--price-per-cpu-hour", "36"});
  const std::string id = Submit("long", "sleep 8");
  // Running, and billed at least once, when the server dies.
  ASSERT_TRUE(WaitUntil(
      [&] {
        Json c = cluster_.CliJson({"costs", "--job", id});
        return c.is_object() && c.value("charged_micros", int64_t{0}) > 0;
      },
      std::chrono::seconds(30)));
  cluster_.KillServer(SIGKILL);
  cluster_.StartServer({"--settle-interval", "1"});
  ASSERT_TRUE(WaitUntil([&] { return Finished(id); }, std::chrono::seconds(60))) << Job(id).dump();
  Json attempt = Job(id)["attempts"][0];
  const int64_t seconds_ms =
      attempt.value("ended_ms", int64_t{0}) - attempt.value("started_ms", int64_t{0});
  Json cost = cluster_.CliJson({"costs", "--job", id});
  EXPECT_EQ(cost.value("charged_micros", int64_t{0}), ledger::ChargeFor(36'000'000, seconds_ms))
      << cost.dump();
  EXPECT_EQ(cluster_.Cli({"ledger", "check"}).exit_code, 0);
}

// A new user starts prepaid (credit limit 0): refused until an admin adds credit, then billed.
TEST_F(BillingE2ETest, AnAccountWithoutCreditStartsNothing) {
  cluster_.StartServer();
  cluster_.StartAgent("n1", {"--price-per-cpu-hour", "36"});
  const std::string alice = cluster_.dir() + "/alice.token";
  ASSERT_EQ(cluster_.Cli({"account", "create", "alice", "--out", alice}).exit_code, 0);
  auto as_alice = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {SluiceBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, {{"SLUICE_SERVER", cluster_.url()}, {"SLUICE_TOKEN_FILE", alice}});
  };
  std::string spec = cluster_.WriteFile("a.yaml", "name: a\nresources: {cpus: 1}\nrun: sleep 2\n");
  CommandResult refused = as_alice({"run", spec, "--detach"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_TRUE(Contains(refused.err, "no credit left")) << refused.err;
  EXPECT_TRUE(Contains(refused.err, "sluice account credit alice")) << refused.err;
  // Only an admin adds credit, and a bad amount is named.
  CommandResult self_service = as_alice({"account", "credit", "alice", "100"});
  EXPECT_NE(self_service.exit_code, 0);
  CommandResult typo = cluster_.Cli({"account", "credit", "alice", "1O"});
  EXPECT_NE(typo.exit_code, 0);
  EXPECT_TRUE(Contains(typo.err, "AMOUNT")) << typo.err;

  ASSERT_EQ(cluster_.Cli({"account", "credit", "alice", "1.50"}).exit_code, 0);
  CommandResult balance = as_alice({"account", "balance"});
  EXPECT_TRUE(Contains(balance.out, "balance $1.50")) << balance.out;
  CommandResult run = as_alice({"run", spec, "--detach"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string id = Trim(run.out);
  ASSERT_TRUE(WaitUntil([&] { return Finished(id); }, std::chrono::seconds(60)));
  Json cost = cluster_.CliJson({"costs", "--job", id});
  const int64_t charged = cost.value("charged_micros", int64_t{0});
  EXPECT_GT(charged, 0);
  auto after_r = ParseJson(as_alice({"account", "balance", "--json"}).out);
  ASSERT_TRUE(after_r.ok());
  const Json after = *after_r;
  EXPECT_EQ(after.value("balance_micros", int64_t{0}), 1'500'000 - charged) << after.dump();
  // Alice sees her own costs, never another account's.
  EXPECT_EQ(as_alice({"costs"}).exit_code, 0);
  EXPECT_NE(as_alice({"costs", "--account", "admin"}).exit_code, 0);
  EXPECT_NE(as_alice({"ledger", "check"}).exit_code, 0);
  CommandResult earnings = as_alice({"earnings"});
  EXPECT_EQ(earnings.exit_code, 2);
  EXPECT_TRUE(Contains(earnings.err, "sluice costs")) << earnings.err;
}

// The counting job the money tests run: it resumes from $SLUICE_CHECKPOINT_DIR/n, says where it
// started from, and on SIGTERM saves its count and says so.
std::string CountingJob(const std::string& name, const std::string& head) {
  return "name: " + name + "\n" + head +
         "run: |\n"
         "  n=$(cat \"$SLUICE_CHECKPOINT_DIR/n\" 2>/dev/null || echo 0)\n"
         "  echo \"attempt=$SLUICE_ATTEMPT resumed=${SLUICE_RESUMED:-0} from=$n\"\n"
         "  trap 'echo $n > \"$SLUICE_CHECKPOINT_DIR/n\"; echo \"saved $n\"; exit 143' TERM\n"
         "  while [ $n -lt 100000 ]; do n=$((n+1)); sleep 0.05; done\n";
}

// The check: a job with max_total_cost is stopped by its budget through SIGTERM with its
// checkpoint saved, its bill never exceeds the budget, and it resumes from the checkpoint when
// the budget is raised.
TEST_F(BillingE2ETest, ABudgetStopsTheJobSafelyAndARaiseResumesIt) {
  cluster_.StartServer({"--settle-interval", "1"});
  cluster_.StartAgent("n1", {"--price-per-cpu-hour", "36"});  // a cent a second
  // $0.20: 3.6 s expected and a safe stop (2 s grace + 5 s margin) fit; it runs about 8 s.
  std::string spec = cluster_.WriteFile(
      "budget.yaml",
      CountingJob("budget",
                  "resources: {cpus: 1}\nmax_total_cost: 0.20\nexpected_hours: 0.001\n"
                  "lifecycle: {grace_period: 2s, checkpoint_interval: 1s}\n"));
  CommandResult r = cluster_.Cli({"run", spec, "--detach"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string id = Trim(r.out);
  auto state = [&] { return Job(id)["job"].value("state", ""); };
  ASSERT_TRUE(WaitUntil([&] { return state() == "budget-exhausted"; }, std::chrono::seconds(60)))
      << Job(id).dump();
  Json job = Job(id);
  EXPECT_TRUE(Contains(job["job"].value("reason", ""), "max_total_cost reached")) << job.dump();
  EXPECT_FALSE(job["job"].value("checkpoint", "").empty()) << "the stop saved a checkpoint";
  ASSERT_EQ(job["attempts"].size(), 1u);
  EXPECT_EQ(job["attempts"][0].value("state", ""), "preempted");
  EXPECT_TRUE(Contains(cluster_.Cli({"logs", id}).out, "saved ")) << "it was sent SIGTERM";
  Json cost = cluster_.CliJson({"costs", "--job", id});
  const int64_t charged = cost.value("charged_micros", int64_t{-1});
  EXPECT_GT(charged, 50'000) << cost.dump();
  EXPECT_LE(charged, 200'000) << "the bill never exceeds the budget: " << cost.dump();
  CommandResult shown = cluster_.Cli({"job", id});
  EXPECT_TRUE(Contains(shown.out, "budget:    $0.20")) << shown.out;

  // A raise resumes it from its checkpoint.
  CommandResult raised = cluster_.Cli({"budget", id, "1"});
  ASSERT_EQ(raised.exit_code, 0) << raised.err;
  EXPECT_TRUE(Contains(raised.out, "max_total_cost $1.00")) << raised.out;
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Contains(cluster_.Cli({"logs", id}).out, "attempt=2");
      },
      std::chrono::seconds(60)))
      << Job(id).dump();
  const std::string logs = cluster_.Cli({"logs", id}).out;
  const size_t at = logs.find("attempt=2 resumed=1 from=");
  ASSERT_NE(at, std::string::npos) << logs;
  EXPECT_GT(std::atoi(logs.c_str() + at + 25), 0) << logs;
  EXPECT_EQ(cluster_.Cli({"cancel", id}).exit_code, 0);
  EXPECT_EQ(cluster_.Cli({"budget", id, "lots"}).exit_code, 1);
  EXPECT_EQ(cluster_.Cli({"ledger", "check"}).exit_code, 0);
}

// The check: two interruptible jobs bid for one node. The higher bid runs, the lower is
// preempted and resumes when capacity frees; each pays its bid (the published rule).
TEST_F(BillingE2ETest, TheHigherBidWinsAndEachPaysItsBid) {
  cluster_.StartServer({"--settle-interval", "1", "--preempt-cooldown", "1"});
  cluster_.StartAgent("n1",
                      {"--price-per-cpu-hour", "36", "--interruptible-price-per-cpu-hour", "3.6"});
  Json nodes = cluster_.CliJson({"nodes"});
  ASSERT_EQ(nodes.size(), 1u);
  const int cpus = nodes[0]["inventory"].value("cpu_cores", 1);
  const double ask = 3.6 * cpus;  // the node's interruptible price for all its CPUs
  const double low_bid = 2 * ask, high_bid = 4 * ask;
  auto bid_spec = [&](const std::string& name, double bid, const std::string& run) {
    char head[256];
    std::snprintf(head, sizeof head,
                  "resources: {cpus: %d}\nlifecycle: {capacity: interruptible, grace_period: 5s, "
                  "checkpoint_interval: 1s, max_bid_per_hour: %.2f}\n",
                  cpus, bid);
    return cluster_.WriteFile(name + ".yaml",
                              run.empty() ? CountingJob(name, head)
                                          : "name: " + name + "\n" + head + "run: " + run + "\n");
  };
  CommandResult lr = cluster_.Cli({"run", bid_spec("low", low_bid, ""), "--detach"});
  ASSERT_EQ(lr.exit_code, 0) << lr.err;
  const std::string low = Trim(lr.out);
  ASSERT_TRUE(WaitUntil([&] { return Contains(cluster_.Cli({"logs", low}).out, "attempt=1"); }));

  CommandResult hr = cluster_.Cli({"run", bid_spec("high", high_bid, "sleep 3"), "--detach"});
  ASSERT_EQ(hr.exit_code, 0) << hr.err;
  const std::string high = Trim(hr.out);
  ASSERT_TRUE(WaitUntil([&] { return Finished(high); }, std::chrono::seconds(60)))
      << Job(high).dump();
  Json la = Job(low)["attempts"];
  ASSERT_GE(la.size(), 1u);
  EXPECT_EQ(la[0].value("state", ""), "preempted");
  EXPECT_TRUE(Contains(la[0].value("cause", ""), "outbid by job " + high)) << la[0];
  // The lower bid resumes from its checkpoint once the node is free.
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Contains(cluster_.Cli({"logs", low}).out, "attempt=2");
      },
      std::chrono::seconds(60)))
      << Job(low).dump();
  const std::string logs = cluster_.Cli({"logs", low}).out;
  const size_t at = logs.find("attempt=2 resumed=1 from=");
  ASSERT_NE(at, std::string::npos) << logs;
  EXPECT_GT(std::atoi(logs.c_str() + at + 25), 0) << logs;

  // Each pays its bid: the locked price of every attempt, and the meters bill it per second.
  for (const auto& [id, bid] : {std::pair{low, low_bid}, std::pair{high, high_bid}}) {
    Json job = Job(id);
    const int64_t bid_micros = std::llround(bid * 100) * 10'000;  // as the spec rounds it
    for (const auto& a : job["attempts"]) {
      EXPECT_NEAR(a.value("price_per_hour", 0.0), bid, 1e-6) << id << " " << a.dump();
    }
    Json cost = cluster_.CliJson({"costs", "--job", id});
    for (const auto& m : cost["meters"]) {
      EXPECT_EQ(m.value("price_micros_per_hour", int64_t{0}), bid_micros) << m.dump();
      if (m.value("end_ms", int64_t{0}) > 0) {
        EXPECT_EQ(m.value("charged_micros", int64_t{-1}),
                  ledger::ChargeFor(
                      bid_micros, m.value("end_ms", int64_t{0}) - m.value("start_ms", int64_t{0})))
            << m.dump();
      }
    }
  }
  EXPECT_EQ(cluster_.Cli({"cancel", low}).exit_code, 0);
  EXPECT_EQ(cluster_.Cli({"ledger", "check"}).exit_code, 0);
}

}  // namespace
}  // namespace sluice::testing
