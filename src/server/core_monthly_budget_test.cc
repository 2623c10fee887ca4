// Monthly budgets of accounts and teams (issue 15 item 1): alerts at 50, 80 and 100 % are
// raised once each, in the commit of the charge that crossed them, as job events and stored
// alerts; their webhook is POSTed (and a refused one recorded); at 100 % the scope's jobs stop
// safely and new ones wait, until the budget is raised; a new month queues them again.
#include <gtest/gtest.h>

#include <mutex>

#include "net/http_server.h"
#include "server/accounts.h"
#include "server/core_test_fixture.h"
#include "server/webhook.h"

namespace sluice::server {
namespace {

class MonthlyBudgetTest : public ServerCoreTest {
 protected:
  void SetUp() override {
    opt_.settle_interval_ms = 5'000;
    ServerCoreTest::SetUp();
    auto a = Accounts::Bootstrap(store_.get(), dir_.string(), &clock_);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    accounts_ = std::move(*a);
    core_->SetAccounts(accounts_.get());
    auto alice = accounts_->CreateAccount("alice", Role::kUser, "");
    ASSERT_TRUE(alice.ok());
    alice_ = alice->id;
    ASSERT_TRUE(core_->TopUp(alice_, 100'000'000, "test").ok());
    link_ = std::make_shared<RecordingLink>();
    proto::Hello h = CpuHello();
    h.price_per_cpu_hour = 0.9;  // 4 CPUs: $3.60/h, a tenth of a cent a second
    auto node = Hello(link_, h);
    ASSERT_TRUE(node.ok());
    node_ = *node;
  }
  void TearDown() override {
    core_.reset();
    accounts_.reset();
    ServerCoreTest::TearDown();
  }
  Result<store::JobRecord> Submit(const std::string& team = "") {
    spec::JobSpec s = Spec(4);
    s.lifecycle.grace_period_s = 5;
    SubmitOptions o;
    o.owner = alice_;
    o.team = team;
    return core_->SubmitJob(s, "", o);
  }
  std::string StartAttempt() { return StartLastAssigned(node_, *link_); }
  // The agent: heartbeats every 5 s; stops (saving a checkpoint) what it is told to preempt.
  void Live(int seconds) {
    for (int s = 1; s <= seconds; ++s) {
      AgentSecond(s, node_, *link_);
      for (const auto& m : link_->OfType("preempt")) {
        const std::string att = m.value("attempt_id", "");
        if (stopped_.insert(att).second) {
          proto::Exited ex{att, 143, 0, ""};
          ex.checkpoint = std::string(64, 'c');
          ASSERT_TRUE(core_->AgentMessage(node_, link_.get(), proto::ToJson(ex)).ok());
        }
      }
    }
  }
  std::string State(const std::string& job) {
    auto d = core_->GetJob(job);
    return d.ok() ? std::string(store::Name(d->job.state)) : "?";
  }
  std::vector<int> AlertPercents() {
    std::vector<int> out;
    auto alerts = core_->BudgetAlerts(false);
    EXPECT_TRUE(alerts.ok());
    if (alerts.ok()) {
      for (const auto& a : *alerts) out.push_back(a.percent);
    }
    return out;
  }
  std::unique_ptr<Accounts> accounts_;
  std::shared_ptr<RecordingLink> link_;
  std::string node_, alice_;
  std::set<std::string> stopped_;
};

TEST_F(MonthlyBudgetTest, AlertsAtFiftyEightyAndAHundredThenTheJobStopsUntilRaised) {
  // $0.10 a month: 100 s of this job.
  ASSERT_TRUE(core_->SetMonthlyBudget("account:" + alice_, 100'000, "").ok());
  auto job = Submit();
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  StartAttempt();
  Live(40);
  EXPECT_TRUE(AlertPercents().empty());
  Live(20);  // $0.060 settled
  EXPECT_EQ(AlertPercents(), std::vector<int>{50});
  // Stopped before it is spent: the reserve (5 s grace + 5 s margin) and 5 s ahead.
  Live(30);
  EXPECT_EQ(State(job->id), "budget-exhausted");
  auto d = core_->GetJob(job->id);
  ASSERT_TRUE(d.ok());
  EXPECT_NE(d->job.reason.find("monthly budget reached: account alice"), std::string::npos)
      << d->job.reason;
  int alert_events = 0;
  for (const auto& e : d->events) alert_events += e.type == "budget-alert";
  ASSERT_TRUE(core_->SettleMeters().ok());
  auto costs = core_->CostOfJob(job->id);
  ASSERT_TRUE(costs.ok());
  EXPECT_LE(costs->charged_micros, 100'000) << "the month's budget was not passed";
  // 80 % was crossed while it ran; 100 % is crossed only if the charges reach it, which the
  // stop prevents: the alerts are exactly those the spend crossed.
  std::vector<int> seen = AlertPercents();
  ASSERT_GE(seen.size(), 2u);
  EXPECT_EQ(seen[0], 50);
  EXPECT_EQ(seen[1], 80);
  EXPECT_EQ(alert_events, static_cast<int>(seen.size()));

  // Raising the budget queues it again, and it resumes from its checkpoint.
  ASSERT_TRUE(core_->SetMonthlyBudget("account:" + alice_, 1'000'000, "").ok());
  core_->Tick();
  EXPECT_EQ(State(job->id), "starting");
  EXPECT_EQ(link_->Last("assign", "checkpoint"), std::string(64, 'c'));
}

TEST_F(MonthlyBudgetTest, ASpentTeamBudgetHoldsNewJobsAndANewMonthReleasesThem) {
  ASSERT_TRUE(accounts_->AddTeamMember("ml", alice_).ok());
  ASSERT_TRUE(core_->SetMonthlyBudget("team:ml", 30'000, "").ok());  // $0.03
  auto first = Submit("ml");
  ASSERT_TRUE(first.ok());
  StartAttempt();
  Live(60);
  EXPECT_EQ(State(first->id), "budget-exhausted");
  // Reaching 100 % is what the stop prevents; a settled charge that reaches it refuses new work.
  ASSERT_TRUE(core_->SetMonthlyBudget("team:ml", 1, "").ok());
  auto refused = Submit("ml");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("monthly budget reached: team ml"), std::string::npos)
      << refused.status().message();
  auto solo = Submit();  // her own jobs are not the team's
  EXPECT_TRUE(solo.ok()) << solo.status().ToString();
  // Next month: the team's spend starts from zero and the stopped job is queued again.
  clock_.Advance(32LL * 24 * 3600 * 1000);
  core_->Tick();
  EXPECT_NE(State(first->id), "budget-exhausted");
}

// The webhook gets each alert as JSON, once; one that refuses is retried and its error recorded.
TEST_F(MonthlyBudgetTest, AlertsArePostedToTheWebhook) {
  std::mutex mu;
  std::vector<Json> got;
  HttpServerOptions o;
  HttpServer hook(
      o,
      [&](HttpRequest req, std::shared_ptr<ResponseWriter> w) {
        if (req.target == "/refuse") {
          w->Send(HttpResponse{503, "text/plain", "no", {}});
          return;
        }
        auto j = ParseJson(req.body);
        std::lock_guard<std::mutex> lock(mu);
        if (j.ok()) got.push_back(*j);
        w->Send(HttpResponse{204, "text/plain", "", {}});
      },
      nullptr);
  ASSERT_TRUE(hook.Start().ok());
  const std::string base = "http://" + hook.address();
  ASSERT_TRUE(core_->SetMonthlyBudget("account:" + alice_, 100'000, base + "/alerts").ok());
  auto job = Submit();
  ASSERT_TRUE(job.ok());
  StartAttempt();
  Live(60);
  WebhookSender sender(core_.get(), /*allow_private=*/true);
  sender.DeliverDue();
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].value("type", ""), "budget-alert");
    EXPECT_EQ(got[0].value("percent", 0), 50);
    EXPECT_EQ(got[0].value("budget", ""), "$0.10");
  }
  sender.DeliverDue();  // delivered alerts are not sent again
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(got.size(), 1u);
  }
  auto alerts = core_->BudgetAlerts(false);
  ASSERT_TRUE(alerts.ok());
  ASSERT_EQ(alerts->size(), 1u);
  EXPECT_GT((*alerts)[0].delivered_ms, 0);

  // A webhook that refuses: the try is recorded with the error, and not counted as delivered.
  ASSERT_TRUE(core_->SetMonthlyBudget("account:" + alice_, 100'000, base + "/refuse").ok());
  Live(20);  // 80 %
  sender.DeliverDue();
  auto after = core_->BudgetAlerts(true);
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ((*after)[0].percent, 80);
  EXPECT_EQ((*after)[0].attempts, 1);
  EXPECT_NE((*after)[0].last_error.find("503"), std::string::npos) << (*after)[0].last_error;
  // Without --allow-private-webhooks the sender refuses a loopback address outright.
  WebhookSender strict(core_.get(), /*allow_private=*/false);
  clock_.Advance(1);
  strict.DeliverDue();
  auto strict_after = core_->BudgetAlerts(true);
  ASSERT_TRUE(strict_after.ok());
  EXPECT_NE((*strict_after)[0].last_error.find("loopback"), std::string::npos)
      << (*strict_after)[0].last_error;
  hook.Stop();
}

TEST(WebhookUrl, PrivateAddressesAreRefusedUnlessAllowed) {
  for (const char* bad :
       {"http://127.0.0.1/", "http://169.254.169.254/", "http://10.0.0.1/", "http://172.16.5.4/",
        "http://192.168.1.1/", "http://[::1]/", "http://[fe80::1]/", "http://[::ffff:127.0.0.1]/",
        "http://localhost/", "http://0.0.0.0/", "http://100.64.0.1/"}) {
    EXPECT_FALSE(CheckWebhookUrl(bad, false, false).ok()) << bad;
    EXPECT_TRUE(CheckWebhookUrl(bad, true, false).ok()) << bad;
  }
  EXPECT_TRUE(CheckWebhookUrl("https://8.8.8.8/hook", false, false).ok());
  EXPECT_TRUE(CheckWebhookUrl("https://hooks.example.com/a", false, false).ok());
  EXPECT_FALSE(CheckWebhookUrl("ftp://example.com/", true, false).ok());
  EXPECT_FALSE(CheckWebhookUrl("not a url", true, false).ok());
}

}  // namespace
}  // namespace sluice::server
