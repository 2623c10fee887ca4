// The daemons' commands in `sluice`: handed to `sluice-node` (cli/command_group.h).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include "cli/command_group.h"

namespace sluice::cli {
namespace {

constexpr const char* kNodeBinary = "sluice-node";

// Execs sluice-node (beside this binary) with our arguments; returns only on failure, saying so.
int ExecNode(char** argv) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string node = NodeBinaryBeside(ec ? "" : self.string(), argv[0]);
  if (node.empty()) {
    std::fprintf(stderr,
                 "sluice: cannot tell which directory `sluice` runs from (/proc/self/exe is "
                 "unreadable and it was started by a bare name): run it by its path, so that "
                 "%s is found beside it\n",
                 kNodeBinary);
    return 127;
  }
  // argv[0] stays what the user typed: `ps` shows `sluice server ...`.
  ::execv(node.c_str(), argv);
  std::fprintf(stderr,
               "sluice: cannot run %s (%s): the server, agent and probe commands run in it, and "
               "it is built and installed beside `sluice`\n",
               node.c_str(), std::strerror(errno));
  return 127;
}

// Lists the command in `sluice --help`; its flags and help are sluice-node's.
class HandedOver final : public CommandGroup {
 public:
  HandedOver(GlobalFlags& g, int& rc, const char* name, const char* about)
      : CommandGroup(g, rc), name_(name), about_(about) {}
  void Add(CLI::App& app) override { app.add_subcommand(name_, about_)->allow_extras(); }

 private:
  const char* name_;
  const char* about_;
};

}  // namespace

std::string NodeBinaryBeside(const std::string& self_exe, const std::string& argv0) {
  const std::string& from = !self_exe.empty() ? self_exe : argv0;
  if (from.find('/') == std::string::npos) return "";
  return (std::filesystem::path(from).parent_path() / kNodeBinary).string();
}

void HandOverDaemonCommands(int argc, char** argv) {
  if (argc < 2) return;
  const std::string_view cmd = argv[1];
  if (cmd == "server" || cmd == "agent" || cmd == "probe") std::exit(ExecNode(argv));
}

std::unique_ptr<CommandGroup> MakeServerGroup(GlobalFlags& g, int& rc) {
  return std::make_unique<HandedOver>(g, rc, "server", kServerAbout);
}
std::unique_ptr<CommandGroup> MakeAgentGroup(GlobalFlags& g, int& rc) {
  return std::make_unique<HandedOver>(g, rc, "agent", kAgentAbout);
}
std::unique_ptr<CommandGroup> MakeProbeGroup(GlobalFlags& g, int& rc) {
  return std::make_unique<HandedOver>(g, rc, "probe", kProbeAbout);
}

}  // namespace sluice::cli
