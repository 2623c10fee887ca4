#!/usr/bin/env python3
"""Preemption recovery: from the preemption notice to the job's first new step elsewhere.

Sluice: a real server (`--heartbeat-interval 0.3`) and N agents on loopback run one
long job that honours the job contract (checkpoint in $SLUICE_CHECKPOINT_DIR, save and exit
on SIGTERM, resume on start) and timestamps itself. Each of the preemptions: t0 =
time.time() right before POST /v1/nodes/NODE/reclaim reaches the wire; the sample ends at
the wall-clock time the job itself writes on its first step line of the next attempt, on
another agent. The job's own save (SIGTERM -> "save_done") and load (process start ->
"load_done") are subtracted.

Baseline: Slurm's requeue path on the same machine, in the same run: the same script as a
`sbatch --requeue` batch job, t0 right before `scontrol requeue JOBID`, ending at the first
step line of the next run in its output file, with the same subtraction.

Stdlib only. Run as root on Debian 12: python3 bench/recovery/run.py [--sluice build/sluice]
See bench/recovery/README.md and docs/benchmarks.md.
"""

import argparse
import http.client
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# Shared helpers (process groups, waits with deadlines, percentiles, the private Slurm).
_spec = importlib.util.spec_from_file_location(
    "submit_latency_run", os.path.join(REPO, "bench", "submit_latency", "run.py"))
sl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sl)
BenchError, Procs, log, wait_for, percentile, tail = (
    sl.BenchError, sl.Procs, sl.log, sl.wait_for, sl.percentile, sl.tail)

TARGET_P50_MS = 1000.0
PREEMPT_COOLDOWN_S = 60.0  # server_core.h preempt_cooldown_ms: a preempted job avoids that node

# The job, identical for both systems. It writes its own wall-clock times (CLOCK_REALTIME,
# the clock time.time() reads) so nothing depends on how fast its output travels:
#   start      first action of the process (bash is already running)
#   load_done  after reading the checkpoint
#   step N     each step (the first one of an attempt ends the sample)
#   term       first action of the SIGTERM trap
#   save_done  after writing the checkpoint in the trap, right before `exit 143`
# `sleep & wait` so the trap runs at once instead of after the sleep. A `date` in flight
# may die with the SIGTERM sent to the process group; such a line has no time and is ignored.
JOB_SCRIPT = r'''ck="${SLUICE_CHECKPOINT_DIR:?}/step"
echo "start t=$(date +%s.%N) attempt=$SLUICE_ATTEMPT resumed=${SLUICE_RESUMED:-0}"
step=0
if [ -f "$ck" ]; then step=$(cat "$ck"); fi
echo "load_done t=$(date +%s.%N) step=$step attempt=$SLUICE_ATTEMPT"
save() { echo "$step" > "$ck.tmp" && mv -f "$ck.tmp" "$ck"; }
on_term() {
  echo "term t=$(date +%s.%N) attempt=$SLUICE_ATTEMPT"
  save
  echo "save_done t=$(date +%s.%N) step=$step attempt=$SLUICE_ATTEMPT"
  exit 143
}
trap on_term TERM
while :; do
  step=$((step + 1))
  echo "step $step t=$(date +%s.%N) attempt=$SLUICE_ATTEMPT"
  save
  sleep 0.02 & wait $!
done
'''

LINE_RE = re.compile(r"^(?P<kind>start|load_done|term|save_done|step) (?:(?P<n>\d+) )?"
                     r"t=(?P<t>\d+\.\d+) (?:.* )?attempt=(?P<att>\d+)")
STEP_RE = re.compile(r"\bstep=(\d+)")


