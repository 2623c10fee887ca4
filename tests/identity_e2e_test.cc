// End-to-end tests of node identity (issue 10 item 2; docs/design-notes.md "Node identity"): a
// fake agent speaking the real protocol with the shared join token and a stolen node id cannot
// take over a live node, a conformance report replayed from another node does not verify it, an
// agent proves its node with its own credential across restarts, and `sluice node revoke` cuts
// it off. Real server, agents and CLI on loopback; the fake agent is a WsClient in this process.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "common/agent_protocol.h"
#include "common/inventory.h"
#include "common/text.h"
#include "harness.h"
#include "net/http_types.h"
#include "net/ws_client.h"

namespace sluice::testing {
namespace {

bool Contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// An agent that is not one: the real protocol over a real WebSocket, driven by the test.
class FakeAgent {
 public:
  ~FakeAgent() {
    if (ws_) ws_->Close();
  }
  Status Connect(const std::string& server_url, const std::string& token) {
    auto url = ParseUrl(server_url);
    if (!url.ok()) return url.status();
    WsClient::Options o;
    o.url = *url;
    o.path = "/v1/agent/connect";
    o.headers.emplace_back("Authorization", "Bearer " + token);
    ws_ = std::make_unique<WsClient>(
        o,
        [this](std::string_view text) {
          auto j = ParseJson(text);
          std::lock_guard<std::mutex> lock(mu_);
          if (j.ok()) received_.push_back(*j);
          cv_.notify_all();
        },
        [this](Status) {
          std::lock_guard<std::mutex> lock(mu_);
          closed_ = true;
          cv_.notify_all();
        });
    return ws_->Connect();
  }
  void Send(const Json& msg) { ws_->Send(DumpJson(msg)); }
  // The first message of `type`; null when none came within `timeout`.
  Json WaitFor(const std::string& type,
               std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> lock(mu_);
    Json found;
    cv_.wait_for(lock, timeout, [&] {
      for (const auto& m : received_) {
        if (m.value("type", "") == type) {
          found = m;
          return true;
        }
      }
      return false;
    });
    return found;
  }
  bool WaitClosed(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return closed_; });
  }
  std::vector<Json> received() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }

 private:
  std::unique_ptr<WsClient> ws_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Json> received_;
  bool closed_ = false;
};

class IdentityE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.StartServer(
        {"--heartbeat-interval", "0.3", "--heartbeat-grace", "6", "--cancel-grace", "1"});
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "---- server log ----\n" << cluster_.ServerLog() << "\n";
  }
  Json Node(const std::string& name) {
    Json nodes = cluster_.CliJson({"nodes"});
    if (!nodes.is_array()) return Json();
    for (const auto& n : nodes) {
      if (n.value("name", "") == name) return n;
    }
    return Json();
  }
  std::string JobState(const std::string& id) {
    Json j = cluster_.CliJson({"job", id});
    return j.is_object() ? j["job"].value("state", "") : "";
  }
  // A hello for `name` with `node_id`, on the inventory `node` (GET /v1/nodes) was probed with.
  Json HelloAs(const std::string& name, const std::string& node_id, const Json& node) {
    proto::Hello h;
    h.node_id = node_id;
    h.name = name;
    auto inv = InventoryFromJson(node["inventory"]);
    EXPECT_TRUE(inv.ok()) << inv.status().ToString();
    if (inv.ok()) h.inventory = *inv;
    h.agent_version = "0.1.0";
    return proto::ToJson(h);
  }
  Cluster cluster_;
};

// The attack of issue 10: with the shared join token and a node id printed by `sluice nodes`, a
// fake agent took over a live node, had its running job marked lost and received the next jobs.
TEST_F(IdentityE2ETest, AFakeAgentWithTheJoinTokenAndAStolenNodeIdIsRefused) {
  // Its job waits for a file outside its work dir, which the sandbox would hide.
  cluster_.StartAgent("victim", {"--no-sandbox"});
  Json victim = Node("victim");
  const std::string victim_id = victim.value("id", "");
  ASSERT_FALSE(victim_id.empty());
  const std::string go = cluster_.dir() + "/go";
  // Runs until the test lets it finish.
  const std::string body =
      "name: wait\n"
      "resources: {cpus: 1, memory_gb: 0.5}\n"
      "env: {API_KEY: s3cret}\n"
      "run: |\n"
      "  while [ ! -f " +
      go +
      " ]; do sleep 0.05; done\n"
      "  echo finished\n";
  std::string spec = cluster_.WriteFile("wait.yaml", body);
  CommandResult run = cluster_.Cli({"run", spec});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string job = Trim(run.out);
  ASSERT_TRUE(WaitUntil([&] { return JobState(job) == "running"; })) << JobState(job);

  FakeAgent fake;
  ASSERT_TRUE(fake.Connect(cluster_.url(), cluster_.join_token()).ok());
  fake.Send(HelloAs("victim", victim_id, victim));  // "I run nothing": today, the job was lost
  Json error = fake.WaitFor("error");
  ASSERT_TRUE(error.is_object()) << DumpJson(fake.received());
  EXPECT_EQ(error.value("code", ""), "PERMISSION_DENIED");
  EXPECT_TRUE(Contains(error.value("message", ""), "a join token cannot take it over"))
      << error.value("message", "");
  EXPECT_TRUE(fake.WaitClosed());
  for (const auto& m : fake.received()) {
    EXPECT_NE(m.value("type", ""), "welcome") << DumpJson(m);
    EXPECT_NE(m.value("type", ""), "assign") << DumpJson(m);
  }

  // The victim keeps its node and its job, which finishes as it should.
  Json after = Node("victim");
  EXPECT_EQ(after.value("state", ""), "online");
  EXPECT_EQ(after.value("running_attempts", 0), 1);
  EXPECT_EQ(JobState(job), "running");
  cluster_.WriteFile("go", "");
  EXPECT_TRUE(WaitUntil([&] { return JobState(job) == "succeeded"; })) << JobState(job);
  Json detail = cluster_.CliJson({"job", job});
  ASSERT_TRUE(detail.is_object());
  EXPECT_EQ(detail["attempts"].size(), 1u) << DumpJson(detail);

  // The audit log names the join token that tried, never the victim, as the actor.
  Json audit = cluster_.CliJson({"audit-log"});
  ASSERT_TRUE(audit.is_array()) << cluster_.Cli({"audit-log"}).err;
  int attempts = 0;
  for (const auto& e : audit) {
    if (e.value("action", "") != "agent.impersonation") continue;
    ++attempts;
    EXPECT_EQ(e.value("target", ""), victim_id);
    EXPECT_TRUE(Contains(e.value("actor", ""), "(join-")) << DumpJson(e);
    EXPECT_FALSE(Contains(e.value("actor", ""), victim_id)) << DumpJson(e);
    EXPECT_EQ(e.value("status", 0), 403) << DumpJson(e);
  }
  EXPECT_EQ(attempts, 1) << DumpJson(audit, 2);
}

