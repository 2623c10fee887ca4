// The isolation matrix (issue 10): every route of the API's own table × {owner, other user, same
// team, provider of the node, provider of another node, revoked token, expired token, read-only
// token}, each answered with the expected status by a real HTTP server on loopback; a route
// missing from the matrix fails the test, and no response to anyone but the owner and the team
// ever contains the owner's env values.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <memory>

#include "audit/signing_key.h"
#include "common/crypto.h"
#include "common/token_file.h"
#include "net/http_client.h"
#include "net/http_server.h"
#include "server/accounts.h"
#include "server/api.h"
#include "server/server_core.h"
#include "server/test_reports.h"
#include "store/blob_store.h"
#include "store/store_test_util.h"

namespace sluice::server {
namespace {

constexpr const char* kSecret = "hunter2-the-owners-secret";

enum Who { kOwner, kOther, kTeam, kNodeProvider, kOtherProvider, kRevoked, kExpired, kReadOnly };
constexpr Who kEveryone[] = {kOwner,         kOther,   kTeam,    kNodeProvider,
                             kOtherProvider, kRevoked, kExpired, kReadOnly};
const char* WhoName(Who w) {
  static const char* names[] = {"owner",   "other user", "same team", "provider of the node",
                                "provider of another node", "revoked token", "expired token",
                                "read-only token"};
  return names[w];
}

class RecordingLink : public AgentLink {
 public:
  void Send(const Json& m) override { sent.push_back(m); }
  void Close() override {}
  std::string Last(const std::string& type, const std::string& field) const {
    for (auto it = sent.rbegin(); it != sent.rend(); ++it) {
      if (it->value("type", "") == type) return it->value(field, "");
    }
    return "";
  }
  std::vector<Json> sent;
};

// One server with two providers' nodes, three users and the owner's running job.
class World {
 public:
  World() : blobs_(dir_.path() + "/blobs") {}

