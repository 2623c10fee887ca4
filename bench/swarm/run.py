#!/usr/bin/env python3
"""Swarm: N simulated agents on one real `sluice server` (issue 12 item 6, first part).

Starts `sluice server --tls` on 127.0.0.1 with a fresh data dir, measures submit latency with no
agent connected (the baseline), then connects N simulated agents over real WebSocket (wss)
connections with the real protocol, spread over source addresses 127.0.0.2... (at most 200 per
address, under the server's per-address cap): each enrols with the join token (`hello`, the
server mints its node credential), answers the server's `reverify` with a passing conformance
report carrying the request's nonce, heartbeats every --interval seconds, and answers `assign`
with `started` and `exited 0`. Nothing is pre-seeded: every node enrols and is verified through
the protocol.

Once all are verified it measures, for the server process alone (the swarm shares the cores):
RSS per connected agent (against the server before any agent), server CPU while the agents
heartbeat, heartbeats answered per second, submit p50/p99 while they heartbeat (ratio against
the baseline), and committed placements per second (jobs submitted back to back until each is
`succeeded`, which needs the commit, the assignment delivered, and the agent's `started` and
`exited`), placements with a deep queue, dead-node detection, the reconnect storm and Slurm's
rates (bench/swarm/README.md).

The agents are played by bench_swarm_agents (--engine cxx, the default: one compiled process,
every connection on one thread; build it with `ninja -C build bench/swarm/bench_swarm_agents`),
steered through SwarmProxy, or by this process (--engine python: the Swarm class below).

Stdlib only. Run: python3 bench/swarm/run.py [--agents 1000] [--interval 5] [--sluice PATH]
                  [--engine cxx|python] [--engine-bin PATH]
Exit status: 0 when measured, 2 when the server cannot be started, 1 for other errors.
"""

import argparse
import asyncio
import base64
import http.client
import json
import multiprocessing
import os
import random
import re
import resource
import shutil
import ssl
import struct
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PER_ADDRESS = 200
RESULTS = {"submit_rate": float("nan"), "placement_rate": float("nan")}  # for Slurm's ratios


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def percentile(xs, p):
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def proc_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def stat_cpu_s(path):
    """(comm, utime + stime in seconds) from a /proc stat file (a process's or a thread's)."""
    with open(path) as f:
        text = f.read()
    fields = text.rsplit(")", 1)[1].split()
    return (text[text.index("(") + 1:text.rindex(")")],
            (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))


def proc_cpu_s(pid):
    return stat_cpu_s(f"/proc/{pid}/stat")[1]


def proc_thread_cpu_s(pid):
    """CPU seconds and seconds spent runnable but waiting for a core, per thread name of a
    process ({comm: (cpu, waited)}, threads of one name summed; the wait from
    /proc/.../schedstat, 0 where the kernel keeps none): the server names its threads
    (sluice-inbox, sluice-sched, sluice-io, ...)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name, cpu = stat_cpu_s(f"/proc/{pid}/task/{tid}/stat")
        except OSError:
            continue  # the thread ended between the listing and the read
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                waited = int(f.read().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            waited = 0.0
        c, w = out.get(name, (0.0, 0.0))
        out[name] = (c + cpu, w + waited)
    return out


def thread_cpu_summary(before, after, span_s):
    """Each thread name's share of one core between two proc_thread_cpu_s(), busiest first, and
    beside it the share of the time its threads waited for a core (a thread holding the core's
    lock while it waits holds up everyone)."""
    rows = []
    for n, (cpu, waited) in after.items():
        cpu0, waited0 = before.get(n, (0.0, 0.0))
        rows.append(((cpu - cpu0) / span_s * 100, (waited - waited0) / span_s * 100, n))
    rows.sort(reverse=True)
    return ", ".join(f"{n} {pct:.0f} % (waited for a core {w:.0f} %)" for pct, w, n in rows
                     if pct >= 0.5) or "none"


def frame(text):
    """A masked client text frame."""
    payload = text.encode()
    head = bytearray([0x81])
    n = len(payload)
    if n < 126:
        head.append(0x80 | n)
    elif n < 65536:
        head.append(0x80 | 126)
        head += struct.pack(">H", n)
    else:
        head.append(0x80 | 127)
        head += struct.pack(">Q", n)
    mask = os.urandom(4)
    head += mask
    # XOR as one big integer: a byte-by-byte generator cost more than the rest of a small
    # message's send, and the swarm shares the machine's two cores with the server it measures.
    key = int.from_bytes((mask * (n // 4 + 1))[:n], "little")
    return bytes(head) + (int.from_bytes(payload, "little") ^ key).to_bytes(n, "little")


async def read_frame(reader):
    """(opcode, payload) of the next server frame (never masked)."""
    b0, b1 = await reader.readexactly(2)
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack(">H", await reader.readexactly(2))[0]
    elif n == 127:
        n = struct.unpack(">Q", await reader.readexactly(8))[0]
    return b0 & 0x0F, await reader.readexactly(n)


# Simulated GPUs: product names as nvidia-smi reports them (so the server labels them as it
# would a real node), their memory, and a per-GPU-hour price.
GPU_MODELS = [
    ("NVIDIA H100 80GB HBM3", 81559, 2.49),
    ("NVIDIA A100-SXM4-80GB", 81920, 1.79),
    ("NVIDIA L4", 23034, 0.44),
    ("NVIDIA GeForce RTX 4090", 24564, 0.34),
]


def inventory(i, rng):
    """Node i's inventory: 30 % CPU-only machines, 70 % with 1, 2, 4 or 8 GPUs of one model."""
    base = {"hostname": f"sim-{i}", "os": "Debian 12", "kernel": "6.1", "arch": "x86_64",
            "cpu_model": "simulated", "disk_free_mib": 100000}
    if rng.random() < 0.3:
        cores = rng.choice([2, 4, 8, 16, 32, 64])
        return {**base, "cpu_cores": cores, "memory_mib": cores * 4096, "gpu_source": "none",
                "gpus": []}, 0.01 * cores, 0
    name, mib, price = rng.choice(GPU_MODELS)
    count = rng.choice([1, 2, 4, 8])
    gpus = [{"index": g, "uuid": f"GPU-sim-{i:06d}-{g}", "name": name, "memory_mib": mib,
             "pci_bus_id": f"00000000:{g + 1:02x}:00.0", "serial": "", "mig_mode": "Disabled",
             "compute_capability": "8.9", "vbios_version": "sim", "power_limit_w": 300}
            for g in range(count)]
    cores = 8 * count
    return {**base, "cpu_cores": cores, "memory_mib": cores * 8192, "gpu_source": "nvml",
            "driver_version": "550.54.15", "cuda_version": "12.4", "gpus": gpus}, 0, price


