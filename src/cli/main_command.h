// Entry point of the `sluice` binary: dispatches subcommands.
#pragma once

namespace sluice::cli {
int Main(int argc, char** argv);
}
