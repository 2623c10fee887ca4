// The isolation matrix (issue 10): every route of the API's own table × {owner, other user, same
// team, provider of the node, provider of another node, revoked token, expired token, read-only
// token}, each answered with the expected status by a real HTTP server on loopback; a route
// missing from the matrix fails the test, and no response to anyone but the owner and the team
// ever contains the owner's env values.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <memory>

#include "server/api_test_world.h"

namespace sluice::server {
namespace {

using namespace testing;  // NOLINT: World, Who

constexpr Who kEveryone[] = {kOwner,         kOther,   kTeam,    kNodeProvider,
                             kOtherProvider, kRevoked, kExpired, kReadOnly};
const char* WhoName(Who w) {
  static const char* names[] = {"owner",
                                "other user",
                                "same team",
                                "provider of the node",
                                "provider of another node",
                                "revoked token",
                                "expired token",
                                "read-only token"};
  return names[w];
}

// Request bodies that pass validation, so a status says who may call, not what was sent.
std::string BodyFor(const std::string& method, const std::string& pattern) {
  Json spec{{"name", "probe"}, {"run", "true"}, {"resources", {{"cpus", 1}}}};
  if (pattern == "/v1/estimate") return DumpJson(Json{{"spec", spec}});
  if (pattern == "/v1/jobs" && method == "POST") {
    return DumpJson(Json{{"spec", spec}, {"queue", true}});
  }
  if (pattern == "/v1/blobs/missing") return DumpJson(Json{{"digests", {std::string(64, 'e')}}});
  // Uploading bytes proves having them: anyone may upload the same content (and then own it).
  if (pattern == "/v1/blobs/{blob}" && method == "PUT") return "alice's workdir";
  if (pattern == "/v1/catalogs") return "provider,gpu,count,price_per_hour\n";
  if (pattern == "/v1/accounts" && method == "POST") return R"({"name":"dave"})";
  if (pattern == "/v1/tokens" && method == "POST") return R"({"name":"new"})";
  if (pattern == "/v1/teams/{team}/members") return R"({"account":"bob"})";
  if (pattern == "/v1/jobs/{job}/budget") return R"({"max_total_cost":"5"})";
  // Only alice (and admins) may set alice's monthly budget; to anyone else she does not exist.
  if (pattern == "/v1/budgets" && method == "POST") return R"({"account":"alice","monthly":"10"})";
  if (method == "POST") return "{}";
  return "";
}

using Row = std::array<int, 8>;  // by Who
// 401 for revoked and expired tokens everywhere except the public certificate.
const std::map<std::string, Row>& Expected() {
  static const std::map<std::string, Row> kMatrix = {
      // clang-format off
      //                                              owner other team  prov1 prov2 revok expir read
      {"GET /v1/health",                             {200,  200,  200,  200,  200,  401,  401,  200}},
      {"GET /v1/metrics",                            {403,  403,  403,  403,  403,  401,  401,  403}},
      {"GET /v1/whoami",                             {200,  200,  200,  200,  200,  401,  401,  200}},
      {"GET /v1/audit/certificate",                  {200,  200,  200,  200,  200,  200,  200,  200}},
      {"GET /v1/offers",                             {200,  200,  200,  200,  200,  401,  401,  200}},
      {"POST /v1/estimate",                          {200,  200,  200,  200,  200,  401,  401,  200}},
      {"POST /v1/catalogs",                          {403,  403,  403,  403,  403,  401,  401,  403}},
      {"GET /v1/nodes",                              {200,  200,  200,  200,  200,  401,  401,  200}},
      {"POST /v1/nodes/{node}/reclaim",              {403,  403,  403,  200,  403,  401,  401,  403}},
      {"POST /v1/nodes/{node}/verify",               {403,  403,  403,  202,  403,  401,  401,  403}},
      {"POST /v1/nodes/{node}/resume",               {403,  403,  403,  200,  403,  401,  401,  403}},
      {"POST /v1/nodes/{node}/revoke",               {403,  403,  403,  200,  403,  401,  401,  403}},
      {"GET /v1/audit-log",                          {403,  403,  403,  403,  403,  401,  401,  403}},
      {"POST /v1/jobs",                              {201,  201,  201,  403,  403,  401,  401,  403}},
      {"GET /v1/jobs",                               {200,  200,  200,  200,  200,  401,  401,  200}},
      {"GET /v1/jobs/{job}",                         {200,  404,  200,  200,  404,  401,  401,  200}},
      {"DELETE /v1/jobs/{job}",                      {409,  404,  409,  403,  403,  401,  401,  403}},
      {"POST /v1/jobs/{job}/cancel",                 {200,  404,  200,  403,  403,  401,  401,  403}},
      {"POST /v1/jobs/{job}/budget",                 {200,  404,  200,  403,  403,  401,  401,  403}},
      {"GET /v1/budgets",                            {200,  200,  200,  200,  200,  401,  401,  200}},
      {"POST /v1/budgets",                           {200,  404,  404,  404,  404,  401,  401,  403}},
      {"GET /v1/budget-alerts",                      {200,  200,  200,  200,  200,  401,  401,  200}},
      {"GET /v1/jobs/{job}/logs",                    {200,  404,  200,  403,  403,  401,  401,  200}},
      {"GET /v1/jobs/{job}/stream",                  {200,  404,  200,  403,  403,  401,  401,  200}},
      {"GET /v1/jobs/{job}/audit",                   {200,  404,  200,  403,  403,  401,  401,  200}},
      {"POST /v1/blobs/missing",                     {200,  200,  200,  403,  403,  401,  401,  200}},
      {"PUT /v1/blobs/{blob}",                       {201,  201,  201,  403,  403,  401,  401,  403}},
      {"GET /v1/blobs/{blob}",                       {200,  404,  404,  403,  403,  401,  401,  200}},
      {"GET /v1/conformance/payload",                {403,  403,  403,  403,  403,  401,  401,  403}},
      {"POST /v1/conformance/payload",               {403,  403,  403,  403,  403,  401,  401,  403}},
      {"GET /v1/accounts",                           {403,  403,  403,  403,  403,  401,  401,  403}},
      {"POST /v1/accounts",                          {403,  403,  403,  403,  403,  401,  401,  403}},
      {"POST /v1/accounts/{account}/disable",        {403,  403,  403,  403,  403,  401,  401,  403}},
      {"POST /v1/accounts/{account}/enable",         {403,  403,  403,  403,  403,  401,  401,  403}},
      {"POST /v1/accounts/{account}/credit",         {403,  403,  403,  403,  403,  401,  401,  403}},
      {"GET /v1/accounts/{account}/balance",         {404,  404,  200,  404,  404,  401,  401,  404}},
      {"GET /v1/ledger/check",                       {403,  403,  403,  403,  403,  401,  401,  403}},
      {"GET /v1/costs",                              {200,  200,  200,  200,  200,  401,  401,  200}},
      {"GET /v1/tokens",                             {200,  200,  200,  200,  200,  401,  401,  200}},
      {"POST /v1/tokens",                            {201,  201,  201,  201,  201,  401,  401,  403}},
      {"POST /v1/tokens/{token}/revoke",             {200,  404,  404,  404,  404,  401,  401,  403}},
      {"GET /v1/teams",                              {200,  200,  200,  200,  200,  401,  401,  200}},
      {"POST /v1/teams/{team}/members",              {403,  403,  403,  403,  403,  401,  401,  403}},
      {"DELETE /v1/teams/{team}/members/{account}",  {403,  403,  403,  403,  403,  401,  401,  403}},
      {"GET /v1/agent/connect",                      {403,  403,  403,  403,  403,  401,  401,  403}},
      // clang-format on
  };
  return kMatrix;
}

TEST(ApiIsolationTest, EveryRouteAnswersEveryPrincipalAsTheMatrixSays) {
  std::unique_ptr<World> shared;
  for (const auto& route : Api::Routes()) {
    const std::string key = std::string(route.method) + " " + route.pattern;
    auto row = Expected().find(key);
    if (row == Expected().end()) {
      ADD_FAILURE() << "route " << key << " is missing from the isolation matrix";
      continue;
    }
    for (Who who : kEveryone) {
      // A route that may change state gets a fresh world per principal, so one principal's
      // success (a cancel, a revoke) cannot change what the next one sees.
      if (!shared || !route.read_only) {
        shared = std::make_unique<World>();
        shared->Build();
        if (::testing::Test::HasFatalFailure()) return;
      }
      World& w = *shared;
      std::string path = w.Fill(route.pattern);
      if (key == "GET /v1/jobs/{job}/stream") path += "?events=1&logs=0";
      HttpResponse r = key == "GET /v1/jobs/{job}/stream"
                           ? w.Stream(who, path)
                           : w.Call(who, route.method, path, BodyFor(route.method, route.pattern));
      EXPECT_EQ(r.status, row->second[who])
          << key << " as " << WhoName(who) << " (" << path << "): " << r.body.substr(0, 300);
      if (who != kOwner && who != kTeam && who != kReadOnly) {
        EXPECT_EQ(r.body.find(kSecret), std::string::npos)
            << key << " as " << WhoName(who) << " shows the owner's env value";
      }
    }
  }
}

// Money (issue 14): a user sees what it pays, a provider what its nodes sold, nobody another
// tenant's bill or balance.
TEST(ApiIsolationTest, CostsAndBalancesShowOnlyYourOwn) {
  World w;
  w.Build();
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_TRUE(w.core_->SettleMeters().ok());  // alice's running job is billed
  auto total = [&](Who who, const std::string& q) -> int64_t {
    HttpResponse r = w.Call(who, "GET", "/v1/costs" + q);
    EXPECT_EQ(r.status, 200) << WhoName(who) << q << ": " << r.body;
    auto j = ParseJson(r.body);
    return j.ok() ? (*j)["total"].value("charged_micros", int64_t{-1}) : -1;
  };
  const int64_t alice = total(kOwner, "");
  EXPECT_GT(alice, 0);
  EXPECT_EQ(total(kOther, ""), 0) << "bob pays nothing";
  EXPECT_EQ(w.Call(kOther, "GET", "/v1/costs").body.find(w.job_), std::string::npos);
  EXPECT_EQ(total(kNodeProvider, ""), alice) << "p1's node sold alice's job";
  EXPECT_EQ(total(kOtherProvider, ""), 0);
  EXPECT_EQ(w.Call(kOther, "GET", "/v1/costs?job=" + w.job_).status, 404);
  EXPECT_EQ(w.Call(kOther, "GET", "/v1/costs?account=alice").status, 403);
  EXPECT_EQ(w.Call(kNodeProvider, "GET", "/v1/costs?account=alice").status, 403);
  EXPECT_EQ(w.Call(kOtherProvider, "GET", "/v1/costs?provider=p1").status, 403);
  // The team shares the job, and so its bill; the node's provider sees what it sold of it.
  HttpResponse team = w.Call(kTeam, "GET", "/v1/costs?job=" + w.job_);
  ASSERT_EQ(team.status, 200) << team.body;
  EXPECT_NE(team.body.find("\"meters\""), std::string::npos);
  HttpResponse prov = w.Call(kNodeProvider, "GET", "/v1/costs?job=" + w.job_);
  ASSERT_EQ(prov.status, 200) << prov.body;
  EXPECT_EQ(prov.body.find("\"meters\""), std::string::npos);
  EXPECT_EQ(w.Call(kOwner, "GET", "/v1/accounts/alice/balance").status, 200);
  EXPECT_EQ(w.Call(kOther, "GET", "/v1/accounts/alice/balance").status, 404);
  EXPECT_EQ(w.core_->BalanceOf(w.ids_["alice"]), 100'000'000 - alice);
}

// Monthly budgets (issue 15): alice sets her own and sees it with its spend; bob sees neither it
// nor its alerts; a team's budget is an admin's to set; a webhook aimed at what only the server
// can reach is refused.
TEST(ApiIsolationTest, MonthlyBudgetsAreTheirOwnersAndWebhooksStayOutside) {
  World w;
  w.Build();
  if (::testing::Test::HasFatalFailure()) return;
  HttpResponse set =
      w.Call(kOwner, "POST", "/v1/budgets", R"({"account":"alice","monthly":"0.000001"})");
  ASSERT_EQ(set.status, 200) << set.body;
  // Her running job's next settlement passes 100 % of a micro-dollar: alerts are raised.
  w.clock_.Advance(5000);
  ASSERT_TRUE(w.core_->SettleMeters().ok());
  HttpResponse mine = w.Call(kOwner, "GET", "/v1/budget-alerts");
  ASSERT_EQ(mine.status, 200);
  EXPECT_NE(mine.body.find("\"percent\":100"), std::string::npos) << mine.body;
  EXPECT_NE(w.Call(kOwner, "GET", "/v1/budgets").body.find("account alice"), std::string::npos);
  EXPECT_EQ(w.Call(kOther, "GET", "/v1/budgets").body.find("alice"), std::string::npos);
  EXPECT_EQ(w.Call(kOther, "GET", "/v1/budget-alerts").body.find("percent"), std::string::npos);
  EXPECT_EQ(w.Call(kTeam, "POST", "/v1/budgets", R"({"team":"ml","monthly":"5"})").status, 403);
  for (const char* hook : {"http://127.0.0.1:9/x", "http://169.254.169.254/latest", "http://[::1]/",
                           "http://localhost:8080/", "http://10.1.2.3/", "ftp://example.com/"}) {
    HttpResponse r =
        w.Call(kOwner, "POST", "/v1/budgets",
               R"({"account":"alice","monthly":"10","webhook":")" + std::string(hook) + R"("})");
    EXPECT_EQ(r.status, 400) << hook << ": " << r.body;
  }
  EXPECT_EQ(w.Call(kOwner, "POST", "/v1/budgets",
                   R"({"account":"alice","monthly":"10","webhook":"https://hooks.example.com/a"})")
                .status,
            200);
}

// An account that reaches its credit limit starts nothing more: its queued job waits saying why
// while capacity is free, and runs once an admin adds credit.
TEST(ApiIsolationTest, AQueuedJobWaitsForCreditAndRunsOnceTopUpArrives) {
  World w;
  w.Build();
  if (::testing::Test::HasFatalFailure()) return;
  auto erin = w.accounts_->CreateAccount("erin", Role::kUser, w.accounts_->admin_account_id());
  ASSERT_TRUE(erin.ok());
  ASSERT_TRUE(w.accounts_->SetCreditLimit(erin->id, 500).ok());  // $0.0005 below zero
  spec::JobSpec spec;
  spec.name = "big";
  spec.run = "train";
  spec.resources.cpus = 4;
  spec.resources.memory_gb = 1;
  SubmitOptions as_erin;
  as_erin.owner = erin->id;
  as_erin.queue_unschedulable = true;
  auto first = w.core_->SubmitJob(spec, "", as_erin);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string att = w.link2_->Last("assign", "attempt_id");
  ASSERT_FALSE(att.empty()) << "the first job goes to the idle n2";
  ASSERT_TRUE(
      w.core_
          ->AgentMessage(w.node2_, w.link2_.get(), Json{{"type", "started"}, {"attempt_id", att}})
          .ok());
  auto second = w.core_->SubmitJob(spec, "", as_erin);  // allowed now; waits for a free node
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  // 30 s at $0.40 an hour (4 CPUs at $0.10): $0.00333, past the $0.0005 limit.
  for (int i = 0; i < 6; ++i) {
    w.clock_.Advance(5'000);
    ASSERT_TRUE(w.core_->AgentMessage(w.node2_, w.link2_.get(), Json{{"type", "heartbeat"}}).ok());
  }
  ASSERT_TRUE(w.core_->SettleMeters().ok());
  EXPECT_LT(w.core_->BalanceOf(erin->id), -500);
  ASSERT_TRUE(
      w.core_->AgentMessage(w.node2_, w.link2_.get(), proto::ToJson(proto::Exited{att, 0, 0, ""}))
          .ok());
  auto waiting = w.core_->GetJob(second->id);
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(waiting->job.state, store::JobState::kQueued) << "n2 is free, but erin has no credit";
  EXPECT_NE(waiting->job.reason.find("waiting for credit"), std::string::npos)
      << waiting->job.reason;
  EXPECT_FALSE(w.core_->SubmitJob(spec, "", as_erin).ok()) << "nor may erin submit more";
  ASSERT_TRUE(w.core_->TopUp(erin->id, 1'000'000, "test").ok());
  auto placed = w.core_->GetJob(second->id);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->job.state, store::JobState::kStarting) << placed->job.reason;
}

TEST(ApiIsolationTest, ListsShowOnlyWhatEachTenantMaySee) {
  World w;
  w.Build();
  if (::testing::Test::HasFatalFailure()) return;
  auto jobs_of = [&](Who who) { return w.Call(who, "GET", "/v1/jobs").body; };
  EXPECT_NE(jobs_of(kOwner).find(w.job_), std::string::npos);
  EXPECT_NE(jobs_of(kTeam).find(w.job_), std::string::npos);
  EXPECT_EQ(jobs_of(kOther).find(w.job_), std::string::npos);
  EXPECT_EQ(jobs_of(kOtherProvider).find(w.job_), std::string::npos);
  // The provider of the node sees the job placed there, without its env values.
  auto seen = w.Call(kNodeProvider, "GET", "/v1/jobs/" + w.job_);
  ASSERT_EQ(seen.status, 200);
  EXPECT_EQ(seen.body.find(kSecret), std::string::npos);
  EXPECT_NE(seen.body.find("[redacted]"), std::string::npos);
  // Tokens are listed per account and never with a secret.
  auto tokens = w.Call(kOther, "GET", "/v1/tokens").body;
  EXPECT_EQ(tokens.find(w.spare_token_), std::string::npos);
  EXPECT_EQ(tokens.find(w.secret_[kOther]), std::string::npos);
  // Nor whether another tenant's upload exists.
  auto probe = w.Call(kOther, "POST", "/v1/blobs/missing", DumpJson(Json{{"digests", {w.blob_}}}));
  ASSERT_EQ(probe.status, 200);
  EXPECT_NE(probe.body.find(w.blob_), std::string::npos) << "bob learned alice's blob exists";
  auto own = w.Call(kOwner, "POST", "/v1/blobs/missing", DumpJson(Json{{"digests", {w.blob_}}}));
  EXPECT_EQ(own.body.find(w.blob_), std::string::npos) << own.body;
  // Another tenant's workdir digest cannot be reused in a submission.
  Json spec{{"name", "steal"}, {"run", "true"}, {"resources", {{"cpus", 1}}}};
  auto steal = w.Call(kOther, "POST", "/v1/jobs",
                      DumpJson(Json{{"spec", spec}, {"workdir_blob", w.blob_}, {"queue", true}}));
  EXPECT_EQ(steal.status, 400) << steal.body;
  // Nor can a user claim a team it is not in.
  auto team = w.Call(kOther, "POST", "/v1/jobs",
                     DumpJson(Json{{"spec", spec}, {"team", "ml"}, {"queue", true}}));
  EXPECT_EQ(team.status, 403) << team.body;
}

// The same once the job has finished and left memory: the list then reads it from the store
// through the owner and team indexes (docs/design-notes.md "The job list"), a path of its own.
TEST(ApiIsolationTest, AFinishedJobIsListedToItsOwnerAndTeamOnly) {
  World w;
  w.Build();
  if (::testing::Test::HasFatalFailure()) return;
  const std::string att = w.link1_->Last("assign", "attempt_id");
  ASSERT_TRUE(
      w.core_->AgentMessage(w.node1_, w.link1_.get(), proto::ToJson(proto::Exited{att, 0, 0, ""}))
          .ok());
  w.core_->Tick();  // retires it: out of the job map, in the store only
  ASSERT_FALSE(w.core_->StateDump()["jobs"].contains(w.job_));
  for (const char* query : {"/v1/jobs", "/v1/jobs?state=succeeded"}) {
    auto jobs_of = [&](Who who) { return w.Call(who, "GET", query).body; };
    EXPECT_NE(jobs_of(kOwner).find(w.job_), std::string::npos) << query;
    EXPECT_NE(jobs_of(kTeam).find(w.job_), std::string::npos) << query;
    EXPECT_NE(jobs_of(kReadOnly).find(w.job_), std::string::npos) << query;
    EXPECT_EQ(jobs_of(kOther).find(w.job_), std::string::npos) << query;
    EXPECT_EQ(jobs_of(kNodeProvider).find(w.job_), std::string::npos) << query;
    EXPECT_EQ(jobs_of(kOtherProvider).find(w.job_), std::string::npos) << query;
  }
}

}  // namespace
}  // namespace sluice::server
