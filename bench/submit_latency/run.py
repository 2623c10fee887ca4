#!/usr/bin/env python3
"""Submit-to-start latency: Sluice vs. Slurm on localhost, measured in the same run.

Sluice: t0 just before spawning `sluice run job.yaml --follow`; t1 when the job's first
output line ("started") is read from the CLI's stdout.
Slurm:  t0 just before spawning `sbatch --wrap ...`; t1 = the high-resolution wall-clock
timestamp the job itself writes as its first action (`date +%s.%N`).
Jobs are submitted sequentially (each must start before the next is submitted), so this
measures latency, not throughput.

Stdlib only. Run as root on Debian 12: python3 bench/submit_latency/run.py
See bench/submit_latency/README.md.
"""

import argparse
import hashlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET_P50_MS = 30.0
TARGET_RATIO = 20.0


class BenchError(Exception):
    """A failure that makes the measurement impossible (not a missed target)."""

    def __init__(self, msg, code=1):
        super().__init__(msg)
        self.code = code


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def wait_for(cond, deadline_s, what, interval=0.01):
    """Polls cond() until it returns a truthy value or the deadline passes."""
    end = time.monotonic() + deadline_s
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            raise BenchError(f"timed out after {deadline_s:.0f}s waiting for {what}")
        time.sleep(interval)