class AttemptLines:
    """First occurrence of each kind of timestamped line, per attempt number."""

    def __init__(self):
        self.by_attempt = {}  # attempt -> {kind: (t, step)}

    def add(self, text):
        m = LINE_RE.match(text)
        if not m:
            return
        kinds = self.by_attempt.setdefault(int(m["att"]), {})
        if m["kind"] in kinds:
            return
        step = m["n"]
        if step is None:
            s = STEP_RE.search(text)
            step = s.group(1) if s else None
        kinds[m["kind"]] = (float(m["t"]), int(step) if step is not None else None)

    def get(self, attempt, kind):
        return self.by_attempt.get(attempt, {}).get(kind)


def job_side(old, new):
    """The job's own lines around one preemption -> times in seconds, or None if missing.
    old/new: {kind: (t, step)} of the preempted and the next attempt."""
    need_old, need_new = ("term", "save_done"), ("start", "load_done", "step")
    if any(k not in old for k in need_old) or any(k not in new for k in need_new):
        return None
    return {
        "term": old["term"][0], "save_done": old["save_done"][0],
        "saved_step": old["save_done"][1],
        "start": new["start"][0], "load_done": new["load_done"][0],
        "loaded_step": new["load_done"][1], "first_step": new["step"][0],
        "first_step_n": new["step"][1],
    }


def sample_from(t0, js):
    """recovery = (first new step - t0) - job save - job load, all from the job's clocks."""
    save = js["save_done"] - js["term"]
    load = js["load_done"] - js["start"]
    raw = js["first_step"] - t0
    return {
        "t0": t0,
        "raw_s": raw,
        "job_save_s": save,
        "job_load_s": load,
        "recovery_s": raw - save - load,
        "notice_to_sigterm_s": js["term"] - t0,
        "exit_to_new_process_s": js["start"] - js["save_done"],
        "load_to_first_step_s": js["first_step"] - js["load_done"],
        "resumed_from_final_checkpoint": js["loaded_step"] == js["saved_step"],
        "saved_step": js["saved_step"],
        "loaded_step": js["loaded_step"],
    }


def stats_ms(xs_s):
    xs = sorted(x * 1000.0 for x in xs_s)
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "p50_ms": percentile(xs, 50), "p90_ms": percentile(xs, 90),
            "p99_ms": percentile(xs, 99), "min_ms": xs[0], "max_ms": xs[-1],
            "mean_ms": sum(xs) / len(xs)}


# --------------------------------------------------------------------------- Sluice

