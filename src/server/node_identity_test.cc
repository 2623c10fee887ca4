// Node identity (issue 10 item 2; docs/design-notes.md "Node identity"): enrolment mints a
// credential, a node id alone proves nothing, `node revoke` cuts a node off, providers have a
// node quota, and a conformance report must answer this server's fresh nonce.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/crypto.h"
#include "common/token_file.h"
#include "server/accounts.h"
#include "server/server_core.h"
#include "server/test_agent_link.h"
#include "server/test_reports.h"
#include "store/store_test_util.h"

namespace sluice::server {
namespace {

namespace fs = std::filesystem;

using testing::RecordingLink;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class NodeIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }
  void TearDown() override {
    core_.reset();
    accounts_.reset();
    store_.reset();
  }
  // (Re)opens store, accounts and core on the same database: a server restart.
  void Open() {
    core_.reset();
    accounts_.reset();
    store_.reset();
    auto s = store::OpenSqliteStore(db_path());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    auto a = Accounts::Bootstrap(store_.get(), dir_.path(), &clock_);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    accounts_ = std::move(*a);
    core_ = std::make_unique<ServerCore>(store_.get(), &clock_, opt_);
    ASSERT_TRUE(core_->Load().ok());
    core_->SetAccounts(accounts_.get());
    auto join = ParseTokenFile(ReadAll(dir_.path() + "/join.token"));
    ASSERT_TRUE(join.ok());
    join_secret_ = join->secret;
  }
  std::string db_path() const { return dir_.path() + "/sluice.db"; }
  // What a bearer token proves on the agent channel, as agent_channel.cc passes it on.
  AgentIdentity Who(const std::string& secret) {
    Principal p = accounts_->Authenticate("Bearer " + secret);
    EXPECT_TRUE(p.authenticated()) << p.refusal;
    return AgentIdentity{p.account_id, p.token_id, p.node_id};
  }
  AgentIdentity Join() { return Who(join_secret_); }
  proto::Hello CpuHello(const std::string& name, std::string node_id = "") {
    proto::Hello h = testing::CpuHello(name);
    h.node_id = std::move(node_id);
    return h;
  }
  Json ReportMsg(const std::string& nonce) {
    return Json{{"type", "conformance"},
                {"report", ToJson(testing::PassingReport(CpuHello("x").inventory))},
                {"nonce", nonce}};
  }
  struct Enrolled {
    std::string node_id;
    std::string credential;
    std::shared_ptr<RecordingLink> link;
  };
  // Enrols a node with the join token and gets it verified by answering the server's request.
  Enrolled Enrol(const std::string& name) {
    Enrolled e;
    e.link = std::make_shared<RecordingLink>();
    auto node = core_->AgentHello(e.link, CpuHello(name), Join());
    EXPECT_TRUE(node.ok()) << node.status().ToString();
    if (!node.ok()) return e;
    e.node_id = *node;
    auto welcome = e.link->OfType("welcome");
    EXPECT_EQ(welcome.size(), 1u);
    if (welcome.size() == 1) e.credential = welcome[0].value("credential", "");
    Status s = core_->AgentMessage(e.node_id, e.link.get(), ReportMsg(e.link->Nonce()));
    EXPECT_TRUE(s.ok()) << s.ToString();
    return e;
  }
  spec::JobSpec Spec() {
    spec::JobSpec s;
    s.name = "t";
    s.run = "echo hi";
    s.resources.cpus = 1;
    s.resources.memory_gb = 1;
    s.env = {{"API_KEY", "s3cret"}};
    return s;
  }
  const NodeView* View(const std::vector<NodeView>& views, const std::string& id) {
    for (const auto& v : views) {
      if (v.node.id == id) return &v;
    }
    return nullptr;
  }
  // Runs SQL on the database behind the store's back: how a test makes a commit fail.
  void Sql(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(db_path().c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
    std::string msg = err ? err : "";
    sqlite3_free(err);
    sqlite3_close(db);
    ASSERT_EQ(rc, SQLITE_OK) << msg;
  }

  CoreOptions opt_ = [] {
    CoreOptions o;
    o.heartbeat_grace_ms = 10'000;
    return o;
  }();
  store::testing::ScratchDir dir_;
  FakeClock clock_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Accounts> accounts_;
  std::unique_ptr<ServerCore> core_;
  std::string join_secret_;
};

TEST_F(NodeIdentityTest, EnrolmentMintsACredentialStoredOnlyAsItsHash) {
  Enrolled a = Enrol("a");
  ASSERT_FALSE(a.credential.empty());
  auto nodes = store_->LoadNodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].owner, accounts_->builtin_provider_id());
  EXPECT_FALSE((*nodes)[0].revoked);

  auto tokens = store_->LoadTokens();
  ASSERT_TRUE(tokens.ok());
  int creds = 0;
  for (const auto& t : *tokens) {
    if (t.kind != "node") continue;
    ++creds;
    EXPECT_EQ(t.node_id, a.node_id);
    EXPECT_EQ(t.account_id, accounts_->builtin_provider_id());
    EXPECT_EQ(t.sha256, Sha256Hex(a.credential));
  }
  EXPECT_EQ(creds, 1);
  // The secret itself is nowhere on the server's disk.
  for (const auto& f : fs::directory_iterator(dir_.path())) {
    EXPECT_EQ(ReadAll(f.path().string()).find(a.credential), std::string::npos) << f.path();
  }
  // It proves that node, and only that node.
  Principal p = accounts_->Authenticate("Bearer " + a.credential);
  EXPECT_EQ(p.role, Role::kNode);
  EXPECT_EQ(p.node_id, a.node_id);

  // The agent reconnects with it: the same node, and no new credential.
  auto again = std::make_shared<RecordingLink>();
  auto node = core_->AgentHello(again, CpuHello("a", a.node_id), Who(a.credential));
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_EQ(*node, a.node_id);
  ASSERT_EQ(again->OfType("welcome").size(), 1u);
  EXPECT_FALSE(again->OfType("welcome")[0].contains("credential"));
  EXPECT_TRUE(a.link->closed);  // the newest link wins, as before
  // With the node id left out it is still that node: the credential says which.
  auto third = std::make_shared<RecordingLink>();
  EXPECT_EQ(core_->AgentHello(third, CpuHello("a"), Who(a.credential)).value(), a.node_id);
  EXPECT_EQ(core_->ListNodes().size(), 1u);
}