  void Build() {
    auto s = store::OpenSqliteStore(dir_.path() + "/sluice.db");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    auto a = Accounts::Bootstrap(store_.get(), dir_.path(), &clock_);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    accounts_ = std::move(*a);
    core_ = std::make_unique<ServerCore>(store_.get(), &clock_, CoreOptions{});
    core_->SetBlobStore(&blobs_);
    core_->SetAccounts(accounts_.get());
    auto signing = LoadOrCreateSigningIdentity(dir_.path(), "test");
    ASSERT_TRUE(signing.ok());
    core_->SetSigningIdentity(*signing);
    ASSERT_TRUE(core_->Load().ok());
    ApiOptions api_opt;
    api_opt.refusals.burst = 1000;
    api_ = std::make_unique<Api>(core_.get(), &blobs_, accounts_.get(), &clock_, api_opt);
    HttpServerOptions net;
    net.port = 0;
    http_ = std::make_unique<HttpServer>(
        net, [this](HttpRequest r, std::shared_ptr<ResponseWriter> w) {
          api_->Handle(std::move(r), std::move(w));
        },
        [this](const HttpRequest& r, const std::shared_ptr<WsConnection>& c) {
          return api_->Upgrade(r, c);
        });
    ASSERT_TRUE(http_->Start().ok());

    auto user = [&](const char* name, Role role) {
      auto acc = accounts_->CreateAccount(name, role, accounts_->admin_account_id());
      EXPECT_TRUE(acc.ok()) << acc.status().ToString();
      auto tok = accounts_->CreateToken(acc->id, "api", Scope::kFull, "", 0);
      EXPECT_TRUE(tok.ok());
      ids_[name] = acc->id;
      return tok->secret;
    };
    secret_[kOwner] = user("alice", Role::kUser);
    secret_[kOther] = user("bob", Role::kUser);
    secret_[kTeam] = user("carol", Role::kUser);
    secret_[kNodeProvider] = user("p1", Role::kProvider);
    secret_[kOtherProvider] = user("p2", Role::kProvider);
    ASSERT_TRUE(accounts_->AddTeamMember("ml", ids_["alice"]).ok());
    ASSERT_TRUE(accounts_->AddTeamMember("ml", ids_["carol"]).ok());
    auto revoked = accounts_->CreateToken(ids_["alice"], "api", Scope::kFull, "", 0);
    ASSERT_TRUE(revoked.ok());
    ASSERT_TRUE(accounts_->RevokeToken(revoked->record.id).ok());
    secret_[kRevoked] = revoked->secret;
    auto expired = accounts_->CreateToken(ids_["alice"], "api", Scope::kFull, "", 60'000);
    ASSERT_TRUE(expired.ok());
    secret_[kExpired] = expired->secret;
    auto read = accounts_->CreateToken(ids_["alice"], "api", Scope::kRead, "", 0);
    ASSERT_TRUE(read.ok());
    secret_[kReadOnly] = read->secret;
    auto spare = accounts_->CreateToken(ids_["alice"], "api", Scope::kFull, "spare", 0);
    ASSERT_TRUE(spare.ok());
    spare_token_ = spare->record.id;

    node1_ = Enrol("p1", "n1");
    // The owner's job, shared with team ml, with a secret in its env and an uploaded workdir.
    blob_ = Sha256Hex("alice's workdir");
    auto put = Call(kOwner, "PUT", "/v1/blobs/" + blob_, "alice's workdir");
    ASSERT_EQ(put.status, 201) << put.body;
    Json spec{{"name", "secret-job"},
              {"run", "sleep 1000"},
              {"resources", {{"cpus", 1}}},
              {"env", {{"MYSECRET", kSecret}}}};
    auto sub = Call(kOwner, "POST", "/v1/jobs",
                    DumpJson(Json{{"spec", spec}, {"workdir_blob", blob_}, {"team", "ml"}}));
    ASSERT_EQ(sub.status, 201) << sub.body;
    job_ = (*ParseJson(sub.body))["job"]["id"];
    std::string attempt = link1_->Last("assign", "attempt_id");
    ASSERT_FALSE(attempt.empty()) << "the job was not placed on n1";
    ASSERT_TRUE(
        core_->AgentMessage(node1_, link1_.get(), Json{{"type", "started"}, {"attempt_id", attempt}})
            .ok());
    // Another provider's node joins after the job was placed.
    link2_ = std::make_shared<RecordingLink>();
    node2_ = Enrol("p2", "n2", link2_);
    clock_.Advance(61'000);  // the expired token's minute is over
  }

  ~World() {
    if (http_) http_->Stop();
  }

  std::string Enrol(const std::string& provider, const std::string& name,
                    std::shared_ptr<RecordingLink> link = nullptr) {
    if (!link) link = link1_ = std::make_shared<RecordingLink>();
    proto::Hello h;
    h.name = name;
    h.inventory.hostname = name;
    h.inventory.cpu_cores = 4;
    h.inventory.memory_mib = 8192;
    h.inventory.gpu_source = "none";
    h.price_per_cpu_hour = 0.1;
    auto node = core_->AgentHello(link, h, AgentIdentity{ids_[provider], "join-x", ""});
    EXPECT_TRUE(node.ok()) << node.status().ToString();
    if (!node.ok()) return "";
    Status s = core_->AgentMessage(*node, link.get(),
                                   Json{{"type", "conformance"},
                                        {"report", ToJson(testing::PassingReport(h.inventory))},
                                        {"nonce", link->Last("reverify", "nonce")}});
    EXPECT_TRUE(s.ok()) << s.ToString();
    return *node;
  }

  HttpResponse Call(Who who, const std::string& method, const std::string& path,
                    std::string body = "") {
    Url url;
    url.scheme = "http";
    url.host = "127.0.0.1";
    url.port = http_->port();
    HttpClient client(url, secret_[who], std::chrono::seconds(10));
    std::string type = method == "PUT" ? "application/octet-stream" : "application/json";
    auto r = client.Request(method, path, std::move(body), type);
    if (!r.ok()) {
      HttpResponse fail;
      fail.status = -1;
      fail.body = r.status().ToString();
      return fail;
    }
    return *r;
  }
  // A stream never ends while the job runs: read its status and the first line only.
  HttpResponse Stream(Who who, const std::string& path) {
    Url url;
    url.scheme = "http";
    url.host = "127.0.0.1";
    url.port = http_->port();
    HttpClient client(url, secret_[who], std::chrono::seconds(10));
    HttpResponse out;
    int status = 0;
    Status s = client.StreamLines(
        "GET", path,
        [&](std::string_view line) {
          out.body += std::string(line) + "\n";
          return false;
        },
        &status);
    out.status = status;
    if (!s.ok()) out.body += s.message();
    return out;
  }

  std::string Fill(const std::string& pattern) {
    std::string p = pattern;
    auto sub = [&](const std::string& key, const std::string& v) {
      size_t at = p.find(key);
      if (at != std::string::npos) p.replace(at, key.size(), v);
    };
    sub("{job}", job_);
    sub("{node}", node1_);
    sub("{blob}", blob_);
    sub("{token}", spare_token_);
    sub("{account}", "carol");
    sub("{team}", "ml");
    return p;
  }

  store::testing::ScratchDir dir_;
  FakeClock clock_;
  store::BlobStore blobs_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Accounts> accounts_;
  std::unique_ptr<ServerCore> core_;
  std::unique_ptr<Api> api_;
  std::unique_ptr<HttpServer> http_;
  std::map<Who, std::string> secret_;
  std::map<std::string, std::string> ids_;
  std::shared_ptr<RecordingLink> link1_, link2_;
  std::string node1_, node2_, job_, blob_, spare_token_;
};

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
      {"POST /v1/nodes/{node}/revoke",               {403,  403,  403,  200,  403,  401,  401,  403}},
      {"GET /v1/audit-log",                          {403,  403,  403,  403,  403,  401,  401,  403}},
      {"POST /v1/jobs",                              {201,  201,  201,  403,  403,  401,  401,  403}},
      {"GET /v1/jobs",                               {200,  200,  200,  200,  200,  401,  401,  200}},
      {"GET /v1/jobs/{job}",                         {200,  404,  200,  200,  404,  401,  401,  200}},
      {"DELETE /v1/jobs/{job}",                      {409,  404,  409,  403,  403,  401,  401,  403}},
      {"POST /v1/jobs/{job}/cancel",                 {200,  404,  200,  403,  403,  401,  401,  403}},
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

}  // namespace
}  // namespace sluice::server