class SluiceRecovery:
    def __init__(self, path, procs, n_agents, keep_tmp=False):
        self.path = path
        self.procs = procs
        self.n_agents = n_agents
        self.keep_tmp = keep_tmp
        self.d = tempfile.mkdtemp(prefix="sluice-bench-recovery-")
        self.server_dir = os.path.join(self.d, "server")
        os.makedirs(self.server_dir)
        self.job_id = None
        self.lines = AttemptLines()
        self.cv = threading.Condition()
        self.stream_conn = None
        self.stream_error = None

    # ---- plumbing
    def _check_alive(self):
        for name, p in self.procs.procs:
            if p.poll() is not None:
                raise BenchError(f"sluice {name} exited with {p.returncode}; log tail:\n"
                                 f"{tail(os.path.join(self.d, name + '.log'))}", code=2)

    def _conn(self, timeout=10):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def api(self, method, path, body=None, timeout=10):
        c = self._conn(timeout)
        try:
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers=self.headers)
            r = c.getresponse()
            data = r.read()
            if r.status >= 300:
                raise BenchError(f"{method} {path}: HTTP {r.status}: {data[:500]!r}")
            return json.loads(data) if data else {}
        finally:
            c.close()

    def start(self):
        lg = lambda n: open(os.path.join(self.d, f"{n}.log"), "w")
        self.procs.start("server", [self.path, "server", "--listen", "127.0.0.1:0",
                                    "--data-dir", self.server_dir,
                                    "--heartbeat-interval", "0.3",
                                    # A reclaimed node leaves the market for a cool-down; the
                                    # bench reclaims nodes again once the job's own 60 s passed.
                                    "--reclaim-cooldown", str(int(PREEMPT_COOLDOWN_S))],
                         stdout=lg("server"), stderr=subprocess.STDOUT)
        url_file = os.path.join(self.server_dir, "server.url")

        def url():
            self._check_alive()
            try:
                with open(url_file) as f:
                    return f.read().strip() or None
            except FileNotFoundError:
                return None
        self.url = wait_for(url, 30, url_file)
        tok, join = (os.path.join(self.server_dir, f) for f in ("admin.token", "join.token"))
        wait_for(lambda: os.path.exists(tok) and os.path.exists(join), 10,
                 "admin.token and join.token")
        with open(tok) as f:
            self.token = f.read().strip()
        u = urllib.parse.urlsplit(self.url)
        self.host, self.port = u.hostname, u.port
        self.headers = {"Authorization": f"Bearer {self.token}",
                        "Content-Type": "application/json"}
        self.env = dict(os.environ, SLUICE_SERVER=self.url, SLUICE_TOKEN=self.token)
        log(f"sluice: server at {self.url}; starting {self.n_agents} agents")
        for i in range(self.n_agents):
            name = f"a{i + 1:02d}"
            self.procs.start(name, [self.path, "agent", "--server", self.url,
                                    "--join-token-file", join,
                                    "--data-dir", os.path.join(self.d, name),
                                    "--name", name, "--skip-software-probe",
                                    # 21 agents verify at once on a small machine: a small
                                    # conformance suite (it runs before the measurement).
                                    "--conformance-memory-mib", "64",
                                    "--conformance-disk-mib", "8"],
                             stdout=lg(name), stderr=subprocess.STDOUT)

        def online():
            self._check_alive()
            nodes = self.api("GET", "/v1/nodes")["nodes"]
            return sum(1 for n in nodes if n.get("state") == "online"
                       and n.get("verification") == "verified") >= self.n_agents
        wait_for(online, 120, f"{self.n_agents} nodes 'online' and verified in GET /v1/nodes",
                 interval=0.1)
        self.node_names = {n["id"]: n["name"] for n in self.api("GET", "/v1/nodes")["nodes"]}
        log(f"sluice: {self.n_agents} agents online")

    def submit(self, max_restarts):
        spec = os.path.join(self.d, "job.yaml")
        body = "".join("  " + l + "\n" if l else "\n" for l in JOB_SCRIPT.splitlines())
        with open(spec, "w") as f:
            f.write("name: recovery\n"
                    "resources: {cpus: 1, memory_gb: 0.1}\n"
                    "run: |\n" + body +
                    "lifecycle: {checkpoint_interval: 1s, grace_period: 5s, "
                    f"max_restarts: {max_restarts}}}\n")
        r = subprocess.run([self.path, "run", spec, "--detach"], env=self.env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=30)
        m = re.search(r"job-[0-9a-f]+", r.stdout)
        if r.returncode != 0 or not m:
            raise BenchError(f"`sluice run --detach` failed (rc={r.returncode}): "
                             f"{r.stdout.strip()} {r.stderr.strip()}")
        self.job_id = m.group(0)
        threading.Thread(target=self._stream, daemon=True).start()
        log(f"sluice: job {self.job_id} submitted")

    def _stream(self):
        """Follows GET /v1/jobs/ID/stream (NDJSON events + logs) and indexes the log lines."""
        try:
            c = self._conn(timeout=None)
            self.stream_conn = c
            c.request("GET", f"/v1/jobs/{self.job_id}/stream?events=1&logs=1",
                      headers=self.headers)
            r = c.getresponse()
            if r.status != 200:
                raise BenchError(f"stream: HTTP {r.status}: {r.read()[:300]!r}")
            for raw in r:
                item = json.loads(raw)
                if item.get("type") == "log":
                    with self.cv:
                        self.lines.add(item.get("text", ""))
                        self.cv.notify_all()
                elif item.get("type") == "end":
                    break
        except Exception as e:  # reported by wait_line
            self.stream_error = e
        with self.cv:
            self.cv.notify_all()

    def wait_line(self, attempt, kind, deadline_s):
        end = time.monotonic() + deadline_s
        with self.cv:
            while True:
                v = self.lines.get(attempt, kind)
                if v is not None:
                    return v
                if self.stream_error is not None:
                    raise BenchError(f"log stream ended: {self.stream_error}")
                left = end - time.monotonic()
                if left <= 0:
                    raise BenchError(f"no `{kind}` line of attempt {attempt} within "
                                     f"{deadline_s:.0f}s; job: {self.job_summary()}")
                self.cv.wait(min(left, 0.5))
                self._check_alive()

    def job(self):
        return self.api("GET", f"/v1/jobs/{self.job_id}")

    def job_summary(self):
        try:
            d = self.job()
            return json.dumps({"job": {k: d["job"].get(k) for k in ("state", "reason")},
                               "attempts": [{k: a.get(k) for k in ("number", "state", "node_id",
                                                                   "cause")}
                                            for a in d["attempts"]]})
        except Exception as e:  # best effort, for an error message
            return f"(unavailable: {e})"

    def reclaim(self, node_id):
        """POST /v1/nodes/ID/reclaim; t0 is taken with the TCP connection already open."""
        c = self._conn()
        try:
            c.connect()
            body = json.dumps({"cause": "bench/recovery"})
            t0 = time.time()
            c.request("POST", f"/v1/nodes/{node_id}/reclaim", body=body, headers=self.headers)
            r = c.getresponse()
            data = r.read()
        finally:
            c.close()
        if r.status != 200:
            raise BenchError(f"reclaim {node_id}: HTTP {r.status}: {data[:300]!r}")
        return t0, json.loads(data).get("preempted", [])

    def cancel_and_sweep(self):
        if self.job_id is None:
            return
        try:
            self.api("POST", f"/v1/jobs/{self.job_id}/cancel", timeout=5)
            wait_for(lambda: self.job()["job"]["state"] in ("cancelled", "failed", "succeeded",
                                                             "lost"), 15, "the job to end",
                     interval=0.1)
        except Exception as e:  # teardown continues regardless
            log(f"sluice: warning: cancelling {self.job_id}: {e}")

    def sweep_stray(self):
        """SIGKILLs job processes an agent left behind, found by SLUICE_JOB_ID in their env."""
        if self.job_id is None:
            return
        needle = f"SLUICE_JOB_ID={self.job_id}".encode()
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        os.kill(int(pid), signal.SIGKILL)
                        log(f"sluice: killed leftover job pid {pid}")
            except (OSError, ProcessLookupError):
                pass

    def stop(self):
        if self.stream_conn is not None:
            try:
                self.stream_conn.sock and self.stream_conn.sock.shutdown(2)
            except OSError:
                pass
        self.sweep_stray()
        if not self.keep_tmp:
            shutil.rmtree(self.d, ignore_errors=True)
        else:
            log(f"sluice: kept {self.d}")


