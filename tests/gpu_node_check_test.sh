#!/usr/bin/env bash
# scripts/gpu-node-check.sh on a machine without a GPU, playing one: the agent probes a recorded
# L4 (tests/fixtures/nvidia-smi/l4-1.txt) and runs its GPU checks on the fake CUDA driver at the
# L4's spec speed. Expected: the node is verified; the PyTorch job is placed on the GPU and says
# CUDA is unusable (there is no real GPU), so the script fails on `job` and nothing else; the
# memory hog ends `out of memory`.
# Usage: gpu_node_check_test.sh BUILD_DIR FAKE_CUDA_LIBRARY
set -uo pipefail
build=$1
fake_cuda=$2
repo=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d /tmp/sluice-gpu-check-test.XXXXXX)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; cat "$out/summary.txt" 2>/dev/null; tail -n 20 "$out"/*.log 2>/dev/null; exit 1; }

fixture=$repo/tests/fixtures/nvidia-smi/l4-1.txt
FAKE_CUDA_DEVICES=1 FAKE_CUDA_PCI=00000000:01:00.0 FAKE_CUDA_TOTAL_MIB=23034 \
  FAKE_CUDA_TFLOPS=121 FAKE_CUDA_GBPS=300 SLUICE_BIN_DIR=$build \
  SLUICE_AGENT_ARGS="--from-nvidia-smi $fixture --cuda-library $fake_cuda --skip-software-probe \
--conformance-gpu-mib 16 --conformance-gpu-elements 65536 --conformance-gpu-perf-ms 20" \
  "$repo/scripts/gpu-node-check.sh" "$out/report" >"$out/run.log" 2>&1
rc=$?
out=$out/report
[[ $rc -eq 1 ]] || fail "exit code $rc, expected 1 (the job cannot use a GPU that is not there)"
grep -q '"verification": "verified"' "$out/node-status.json" || fail "the node was not verified"
grep -q 'placed on local (node-[0-9a-f]*), GPUs 0' "$out/job-run.txt" || fail "the GPU job was not placed"
grep -q 'CUDA is not available to this job' "$out/job-run.txt" || fail "matmul.py did not run"
grep -q '^memory limit: held (out of memory' "$out/summary.txt" || fail "the memory limit"
grep -qx 'FAIL: job' "$out/summary.txt" || fail "something besides the job failed"
for f in probe.json offers.txt estimate.txt audit.zip agent.log server.log; do
  [[ -s $out/$f ]] || fail "no $f in the report"
done
echo "gpu-node-check: verified, job placed on GPU 0 and refused for want of CUDA, memory held"
