#!/usr/bin/env bash
# The end-to-end demo behind `make demo`: a server on SQLite, one local agent, and
# examples/hello.yaml submitted, followed to the end, and everything shut down cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${SLUICE_BIN:-build/sluice}
work=$(mktemp -d /tmp/sluice-demo.XXXXXX)
server_pid=""
agent_pid=""
cleanup() {
  local rc=$?
  [[ -n $agent_pid ]] && kill -TERM "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null || true
  [[ -n $server_pid ]] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  if [[ $rc -ne 0 ]]; then
    echo "demo: failed (exit $rc); logs:" >&2
    tail -n 30 "$work"/server.log "$work"/agent.log >&2 || true
  fi
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT INT TERM

echo "==> starting sluice server (SQLite in $work/server)"
"$bin" server --listen 127.0.0.1:0 --data-dir "$work/server" >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do [[ -s $work/server/server.url ]] && break; sleep 0.1; done
[[ -s $work/server/server.url ]] || { echo "demo: the server did not start" >&2; exit 1; }
export SLUICE_SERVER=$(cat "$work/server/server.url")
export SLUICE_TOKEN=$(cat "$work/server/admin.token")
echo "    listening on $SLUICE_SERVER"

echo "==> starting a local agent (it probes this machine and publishes its offer)"
# --allow-unfiltered-network: the demo's only job is your own, and an agent that is not root (or
# a container without CAP_NET_ADMIN) cannot install the jobs' network filter; a provider's agent
# should run without it (README, "Join a machine as a provider").
"$bin" agent --server "$SLUICE_SERVER" --join-token-file "$work/server/join.token" \
  --data-dir "$work/agent" --name local --allow-unfiltered-network >"$work/agent.log" 2>&1 &
agent_pid=$!
# The probe imports PyTorch when it is installed, which can take several seconds; then the
# server has the agent run its conformance suite and verifies the node.
online=""
for _ in $(seq 1 900); do
  if "$bin" nodes --json 2>/dev/null | grep -q '"verification": "verified"'; then
    online=yes
    break
  fi
  sleep 0.1
done
if [[ -z $online ]]; then
  echo "demo: the agent was not online and verified within 90 s" >&2
  "$bin" node status local >&2 || true
  exit 1
fi
"$bin" nodes
echo
echo "==> sluice node status local (the conformance suite, judged by the server)"
"$bin" node status local
echo
"$bin" offers
echo
echo "==> sluice run examples/hello.yaml --follow"
set +e
"$bin" run examples/hello.yaml --follow
rc=$?
set -e
echo
"$bin" jobs
job=$("$bin" jobs --json | sed -n 's/.*"id": "\(job-[0-9a-f]*\)".*/\1/p' | head -n 1)
echo
echo "==> sluice audit $job -o $work/audit.zip; sluice audit verify $work/audit.zip"
"$bin" audit "$job" -o "$work/audit.zip"
"$bin" audit verify "$work/audit.zip"
echo
echo "==> shutting down (exit code of the job: $rc)"
exit $rc