def bench_sluice(args, procs):
    rng = random.Random(4242)
    s = SluiceRecovery(args.sluice, procs, args.agents, keep_tmp=args.keep_tmp)
    samples = []
    reclaimed_at = {}  # node id -> monotonic time we reclaimed it (the job avoids it 60 s)
    try:
        s.start()
        s.submit(max_restarts=args.preemptions + 10)
        for i in range(args.preemptions):
            k = i + 1  # attempt running now
            s.wait_line(k, "step", args.deadline)
            time.sleep(rng.uniform(args.pause_min, args.pause_max))  # pacing, not correctness
            d = s.job()
            att = d["attempts"][-1]
            if att["number"] != k or att["state"] != "running":
                raise BenchError(f"expected attempt {k} running, got {att['number']} "
                                 f"{att['state']}: {s.job_summary()}")
            node = att["node_id"]
            # The server makes the job avoid each node it was preempted from for 60 s. Never
            # let the sample include that wait: reclaim only when another node is free of it.
            def fresh():
                now = time.monotonic()
                return [n for n in s.node_names if n != node
                        and now - reclaimed_at.get(n, -1e9) > PREEMPT_COOLDOWN_S + 2]
            if not fresh():
                soonest = min(reclaimed_at[n] for n in s.node_names if n != node)
                wait_s = soonest + PREEMPT_COOLDOWN_S + 2 - time.monotonic()
                log(f"sluice: every other node is in the job's cooldown; waiting {wait_s:.0f}s "
                    "(not measured; use more --agents)")
                wait_for(fresh, wait_s + 5, "a node out of the job's cooldown", interval=0.2)
            t0, preempted = s.reclaim(node)
            reclaimed_at[node] = time.monotonic()
            if att["id"] not in preempted:
                raise BenchError(f"reclaim of {node} preempted {preempted}, not {att['id']}")
            s.wait_line(k + 1, "step", args.deadline)
            for kind in ("term", "save_done"):
                s.wait_line(k, kind, args.deadline)
            for kind in ("start", "load_done"):
                s.wait_line(k + 1, kind, args.deadline)
            with s.cv:
                js = job_side(s.lines.by_attempt[k], s.lines.by_attempt[k + 1])
            smp = sample_from(t0, js)
            d = s.job()
            old, new = d["attempts"][k - 1], d["attempts"][k]
            if new["node_id"] == node:
                raise BenchError(f"attempt {k + 1} ran on the reclaimed node {node}")
            ended, placed = old["ended_ms"] / 1000.0, new["created_ms"] / 1000.0
            smp.update({
                "from_node": s.node_names.get(node, node),
                "to_node": s.node_names.get(new["node_id"], new["node_id"]),
                "old_state": old["state"], "old_exit": old["exit_code"],
                "restored_checkpoint": bool(new.get("checkpoint_restored")),
                # Server timestamps (ms resolution, same clock).
                "exit_to_requeued_s": ended - js["save_done"],
                "requeued_to_placed_s": placed - ended,
                "placed_to_process_start_s": js["start"] - placed,
            })
            samples.append(smp)
            log(f"sluice: preemption {k}/{args.preemptions}: {smp['from_node']} -> "
                f"{smp['to_node']}, recovery {smp['recovery_s'] * 1000:.0f} ms "
                f"(raw {smp['raw_s'] * 1000:.0f} ms, job save+load "
                f"{(smp['job_save_s'] + smp['job_load_s']) * 1000:.0f} ms)")
        return samples
    finally:
        s.cancel_and_sweep()
        procs.stop_all()
        s.stop()


