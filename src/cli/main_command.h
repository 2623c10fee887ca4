// Entry point of the `sluice` binary: dispatches subcommands.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sluice::cli {
int Main(int argc, char** argv);
// The top-level commands Main builds for a command line whose first argument is `first` (tests).
std::vector<std::string> TopLevelCommands(std::string_view first);
}  // namespace sluice::cli