def passing_report(nonce, inv):
    mem = float(inv["memory_mib"])
    checks = [
        ("cpu", {"cores": inv["cpu_cores"], "ops_per_s": 1e9}),
        ("memory", {"total_mib": mem, "available_mib": mem / 2, "touched_mib": 256,
                    "touch_mib_s": 4000}),
        ("disk", {"write_mib_s": 500, "fsync_ms": 2, "read_mib_s": 900, "free_mib": 100000}),
        ("link", {"rtt_ms": 0.3, "rtt_max_ms": 1, "download_mib_s": 800, "upload_mib_s": 700}),
    ]
    for g in inv["gpus"]:
        checks.append((f"gpu-memory.{g['index']}", {"total_mib": float(g["memory_mib"]),
                                                    "allocated_mib": 1024, "h2d_gib_s": 12}))
        checks.append((f"gpu-compute.{g['index']}", {"elements": 1 << 24, "kernel_ms": 3,
                                                     "mismatches": 0}))
        # The speed check, at or above every model's spec, so no simulated GPU is flagged.
        checks.append((f"gpu-perf.{g['index']}", {"matmul_mode": 1, "matmul_tflops": 2500,
                                                  "mismatches": 0, "mem_gb_s": 10000}))
    report = {"trigger": "registration", "started_ms": 1, "duration_ms": 100,
              "checks": [{"name": n, "outcome": "pass", "measurements": m, "reason": "simulated"}
                         for n, m in checks]}
    return {"type": "conformance", "report": report, "nonce": nonce}


def hello_members(a):
    """An agent's hello but type, node_id and attempts (the members that never change; both
    engines send them)."""
    return {"name": f"sim-{a.i}", "inventory": a.inv, "price_per_gpu_hour": a.gpu_price,
            "price_per_cpu_hour": a.cpu_price, "interruptible_price_per_gpu_hour": 0,
            "interruptible_price_per_cpu_hour": 0, "region": "bench", "agent_version": "swarm",
            "claims": []}


class Agent:
    """What one simulated agent keeps across its connections."""

    def __init__(self, i, rng):
        self.i = i
        self.inv, self.cpu_price, self.gpu_price = inventory(i, rng)
        self.node_id = ""
        self.credential = ""
        self.writer = None
        self.held = {}          # attempt id -> job id: started, not exited (hold mode)
        self.silent = False     # stops writing (heartbeats, pongs, replies); keeps reading
        self.last_sent = 0.0    # monotonic time of its last message (the core's sign of life)
        self.closed_at = None   # monotonic time the server closed the connection
        self.last_recv = 0.0    # monotonic time of the server's last frame (debug output)
        self.close_how = ""
        self.welcomes = 0


class Swarm:
    def __init__(self, port, join_token, interval, seed=1):
        self.port = port
        self.join_token = join_token
        self.interval = interval
        self.ctx = ssl.create_default_context()
        self.ctx.check_hostname = False
        self.ctx.verify_mode = ssl.CERT_NONE  # loopback bench against the server's own CA
        self.rng = random.Random(seed)
        self.agents = []
        self.welcomed = 0
        self.reported = 0
        self.leases = 0
        self.started = 0
        self.exited = 0
        self.assigned_jobs = {}  # job id -> times assigned (a job run twice shows up here)
        self.hold = False        # answer `assign` with `started` only, until released
        self.errors = []
        self.stop = asyncio.Event()

    cpu_label = "this process playing the agents"

    def cpu_s(self):
        """CPU seconds of what plays the agents: here, this process."""
        return sum(os.times()[:2])

    def write(self, a, msg):
        if not a.silent and a.writer is not None:
            a.writer.write(frame(json.dumps(msg)))
            a.last_sent = time.monotonic()

    def release(self):
        """Every held attempt exits now, and later ones exit as soon as they start."""
        self.hold = False
        for a in self.agents:
            for aid in list(a.held):
                self.write(a, {"type": "exited", "attempt_id": aid, "exit_code": 0, "signal": 0})
                self.exited += 1
            a.held.clear()

    async def agent(self, a, connect_gate, reconnect=False):
        """One connection's life: hello, then serve until the server closes it. With
        `reconnect`, connects again with the node credential (backing off with jitter)."""
        delay = 0.5
        while not self.stop.is_set():
            try:
                await self.connect_and_serve(a, connect_gate)
            except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
                if a.closed_at is None:
                    a.closed_at = time.monotonic()
                    a.close_how = a.close_how or type(e).__name__
                if not reconnect or self.stop.is_set():
                    if not self.stop.is_set() and not a.silent:
                        self.errors.append(f"agent {a.i}: connection lost ({e})")
                    return
            if not reconnect or a.silent:
                return
            await asyncio.sleep(random.uniform(0, delay))
            delay = min(delay * 2, 8)

    async def connect_and_serve(self, a, connect_gate):
        source = f"127.0.0.{2 + a.i // PER_ADDRESS}"
        hello = {"type": "hello", "node_id": a.node_id, **hello_members(a),
                 "attempts": [{"attempt_id": aid, "running": True} for aid in a.held]}
        token = a.credential or self.join_token
        async with connect_gate:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", self.port, ssl=self.ctx, local_addr=(source, 0),
                server_hostname="127.0.0.1")
            key = base64.b64encode(os.urandom(16)).decode()
            writer.write((f"GET /v1/agent/connect HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          f"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                          f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                          f"Authorization: Bearer {token}\r\n\r\n").encode())
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 101"):
                writer.close()
                raise ConnectionError(f"upgrade refused: {head[:80]!r}")
            a.writer = writer
            a.closed_at = None
            writer.write(frame(json.dumps(hello)))

        async def heartbeat():
            seq = 0
            await asyncio.sleep(random.uniform(0, self.interval))
            while not self.stop.is_set():
                if not a.silent:
                    seq += 1
                    self.write(a, {"type": "heartbeat", "seq": seq})
                await asyncio.sleep(self.interval)

        beat = None
        try:
            while not self.stop.is_set():
                op, payload = await read_frame(reader)
                a.last_recv = time.monotonic()
                if op == 0x9:  # ping: answer with a masked pong
                    if not a.silent:
                        pong = bytearray([0x8A, 0x80 | len(payload)]) + b"\0\0\0\0" + payload
                        writer.write(bytes(pong))  # not a sign of life the core counts
                    continue
                if op == 0x8:
                    a.close_how = "close frame"
                    raise ConnectionError("closed by the server")
                if op != 0x1:
                    continue
                msg = json.loads(payload)
                t = msg.get("type")
                if t == "welcome":
                    self.welcomed += 1
                    a.welcomes += 1
                    a.node_id = msg.get("node_id", a.node_id)
                    a.credential = msg.get("credential") or a.credential
                    if beat is None:
                        beat = asyncio.ensure_future(heartbeat())
                elif t == "reverify":
                    self.write(a, passing_report(msg.get("nonce", ""), a.inv))
                    self.reported += 1
                elif t == "lease":
                    self.leases += 1
                elif t == "assign":
                    aid = msg["attempt_id"]
                    job = msg.get("job_id", "")
                    self.assigned_jobs[job] = self.assigned_jobs.get(job, 0) + 1
                    self.write(a, {"type": "started", "attempt_id": aid})
                    self.started += 1
                    if self.hold:
                        a.held[aid] = job
                    else:
                        self.write(a, {"type": "exited", "attempt_id": aid, "exit_code": 0,
                                       "signal": 0})
                        self.exited += 1
                elif t in ("kill", "cancel"):
                    a.held.pop(msg.get("attempt_id", ""), None)
                elif t == "error":
                    self.errors.append(msg.get("message", ""))
        finally:
            if beat:
                beat.cancel()
            a.writer = None
            writer.close()