# --------------------------------------------------------------------------- Slurm

# "tuned" gives Slurm its best chance: a requeued batch job is held until its old job
# credential expires (AuthInfo cred_expire, default 120 s, minimum 5 s: smaller values are
# rejected and the default is used), then waits for a scheduler pass (sched_interval
# default 60 s, backfill bf_interval default 30 s).
SLURM_PROFILES = {
    "stock": {"sched": "", "cred_expire": None},
    "tuned": {"sched": "batch_sched_delay=0,sched_min_interval=0,sched_interval=1,"
                       "bf_interval=1", "cred_expire": 5},
}


class SlurmRequeue(sl.Slurm):
    def __init__(self, procs, profile, keep_tmp=False):
        super().__init__(procs, sched_params=SLURM_PROFILES[profile]["sched"],
                         keep_tmp=keep_tmp)
        self.cred_expire = SLURM_PROFILES[profile]["cred_expire"]
        self.job_id = None

    def _write_conf(self):
        super()._write_conf()
        if self.cred_expire is not None:
            with open(self.conf) as f:
                text = f.read()
            old = f"AuthInfo=socket={self.munge_socket}"
            assert old in text
            text = text.replace(old, f"{old},cred_expire={self.cred_expire}")
            with open(self.conf, "w") as f:
                f.write(text)

    def start(self):
        super().start()
        r = self._run(["scontrol", "show", "config"])
        for line in r.stdout.splitlines():
            k = line.split("=", 1)[0].strip()
            if k in ("AuthInfo", "KillWait"):
                self.config_summary[k] = line.split("=", 1)[1].strip()

    def submit(self):
        ck = os.path.join(self.d, "checkpoint")
        os.makedirs(ck)
        self.out = os.path.join(self.d, "jobs", "out.txt")
        script = os.path.join(self.d, "job.sh")
        with open(script, "w") as f:
            f.write("#!/bin/bash\n"
                    f"export SLUICE_CHECKPOINT_DIR={ck}\n"
                    "export SLUICE_ATTEMPT=$(( ${SLURM_RESTART_COUNT:-0} + 1 ))\n"
                    "[ \"$SLUICE_ATTEMPT\" -gt 1 ] && export SLUICE_RESUMED=1\n" + JOB_SCRIPT)
        r = self._run(["sbatch", "--parsable", "--requeue", "--open-mode=append",
                       f"--output={self.out}", "--job-name=recovery", "-n", "1", "-c", "1",
                       "--mem=100M", script])
        if r.returncode != 0:
            raise BenchError(f"sbatch failed ({r.returncode}): {r.stderr.strip()}")
        self.job_id = r.stdout.strip().split(";")[0]

    def lines(self):
        al = AttemptLines()
        try:
            with open(self.out, errors="replace") as f:
                for line in f:
                    al.add(line.rstrip("\n"))
        except FileNotFoundError:
            pass
        return al

    def wait_line(self, attempt, kind, deadline_s):
        end = time.monotonic() + deadline_s
        while True:
            v = self.lines().get(attempt, kind)
            if v is not None:
                return v
            if time.monotonic() > end:
                q = self._run(["scontrol", "show", "job", self.job_id], timeout=10).stdout
                raise BenchError(f"slurm: no `{kind}` line of run {attempt} within "
                                 f"{deadline_s:.0f}s:\n{q}")
            self._daemons_alive()
            time.sleep(0.005)

    def cancel(self):
        if self.job_id:
            self._run(["scancel", self.job_id], timeout=10)


