#include "cli/main_command.h"

int main(int argc, char** argv) { return sluice::cli::Main(argc, argv); }
