#include "cli/main_command.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "cli/command_group.h"

namespace sluice::cli {
namespace {

bool Has(const std::vector<std::string>& names, const std::string& n) {
  return std::find(names.begin(), names.end(), n) != names.end();
}

// `sluice NAME ...` builds only NAME's group of commands (main_command.cc, CommandGroup); help, a
// missing or unknown command builds them all.
TEST(MainCommandTest, NamingACommandBuildsItsGroupOnlyAndAnythingElseBuildsAll) {
  const std::vector<std::string> all = TopLevelCommands("");
  for (const char* n :
       {"server", "agent", "probe", "run", "jobs", "logs", "offers", "estimate", "nodes", "node",
        "account", "token", "team", "budget", "costs", "audit", "audit-log"}) {
    EXPECT_TRUE(Has(all, n)) << n;
  }
  EXPECT_EQ(TopLevelCommands("--help"), all);
  EXPECT_EQ(TopLevelCommands("no-such-command"), all);
  for (const std::string& n : all) {
    const std::vector<std::string> built = TopLevelCommands(n);
    EXPECT_TRUE(Has(built, n)) << n;
    // A command missing from its group's list in Groups() would build everything here.
    EXPECT_LT(built.size(), all.size()) << n << " is not listed with its group";
  }
  EXPECT_EQ(TopLevelCommands("server"), std::vector<std::string>{"server"});
}

// `sluice` hands server, agent and probe to sluice-node beside it (daemon_exec.cc): this test
// binary has none beside it, so the hand-over fails, and says what is missing.
TEST(MainCommandDeathTest, ADaemonCommandWithoutSluiceNodeBesideItSaysSo) {
  char a0[] = "sluice", a1[] = "agent";
  char* argv[] = {a0, a1, nullptr};
  EXPECT_EXIT(HandOverDaemonCommands(2, argv), testing::ExitedWithCode(127),
              "cannot run .*sluice-node.*built and installed beside `sluice`");
}

TEST(MainCommandTest, SluiceNodeIsLookedForBesideTheRunningBinaryNeverInTheCurrentDirectory) {
  EXPECT_EQ(NodeBinaryBeside("/opt/sluice/bin/sluice", "sluice"), "/opt/sluice/bin/sluice-node");
  EXPECT_EQ(NodeBinaryBeside("", "/usr/local/bin/sluice"), "/usr/local/bin/sluice-node");
  EXPECT_EQ(NodeBinaryBeside("", "./sluice"), "./sluice-node");  // as typed: a path
  // No /proc and started from $PATH by a bare name: unknown, not "sluice-node" in the cwd.
  EXPECT_EQ(NodeBinaryBeside("", "sluice"), "");
}

TEST(MainCommandTest, ClientCommandsAreNotHandedOver) {
  char a0[] = "sluice", a1[] = "jobs";
  char* argv[] = {a0, a1, nullptr};
  HandOverDaemonCommands(2, argv);  // returns: `jobs` runs here
  HandOverDaemonCommands(1, argv);
  SUCCEED();
}

}  // namespace
}  // namespace sluice::cli