def percentile(sorted_xs, p):
    """Linear interpolation between closest ranks (numpy's default method)."""
    if not sorted_xs:
        return float("nan")
    k = (len(sorted_xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (k - lo)


def summarize(samples_s):
    xs = sorted(x * 1000.0 for x in samples_s)
    return {
        "n": len(xs),
        "p50_ms": percentile(xs, 50),
        "p99_ms": percentile(xs, 99),
        "mean_ms": sum(xs) / len(xs) if xs else float("nan"),
        "min_ms": xs[0] if xs else float("nan"),
        "max_ms": xs[-1] if xs else float("nan"),
    }


def host_speed():
    """How fast this host runs what Sluice's path is made of, so runs on different days can be
    told apart: Slurm's latency is mostly its own timers, Sluice's is process starts and CPU, so
    a slower (busier) host moves the ratio. Returns p50s in ms: fork+exec of /bin/true (the
    CLI's and the job's own start) and SHA-256 of 16 MiB (plain CPU)."""
    spawn = []
    for _ in range(50):
        t0 = time.perf_counter()
        subprocess.run(["/bin/true"], check=False)
        spawn.append(time.perf_counter() - t0)
    data = b"\0" * (16 << 20)
    cpu = []
    for _ in range(5):
        t0 = time.perf_counter()
        hashlib.sha256(data).digest()
        cpu.append(time.perf_counter() - t0)
    return {"exec_true_p50_ms": summarize(spawn)["p50_ms"],
            "sha256_16mib_p50_ms": summarize(cpu)["p50_ms"]}


class Procs:
    """Daemons this script started; each leads its own process group."""

    def __init__(self):
        self.procs = []  # (name, Popen)

    def start(self, name, argv, **kw):
        kw.setdefault("stdin", subprocess.DEVNULL)
        p = subprocess.Popen(argv, start_new_session=True, **kw)
        self.procs.append((name, p))
        return p

    def stop_all(self, grace_s=5.0):
        # Reverse start order: agents/slurmd before servers/slurmctld before munged.
        for name, p in reversed(self.procs):
            self._stop(name, p, grace_s)
        self.procs.clear()

    @staticmethod
    def _signal(p, sig):
        try:
            os.killpg(p.pid, sig)  # the group we created with start_new_session
        except (ProcessLookupError, PermissionError):
            try:
                p.send_signal(sig)
            except ProcessLookupError:
                pass

    def _stop(self, name, p, grace_s):
        if p.poll() is None:
            self._signal(p, signal.SIGTERM)
            try:
                p.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                log(f"{name} (pid {p.pid}) ignored SIGTERM for {grace_s:.0f}s; SIGKILL")
                self._signal(p, signal.SIGKILL)
                p.wait(timeout=grace_s)
        # Children left in the group (e.g. slurmstepd) get SIGKILL.
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def tail(path, n=20):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no log)"


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- Slurm

SLURM_PKGS = {"slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client",
              "munged": "munge"}


def ensure_slurm_installed(allow_install):
    missing = sorted({pkg for exe, pkg in SLURM_PKGS.items() if not shutil.which(exe)
                      and not os.path.exists(f"/usr/sbin/{exe}")})
    if not missing:
        return
    if not allow_install:
        raise BenchError(f"Slurm packages missing: {' '.join(missing)} (--no-install given)")
    if os.geteuid() != 0:
        raise BenchError(f"Slurm packages missing ({' '.join(missing)}); run as root to "
                         "let this script apt-get install them")
    log(f"installing {' '.join(missing)} via apt-get ...")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends"] + missing,
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        log("apt-get install failed; running apt-get update and retrying")
        subprocess.run(["apt-get", "update", "-q"], env=env, stdout=subprocess.DEVNULL)
        r = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends"]
                           + missing, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            raise BenchError("apt-get install failed:\n" + r.stdout[-2000:])
    # The Debian packages enable systemd units; on a systemd host they may have started
    # slurmd/slurmctld with /etc/slurm (absent) -> they fail harmlessly. We never use them.


def node_resources():
    cpus = os.cpu_count() or 1
    mem_mb = 1024
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_mb = int(line.split()[1]) // 1024
    # Leave headroom so slurmd's own RealMemory check never drains the node.
    return cpus, max(256, int(mem_mb * 0.9))


SLURM_CONF = """\
# Minimal single-node Slurm for the submit-latency benchmark (generated by run.py).
ClusterName=sluicebench
SlurmctldHost={ctld_host}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={d}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
{sched_params_line}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MinJobAge=10
InactiveLimit=0
KillWait=5
Waittime=0
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN
PartitionName=bench Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


class Slurm:
    def __init__(self, procs, sched_params="", keep_tmp=False):
        self.procs = procs
        self.sched_params = sched_params
        self.keep_tmp = keep_tmp
        self.d = tempfile.mkdtemp(prefix="sluice-bench-slurm-")
        # munged requires execute permission for all on every directory above its socket.
        os.chmod(self.d, 0o711)
        for sub in ("state", "spool", "run", "log", "munge-key", "jobs"):
            os.makedirs(os.path.join(self.d, sub), mode=0o700)
        os.makedirs(os.path.join(self.d, "munge"), mode=0o711)
        self.conf = os.path.join(self.d, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        for k in list(self.env):
            if k.startswith(("SLURM_", "SBATCH_")) and k != "SLURM_CONF":
                del self.env[k]
        self.config_summary = {}

    def _munge(self):
        m = os.path.join(self.d, "munge")
        key = os.path.join(self.d, "munge-key", "munge.key")
        with open(key, "wb") as f:
            f.write(secrets.token_bytes(1024))
        os.chmod(key, 0o400)
        self.munge_socket = os.path.join(m, "munge.socket")
        munged = self.procs.start("munged", [
            "munged", "--foreground", "--key-file", key, "--socket", self.munge_socket,
            "--pid-file", os.path.join(m, "munged.pid"),
            "--log-file", os.path.join(self.d, "log", "munged.log"),
            "--seed-file", os.path.join(m, "munged.seed"), "--num-threads", "2"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.d, "log",
                                                                "munged.stderr"), "w"))

        def up():
            if munged.poll() is not None:
                raise BenchError(f"munged exited with {munged.returncode}:\n"
                                 + tail(os.path.join(self.d, "log", "munged.stderr")))
            return os.path.exists(self.munge_socket)
        wait_for(up, 15, "munged socket")

    def _write_conf(self):
        cpus, mem_mb = node_resources()
        ctld_port, slurmd_port = free_port(), free_port()
        with open(os.path.join(self.d, "plugstack.conf"), "w"):
            pass
        text = SLURM_CONF.format(ctld_host="localhost", ctld_port=ctld_port,
                                 slurmd_port=slurmd_port, munge_socket=self.munge_socket,
                                 d=self.d, cpus=cpus, mem_mb=mem_mb,
                                 sched_params_line=(f"SchedulerParameters={self.sched_params}"
                                                    if self.sched_params else ""))
        with open(self.conf, "w") as f:
            f.write(text)
        self.config_summary = {"cpus": cpus, "real_memory_mb": mem_mb,
                               "select": "select/cons_tres CR_Core_Memory",
                               "sched": "sched/backfill, default SchedulerParameters",
                               "proctrack": "proctrack/linuxproc", "task": "task/none",
                               "auth": "auth/munge (private munged, temp key)"}

    def _run(self, argv, timeout=30):
        return subprocess.run(argv, env=self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=timeout)

    def _daemons_alive(self):
        for name, p in self.procs.procs:
            if name.startswith("slurm") and p.poll() is not None:
                logf = os.path.join(self.d, "log", f"{name}.log")
                raise BenchError(f"{name} exited with {p.returncode}; log tail:\n"
                                 f"{tail(logf)}\nstderr:\n{tail(logf + '.stderr')}")

    def start(self):
        self._munge()
        self._write_conf()
        log(f"slurm: config {self.conf}")
        lg = os.path.join(self.d, "log")
        self.procs.start("slurmctld", ["slurmctld", "-D", "-i", "-f", self.conf],
                         env=self.env, stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(lg, "slurmctld.log.stderr"), "w"))

        def ctld_up():
            self._daemons_alive()
            r = self._run(["scontrol", "ping"], timeout=10)
            return r.returncode == 0 and "UP" in r.stdout
        wait_for(ctld_up, 60, "slurmctld to answer `scontrol ping`", interval=0.2)
        self.procs.start("slurmd", ["slurmd", "-D", "-N", "localhost", "-f", self.conf],
                         env=self.env, stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(lg, "slurmd.log.stderr"), "w"))

        def node_idle():
            self._daemons_alive()
            r = self._run(["sinfo", "-h", "-N", "-n", "localhost", "-o", "%T"], timeout=10)
            return r.returncode == 0 and r.stdout.strip() == "idle"
        wait_for(node_idle, 90, "Slurm node 'localhost' to become idle", interval=0.2)
        r = self._run(["scontrol", "show", "config"])
        for line in r.stdout.splitlines():
            k = line.split("=", 1)[0].strip()
            if k in ("SLURM_VERSION", "SchedulerParameters", "SchedulerType", "SelectType",
                     "PriorityType", "MessageTimeout", "BatchStartTimeout"):
                self.config_summary[k] = line.split("=", 1)[1].strip()
        log(f"slurm: {self.config_summary.get('SLURM_VERSION', '?')} up, node idle")

    def one_job(self, i, deadline_s):
        out = os.path.join(self.d, "jobs", f"start-{i}")
        # The job's first action writes its own wall-clock start time (atomically via rename).
        wrap = f"date +%s.%N > {out}.tmp && mv {out}.tmp {out}"
        argv = ["sbatch", "--parsable", "--output=/dev/null", "--job-name=lat",
                "-n", "1", "-c", "1", "--mem=100M", "--wrap", wrap]
        t0 = time.time()
        r = subprocess.run(argv, env=self.env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=deadline_s)
        if r.returncode != 0:
            raise BenchError(f"sbatch failed ({r.returncode}): {r.stderr.strip()}")
        job_id = r.stdout.strip().split(";")[0]

        def started():
            try:
                with open(out) as f:
                    s = f.read().strip()
                return s or None
            except FileNotFoundError:
                return None
        end = time.monotonic() + deadline_s
        while True:
            s = started()
            if s:
                break
            if time.monotonic() > end:
                q = self._run(["scontrol", "show", "job", job_id], timeout=10).stdout
                raise BenchError(f"slurm job {job_id} did not start within {deadline_s}s:\n{q}")
            self._daemons_alive()
            time.sleep(0.002)
        return float(s) - t0

    def drain(self, deadline_s=30):
        """Waits until no job is left (so slurmstepd exits on its own before slurmd does)."""
        def empty():
            r = self._run(["squeue", "-h", "-o", "%i"], timeout=10)
            return r.returncode == 0 and not r.stdout.strip()
        try:
            wait_for(empty, deadline_s, "the Slurm queue to drain", interval=0.05)
        except BenchError as e:
            log(f"slurm: warning: {e}")

    def sweep_stray(self):
        """SIGKILLs leftover processes of this Slurm instance (slurmstepd daemonizes out of
        slurmd's process group), recognised by SLURM_CONF=<our conf> in their environment."""
        needle = f"SLURM_CONF={self.conf}".encode()
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        os.kill(int(pid), signal.SIGKILL)
                        log(f"slurm: killed leftover pid {pid}")
            except (OSError, ProcessLookupError):
                pass

    def stop(self):
        self.sweep_stray()
        if not self.keep_tmp:
            shutil.rmtree(self.d, ignore_errors=True)
        else:
            log(f"slurm: kept {self.d}")


# Slurm 22.05 schedules newly submitted batch jobs from a background thread that wakes
# about once a second and, by default, waits batch_sched_delay=3 s before considering
# them. "default" keeps that stock behaviour (what the issue calls Slurm on localhost);
# "tuned" removes that 3 s hold (the ~1 s tick remains), so the ratio is also shown
# against a Slurm that was given a fair chance.
SLURM_PROFILES = {
    "default": "",
    "tuned": "batch_sched_delay=0,sched_min_interval=0",
}


def bench_slurm(args, procs, profile):
    ensure_slurm_installed(not args.no_install)
    s = Slurm(procs, sched_params=SLURM_PROFILES[profile], keep_tmp=args.keep_tmp)
    rng = random.Random(12345)
    try:
        s.start()
        for i in range(args.warmup):
            s.one_job(f"warm{i}", args.job_deadline)
        samples = []
        for i in range(args.slurm_jobs):
            # A random pause de-phases submits from Slurm's ~1 s scheduler tick; without it
            # every submit lands just after a tick and Slurm looks worse than it is.
            time.sleep(rng.uniform(0.0, args.slurm_jitter))
            samples.append(s.one_job(i, args.job_deadline))
            if (i + 1) % 10 == 0:
                log(f"slurm[{profile}]: {i + 1}/{args.slurm_jobs} jobs")
        s.drain()
        return samples, s.config_summary
    finally:
        procs.stop_all()
        s.stop()


# --------------------------------------------------------------------------- Sluice

JOB_SPEC = "name: lat\nresources: {cpus: 1, memory_gb: 0.1}\nrun: echo started\n"


def check_sluice(path):
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise BenchError(f"sluice binary not found at {path} (build it, or pass --sluice PATH)",
                         code=2)
    try:
        r = subprocess.run([path, "server", "--help"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        raise BenchError(f"`{path} server --help` hung", code=2)
    if r.returncode != 0:
        raise BenchError(f"`{path} server --help` failed (rc={r.returncode}); the binary "
                         f"does not implement `server` yet:\n{r.stdout.strip()[:1000]}", code=2)


# Sluice profiles (issue 10), each on a fresh server:
#   admin: plain HTTP, the admin token (what earlier runs measured)
#   user:  plain HTTP, a user account's token made with `sluice account create` (every request
#          is checked against the job's owner)
#   tls:   `sluice server --tls`, the same user token, the CLI pinning the generated CA
# and (issue 11) the same as tls with the agent started --no-sandbox, to state what the job
# sandbox (bubblewrap: namespaces, its own uid) adds; every other profile runs jobs sandboxed.
#   tls-nosandbox: as tls, jobs unboxed
#   tls-cold:      as tls, with no warm sandbox kept (each job waits for its box to be built)
SLUICE_PROFILES = ("admin", "user", "tls-nosandbox", "tls-cold", "tls")


class Sluice:
    def __init__(self, path, procs, keep_tmp=False, profile="admin"):
        self.profile = profile
        self.path = path
        self.procs = procs
        self.keep_tmp = keep_tmp
        self.d = tempfile.mkdtemp(prefix="sluice-bench-")
        self.server_dir = os.path.join(self.d, "server")
        self.agent_dir = os.path.join(self.d, "agent")
        os.makedirs(self.server_dir)
        os.makedirs(self.agent_dir)
        self.job = os.path.join(self.d, "job.yaml")
        with open(self.job, "w") as f:
            f.write(JOB_SPEC)

    def _check_alive(self):
        for name, p in self.procs.procs:
            if p.poll() is not None:
                logf = os.path.join(self.d, f"{name}.log")
                raise BenchError(f"sluice {name} exited with {p.returncode}; log tail:\n"
                                 f"{tail(logf)}", code=2)

    def start(self):
        lg = lambda n: open(os.path.join(self.d, f"{n}.log"), "w")
        extra = ["--tls"] if self.profile.startswith("tls") else []
        self.procs.start("server", [self.path, "server", "--listen", "127.0.0.1:0",
                                    "--data-dir", self.server_dir] + extra,
                         stdout=lg("server"), stderr=subprocess.STDOUT)
        url_file = os.path.join(self.server_dir, "server.url")

        def url():
            self._check_alive()
            try:
                with open(url_file) as f:
                    u = f.read().strip()
            except FileNotFoundError:
                return None
            return u or None
        self.url = wait_for(url, 30, f"{url_file}")
        tok = os.path.join(self.server_dir, "admin.token")
        join = os.path.join(self.server_dir, "join.token")
        wait_for(lambda: os.path.exists(tok) and os.path.exists(join), 10,
                 "admin.token and join.token")
        # The whole token file: the secret and, with --tls, the CA pin the CLI verifies against.
        with open(tok) as f:
            self.env = dict(os.environ, SLUICE_SERVER=self.url, SLUICE_TOKEN=f.read().strip())
        if self.profile in ("user", "tls", "tls-nosandbox", "tls-cold"):
            user_tok = os.path.join(self.d, "bench-user.token")
            r = subprocess.run([self.path, "account", "create", "bench", "--out", user_tok],
                               env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=30)
            if r.returncode != 0:
                raise BenchError(f"sluice account create failed: {r.stdout[-1000:]}", code=2)
            # New users are prepaid (issue 14): give the bench user credit to spend.
            r = subprocess.run([self.path, "account", "credit", "bench", "1000"],
                               env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=30)
            if r.returncode != 0:
                raise BenchError(f"sluice account credit failed: {r.stdout[-1000:]}", code=2)
            admin_env = self.env
            self.env = dict(os.environ, SLUICE_SERVER=self.url, SLUICE_TOKEN_FILE=user_tok)
            self.env.pop("SLUICE_TOKEN", None)
        else:
            admin_env = self.env
        log(f"sluice ({self.profile}): server at {self.url}")
        box = {"tls-nosandbox": ["--no-sandbox"], "tls-cold": ["--warm-boxes", "0"]}.get(
            self.profile, [])
        self.procs.start("agent", [self.path, "agent", "--server", self.url,
                                   "--join-token-file", join, "--data-dir", self.agent_dir] + box,
                         stdout=lg("agent"), stderr=subprocess.STDOUT)

        def online():
            self._check_alive()
            r = subprocess.run([self.path, "nodes", "--json"], env=admin_env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=10)
            if r.returncode != 0:
                return False
            try:
                doc = json.loads(r.stdout)
            except ValueError:
                return False
            nodes = doc.get("nodes", []) if isinstance(doc, dict) else doc
            # Only verified nodes take work (issue 5): wait for the verdict too, so the first
            # measured submit does not include the conformance suite.
            return sum(1 for n in nodes if isinstance(n, dict)
                       and n.get("state") == "online"
                       and n.get("verification") == "verified") >= 1
        wait_for(online, 60, "one verified node with state 'online' in `sluice nodes --json`",
                 interval=0.05)
        log("sluice: agent online")

    def one_job(self, i, deadline_s):
        errf = open(os.path.join(self.d, "cli.stderr"), "w+")
        t0 = time.time()
        p = subprocess.Popen([self.path, "run", self.job, "--follow"], env=self.env,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errf,
                             bufsize=0)
        t1 = None
        extra = []
        try:
            # Readline on the raw pipe returns as soon as a full line is available.
            # The deadline is enforced by the watchdog kill below.
            timer_end = time.monotonic() + deadline_s
            timed_out = threading.Event()

            def watchdog():
                while p.poll() is None:
                    if time.monotonic() > timer_end:
                        timed_out.set()
                        p.kill()
                        return
                    time.sleep(0.05)
            threading.Thread(target=watchdog, daemon=True).start()
            while True:
                line = p.stdout.readline()
                if not line:
                    break
                if t1 is None and line.strip() == b"started":
                    t1 = time.time()
                    continue
                extra.append(line)
            rc = p.wait()
            if timed_out.is_set():
                raise BenchError(f"`sluice run --follow` (job {i}) did not finish within "
                                 f"{deadline_s}s", code=1)
            if rc != 0 or t1 is None:
                errf.seek(0)
                raise BenchError(f"`sluice run --follow` (job {i}) rc={rc}, "
                                 f"saw 'started'={t1 is not None}; stdout other lines: "
                                 f"{b''.join(extra)[:500]!r}; stderr:\n{errf.read()[-1500:]}")
            if extra and i == 0:
                log(f"sluice: warning: unexpected stdout lines besides 'started': "
                    f"{b''.join(extra)[:200]!r}")
            return t1 - t0
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            errf.close()

    def stop(self):
        if not self.keep_tmp:
            shutil.rmtree(self.d, ignore_errors=True)
        else:
            log(f"sluice: kept {self.d}")


def bench_sluice(args, procs, profile="admin"):
    s = Sluice(args.sluice, procs, keep_tmp=args.keep_tmp, profile=profile)
    try:
        s.start()
        for i in range(args.warmup):
            s.one_job(f"warm{i}", args.job_deadline)
        samples = []
        for i in range(args.sluice_jobs):
            samples.append(s.one_job(i, args.job_deadline))
            if (i + 1) % 50 == 0:
                log(f"sluice ({profile}): {i + 1}/{args.sluice_jobs} jobs")
        return samples
    finally:
        procs.stop_all()
        s.stop()


# --------------------------------------------------------------------------- main

def fmt(name, st):
    return (f"{name:<7} n={st['n']:<4} p50={st['p50_ms']:9.2f} ms  p99={st['p99_ms']:9.2f} ms"
            f"  mean={st['mean_ms']:9.2f} ms  min={st['min_ms']:9.2f} ms  "
            f"max={st['max_ms']:9.2f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sluice", default=os.path.join(REPO, "build", "sluice"),
                    help="path to the sluice binary (default: build/sluice)")
    ap.add_argument("--sluice-jobs", type=int, default=200)
    ap.add_argument("--slurm-jobs", type=int, default=50,
                    help="Slurm sample size (default 50: Slurm is slow per job)")
    ap.add_argument("--slurm-config", choices=["default", "tuned", "both"], default="both",
                    help="Slurm SchedulerParameters profile(s) to measure (default both; the "
                    "target is judged against 'default', the stock Slurm)")
    ap.add_argument("--slurm-jitter", type=float, default=1.0,
                    help="max random pause (s) before each Slurm submit (default 1.0)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="untimed jobs per system before measuring (default 1)")
    ap.add_argument("--job-deadline", type=float, default=60.0,
                    help="seconds one job may take to start/finish before it is an error")
    ap.add_argument("--sluice-profiles", default=",".join(SLUICE_PROFILES),
                    help="Sluice profiles to measure, each on a fresh server: admin (admin "
                    "token, plain HTTP), user (a user account's token), tls (--tls, user token); "
                    "default all; the target is judged on the last one listed")
    ap.add_argument("--only", choices=["slurm", "sluice"],
                    help="measure one side only (debugging; no ratio, target not judged)")
    ap.add_argument("--no-install", action="store_true",
                    help="do not apt-get install missing Slurm/munge packages")
    ap.add_argument("--keep-tmp", action="store_true", help="keep temp dirs (logs) afterwards")
    ap.add_argument("--json", metavar="OUT", help="write the results as JSON to OUT")
    args = ap.parse_args()
    args.sluice = os.path.abspath(args.sluice)

    # SIGTERM/SIGHUP -> KeyboardInterrupt so the finally blocks tear the daemons down.
    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    procs = Procs()
    result = {"benchmark": "submit_latency", "unit": "ms",
              "target": {"sluice_p50_ms_below": TARGET_P50_MS, "ratio_at_least": TARGET_RATIO}}
    try:
        if args.only != "slurm":
            check_sluice(args.sluice)  # fail fast (exit 2) before the slow Slurm setup
        result["host_before"] = host_speed()
        if args.only != "sluice":
            profiles = (["default", "tuned"] if args.slurm_config == "both"
                        else [args.slurm_config])
            for prof in profiles:
                slurm_samples, conf = bench_slurm(args, procs, prof)
                key = "slurm" if prof == "default" else "slurm_tuned"
                result[key] = summarize(slurm_samples)
                result[key]["config"] = conf
                result[key]["measure"] = "t0 before sbatch exec -> job's own `date +%s.%N`"
        if args.only != "slurm":
            profiles = [p for p in args.sluice_profiles.split(",") if p]
            for prof in profiles:
                if prof not in SLUICE_PROFILES:
                    raise BenchError(f"--sluice-profiles: unknown profile {prof!r}", code=2)
            for prof in profiles:
                sl = bench_sluice(args, procs, prof)
                result[f"sluice_{prof}"] = summarize(sl)
            # The target is judged on the last profile (by default: a user account over TLS).
            result["sluice"] = dict(result[f"sluice_{profiles[-1]}"], profile=profiles[-1])
            result["sluice"]["measure"] = ("t0 before `sluice run --follow` exec -> first "
                                           "job output line read from CLI stdout")
        result["host_after"] = host_speed()
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

    print("submit-to-start latency, sequential trivial jobs, localhost "
          f"({os.cpu_count()} CPUs)")
    for when in ("before", "after"):
        h = result[f"host_{when}"]
        print(f"host speed {when} the runs: fork+exec of /bin/true p50 "
              f"{h['exec_true_p50_ms']:.2f} ms, SHA-256 of 16 MiB p50 "
              f"{h['sha256_16mib_p50_ms']:.2f} ms (compare runs of different days by these)")
    for prof in SLUICE_PROFILES:
        if f"sluice_{prof}" in result:
            print(fmt(f"s:{prof}", result[f"sluice_{prof}"]))
    if "sluice_admin" in result and "sluice_user" in result:
        d = result["sluice_user"]["p50_ms"] - result["sluice_admin"]["p50_ms"]
        result["added_p50_ms_user_account"] = d
        print(f"        added p50, user account vs admin token: {d:+.2f} ms")
    if "sluice_user" in result and "sluice_tls" in result:
        d = result["sluice_tls"]["p50_ms"] - result["sluice_user"]["p50_ms"]
        result["added_p50_ms_tls"] = d
        print(f"        added p50, TLS vs plain HTTP (same user token): {d:+.2f} ms")
    if "sluice" in result:
        print(f"        judged: sluice = the {result['sluice'].get('profile')} profile")
    for key in ("slurm", "slurm_tuned"):
        if key not in result:
            continue
        print(fmt("slurm" if key == "slurm" else "slurm*", result[key]))
        c = result[key]["config"]
        print(f"        {'stock' if key == 'slurm' else 'tuned'}: slurm "
              f"{c.get('SLURM_VERSION', '?')}, {c.get('SchedulerType')}, "
              f"SchedulerParameters={c.get('SchedulerParameters') or '(default)'}, "
              f"{c.get('select')}, {c.get('proctrack')}, {c.get('auth')}")
    if args.only != "sluice":
        print(f"        slurm sample: {args.slurm_jobs} jobs per profile"
              + (" (not 200: Slurm takes seconds per job; override with --slurm-jobs)"
                 if args.slurm_jobs < 200 else "")
              + f", random 0-{args.slurm_jitter:g} s pause before each submit")
    base = [k for k in ("slurm", "slurm_tuned") if k in result]
    if "sluice" in result and base:
        for key in base:
            ratio = result[key]["p50_ms"] / result["sluice"]["p50_ms"]
            result[f"ratio_{key}_p50_over_sluice_p50"] = ratio
            name = "slurm" if key == "slurm" else "slurm*"
            print(f"ratio {name}_p50 / sluice_p50 = {ratio:.1f}x")
        judged = base[0]  # stock Slurm when measured
        ratio = result[f"ratio_{judged}_p50_over_sluice_p50"]
        met = result["sluice"]["p50_ms"] < TARGET_P50_MS and ratio >= TARGET_RATIO
        result["ratio_slurm_p50_over_sluice_p50"] = ratio
        result["target_judged_against"] = judged
        result["target_met"] = met
        print(f"target: sluice p50 < {TARGET_P50_MS:.0f} ms and ratio >= {TARGET_RATIO:.0f} "
              f"(vs {'stock' if judged == 'slurm' else 'tuned'} slurm): "
              f"{'MET' if met else 'NOT MET'}")
        if "slurm_tuned" in result and judged == "slurm":
            r2 = result["ratio_slurm_tuned_p50_over_sluice_p50"]
            print(f"        vs tuned slurm*: {'MET' if r2 >= TARGET_RATIO and met else 'NOT MET'}")
    else:
        print("target: not judged (--only measures one side; no same-run baseline)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
