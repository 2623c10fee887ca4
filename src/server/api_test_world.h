// Test helper for the API tests (issue 10): one real server on loopback (HTTP, accounts, core on
// SQLite in a scratch dir) with two providers' nodes, three users and the owner's running job.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "audit/signing_key.h"
#include "common/crypto.h"
#include "common/token_file.h"
#include "net/http_client.h"
#include "net/http_server.h"
#include "server/accounts.h"
#include "server/api.h"
#include "server/server_core.h"
#include "server/test_agent_link.h"
#include "server/test_reports.h"
#include "store/blob_store.h"
#include "store/store_test_util.h"

namespace sluice::server::testing {

inline std::string ReadTokenFileText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto f = ParseTokenFile(ss.str());
  return f.ok() ? f->secret : "";
}

inline constexpr const char* kSecret = "hunter2-the-owners-secret";

enum Who { kOwner, kOther, kTeam, kNodeProvider, kOtherProvider, kRevoked, kExpired, kReadOnly };

// One server with two providers' nodes, three users and the owner's running job.
class World {
 public:
  explicit World(CoreOptions core_options = {})
      : blobs_(dir_.path() + "/blobs"), core_options_(core_options) {}

  // HttpServerOptions::max_queued_bytes of the server Build starts.
  size_t max_queued_bytes_ = HttpServerOptions{}.max_queued_bytes;

  void Build() {
    auto s = store::OpenSqliteStore(dir_.path() + "/sluice.db");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    auto a = Accounts::Bootstrap(store_.get(), dir_.path(), &clock_);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    accounts_ = std::move(*a);
    core_ = std::make_unique<ServerCore>(store_.get(), &clock_, core_options_);
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
    net.max_queued_bytes = max_queued_bytes_;
    http_ = std::make_unique<HttpServer>(
        net,
        [this](HttpRequest r, std::shared_ptr<ResponseWriter> w) {
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
      // Users are prepaid (issue 14): the admin funded each with $100.
      if (role == Role::kUser) {
        EXPECT_TRUE(core_->TopUp(acc->id, 100'000'000, "test").ok());
      }
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
        core_
            ->AgentMessage(node1_, link1_.get(), Json{{"type", "started"}, {"attempt_id", attempt}})
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
    proto::Hello h = CpuHello(name);
    h.price_per_cpu_hour = 0.1;
    auto node = core_->AgentHello(link, h, AgentIdentity{ids_[provider], "join-x", ""});
    EXPECT_TRUE(node.ok()) << node.status().ToString();
    if (!node.ok()) return "";
    Status s = core_->AgentMessage(*node, link.get(),
                                   Json{{"type", "conformance"},
                                        {"report", ToJson(PassingReport(h.inventory))},
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

  // The admin token the server wrote on first start.
  std::string AdminSecret() {
    auto f = ReadTokenFileText(dir_.path() + "/admin.token");
    return f;
  }
  // Bytes of the database on disk (the main file and its write-ahead log).
  uint64_t DbBytes() {
    uint64_t n = 0;
    for (const char* f : {"/sluice.db", "/sluice.db-wal"}) {
      std::error_code ec;
      auto size = std::filesystem::file_size(dir_.path() + f, ec);
      if (!ec) n += size;
    }
    return n;
  }
  Url BaseUrl() const {
    Url url;
    url.scheme = "http";
    url.host = "127.0.0.1";
    url.port = http_->port();
    return url;
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
  CoreOptions core_options_;
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

}  // namespace sluice::server::testing