// The attack of issue 10: the shared join token and a victim's node id took over a live node.
TEST_F(NodeIdentityTest, AJoinTokenCannotTakeOverAnEnrolledNodeAndNothingChanges) {
  Enrolled victim = Enrol("victim");
  auto job = core_->SubmitJob(Spec(), "");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_EQ(victim.link->OfType("assign").size(), 1u);
  std::string att = victim.link->OfType("assign")[0]["attempt_id"];
  ASSERT_TRUE(core_
                  ->AgentMessage(victim.node_id, victim.link.get(),
                                 Json{{"type", "started"}, {"attempt_id", att}})
                  .ok());
  auto nodes_before = store_->LoadNodes();
  auto job_before = core_->GetJob(job->id);
  ASSERT_TRUE(nodes_before.ok() && job_before.ok());
  size_t sent_before = victim.link->sent.size();

  auto fake = std::make_shared<RecordingLink>();
  proto::Hello h = CpuHello("victim", victim.node_id);  // says it runs nothing
  auto refused = core_->AgentHello(fake, h, Join());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("impersonation"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("a join token cannot take it over"), std::string::npos);

  // Nothing changed: the victim's link, its attempt, its job, its stored record.
  EXPECT_TRUE(fake->sent.empty());
  EXPECT_FALSE(victim.link->closed);
  EXPECT_EQ(victim.link->sent.size(), sent_before);
  auto job_after = core_->GetJob(job->id);
  ASSERT_TRUE(job_after.ok());
  EXPECT_EQ(job_after->job.state, store::JobState::kRunning);
  EXPECT_EQ(job_after->job, job_before->job);
  ASSERT_EQ(job_after->attempts.size(), 1u);
  EXPECT_EQ(job_after->attempts[0].state, store::AttemptState::kRunning);
  EXPECT_EQ(store_->LoadNodes().value(), nodes_before.value());
  // The victim still speaks for its node, and the next job (with its env secret) goes to it.
  EXPECT_TRUE(core_
                  ->AgentMessage(victim.node_id, victim.link.get(),
                                 Json{{"type", "exited"}, {"attempt_id", att}, {"exit_code", 0}})
                  .ok());
  ASSERT_TRUE(core_->SubmitJob(Spec(), "").ok());
  EXPECT_EQ(victim.link->OfType("assign").size(), 2u);
  EXPECT_TRUE(fake->OfType("assign").empty());
}

