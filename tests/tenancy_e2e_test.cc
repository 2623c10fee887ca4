// End-to-end tests of accounts and submissions (issue 10 items 1 and 3; README "Accounts, tokens
// and teams"): real server, agent and CLI on loopback. Users made with `sluice account create`
// see only their own jobs, tokens are scoped and revocable, and `sluice run` retried across a
// server that was down yields exactly one job.
#include <gtest/gtest.h>
#include <signal.h>

#include "harness.h"

namespace sluice::testing {
namespace {

bool Contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

class TenancyE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.StartServer({"--heartbeat-grace", "6"});
    cluster_.StartAgent("a1");
  }
  // Runs the CLI with a token file instead of the admin token.
  CommandResult As(const std::string& token_file, std::vector<std::string> args) {
    std::vector<std::string> argv{SluiceBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, {{"SLUICE_SERVER", cluster_.url()},
                             {"SLUICE_TOKEN_FILE", token_file},
                             {"SLUICE_DATA_DIR", cluster_.dir() + "/nowhere"}});
  }
  Cluster cluster_;
};

TEST_F(TenancyE2ETest, UsersSeeOnlyTheirOwnJobsAndTokensAreScoped) {
  const std::string alice = cluster_.dir() + "/alice.token";
  const std::string bob = cluster_.dir() + "/bob.token";
  CommandResult made = cluster_.Cli({"account", "create", "alice", "--out", alice});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  ASSERT_EQ(cluster_.Cli({"account", "create", "bob", "--out", bob}).exit_code, 0);
  // New users are prepaid (issue 14): the admin funds alice before she runs anything.
  ASSERT_EQ(cluster_.Cli({"account", "credit", "alice", "20"}).exit_code, 0);
  CommandResult who = As(alice, {"whoami"});
  ASSERT_EQ(who.exit_code, 0) << who.err;
  EXPECT_TRUE(Contains(who.out, "alice")) << who.out;
  EXPECT_TRUE(Contains(who.out, "user")) << who.out;

  std::string spec =
      cluster_.WriteFile("secret.yaml",
                         "name: secret\nresources: {cpus: 1}\nenv: {MYSECRET: hunter2}\n"
                         "run: echo done\n");
  CommandResult run = As(alice, {"run", spec, "--follow"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  CommandResult mine = As(alice, {"jobs", "--json"});
  ASSERT_EQ(mine.exit_code, 0) << mine.err;
  auto jobs = ParseJson(mine.out);
  ASSERT_TRUE(jobs.ok() && jobs->size() == 1) << mine.out;
  std::string id = (*jobs)[0]["id"];

  // Bob cannot see it, its logs or its env; to him it does not exist.
  CommandResult theirs = As(bob, {"jobs", "--json"});
  EXPECT_FALSE(Contains(theirs.out, id)) << theirs.out;
  CommandResult peek = As(bob, {"job", id});
  EXPECT_NE(peek.exit_code, 0);
  EXPECT_TRUE(Contains(peek.err, "no job")) << peek.err;
  EXPECT_FALSE(Contains(peek.out + peek.err, "hunter2"));
  EXPECT_NE(As(bob, {"logs", id}).exit_code, 0);
  EXPECT_NE(As(bob, {"cancel", id}).exit_code, 0);

  // A read-only token reads but cannot act; a revoked one does nothing at all.
  const std::string ro = cluster_.dir() + "/alice-ro.token";
  ASSERT_EQ(
      As(alice, {"token", "create", "--scope", "read", "--name", "dash", "--out", ro}).exit_code,
      0);
  EXPECT_EQ(As(ro, {"job", id}).exit_code, 0);
  CommandResult ro_delete = As(ro, {"delete", id});
  EXPECT_NE(ro_delete.exit_code, 0);
  EXPECT_TRUE(Contains(ro_delete.err, "scope")) << ro_delete.err;
  CommandResult listed = As(alice, {"token", "list", "--json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  auto tokens = ParseJson(listed.out);
  ASSERT_TRUE(tokens.ok());
  std::string ro_id;
  for (const auto& t : *tokens) {
    if (t.value("name", "") == "dash") ro_id = t.value("id", "");
    EXPECT_FALSE(t.contains("secret"));
  }
  ASSERT_FALSE(ro_id.empty()) << listed.out;
  EXPECT_NE(As(bob, {"token", "revoke", ro_id}).exit_code, 0) << "bob revoked alice's token";
  ASSERT_EQ(As(alice, {"token", "revoke", ro_id}).exit_code, 0);
  CommandResult revoked = As(ro, {"jobs"});
  EXPECT_NE(revoked.exit_code, 0);
  EXPECT_TRUE(Contains(revoked.err, "revoked")) << revoked.err;

  // A disabled account is cut off at once.
  ASSERT_EQ(cluster_.Cli({"account", "disable", "bob"}).exit_code, 0);
  CommandResult disabled = As(bob, {"jobs"});
  EXPECT_NE(disabled.exit_code, 0);
  EXPECT_TRUE(Contains(disabled.err, "disabled")) << disabled.err;
  // Users do not manage accounts.
  CommandResult escalate = As(alice, {"account", "create", "mallory", "--role", "admin"});
  EXPECT_NE(escalate.exit_code, 0);
}

TEST_F(TenancyE2ETest, ASubmitRetriedAcrossAServerOutageMakesExactlyOneJob) {
  std::string spec =
      cluster_.WriteFile("once.yaml", "name: once\nresources: {cpus: 1}\nrun: true\n");
  cluster_.KillServer(SIGKILL);
  // `sluice run` against a server that is down retries with one Idempotency-Key.
  Daemon cli({SluiceBinary(), "run", spec, "--detach"},
             {{"SLUICE_SERVER", cluster_.url()}, {"SLUICE_TOKEN", cluster_.admin_token()}},
             cluster_.dir() + "/cli.log");
  ASSERT_TRUE(WaitUntil([&] { return Contains(cli.Log(), "retrying"); }))
      << "the CLI did not retry: " << cli.Log();
  cluster_.StartServer();
  ASSERT_EQ(cli.Wait(std::chrono::seconds(60)), 0) << cli.Log();
  Json jobs = cluster_.CliJson({"jobs"});
  ASSERT_TRUE(jobs.is_array());
  EXPECT_EQ(jobs.size(), 1u) << jobs.dump();
}

}  // namespace
}  // namespace sluice::testing
