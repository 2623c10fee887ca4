// The `sluice` command line is built in groups of top-level commands (main_command.cc): a
// command line builds only the group of the command it names. CLI11 building every command's
// flags cost ~100 page faults of each `sluice` call; building one group made a client command
// 0.884x as long (bench/cli_start; docs/benchmarks.md, "Submit-to-start latency").
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "cli/commands.h"

namespace sluice::cli {

// A group of top-level commands and the storage their flags write, alive until the parse is done.
class CommandGroup {
 public:
  CommandGroup(GlobalFlags& g, int& rc) : g(g), rc(rc) {}
  virtual ~CommandGroup() = default;
  virtual void Add(CLI::App& app) = 0;

 protected:
  GlobalFlags& g;  // the flags every client command takes
  int& rc;         // the exit code
};

// The daemons' commands, as `sluice --help` lists them (daemon_flags.cc, daemon_exec.cc).
inline constexpr const char* kServerAbout = "Run the marketplace server (REST API + agent channel)";
inline constexpr const char* kAgentAbout = "Join this machine to a server as a provider";
inline constexpr const char* kProbeAbout = "Print what an agent on this machine would publish";

// Two binaries share this command line (docs/design-notes.md, "Two binaries"): `sluice-node`
// runs everything and holds the daemons' code (daemon_flags.cc); `sluice`, the command users
// type most, is linked without position independence so that it starts faster, and hands the
// daemons' commands to `sluice-node` beside it (daemon_exec.cc). Called first by Main: in
// `sluice`, execs `sluice-node` with the same arguments when `argv[1]` is one of them (and does
// not return); in `sluice-node`, does nothing.
void HandOverDaemonCommands(int argc, char** argv);
// Where that `sluice-node` is: beside `self_exe` (/proc/self/exe), else beside `argv0` when it
// names a directory; "" when neither does. Never a bare name, which execv would resolve in the
// current directory: whatever `sluice-node` lay there would run the agent.
std::string NodeBinaryBeside(const std::string& self_exe, const std::string& argv0);

// --server, --token, --ca-file and (with `json`) --json.
void AddClientFlags(CLI::App* cmd, GlobalFlags* g, bool json = true);

// The groups (daemon_flags.cc, job_flags.cc, account_flags.cc).
std::unique_ptr<CommandGroup> MakeServerGroup(GlobalFlags& g, int& rc);
std::unique_ptr<CommandGroup> MakeAgentGroup(GlobalFlags& g, int& rc);
std::unique_ptr<CommandGroup> MakeProbeGroup(GlobalFlags& g, int& rc);
std::unique_ptr<CommandGroup> MakeRunGroup(GlobalFlags& g, int& rc);
std::unique_ptr<CommandGroup> MakeJobGroup(GlobalFlags& g, int& rc);
std::unique_ptr<CommandGroup> MakeOffersGroup(GlobalFlags& g, int& rc);
std::unique_ptr<CommandGroup> MakeEstimateGroup(GlobalFlags& g, int& rc);
std::unique_ptr<CommandGroup> MakeAccountGroup(GlobalFlags& g, int& rc);
std::unique_ptr<CommandGroup> MakeAuditGroup(GlobalFlags& g, int& rc);

}  // namespace sluice::cli
