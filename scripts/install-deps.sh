#!/usr/bin/env bash
# Installs the Debian 12 packages Sluice builds and runs with (DESIGN.md §9). Idempotent: does
# nothing when everything is present. Needs root or sudo for apt-get.
set -euo pipefail

packages=(
  build-essential make cmake ninja-build pkg-config git
  libboost-dev nlohmann-json3-dev libyaml-cpp-dev libcli11-dev
  libsqlite3-dev libssl-dev libpugixml-dev libarchive-dev
  libjemalloc-dev  # sluice-node's allocator, linked in (CMakeLists.txt: SLUICE_JEMALLOC)
  openssl  # `openssl cms -verify` checks audit bundles in tests and for users
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 procps
  pci.ids  # GPU names from PCI device ids, compiled into the market library (issue 13)
  bubblewrap iptables  # the job sandbox (agent/sandbox.h) and its network filter
  python3-torch  # examples/pytorch and its test
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