TEST_F(NodeIdentityTest, ACredentialProvesOneNodeOnly) {
  Enrolled a = Enrol("a");
  Enrolled b = Enrol("b");
  ASSERT_NE(a.credential, b.credential);
  auto nodes_before = store_->LoadNodes();
  auto link = std::make_shared<RecordingLink>();
  auto refused = core_->AgentHello(link, CpuHello("b", b.node_id), Who(a.credential));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("cannot say hello as node " + b.node_id),
            std::string::npos)
      << refused.status().message();
  EXPECT_TRUE(link->sent.empty());
  EXPECT_FALSE(b.link->closed);
  EXPECT_EQ(store_->LoadNodes().value(), nodes_before.value());
}

TEST_F(NodeIdentityTest, NodesFromBeforeIdentityReEnrolUnderANewIdNeverByTheirIdAlone) {
  // Registered before node identity: no owner, no credential.
  core_->SetAccounts(nullptr);
  auto old_link = std::make_shared<RecordingLink>();
  auto legacy = core_->AgentHello(old_link, CpuHello("old"));
  ASSERT_TRUE(legacy.ok());
  ASSERT_TRUE(store_->LoadNodes().value()[0].owner.empty());
  core_->SetAccounts(accounts_.get());

  auto link = std::make_shared<RecordingLink>();
  auto node = core_->AgentHello(link, CpuHello("old", *legacy), Join());
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_NE(*node, *legacy);  // a new node, with its own credential
  ASSERT_EQ(link->OfType("welcome").size(), 1u);
  EXPECT_EQ(link->OfType("welcome")[0]["node_id"], *node);
  EXPECT_FALSE(link->OfType("welcome")[0].value("credential", "").empty());
  auto views = core_->ListNodes();
  ASSERT_EQ(views.size(), 2u);
  EXPECT_EQ(View(views, *node)->node.owner, accounts_->builtin_provider_id());
  EXPECT_TRUE(View(views, *legacy)->node.owner.empty());  // left to go lost by the grace
}

TEST_F(NodeIdentityTest, RevokeCutsANodeOffAndRequeuesItsJobs) {
  Enrolled a = Enrol("a");
  auto job = core_->SubmitJob(Spec(), "");
  ASSERT_TRUE(job.ok());
  ASSERT_EQ(a.link->OfType("assign").size(), 1u);

  auto revoked = core_->RevokeNode("a");
  ASSERT_TRUE(revoked.ok()) << revoked.status().ToString();
  EXPECT_TRUE(revoked->revoked);
  EXPECT_EQ(revoked->state, store::NodeState::kLost);
  EXPECT_TRUE(a.link->closed);
  EXPECT_TRUE(core_->ListOffers().empty());
  auto d = core_->GetJob(job->id);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->attempts[0].state, store::AttemptState::kLost);
  EXPECT_EQ(d->job.state, store::JobState::kQueued);
  // Its credential is refused at the next connection, and stays so after a restart.
  EXPECT_EQ(accounts_->Authenticate("Bearer " + a.credential).refusal, "revoked");
  Open();
  EXPECT_EQ(accounts_->Authenticate("Bearer " + a.credential).refusal, "revoked");
  ASSERT_TRUE(core_->FindNode(a.node_id).value().revoked);
  // Neither can the join token bring it back under its id.
  auto link = std::make_shared<RecordingLink>();
  EXPECT_FALSE(core_->AgentHello(link, CpuHello("a", a.node_id), Join()).ok());
  // Again: a no-op. Unknown: NotFound.
  EXPECT_TRUE(core_->RevokeNode(a.node_id).ok());
  EXPECT_EQ(core_->RevokeNode("nope").status().code(), StatusCode::kNotFound);
}

TEST_F(NodeIdentityTest, AProviderHasANodeQuota) {
  opt_.max_nodes_per_provider = 2;
  Open();
  Enrolled a = Enrol("a");
  Enrol("b");
  auto link = std::make_shared<RecordingLink>();
  auto third = core_->AgentHello(link, CpuHello("c"), Join());
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("--max-nodes-per-provider 2"), std::string::npos)
      << third.status().message();
  EXPECT_EQ(core_->ListNodes().size(), 2u);
  // A revoked node no longer counts.
  ASSERT_TRUE(core_->RevokeNode(a.node_id).ok());
  EXPECT_TRUE(core_->AgentHello(link, CpuHello("c"), Join()).ok());
}

