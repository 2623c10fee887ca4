#!/usr/bin/env bash
# The README's quick start, runnable on a fresh Debian 12 machine where even `make` may be
# missing: installs the build dependencies (apt-get; sudo when not root), then runs the Makefile.
#
#   ./dev.sh demo   build, then run examples/hello.yaml end to end (server + agent + job)
#   ./dev.sh test   build, then run the whole test suite
#   ./dev.sh TARGET any other Makefile target (build, test-asan, format, clean)
set -euo pipefail
cd "$(dirname "$0")"
if [[ $# -ne 1 ]]; then
  echo "usage: ./dev.sh demo|test|build|test-asan|format|clean" >&2
  exit 2
fi
./scripts/install-deps.sh
exec make --no-print-directory "$1"
