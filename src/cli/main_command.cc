#include "cli/main_command.h"

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cli/client_config.h"
#include "cli/command_group.h"
#include "cli/commands.h"

namespace sluice::cli {

void AddClientFlags(CLI::App* cmd, GlobalFlags* g, bool json) {
  cmd->add_option("--server", g->server,
                  "Server URL (default: $SLUICE_SERVER, else the local server's server.url)");
  cmd->add_option("--token", g->token,
                  "API token (default: $SLUICE_TOKEN, else the local server's admin.token)");
  cmd->add_option("--ca-file", CaFileFlag(),
                  "CA certificate (PEM) an https:// server must chain to (default: "
                  "$SLUICE_CA_FILE, else the token file's ca-sha256 pin, else the local server's "
                  "tls/ca.crt, else the system trust store)");
  if (json) cmd->add_flag("--json", g->json, "Print JSON for scripts instead of a table");
}

namespace {

constexpr const char* kVersion = "0.1.0";

struct GroupEntry {
  std::vector<std::string_view> commands;  // the top-level commands the group adds
  std::unique_ptr<CommandGroup> (*make)(GlobalFlags&, int&);
};

const std::vector<GroupEntry>& Groups() {
  static const std::vector<GroupEntry> groups = {
      {{"server"}, MakeServerGroup},
      {{"agent"}, MakeAgentGroup},
      {{"probe"}, MakeProbeGroup},
      {{"run"}, MakeRunGroup},
      {{"jobs", "job", "logs", "cancel", "delete"}, MakeJobGroup},
      {{"offers"}, MakeOffersGroup},
      {{"estimate", "catalog", "nodes", "node"}, MakeEstimateGroup},
      {{"whoami", "account", "budget", "budgets", "ledger", "costs", "earnings", "token", "team"},
       MakeAccountGroup},
      {{"audit-log", "audit"}, MakeAuditGroup},
  };
  return groups;
}

// The app with the commands a command line naming `first` needs: that command's group, or all of
// them when `first` names none (help, --version, a typo: CLI11 lists or suggests every command).
std::unique_ptr<CLI::App> BuildApp(std::string_view first, GlobalFlags& g, int& rc,
                                   std::vector<std::unique_ptr<CommandGroup>>& groups) {
  auto app = std::make_unique<CLI::App>(
      "Sluice: one job contract for GPUs everywhere.\n"
      "Run a marketplace server, join machines with agents, run jobs on them.");
  app->set_version_flag("--version", kVersion);
  app->require_subcommand(1);
  app->fallthrough(false);
  bool known = false;
  for (const auto& e : Groups()) {
    for (auto c : e.commands) known = known || c == first;
  }
  for (const auto& e : Groups()) {
    bool wanted = !known;
    for (auto c : e.commands) wanted = wanted || c == first;
    if (!wanted) continue;
    groups.push_back(e.make(g, rc));
    groups.back()->Add(*app);
  }
  return app;
}

}  // namespace

std::vector<std::string> TopLevelCommands(std::string_view first) {
  GlobalFlags g;
  int rc = 0;
  std::vector<std::unique_ptr<CommandGroup>> groups;
  auto app = BuildApp(first, g, rc, groups);
  std::vector<std::string> names;
  for (const CLI::App* sub : app->get_subcommands({})) names.push_back(sub->get_name());
  return names;
}

int Main(int argc, char** argv) {
  HandOverDaemonCommands(argc, argv);
  int rc = 0;
  GlobalFlags g;
  std::vector<std::unique_ptr<CommandGroup>> groups;
  auto app = BuildApp(argc > 1 ? argv[1] : "", g, rc, groups);
  try {
    app->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app->exit(e);
  }
  return rc;
}

}  // namespace sluice::cli