TEST_F(NodeIdentityTest, AConformanceReportMustAnswerAFreshNonceOnce) {
  auto link = std::make_shared<RecordingLink>();
  auto a = core_->AgentHello(link, CpuHello("a"), Join());
  ASSERT_TRUE(a.ok());
  const std::string nonce = link->Nonce();
  ASSERT_EQ(nonce.size(), 32u);
  auto unverified = [&](const std::string& id) {
    return core_->FindNode(id).value().verification != "verified";
  };

  // Missing, or not this server's: refused, audited, and the node stays unverified.
  Json missing = ReportMsg("");
  missing.erase("nonce");
  EXPECT_EQ(core_->AgentMessage(*a, link.get(), missing).code(), StatusCode::kPermissionDenied);
  Status wrong = core_->AgentMessage(*a, link.get(), ReportMsg(RandomHex(16)));
  EXPECT_EQ(wrong.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(wrong.message().find("does not answer this server's request (stale or replayed)"),
            std::string::npos)
      << wrong.message();
  EXPECT_TRUE(unverified(*a));
  auto audit = core_->ReadAudit(0, 0, 100);
  ASSERT_TRUE(audit.ok());
  int refusals = 0;
  for (const auto& e : *audit) {
    if (e.action == "agent.conformance" && e.status == 403 && e.target == *a) ++refusals;
  }
  EXPECT_EQ(refusals, 2);

  // The answer to the request: accepted, once.
  Json answer = ReportMsg(nonce);
  ASSERT_TRUE(core_->AgentMessage(*a, link.get(), answer).ok());
  EXPECT_FALSE(unverified(*a));
  EXPECT_FALSE(core_->ListNodes()[0].verifying);
  EXPECT_EQ(core_->AgentMessage(*a, link.get(), answer).code(), StatusCode::kPermissionDenied);

  // Another node replays what `a` sent: refused, it stays unverified.
  auto other = std::make_shared<RecordingLink>();
  auto b = core_->AgentHello(other, CpuHello("b"), Join());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(core_->AgentMessage(*b, other.get(), answer).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(unverified(*b));

  // Requests merged by the agent: the newest nonce answers the older ones too.
  ASSERT_TRUE(core_->VerifyNode(*a).ok());
  std::string first = link->Nonce();
  ASSERT_TRUE(core_->VerifyNode(*a).ok());
  std::string second = link->Nonce();
  ASSERT_NE(first, second);
  ASSERT_TRUE(core_->AgentMessage(*a, link.get(), ReportMsg(second)).ok());
  EXPECT_FALSE(View(core_->ListNodes(), *a)->verifying);
  EXPECT_EQ(core_->AgentMessage(*a, link.get(), ReportMsg(first)).code(),
            StatusCode::kPermissionDenied);
}

TEST_F(NodeIdentityTest, AFailedEnrolmentCommitLeavesMemoryUnchanged) {
  Sql("CREATE TRIGGER fail_tokens BEFORE INSERT ON tokens "
      "BEGIN SELECT RAISE(ABORT, 'injected failure'); END;");
  auto link = std::make_shared<RecordingLink>();
  auto node = core_->AgentHello(link, CpuHello("a"), Join());
  ASSERT_FALSE(node.ok());
  EXPECT_TRUE(core_->ListNodes().empty());
  EXPECT_TRUE(link->sent.empty());  // no welcome, no credential
  EXPECT_TRUE(store_->LoadNodes().value().empty());
  auto tokens = store_->LoadTokens();
  ASSERT_TRUE(tokens.ok());
  for (const auto& t : *tokens) EXPECT_NE(t.kind, "node");

  Sql("DROP TRIGGER fail_tokens;");
  auto again = core_->AgentHello(link, CpuHello("a"), Join());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(core_->ListNodes().size(), 1u);
  std::string credential = link->OfType("welcome").at(0).value("credential", "");
  EXPECT_EQ(accounts_->Authenticate("Bearer " + credential).node_id, *again);
}

TEST_F(NodeIdentityTest, AFailedRevocationCommitLeavesTheNodeAsItWas) {
  Enrolled a = Enrol("a");
  Sql("CREATE TRIGGER fail_nodes BEFORE INSERT ON nodes "
      "BEGIN SELECT RAISE(ABORT, 'injected failure'); END;");
  EXPECT_FALSE(core_->RevokeNode(a.node_id).ok());
  EXPECT_FALSE(core_->FindNode(a.node_id).value().revoked);
  EXPECT_FALSE(a.link->closed);
  EXPECT_EQ(accounts_->Authenticate("Bearer " + a.credential).node_id, a.node_id);
  Sql("DROP TRIGGER fail_nodes;");
  EXPECT_TRUE(core_->RevokeNode(a.node_id).ok());
}

}  // namespace
}  // namespace sluice::server