TEST_F(IdentityE2ETest, AConformanceReportReplayedFromAnotherNodeDoesNotVerifyIt) {
  cluster_.StartAgent("real");
  Json real = Node("real");
  Json captured = real["conformance"];  // what the real agent sent, as the server shows it
  ASSERT_TRUE(captured.is_object() && captured.contains("checks")) << DumpJson(real);

  // A fake node on the same inventory enrols with the join token and answers the server's
  // request with the captured report.
  FakeAgent fake;
  ASSERT_TRUE(fake.Connect(cluster_.url(), cluster_.join_token()).ok());
  fake.Send(HelloAs("fake", "", real));
  Json welcome = fake.WaitFor("welcome");
  ASSERT_TRUE(welcome.is_object()) << DumpJson(fake.received());
  EXPECT_FALSE(welcome.value("credential", "").empty());  // enrolment mints one
  Json ask = fake.WaitFor("reverify");
  ASSERT_TRUE(ask.is_object());
  EXPECT_EQ(ask.value("nonce", "").size(), 32u);
  fake.Send(Json{{"type", "conformance"}, {"report", captured}});
  Json error = fake.WaitFor("error");
  ASSERT_TRUE(error.is_object()) << DumpJson(fake.received());
  EXPECT_EQ(error.value("code", ""), "PERMISSION_DENIED");
  EXPECT_TRUE(Contains(error.value("message", ""), "stale or replayed"))
      << error.value("message", "");
  Json node = Node("fake");
  EXPECT_NE(node.value("verification", ""), "verified") << DumpJson(node);
  Json offers = cluster_.CliJson({"offers"});
  ASSERT_TRUE(offers.is_array());
  for (const auto& o : offers) EXPECT_NE(o.value("node", ""), node.value("id", ""));
}

TEST_F(IdentityE2ETest, AnAgentKeepsItsCredentialAcrossRestartsAndRevokeCutsItOff) {
  Daemon* agent = cluster_.StartAgent("keeper");
  const std::string id = Node("keeper").value("id", "");
  ASSERT_FALSE(id.empty());
  const std::string data = cluster_.dir() + "/agent-keeper";
  const std::string credential = Trim(ReadAll(data + "/node.credential"));
  ASSERT_FALSE(credential.empty());
  EXPECT_NE(credential, cluster_.join_token());
  struct stat st {};
  ASSERT_EQ(::stat((data + "/node.credential").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  // Restarted, it proves the same node with its credential.
  agent->Signal(SIGTERM);
  ASSERT_EQ(agent->Wait(std::chrono::seconds(20)), 0) << agent->Log();
  agent = cluster_.StartAgent("keeper");
  EXPECT_EQ(Node("keeper").value("id", ""), id);
  EXPECT_TRUE(Contains(agent->Log(), "using the node credential")) << agent->Log();
  Json nodes = cluster_.CliJson({"nodes"});
  ASSERT_TRUE(nodes.is_array());
  EXPECT_EQ(nodes.size(), 1u);

  // Revoked: disconnected, its credential refused, and the agent stops with the reason.
  CommandResult revoke = cluster_.Cli({"node", "revoke", "keeper"});
  ASSERT_EQ(revoke.exit_code, 0) << revoke.out << revoke.err;
  EXPECT_TRUE(Contains(revoke.out, "revoked node keeper")) << revoke.out;
  int rc = agent->Wait(std::chrono::seconds(30));
  EXPECT_NE(rc, 0) << agent->Log();
  EXPECT_NE(rc, -1) << "the agent did not stop:\n" << agent->Log();
  EXPECT_TRUE(Contains(agent->Log(), "node credential refused (revoked?)")) << agent->Log();
  Json node = Node("keeper");
  EXPECT_EQ(node.value("state", ""), "lost") << DumpJson(node);
  EXPECT_TRUE(node.value("revoked", false)) << DumpJson(node);

  // Nor can the credential be used by anyone else.
  FakeAgent fake;
  Status s = fake.Connect(cluster_.url(), credential);
  EXPECT_EQ(s.code(), StatusCode::kUnauthenticated) << s.ToString();
}

}  // namespace
}  // namespace sluice::testing