def bench_slurm(args, procs, profile, n):
    sl.ensure_slurm_installed(not args.no_install)
    rng = random.Random(2424)
    s = SlurmRequeue(procs, profile, keep_tmp=args.keep_tmp)
    samples = []
    deadline = args.deadline if profile == "tuned" else max(args.deadline, 400)
    try:
        s.start()
        s.submit()
        for i in range(n):
            k = i + 1
            s.wait_line(k, "step", deadline)
            time.sleep(rng.uniform(args.pause_min, args.pause_max))
            argv = ["scontrol", "requeue", s.job_id]
            t0 = time.time()
            r = subprocess.run(argv, env=s.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, timeout=30)
            if r.returncode != 0:
                raise BenchError(f"scontrol requeue failed ({r.returncode}): {r.stderr.strip()}")
            s.wait_line(k + 1, "step", deadline)
            for kind in ("term", "save_done"):
                s.wait_line(k, kind, 10)
            al = s.lines()
            smp = sample_from(t0, job_side(al.by_attempt[k], al.by_attempt[k + 1]))
            samples.append(smp)
            log(f"slurm[{profile}]: requeue {k}/{n}: recovery {smp['recovery_s'] * 1000:.0f} ms")
        s.cancel()
        s.drain()
        return samples, s.config_summary
    finally:
        if s.job_id:
            try:
                s.cancel()
            except Exception:
                pass
        procs.stop_all()
        s.stop()


# --------------------------------------------------------------------------- report

def fmt_row(name, st):
    if not st.get("n"):
        return f"{name:<14} n=0"
    return (f"{name:<14} n={st['n']:<3} p50={st['p50_ms']:9.1f} ms  p90={st['p90_ms']:9.1f} ms"
            f"  p99={st['p99_ms']:9.1f} ms  max={st['max_ms']:9.1f} ms")


