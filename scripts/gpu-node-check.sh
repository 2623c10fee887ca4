#!/usr/bin/env bash
# Checks Sluice end to end on a machine with an NVIDIA GPU, and keeps the evidence:
#   1. records `nvidia-smi -q`, `-q -x` and `topo -m` (test fixtures for the probe's parsers);
#   2. `sluice probe` as an agent here would publish it;
#   3. a server on SQLite and an agent on this machine: the agent runs its conformance suite
#      (gpu-memory, gpu-compute and the gpu-perf speed check on the real GPU) and the server
#      judges it; sandboxed when bubblewrap works here, else with --no-sandbox (said), and the
#      jobs' network filter where iptables works (--allow-unfiltered-network: said either way);
#   4. examples/gpu/job.yaml through `sluice estimate` and `sluice run`, then its audit bundle;
#   5. a job that fills 3 GiB with 1 GiB allocated: it must end `out of memory`.
#
# Usage: scripts/gpu-node-check.sh OUT_DIR
#   SLUICE_BIN_DIR  where sluice, sluice-node and sluice-supervisor are (default: build)
#   SLUICE_GPU_JOB  the job to run (default: examples/gpu/job.yaml)
#   SLUICE_AGENT_ARGS  extra agent flags (tests use them to play a GPU with the fake drivers)
# Relative paths are the caller's. Exit code: 0 when the node was verified, the GPU job succeeded
# and the memory hog ended `out of memory`; summary.txt says what failed.
set -uo pipefail
out=${1:?usage: scripts/gpu-node-check.sh OUT_DIR}
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 1
repo=$(cd "$(dirname "$0")/.." && pwd)
bin_dir=$(cd "${SLUICE_BIN_DIR:-$repo/build}" && pwd) || exit 1
bin=$bin_dir/sluice
job=$(realpath "${SLUICE_GPU_JOB:-$repo/examples/gpu/job.yaml}") || exit 1
cd "$repo"
work=$(mktemp -d /tmp/sluice-gpu-check.XXXXXX)
server_pid=""
agent_pid=""
failed=()
summary() { echo "$*" | tee -a "$out/summary.txt"; }
stop() {
  [[ -n $agent_pid ]] && kill -TERM "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
  [[ -n $server_pid ]] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  cp "$work"/*.log "$out/" 2>/dev/null
  rm -rf "$work"
}
trap stop EXIT

summary "==> $(date -u +%FT%TZ) on $(hostname), kernel $(uname -r)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi -q >"$out/nvidia-smi-q.txt" 2>&1
  nvidia-smi -q -x >"$out/nvidia-smi-q.xml" 2>&1
  nvidia-smi topo -m >"$out/nvidia-smi-topo.txt" 2>&1
  summary "nvidia-smi -L: $(nvidia-smi -L 2>&1 | head -n 4)"
else
  summary "nvidia-smi: not on PATH"
fi

summary "==> sluice probe"
"$bin" probe >"$out/probe.txt" 2>&1 || failed+=(probe)
"$bin" probe --json >"$out/probe.json" 2>&1 || failed+=(probe-json)
head -n 30 "$out/probe.txt"

"$bin" server --listen 127.0.0.1:0 --data-dir "$work/server" >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 300); do [[ -s $work/server/server.url ]] && break; sleep 0.1; done
[[ -s $work/server/server.url ]] || { summary "FAIL: the server did not start"; exit 1; }
export SLUICE_SERVER=$(cat "$work/server/server.url")
export SLUICE_TOKEN=$(cat "$work/server/admin.token")

# Starts the agent; returns 0 once the node is verified, 1 when it failed verification or is not
# verified within 240 s, 2 when the agent exited (it refuses to start where the sandbox cannot be
# built).
start_agent() {
  # shellcheck disable=SC2086  # SLUICE_AGENT_ARGS is a list of flags
  "$bin" agent --server "$SLUICE_SERVER" --join-token-file "$work/server/join.token" \
    --data-dir "$work/agent" --name local --price-per-gpu-hour 3 --price-per-cpu-hour 0.05 \
    --allow-unfiltered-network \
    ${SLUICE_AGENT_ARGS:-} "$@" >>"$work/agent.log" 2>&1 &
  agent_pid=$!
  for _ in $(seq 1 2400); do
    kill -0 "$agent_pid" 2>/dev/null || { wait "$agent_pid"; agent_pid=""; return 2; }
    if "$bin" nodes --json 2>/dev/null | grep -q '"verification": "verified"'; then return 0; fi
    # The server retries a failed verification later (with backoff): the first failure is the
    # verdict here, and its reasons stay in `node status` until the retry starts.
    grep -q 'failed verification' "$work/server.log" && return 1
    sleep 0.1
  done
  return 1
}

summary "==> sluice agent (sandboxed)"
start_agent
rc=$?
sandbox=bubblewrap
if [[ $rc -eq 2 ]]; then
  summary "the sandboxed agent exited: $(grep -i 'sandbox\|cgroup' "$work/agent.log" | tail -n 3)"
  summary "==> sluice agent --no-sandbox"
  sandbox=none
  start_agent --no-sandbox
  rc=$?
fi
summary "agent start line: $(grep -m1 -i 'sandbox' "$work/agent.log")"
summary "agent start line: $(grep -m1 'job network' "$work/agent.log")"
[[ $rc -eq 0 ]] || failed+=("verification")
"$bin" nodes >"$out/nodes.txt" 2>&1
"$bin" node status local >"$out/node-status.txt" 2>&1
"$bin" node status local --json >"$out/node-status.json" 2>&1
"$bin" offers >"$out/offers.txt" 2>&1
summary "verification: $(grep -m1 -o '"verification": "[a-z]*"' "$out/node-status.json") (sandbox: $sandbox)"
cat "$out/node-status.txt"

summary "==> sluice estimate $job"
"$bin" estimate "$job" >"$out/estimate.txt" 2>&1 || failed+=(estimate)
cat "$out/estimate.txt"

summary "==> sluice run $job --follow"
if [[ $rc -eq 0 ]]; then
  timeout 300 "$bin" run "$job" --follow >"$out/job-run.txt" 2>&1 || failed+=("job")
else
  echo "not run: the node is not verified, so no job can be placed on it" >"$out/job-run.txt"
fi
cat "$out/job-run.txt"
summary "job: $(grep -m1 '^result ' "$out/job-run.txt" || echo 'no result line')"
# The agent's own speed check against PyTorch on the same GPU, in this run (docs/benchmarks.md).
python3 - "$out/node-status.json" "$out/job-run.txt" <<'PY' | while read -r line; do summary "$line"; done
import json, sys
try:
    speed = json.load(open(sys.argv[1]))["gpu_speeds"][0]
    line = next(l for l in open(sys.argv[2]) if l.startswith("result "))
    torch = json.loads(line[len("result "):])
except (OSError, ValueError, KeyError, IndexError, StopIteration):
    sys.exit(0)  # no measurement or no result: nothing to compare
a, t = speed["measured_tflops"], torch["fp16_tflops"]
ag, tg = speed["measured_gb_s"], torch["copy_gb_s"]
print(f"agent check vs PyTorch, GPU 0: FP16 {a:.1f} / {t:.1f} TFLOPS = {a / t:.3f}x; "
      f"copy {ag:.1f} / {tg:.1f} GB/s = {ag / tg:.3f}x")
PY
id=$("$bin" jobs --json | sed -n 's/.*"id": "\(job-[0-9a-f]*\)".*/\1/p' | head -n 1)
if [[ -n $id ]]; then
  "$bin" job "$id" >"$out/job.txt" 2>&1
  "$bin" audit "$id" -o "$out/audit.zip" >/dev/null 2>&1 && "$bin" audit verify "$out/audit.zip" \
    >"$out/audit-verify.txt" 2>&1 || failed+=(audit)
fi

# The job's memory limit (its cgroup: v1 or v2, whichever the host has): a job that fills 3 GiB
# with 1 GiB allocated must end `out of memory`, and the node must stay up.
if [[ $rc -eq 0 ]]; then
  summary "==> a job over its memory limit"
  cat >"$work/memory-hog.yaml" <<'YAML'
name: memory-hog
resources:
  cpus: 1
  memory_gb: 1
run: |
  python3 -c "b = b'x' * (3 << 30); print('filled 3 GiB, so the memory limit did not hold')"
YAML
  timeout 120 "$bin" run "$work/memory-hog.yaml" --follow >"$out/memory-hog.txt" 2>&1
  tail -n 2 "$out/memory-hog.txt"
  if grep -q 'out of memory' "$out/memory-hog.txt" && ! grep -q 'did not hold' "$out/memory-hog.txt"; then
    summary "memory limit: held ($(grep -m1 -o 'out of memory[^"]*' "$out/memory-hog.txt"))"
  elif grep -q 'did not hold' "$out/memory-hog.txt"; then
    summary "memory limit: NOT held (the job filled 3 GiB with 1 GB allocated)"
    failed+=(memory-limit)
  else
    summary "memory limit: not tested (the job did not run as planned: see memory-hog.txt)"
    failed+=(memory-limit)
  fi
  "$bin" nodes >>"$out/nodes.txt" 2>&1
fi

if [[ ${#failed[@]} -eq 0 ]]; then
  summary "PASS: verified and the GPU job succeeded"
  exit 0
fi
summary "FAIL: ${failed[*]}"
exit 1