class EngineAgent:
    """One agent of the compiled engine, with the attributes of Agent that the dead-node and
    storm code read (fetched through SwarmProxy, at most 50 ms old) and set (silent)."""

    def __init__(self, proxy, i):
        self._proxy = proxy
        self.i = i

    def _get(self, key):
        return self._proxy.record(self.i)[key]

    node_id = property(lambda self: self._get("node_id"))
    last_sent = property(lambda self: self._get("last_sent"))
    last_recv = property(lambda self: self._get("last_recv"))
    close_how = property(lambda self: self._get("close_how"))
    welcomes = property(lambda self: self._get("welcomes"))

    @property
    def silent(self):
        return self._get("silent")

    @silent.setter
    def silent(self, value):
        if not value:
            raise ValueError("a silenced agent stays silent")
        self._proxy.command(f"silence {self.i}")  # the engine also clears closed_at
        self._proxy.record(self.i).update(silent=True, closed_at=None)

    @property
    def closed_at(self):
        return self._get("closed_at")

    @closed_at.setter
    def closed_at(self, value):
        if value is not None:
            raise ValueError("closed_at can only be cleared")
        # Only ever cleared just before `silent = True`, whose `silence` clears it in the engine.
        self._proxy.record(self.i)["closed_at"] = None


class SwarmProxy:
    """Stands in for Swarm with --engine cxx: the agents are played by bench_swarm_agents (one
    compiled process, all connections on one thread; bench/swarm/agents_engine.h), steered over
    its stdin/stdout (agents_control.h). The attributes the measurements read are fetched from
    it: counters at most 10 ms old, agents' records at most 50 ms old (only those that changed)."""

    cpu_label = "the agent engine (bench_swarm_agents)"

    def __init__(self, binary, tmp, port, join_token, interval, n, seed=1):
        # The same fleet as Swarm's: inventories drawn from the same seeded random, in order.
        rng = random.Random(seed)
        path = os.path.join(tmp, "agents.jsonl")
        with open(path, "w") as f:
            for i in range(n):
                a = Agent(i, rng)
                f.write(json.dumps({"i": i, "hello": hello_members(a),
                                    "report": passing_report("", a.inv)["report"]}) + "\n")
        self.proc = subprocess.Popen(
            [binary, "--agents-file", path, "--port", str(port), "--join-token", join_token,
             "--interval", str(interval), "--seed", str(seed), "--per-address", str(PER_ADDRESS)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.agents = [EngineAgent(self, i) for i in range(n)]
        self.assigned_jobs = _EngineAssigned(self)
        self.stop = _EngineStop(self)
        self._stats, self._stats_at = None, 0.0
        self._records, self._seq, self._records_at = {}, 0, 0.0
        self._stopped = False
        self.stats()  # answered once the engine has read its file: no agent connects before start()

    def start(self):
        """Every agent connects (the engine has read its file by the time it answers)."""
        self.command("start")

    def command(self, line):
        """One command, its JSON reply (agents_control.h)."""
        if self._stopped:
            raise RuntimeError(f"the agent engine was stopped before `{line}`")
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
            reply = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            reply = ""
        if not reply:
            raise RuntimeError(f"the agent engine exited (status {self.proc.wait()})")
        out = json.loads(reply)
        if "error" in out:
            raise RuntimeError(f"the agent engine refused `{line}`: {out['error']}")
        self._stats_at = 0.0  # anything may have changed the counters
        return out

    def stats(self):
        if not self._stopped and time.monotonic() - self._stats_at > 0.01:
            self._stats = self.command("stats")
            self._stats_at = time.monotonic()
        return self._stats

    def record(self, i):
        if not self._stopped and time.monotonic() - self._records_at > 0.05:
            reply = self.command(f"changed {self._seq}")
            self._seq = reply["seq"]
            for r in reply["agents"]:
                self._records[r["i"]] = r
            self._records_at = time.monotonic()
        return self._records[i]

    welcomed = property(lambda self: self.stats()["welcomed"])
    reported = property(lambda self: self.stats()["reported"])
    leases = property(lambda self: self.stats()["leases"])
    started = property(lambda self: self.stats()["started"])
    exited = property(lambda self: self.stats()["exited"])
    errors = property(lambda self: _EngineErrors(self.stats()))

    @property
    def hold(self):
        return self.stats()["hold"]

    @hold.setter
    def hold(self, value):
        self.command("hold" if value else "hold off")

    def release(self):
        """Every held attempt exits now, and later ones exit as soon as they start."""
        self.command("release")

    def cpu_s(self):
        """CPU seconds of what plays the agents: the engine process."""
        return proc_cpu_s(self.proc.pid)


class _EngineErrors:
    """Swarm.errors as far as run.py reads it: how many, and the first."""

    def __init__(self, stats):
        self.n, self.first = stats["errors"], stats["first_error"]

    def __len__(self):
        return self.n

    def __getitem__(self, k):
        if k != 0 or not self.n:
            raise IndexError(k)
        return self.first


class _EngineAssigned:
    """Swarm.assigned_jobs as far as run.py reads it: get() for any job; values() and items()
    list only the jobs assigned more than once (the only ones run.py looks for there)."""

    def __init__(self, proxy):
        self._proxy = proxy

    def get(self, job, default=0):
        n = self._proxy.command(f"assigned {job}")["assigned"][job]
        return n if n else default

    def items(self):
        twice = self._proxy.stats()["assigned_twice"]
        return self._proxy.command("assigned " + " ".join(twice))["assigned"].items() \
            if twice else {}.items()

    def values(self):
        return [n for _, n in self.items()]


class _EngineStop:
    """Swarm.stop as far as run.py uses it: set() stops the engine (its counters kept)."""

    def __init__(self, proxy):
        self._proxy = proxy

    def is_set(self):
        return self._proxy._stopped

    def set(self):
        p = self._proxy
        if p._stopped:
            return
        p._stats = p.command("stats")
        p.command("stop")
        p._stopped = True
        try:
            p.proc.wait(10)
        except subprocess.TimeoutExpired:
            p.proc.kill()
            p.proc.wait()


class Api:
    """One keep-alive HTTPS connection with the admin token."""

    def __init__(self, port, token):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        self.conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=60)
        self.token = token

    def call(self, method, path, body=None):
        headers = {"Authorization": f"Bearer {self.token}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        for attempt in (1, 2):
            try:
                self.conn.request(method, path, body=data, headers=headers)
                r = self.conn.getresponse()
                return r.status, r.read()
            except (http.client.RemoteDisconnected, ConnectionError):
                # The server closes a keep-alive connection idle for a minute (while the swarm
                # enrols): open a new one, once.
                self.conn.close()
                if attempt == 2:
                    raise


JOB = {"spec": {"name": "swarm", "run": "true", "resources": {"cpus": 1, "memory_gb": 1}}}


LOCK_LINE = re.compile(r'^sluice_core_lock_(wait|hold)_seconds_(bucket|sum)'
                       r'(?:\{(?:holder="([a-z_]+)",?)?(?:le="([^"]+)")?\})? (\S+)$')


def lock_histograms(api):
    """The core's lock times from the metrics page: {(kind, holder): {"le": [(bound s, cumulative
    count)], "sum": seconds}} with kind "wait" or "hold" (waits have holder ""), and "at" (when
    read); no (kind, holder) keys from a server without them."""
    status, body = api.call("GET", "/v1/metrics")
    out = {"at": time.monotonic()}
    for line in body.decode().splitlines() if status == 200 else []:
        m = LOCK_LINE.match(line)
        if not m:
            continue
        kind, what, holder, le, value = m.groups()
        h = out.setdefault((kind, holder or ""), {"le": [], "sum": 0.0})
        if what == "bucket":
            h["le"].append((float(le), int(value)))
        else:
            h["sum"] = float(value)
    return out


def lock_summary(before, after):
    """What the core's lock did between two lock_histograms(): the share of the time it was held,
    how many holds and waits, how many over 25 ms, the bucket of the longest, and per holder
    that held it over 25 ms the same."""
    keys = [k for k in after if k != "at" and k in before]
    if not keys:
        return "no lock times on the metrics page"
    span = max(after["at"] - before["at"], 1e-9)

    def delta(k):
        d = [(le, a - b) for (le, a), (_, b) in zip(after[k]["le"], before[k]["le"])]
        return d, after[k]["sum"] - before[k]["sum"]

    def describe(d, what):
        total = d[-1][1]
        over = total - next(n for le, n in d if le >= 0.025)
        longest = next((le for le, n in d if n == total), float("inf"))
        lower = max((le for le, n in d if n < total), default=0.0)
        return total, over, f"{total} {what}, {over} over 25 ms, longest in ({lower:g}, {longest:g}] s"

    holds = [(k[1], *delta(k)) for k in keys if k[0] == "hold"]
    merged = [(le, sum(d[i][1] for _, d, _ in holds)) for i, (le, _) in enumerate(holds[0][1])]
    held = sum(x for _, _, x in holds) / span
    parts = [f"held {100 * held:.0f} % of the time; " + describe(merged, "holds")[2]]
    for k in keys:
        if k[0] == "wait":
            parts.append(describe(delta(k)[0], "waits")[2])
    for holder, d, secs in sorted(holds, key=lambda h: -h[2]):
        total, over, text = describe(d, "holds")
        if over and holder:  # a server without holder labels has one series: the total above
            parts.append(f"{holder}: {100 * secs / span:.0f} % of the time, {text}")
    return "; ".join(parts)


def submit_latencies(api, n):
    xs = []
    locks0 = lock_histograms(api)
    start, wall0 = time.perf_counter(), time.time()  # the wall clock, to line up with server logs
    slow = []  # (ms, seconds into the sample): when the tail happens says what causes it
    for _ in range(n):
        t0 = time.perf_counter()
        status, body = api.call("POST", "/v1/jobs", {**JOB, "queue": True})
        xs.append((time.perf_counter() - t0) * 1000)
        slow.append((xs[-1], t0 - start))
        if status not in (200, 201):
            raise RuntimeError(f"submit answered {status}: {body[:200]!r}")
    slow.sort(reverse=True)
    log(f"slowest submits (ms @ s into the sample that began at {time.strftime('%H:%M:%S', time.gmtime(wall0))}"
        f".{int(wall0 * 1000) % 1000:03d} UTC): " +
        " ".join(f"{ms:.1f}@{at:.2f}" for ms, at in slow[:6]))
    log(f"the core's lock during that sample: {lock_summary(locks0, lock_histograms(api))}")
    return xs


def _submit_latencies_child(port, token, n):
    return submit_latencies(Api(port, token), n)


def submit_latencies_apart(port, token, n):
    """submit_latencies from a client process of its own, as a real client is. A thread of this
    process shares Python's GIL with the event loop that plays the agents (at 10,000 agents it
    holds the GIL most of the time), so its latencies included the swarm's own delays."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_submit_latencies_child, (port, token, n))


GPU_LABELS = ["h100-80gb", "a100-80gb", "l4-24gb", "rtx4090-24gb"]


def mixed_job(rng, n):
    """A queued job of a mixed shape: 40 % CPU jobs, 60 % GPU jobs of 1-8 GPUs, most naming a
    model, some only a minimum of GPU memory."""
    if rng.random() < 0.4:
        res = {"cpus": rng.choice([1, 2, 4]), "memory_gb": rng.choice([1, 2, 4])}
    else:
        res = {"gpus": rng.choice([1, 1, 1, 2, 4, 8]), "cpus": rng.choice([1, 2, 4]),
               "memory_gb": rng.choice([4, 8, 16])}
        if rng.random() < 0.8:
            res["gpu"] = rng.choice(GPU_LABELS)
        else:
            res["min_vram_gb"] = rng.choice([24, 40])
    return {"spec": {"name": f"q{n}", "run": "true", "resources": res}, "queue": True}


def _submit_chunk(port, token, chunk):
    api = Api(port, token)
    for body in chunk:
        status, reply = api.call("POST", "/v1/jobs", body)
        if status not in (200, 201):
            raise RuntimeError(f"submit answered {status}: {reply[:200]!r}")


def submit_all(port, token, bodies, clients):
    """Submits every body over `clients` keep-alive connections, each from a client process of
    its own (threads of this process would share the GIL with the agents' event loop, and the
    rate would be the swarm's, not the server's); returns the seconds taken."""
    chunks = [bodies[k::clients] for k in range(clients)]
    with multiprocessing.get_context("spawn").Pool(clients) as pool:
        t0 = time.monotonic()
        for r in [pool.apply_async(_submit_chunk, (port, token, c)) for c in chunks]:
            r.get()
        return time.monotonic() - t0


async def settle(counter, quiet_s=2.0, limit_s=600.0):
    """Waits until counter() has not changed for quiet_s."""
    last, since, t0 = counter(), time.monotonic(), time.monotonic()
    while time.monotonic() - since < quiet_s and time.monotonic() - t0 < limit_s:
        await asyncio.sleep(0.2)
        now = counter()
        if now != last:
            last, since = now, time.monotonic()
    return last


def store_counters(api):
    """The server's store commits and the pages they wrote, from its metrics page."""
    status, body = api.call("GET", "/v1/metrics")
    if status != 200:
        raise RuntimeError(f"GET /v1/metrics answered {status}")
    out = {}
    for line in body.decode().splitlines():
        for name in ("commits", "pages_written"):
            if line.startswith(f"sluice_store_{name}_total "):
                out[name] = int(line.split()[1])
    if len(out) != 2:
        raise RuntimeError("the metrics page has no sluice_store_commits_total / "
                           "sluice_store_pages_written_total")
    for line in body.decode().splitlines():  # servers before 2026-12-06 do not count it
        if line.startswith("sluice_placement_rechecked_nodes_total "):
            out["rechecked"] = int(line.split()[1])
    return out


async def queued_placements(args, swarm, port, admin_token, pid):
    """Committed placements per second with a deep queue of mixed shapes: the agents hold their
    jobs (answer `started`, never exit) while args.queued jobs are submitted, so what does not fit
    queues; then every held job exits at once and, from then on, every job exits as soon as it
    starts. The rate is the placements (assignment delivered and `started` sent) after the
    release, over the time until the queue is empty."""
    rng = random.Random(7)
    bodies = [mixed_job(rng, n) for n in range(args.queued)]
    shapes = len({json.dumps(b["spec"]["resources"], sort_keys=True) for b in bodies})
    start0 = swarm.started
    swarm.hold = True
    loop = asyncio.get_running_loop()
    submit_s = await loop.run_in_executor(None, submit_all, port, admin_token, bodies,
                                          args.submit_threads)
    held = await settle(lambda: swarm.started) - start0
    queued = args.queued - held
    log(f"{args.queued} jobs of {shapes} shapes submitted in {submit_s:.1f} s "
        f"({args.queued / submit_s:.0f}/s over {args.submit_threads} connections); "
        f"{held} placed and held, {queued} queued")
    api = Api(port, admin_token)
    store0 = store_counters(api)
    locks0 = lock_histograms(api)
    t0 = time.monotonic()
    # Who is busy during the drain: the server, or this process playing the agents (both share
    # the machine's cores).
    server_cpu0, own_cpu0, swarm_cpu0 = proc_cpu_s(pid), sum(os.times()[:2]), swarm.cpu_s()
    threads0 = proc_thread_cpu_s(pid)
    swarm.release()
    at_release = swarm.started
    while swarm.started - start0 < args.queued:
        await asyncio.sleep(0.05)
        if time.monotonic() - t0 > args.timeout:
            break
    drain_s = time.monotonic() - t0
    server_cpu = (proc_cpu_s(pid) - server_cpu0) / drain_s * 100
    threads = thread_cpu_summary(threads0, proc_thread_cpu_s(pid), drain_s)
    own_cpu = (sum(os.times()[:2]) - own_cpu0) / drain_s * 100
    swarm_cpu_s = swarm.cpu_s() - swarm_cpu0
    placed = swarm.started - at_release
    store1 = store_counters(api)
    locks = lock_summary(locks0, lock_histograms(api))
    commits = store1["commits"] - store0["commits"]
    pages = store1["pages_written"] - store0["pages_written"]
    rechecked = (store1["rechecked"] - store0["rechecked"]
                 if "rechecked" in store0 and "rechecked" in store1 else None)
    twice = sum(1 for n in swarm.assigned_jobs.values() if n > 1)
    if twice:  # say why, from the first such job's events
        job = next(j for j, n in swarm.assigned_jobs.items() if n > 1)
        status, body = Api(port, admin_token).call("GET", f"/v1/jobs/{job}")
        events = json.loads(body).get("events", []) if status == 200 else []
        log(f"job {job} was assigned more than once; its events:")
        for e in events[-8:]:
            log(f"  {e.get('kind', '')}: {e.get('message', '')}")
    return {"shapes": shapes, "submit_s": submit_s, "held": held, "queued": queued,
            "placed": placed, "drain_s": drain_s, "rate": placed / drain_s, "twice": twice,
            "server_cpu_pct": server_cpu, "swarm_cpu_pct": swarm_cpu_s / drain_s * 100,
            "swarm_ms_per_placement": 1000 * swarm_cpu_s / max(placed, 1),
            "own_cpu_pct": own_cpu, "threads": threads,
            "commits": commits, "pages": pages, "rechecked": rechecked, "locks": locks,
            "complete": swarm.started - start0 >= args.queued}


class Server:
    """The `sluice server` under test: started, killed with SIGKILL, started again on the same
    port and data dir."""

    def __init__(self, args, tmp):
        self.args = args
        self.tmp = tmp
        self.data = os.path.join(tmp, "server")
        self.proc = None
        self.starts = 0

    @property
    def pid(self):
        return self.proc.pid

    def first(self, name):
        return open(os.path.join(self.data, name)).read().split("\n", 1)[0].strip()

    def start(self, listen):
        """Starts it; returns the port once it listens, or None."""
        a = self.args
        cmd = [a.sluice, "server", "--listen", listen, "--data-dir", self.data, "--tls",
               "--heartbeat-interval", str(a.interval), "--heartbeat-grace", str(3 * a.interval),
               "--max-nodes-per-provider", str(a.agents + 10)] + a.server_arg
        self.starts += 1
        url_file = os.path.join(self.data, "server.url")
        if os.path.exists(url_file):
            os.unlink(url_file)  # a killed server leaves its own behind
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(
            os.path.join(self.tmp, f"server-{self.starts}.log"), "w"))
        end = time.monotonic() + 60
        while not os.path.exists(url_file):
            if self.proc.poll() is not None or time.monotonic() > end:
                return None
            time.sleep(0.01)
        return int(open(url_file).read().strip().rsplit(":", 1)[1].split("/")[0])

    def kill9(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def dead_nodes(args, swarm, api):
    """Silences args.silence random agents (no heartbeat, no pong, nothing written; the socket
    stays open) and waits for the server to declare each lost and close its connection. The
    delay counted is from the last message an agent wrote (a heartbeat, a job's exit; WebSocket
    pongs are not messages) to that close."""
    victims = random.Random(11).sample(swarm.agents, min(args.silence, len(swarm.agents)))
    for a in victims:
        a.closed_at = None
        a.silent = True
    grace = 3 * args.interval
    t0 = time.monotonic()
    lags = []  # how late this process's own event loop wakes: the swarm's share of any delay
    while any(a.closed_at is None for a in victims) and time.monotonic() - t0 < grace + 60:
        before = time.monotonic()
        await asyncio.sleep(0.05)
        lags.append(time.monotonic() - before - 0.05)
    delays = [a.closed_at - a.last_sent for a in victims if a.closed_at is not None]
    log("dead-node delays (s): " + " ".join(f"{d:.2f}" for d in sorted(delays)))
    if os.environ.get("SWARM_DEBUG_DEAD"):
        for a in sorted(victims, key=lambda a: a.last_sent):
            log(f"victim {a.i}: last sent {a.last_sent - t0:+.2f} s, last heard "
                f"{a.last_recv - t0:+.2f} s, closed {(a.closed_at or 0) - t0:+.2f} s "
                f"({a.close_how})")
    # With --engine cxx the agents run in their own process: this loop only polls them.
    loop = "swarm" if isinstance(swarm, Swarm) else "orchestrator (not the agents')"
    log(f"{loop} event-loop lag while waiting: median {percentile(lags, 50) * 1000:.0f} ms, "
        f"p99 {percentile(lags, 99) * 1000:.0f} ms, worst {max(lags, default=0) * 1000:.0f} ms")
    status, body = await asyncio.get_running_loop().run_in_executor(
        None, api.call, "GET", "/v1/nodes")
    state = {n["id"]: n.get("state") for n in json.loads(body)["nodes"]} if status == 200 else {}
    lost = sum(1 for a in victims if state.get(a.node_id) == "lost")
    return {"silenced": len(victims), "detected": len(delays), "lost": lost,
            "worst": max(delays) if delays else float("nan"),
            "median": percentile(delays, 50) if delays else float("nan"), "grace": grace}


async def reconnect_storm(args, swarm, server, port, admin_token):
    """kill -9 of the server with every agent connected and args.storm_jobs jobs running (held
    by the agents), then a restart on the same port and data dir: the time until every live
    agent is welcomed again, the suites asked for meanwhile (unchanged fingerprints need none),
    and whether every running job survives, runs once and then succeeds."""
    live = [a for a in swarm.agents if not a.silent]
    swarm.hold = True
    api = Api(port, admin_token)
    started0 = swarm.started
    n = min(args.storm_jobs, len(live))
    await asyncio.get_running_loop().run_in_executor(
        None, submit_all, port, admin_token,
        [{"spec": {"name": f"storm{k}", "run": "true",
                   "resources": {"cpus": 1, "memory_gb": 1}}} for k in range(n)], 4)
    while swarm.started - started0 < n:
        await asyncio.sleep(0.05)
    welcomes0 = {a.i: a.welcomes for a in live}
    reported0 = swarm.reported
    server.kill9()
    t_kill = time.monotonic()
    restarted = await asyncio.get_running_loop().run_in_executor(
        None, server.start, f"127.0.0.1:{port}")
    if restarted is None:
        raise RuntimeError("the server did not restart on its port")
    t0 = time.monotonic()
    while True:
        back = sum(1 for a in live if a.welcomes > welcomes0[a.i])
        if back == len(live) or time.monotonic() - t0 > args.timeout:
            break
        await asyncio.sleep(0.05)
    back_s = time.monotonic() - t0
    suites = swarm.reported - reported0
    # The held jobs: still placed where they ran, then finished once each.
    await asyncio.sleep(1)
    swarm.release()
    api = Api(port, admin_token)
    t1 = time.monotonic()
    while True:
        status, body = api.call("GET", "/v1/jobs?limit=10000")
        jobs = [j for j in json.loads(body)["jobs"] if j["name"].startswith("storm")]
        done = sum(1 for j in jobs if j["state"] == "succeeded")
        if done == n or time.monotonic() - t1 > 120:
            break
        await asyncio.sleep(0.5)
    twice = sum(1 for j in jobs if swarm.assigned_jobs.get(j["id"], 0) > 1)
    return {"agents": len(live), "back": back, "back_s": back_s,
            "restart_s": t0 - t_kill, "suites": suites, "jobs": n, "succeeded": done,
            "twice": twice}


def load_slurm_harness():
    """bench/submit_latency's Slurm harness (a private munged, slurmctld and slurmd on
    localhost), loaded by path: both benches are scripts named run.py."""
    import importlib.util
    path = os.path.join(REPO, "bench", "submit_latency", "run.py")
    spec = importlib.util.spec_from_file_location("submit_latency_run", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def slurm_baseline(args):
    """Slurm on this machine, where it has a counterpart: `sbatch` acceptance rate over the same
    number of connections (processes) as the swarm's submits, and jobs started per second, with
    its one node declared with 1024 CPUs (config_overrides: oversubscribed, so the node is never
    what a job waits for) and the tuned scheduler (no batch delay, no minimum interval)."""
    mod = load_slurm_harness()
    mod.ensure_slurm_installed(not args.no_install)
    mem_mb = mod.node_resources()[1]
    mod.node_resources = lambda: (1024, mem_mb)
    mod.SLURM_CONF = mod.SLURM_CONF.replace(
        "MpiDefault=none", "MpiDefault=none\nSlurmdParameters=config_overrides\nMaxJobCount=100000")
    procs = mod.Procs()
    slurm = mod.Slurm(procs, sched_params=mod.SLURM_PROFILES["tuned"])
    import concurrent.futures
    try:
        slurm.start()
        stamps = os.path.join(slurm.d, "jobs")
        n = args.slurm_jobs

        def one(k):
            wrap = f"date +%s.%N > {stamps}/s-{k}"
            r = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", "-n", "1", "-c", "1",
                                "--mem=1M", "--wrap", wrap], env=slurm.env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=60)
            if r.returncode != 0:
                raise RuntimeError(f"sbatch failed: {r.stderr.strip()}")

        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(args.submit_threads) as pool:
            for f in [pool.submit(one, k) for k in range(n)]:
                f.result()
        accept_s = time.time() - t0
        end = time.monotonic() + args.timeout
        while len(os.listdir(stamps)) < n and time.monotonic() < end:
            time.sleep(0.2)
        starts = []
        for name in os.listdir(stamps):
            try:
                starts.append(float(open(os.path.join(stamps, name)).read().strip()))
            except ValueError:
                pass
        starts.sort()
        span = starts[-1] - starts[0] if len(starts) > 1 else float("nan")
        slurm.drain(60)
        return {"jobs": n, "accept_rate": n / accept_s, "started": len(starts),
                "start_rate": (len(starts) - 1) / span if span > 0 else float("nan"),
                "version": slurm.config_summary.get("SLURM_VERSION", "?")}
    finally:
        procs.stop_all()
        slurm.stop()


def verified_nodes(api):
    status, body = api.call("GET", "/v1/nodes")
    return sum(1 for n in json.loads(body)["nodes"] if n.get("verification") == "verified")


async def run(args, server, port, join_token, admin_token):
    api = Api(port, admin_token)
    pid = server.pid
    rss0 = proc_rss_kib(pid)
    base = submit_latencies_apart(port, admin_token, args.submits)  # no agent: everything queues
    log(f"baseline submit (no agents): p50 {percentile(base, 50):.2f} ms, "
        f"p99 {percentile(base, 99):.2f} ms; server RSS {rss0 / 1024:.1f} MiB")
    # Cancel the baseline's jobs so the swarm's nodes do not run them.
    status, body = api.call("GET", "/v1/jobs?state=queued&limit=10000")
    for j in json.loads(body)["jobs"]:
        api.call("POST", f"/v1/jobs/{j['id']}/cancel")

    if args.engine == "cxx":
        swarm = SwarmProxy(args.engine_bin, server.tmp, port, join_token, args.interval,
                           args.agents)
        t0 = time.monotonic()
        swarm.start()
        tasks = []
    else:
        swarm = Swarm(port, join_token, args.interval)
        swarm.agents = [Agent(i, swarm.rng) for i in range(args.agents)]
        gate = asyncio.Semaphore(64)
        t0 = time.monotonic()
        tasks = [asyncio.ensure_future(swarm.agent(a, gate, reconnect=True))
                 for a in swarm.agents]
    while swarm.welcomed < args.agents:
        await asyncio.sleep(0.5)
        for t in tasks:
            if t.done() and t.exception():
                raise t.exception()
        if time.monotonic() - t0 > args.timeout:
            raise RuntimeError(f"only {swarm.welcomed} of {args.agents} agents welcomed")
    connected_s = time.monotonic() - t0
    log(f"{args.agents} agents enrolled in {connected_s:.1f} s")
    while True:
        v = await asyncio.get_running_loop().run_in_executor(None, verified_nodes, api)
        if v >= args.agents:
            break
        if time.monotonic() - t0 > args.timeout:
            raise RuntimeError(f"only {v} of {args.agents} nodes verified")
        await asyncio.sleep(1)
    verified_s = time.monotonic() - t0
    log(f"all verified {verified_s:.1f} s after the first connect; settling")
    await asyncio.sleep(2 * args.interval)

    # Steady heartbeats: RSS, CPU and leases over a window.
    rss1 = proc_rss_kib(pid)
    cpu0, leases0, w0, swarm_cpu0 = proc_cpu_s(pid), swarm.leases, time.monotonic(), swarm.cpu_s()
    await asyncio.sleep(args.window)
    cpu1, leases1, w1, swarm_cpu1 = proc_cpu_s(pid), swarm.leases, time.monotonic(), swarm.cpu_s()
    rss2 = proc_rss_kib(pid)  # after the window: steady heartbeats only, the burst long over
    window = w1 - w0
    cpu_pct = (cpu1 - cpu0) / window * 100
    swarm_cpu_pct = (swarm_cpu1 - swarm_cpu0) / window * 100
    hb_per_s = (leases1 - leases0) / window

    # Submit latency while the agents heartbeat (and the jobs place and run on them).
    loaded = await asyncio.get_running_loop().run_in_executor(
        None, submit_latencies_apart, port, admin_token, args.submits)

    while swarm.exited < args.submits:  # the latency sample's jobs ran too; let them finish
        await asyncio.sleep(0.05)
        if time.monotonic() - w1 > args.timeout:
            raise RuntimeError(f"only {swarm.exited} of {args.submits} jobs ran")

    # Placements: jobs submitted back to back until each has succeeded.
    done0 = swarm.exited
    t_place = time.monotonic()
    await asyncio.get_running_loop().run_in_executor(None, submit_latencies, api, args.jobs)
    while swarm.exited - done0 < args.jobs:
        await asyncio.sleep(0.05)
        if time.monotonic() - t_place > args.timeout:
            raise RuntimeError(f"only {swarm.exited - done0} of {args.jobs} jobs ran")
    placed_s = time.monotonic() - t_place

    deep = None
    if args.queued > 0:
        deep = await queued_placements(args, swarm, port, admin_token, pid)
    dead = await dead_nodes(args, swarm, api) if args.silence > 0 else None
    storm = None
    if args.storm:
        storm = await reconnect_storm(args, swarm, server, port, admin_token)
    swarm.stop.set()
    for t in tasks:
        t.cancel()
    if swarm.errors:
        log(f"{len(swarm.errors)} agent errors, first: {swarm.errors[0]}")

    per_agent_kib = (rss2 - rss0) / args.agents
    settle_kib = (rss1 - rss0) / args.agents
    print(f"agents: {args.agents} over {1 + (args.agents - 1) // PER_ADDRESS} source addresses, "
          f"wss, heartbeat every {args.interval:g} s; enrolled in {connected_s:.1f} s, "
          f"verified after {verified_s:.1f} s (every node enrolled and verified by protocol)")
    print(f"server RSS: {rss0 / 1024:.1f} MiB before, {rss2 / 1024:.1f} MiB with the agents "
          f"after {args.window:g} s of heartbeats: {per_agent_kib:.1f} KiB per agent (target "
          f"64 KiB: {per_agent_kib / 64:.2f}x); {settle_kib:.1f} KiB per agent "
          f"{2 * args.interval:g} s after the last verification")
    print(f"server CPU while heartbeating: {cpu_pct:.1f} % of one core "
          f"(target 25 %: {cpu_pct / 25:.2f}x); heartbeats answered: {hb_per_s:.0f}/s; "
          f"{swarm.cpu_label}: {swarm_cpu_pct:.1f} %")
    print(f"submit with no agents (baseline): p50 {percentile(base, 50):.2f} ms, "
          f"p99 {percentile(base, 99):.2f} ms")
    print(f"submit while {args.agents} agents heartbeat (a client process of its own): "
          f"p50 {percentile(loaded, 50):.2f} ms, "
          f"p99 {percentile(loaded, 99):.2f} ms; ratio to baseline p50 "
          f"{percentile(loaded, 50) / percentile(base, 50):.2f}x, p99 "
          f"{percentile(loaded, 99) / percentile(base, 99):.2f}x")
    print(f"placements: {args.jobs} jobs submitted and run to success in {placed_s:.2f} s: "
          f"{args.jobs / placed_s:.0f}/s end to end (submit, commit, assign, started, exited)")
    if deep:
        RESULTS["submit_rate"] = args.queued / deep["submit_s"]
        RESULTS["placement_rate"] = deep["rate"]
        print(f"queued placements: {args.queued} jobs of {deep['shapes']} shapes submitted in "
              f"{deep['submit_s']:.1f} s ({args.queued / deep['submit_s']:.0f}/s); "
              f"{deep['held']} placed and held, {deep['queued']} queued")
        print(f"  released: {deep['placed']} placements in {deep['drain_s']:.1f} s: "
              f"{deep['rate']:.0f}/s committed, assigned and started with a queue of "
              f"{deep['queued']} (target 5,000/s: {deep['rate'] / 5000:.2f}x); "
              f"{'all placed' if deep['complete'] else 'NOT all placed before --timeout'}; "
              f"jobs assigned twice: {deep['twice']}")
        own = (f", this process orchestrating {deep['own_cpu_pct']:.0f} %"
               if args.engine == "cxx" else "")
        print(f"  during the release: server {deep['server_cpu_pct']:.0f} % of one core, "
              f"{swarm.cpu_label} {deep['swarm_cpu_pct']:.0f} % "
              f"({deep['swarm_ms_per_placement']:.3f} ms per placement){own}; store commits "
              f"{deep['commits']} ({deep['commits'] / max(deep['placed'], 1):.2f} per placement, "
              f"{deep['pages'] / max(deep['commits'], 1):.1f} pages written each)")
        # What the machine allows at this cost: every process of the bench shares its cores, so
        # the rate cannot pass cores / (CPU seconds the release spent per placement).
        cores = os.cpu_count() or 1
        per_placement_ms = ((deep["server_cpu_pct"] + deep["swarm_cpu_pct"] +
                             (deep["own_cpu_pct"] if args.engine == "cxx" else 0)) / 100 *
                            deep["drain_s"] * 1000 / max(deep["placed"], 1))
        print(f"  CPU per placement in the release, server and agents together (heartbeats "
              f"included): {per_placement_ms:.3f} ms; at that cost {cores} cores allow at most "
              f"{cores * 1000 / per_placement_ms:.0f}/s (this run: "
              f"{deep['rate'] / (cores * 1000 / per_placement_ms):.0%} of that); 5,000/s allows "
              f"{cores * 1000 / 5000:.3f} ms")
        if deep["rechecked"] is not None:
            print(f"  nodes searched again by incremental passes: {deep['rechecked']} "
                  f"({deep['rechecked'] / max(deep['placed'], 1):.2f} per placement)")
        print(f"  the server's threads during the release, share of one core: {deep['threads']}")
        print(f"  the core's lock during the release: {deep['locks']}")
    if dead:
        print(f"dead nodes: {dead['silenced']} agents silenced (socket left open): "
              f"{dead['detected']} detected, {dead['lost']} shown lost; delay from the last "
              f"message: median {dead['median']:.2f} s, worst {dead['worst']:.2f} s "
              f"(target grace {dead['grace']:g} s + 1 s: "
              f"{'met' if dead['worst'] <= dead['grace'] + 1 else 'NOT met'})")
    if storm:
        print(f"reconnect storm: kill -9 with {storm['agents']} agents connected and "
              f"{storm['jobs']} jobs running; restarted in {storm['restart_s']:.1f} s; "
              f"{storm['back']} of {storm['agents']} back online {storm['back_s']:.1f} s after "
              f"the restart (target 60 s); suites asked for: {storm['suites']} (target 0); "
              f"running jobs that then succeeded: {storm['succeeded']} of {storm['jobs']}, "
              f"run twice: {storm['twice']}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sluice", default=os.path.join(REPO, "build", "sluice"))
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--interval", type=float, default=5.0, help="heartbeat interval, seconds")
    ap.add_argument("--window", type=float, default=20.0, help="seconds of steady heartbeats")
    ap.add_argument("--submits", type=int, default=200, help="submits per latency sample")
    ap.add_argument("--jobs", type=int, default=500, help="jobs for the placement rate")
    ap.add_argument("--queued", type=int, default=-1,
                    help="jobs for the deep-queue placement rate (default 10 per agent; 0: skip)")
    ap.add_argument("--submit-threads", type=int, default=4)
    ap.add_argument("--silence", type=int, default=100, help="agents silenced for dead-node "
                    "detection (0: skip)")
    ap.add_argument("--storm", type=int, default=1, help="1: measure the reconnect storm")
    ap.add_argument("--slurm-jobs", type=int, default=2000,
                    help="jobs for Slurm's rates, measured in the same run (0: skip)")
    ap.add_argument("--no-install", action="store_true",
                    help="do not apt-get install Slurm when it is missing")
    ap.add_argument("--storm-jobs", type=int, default=1000,
                    help="jobs running through the storm")
    ap.add_argument("--engine", choices=["cxx", "python"], default="cxx",
                    help="what plays the agents: bench_swarm_agents (one compiled process) or "
                    "this Python process")
    ap.add_argument("--engine-bin", help="the bench_swarm_agents binary (default: "
                    "bench/swarm/bench_swarm_agents in the build dir that holds --sluice)")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="one more argument for `sluice server` (repeat for more), e.g. "
                    "--server-arg=--threads --server-arg=1")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--keep-tmp", action="store_true")
    args = ap.parse_args()
    if args.queued < 0:
        args.queued = 10 * args.agents

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2 * args.agents + 1024
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (want if hard == resource.RLIM_INFINITY else min(want, hard), hard))
    if not os.access(args.sluice, os.X_OK):
        log(f"no sluice binary at {args.sluice} (build it, or pass --sluice)")
        return 2
    if args.engine == "cxx":
        build = os.path.dirname(os.path.abspath(args.sluice))
        args.engine_bin = args.engine_bin or os.path.join(build, "bench", "swarm",
                                                          "bench_swarm_agents")
        if not os.access(args.engine_bin, os.X_OK):
            log(f"no agent engine at {args.engine_bin}: build it with `ninja -C {build} "
                f"bench/swarm/bench_swarm_agents`, pass --engine-bin, or use --engine python")
            return 1
    tmp = tempfile.mkdtemp(prefix="sluice-swarm-")
    server = Server(args, tmp)
    try:
        port = server.start("127.0.0.1:0")
        if port is None:
            log("the server did not start; see " + os.path.join(tmp, "server.log"))
            args.keep_tmp = True
            return 2
        rc = asyncio.run(run(args, server, port, server.first("join.token"),
                             server.first("admin.token")))
        server.stop()  # Slurm measures on a quiet machine, as the swarm did
        if rc == 0 and args.slurm_jobs > 0:
            sl = slurm_baseline(args)
            print(f"slurm {sl['version']} (tuned, one node declared with 1024 CPUs): sbatch "
                  f"accepted {sl['accept_rate']:.0f}/s over {args.submit_threads} "
                  f"processes; {sl['started']} of {sl['jobs']} jobs started at "
                  f"{sl['start_rate']:.0f}/s")
            print(f"ratios: submits accepted {RESULTS['submit_rate'] / sl['accept_rate']:.2f}x "
                  f"Slurm's sbatch; placements {RESULTS['placement_rate'] / sl['start_rate']:.2f}x"
                  f" Slurm's jobs started per second (target 10x)")
        return rc
    except Exception as e:  # noqa: BLE001 - a bench reports, it does not trace
        log(f"swarm failed: {e}")
        args.keep_tmp = True
        return 1
    finally:
        server.stop()
        if args.keep_tmp:
            log("kept " + tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)

if __name__ == "__main__":
    sys.exit(main())
