#include "cli/main_command.h"

#include <cstdio>

namespace sluice::cli {
int Main(int argc, char** argv) {
  std::fprintf(stderr, "sluice: no subcommands are wired yet\n");
  return 2;
}
}  // namespace sluice::cli