def breakdown(samples, keys):
    out = {}
    for key, label in keys:
        xs = [s[key] for s in samples if key in s]
        if xs:
            out[key] = dict(stats_ms(xs), label=label)
    return out


SLUICE_PARTS = [
    ("notice_to_sigterm_s", "notice -> SIGTERM in the job (API, server -> agent, kill)"),
    ("job_save_s", "job's own save (excluded)"),
    ("exit_to_requeued_s", "job exit -> attempt ended at server (final checkpoint upload)"),
    ("requeued_to_placed_s", "requeued -> placed on another agent"),
    ("placed_to_process_start_s", "placed -> new process running (restore, spawn)"),
    ("job_load_s", "job's own load (excluded)"),
    ("load_to_first_step_s", "load done -> first step line"),
]
SLURM_PARTS = [
    ("notice_to_sigterm_s", "requeue cmd -> SIGTERM in the job"),
    ("job_save_s", "job's own save (excluded)"),
    ("exit_to_new_process_s", "job exit -> new process running (hold, schedule, launch)"),
    ("job_load_s", "job's own load (excluded)"),
    ("load_to_first_step_s", "load done -> first step line"),
]


def print_breakdown(parts):
    for key, st in parts.items():
        print(f"    {st['label']:<62} p50 {st['p50_ms']:8.1f} ms  max {st['max_ms']:8.1f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sluice", default=os.path.join(REPO, "build", "sluice"),
                    help="path to the sluice binary (default: build/sluice)")
    ap.add_argument("--preemptions", type=int, default=20)
    ap.add_argument("--agents", type=int, default=None,
                    help="agents to start (default: preemptions + 1, so the job's 60 s "
                    "per-node cooldown never leaves it without a node)")
    ap.add_argument("--slurm-config", choices=["tuned", "stock", "both", "none"],
                    default="tuned",
                    help="Slurm baseline profile(s) (default tuned: stock Slurm holds a "
                    "requeued job >= 121 s, see README)")
    ap.add_argument("--slurm-requeues", type=int, default=None,
                    help="requeues per Slurm profile (default 10 tuned, 3 stock)")
    ap.add_argument("--pause-min", type=float, default=0.5,
                    help="min random run time before each preemption, after the first step "
                    "(s, default 0.5)")
    ap.add_argument("--pause-max", type=float, default=1.0)
    ap.add_argument("--deadline", type=float, default=60.0,
                    help="seconds a recovery may take before it is an error (stock Slurm: 400)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 5 preemptions, no Slurm")
    ap.add_argument("--no-install", action="store_true",
                    help="do not apt-get install missing Slurm/munge packages")
    ap.add_argument("--keep-tmp", action="store_true", help="keep temp dirs (logs) afterwards")
    ap.add_argument("--json", metavar="OUT", help="write the results as JSON to OUT")
    args = ap.parse_args()
    if args.quick:
        args.preemptions = min(args.preemptions, 5)
        args.slurm_config = "none"
    if args.agents is None:
        args.agents = args.preemptions + 1
    if args.agents < 2:
        ap.error("--agents must be at least 2")
    args.sluice = os.path.abspath(args.sluice)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    procs = Procs()
    result = {"benchmark": "recovery", "unit": "ms", "target": {"sluice_p50_ms_at_most":
                                                                 TARGET_P50_MS}}
    slurm_error = {}
    started = time.monotonic()
    try:
        sl.check_sluice(args.sluice)
        samples = bench_sluice(args, procs)
        result["sluice"] = {"recovery": stats_ms([s["recovery_s"] for s in samples]),
                            "raw": stats_ms([s["raw_s"] for s in samples]),
                            "breakdown": breakdown(samples, SLUICE_PARTS),
                            "agents": args.agents, "samples": samples}
        profiles = {"tuned": ["tuned"], "stock": ["stock"], "both": ["tuned", "stock"],
                    "none": []}[args.slurm_config]
        for prof in profiles:
            n = args.slurm_requeues or (10 if prof == "tuned" else 3)
            try:
                ss, conf = bench_slurm(args, procs, prof, n)
            except BenchError as e:
                # No invented number: say why the baseline is missing and go on.
                slurm_error[prof] = str(e)
                log(f"slurm[{prof}]: baseline not measured: {e}")
                continue
            result[f"slurm_{prof}"] = {"recovery": stats_ms([s["recovery_s"] for s in ss]),
                                       "raw": stats_ms([s["raw_s"] for s in ss]),
                                       "breakdown": breakdown(ss, SLURM_PARTS),
                                       "config": conf, "samples": ss}
    except BenchError as e:
        procs.stop_all()
        log(f"error: {e}")
        return e.code
    except KeyboardInterrupt as e:
        procs.stop_all()
        log(f"interrupted ({e}); daemons stopped")
        return 130
    finally:
        procs.stop_all()

    sm = result["sluice"]
    print(f"preemption recovery, one job, loopback ({os.cpu_count()} CPUs), "
          f"{time.monotonic() - started:.0f} s wall")
    print("recovery = notice -> first step of the next attempt, minus the job's own save "
          "(SIGTERM -> save_done) and load (process start -> load_done)")
    print(fmt_row("sluice", sm["recovery"]))
    print(fmt_row("  (raw)", sm["raw"]) + "   <- nothing subtracted")
    moved = sum(1 for s in sm["samples"] if s["from_node"] != s["to_node"])
    resumed = sum(1 for s in sm["samples"] if s["resumed_from_final_checkpoint"])
    preempted = sum(1 for s in sm["samples"] if s["old_state"] == "preempted"
                    and s["old_exit"] == 143)
    n = sm["recovery"]["n"]
    print(f"    {args.agents} agents, --heartbeat-interval 0.3; {moved}/{n} on another agent, "
          f"{preempted}/{n} ended preempted with exit 143, {resumed}/{n} resumed at the step "
          "saved on SIGTERM")
    print_breakdown(sm["breakdown"])
    for prof in ("tuned", "stock"):
        key = f"slurm_{prof}"
        if key in result:
            r = result[key]
            c = r["config"]
            print(fmt_row(f"slurm {prof}", r["recovery"]))
            print(fmt_row("  (raw)", r["raw"]))
            sched = c.get("SchedulerParameters")
            ce = re.search(r"cred_expire=(\d+)", c.get("AuthInfo", ""))
            print(f"    slurm {c.get('SLURM_VERSION', '?')}, `scontrol requeue` of a "
                  f"`sbatch --requeue` job, same node; SchedulerParameters="
                  f"{sched if sched and sched != '(null)' else '(default)'}; AuthInfo "
                  f"cred_expire={ce.group(1) if ce else '(default, 120)'}; "
                  f"KillWait={c.get('KillWait', '?')}")
            print_breakdown(r["breakdown"])
        elif prof in slurm_error:
            print(f"slurm {prof}: NOT MEASURED: {slurm_error[prof].splitlines()[0]}")
    if args.slurm_config == "none":
        print("slurm: not measured (--quick or --slurm-config none); no ratio")
    p50 = sm["recovery"]["p50_ms"]
    for prof in ("tuned", "stock"):
        key = f"slurm_{prof}"
        if key in result:
            ratio = result[key]["recovery"]["p50_ms"] / p50
            result[f"ratio_{key}_p50_over_sluice_p50"] = ratio
            print(f"ratio slurm_{prof}_p50 / sluice_p50 = {ratio:.1f}x")
    met = p50 <= TARGET_P50_MS
    result["target_met"] = met
    print(f"target: sluice p50 <= {TARGET_P50_MS:.0f} ms on loopback: "
          f"{'MET' if met else 'NOT MET'} (p50 {p50:.1f} ms)")
    if slurm_error:
        result["slurm_not_measured"] = slurm_error
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
