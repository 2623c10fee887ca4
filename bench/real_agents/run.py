#!/usr/bin/env python3
"""Real agents started together (issue 12's target: 100 real agents, `--skip-software-probe`,
default conformance sizes, started at once on one machine, are all verified within 5 minutes).

Starts one real `sluice server` with TLS on loopback and N real `sluice agent` processes at the
same instant, each with a data dir and name of its own and the server's join token. Polls the
server's node list until every agent is verified (or the timeout), and prints how long that took
from the start, when each quarter of the fleet was verified, how many suites the server had to
ask again (a failed verification retried), and the RSS of the server and of the agents.

    python3 bench/real_agents/run.py                    # 100 agents
    python3 bench/real_agents/run.py --agents 20 --sluice /tmp/other/sluice
"""
import argparse
import http.client
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def first_line(path):
    return open(path).read().split("\n", 1)[0].strip()


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def nodes(port, token):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
    try:
        conn.request("GET", "/v1/nodes", headers={"Authorization": f"Bearer {token}"})
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"GET /v1/nodes answered {resp.status}: {body[:200]!r}")
        return json.loads(body)["nodes"]
    finally:
        conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sluice", default=os.path.join(REPO, "build", "sluice"))
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--target", type=float, default=300, help="seconds (the issue's 5 minutes)")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--keep-tmp", action="store_true")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="sluice-real-agents-")
    data = os.path.join(tmp, "server")
    server = subprocess.Popen(
        [args.sluice, "server", "--listen", "127.0.0.1:0", "--data-dir", data, "--tls",
         "--max-nodes-per-provider", str(args.agents + 10)],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "server.log"), "w"))
    agents = []
    ok = False
    try:
        url_file = os.path.join(data, "server.url")
        end = time.monotonic() + 60
        while not os.path.exists(url_file):
            if server.poll() is not None or time.monotonic() > end:
                raise RuntimeError("the server did not start; see " + tmp + "/server.log")
            time.sleep(0.05)
        url = open(url_file).read().strip()
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        admin = first_line(os.path.join(data, "admin.token"))
        rss_server0 = rss_kib(server.pid)

        t0 = time.monotonic()
        for i in range(args.agents):
            name = f"real-{i:03d}"
            agents.append(subprocess.Popen(
                [args.sluice, "agent", "--server", url, "--join-token-file",
                 os.path.join(data, "join.token"), "--data-dir", os.path.join(tmp, name),
                 "--name", name, "--skip-software-probe"],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, name + ".log"), "w")))
        started_s = time.monotonic() - t0
        log(f"{args.agents} agents started in {started_s:.1f} s")

        quarters = {}
        peak_agents_rss = 0
        while True:
            ns = [n for n in nodes(port, admin) if n.get("name", "").startswith("real-")]
            verified = sum(1 for n in ns if n.get("verification") == "verified")
            elapsed = time.monotonic() - t0
            for q in (25, 50, 75, 100):
                if q not in quarters and verified * 100 >= q * args.agents:
                    quarters[q] = elapsed
            peak_agents_rss = max(peak_agents_rss, sum(rss_kib(a.pid) for a in agents))
            dead = [a for a in agents if a.poll() is not None]
            if dead:
                raise RuntimeError(f"{len(dead)} agents exited; see {tmp}/real-*.log")
            if verified == args.agents or elapsed > args.timeout:
                break
            time.sleep(1)
        all_s = quarters.get(100)
        rss_server1 = rss_kib(server.pid)
        retried = sum(1 for line in open(os.path.join(tmp, "server.log"))
                      if "failed verification" in line)
        unverified = [n["name"] for n in ns if n.get("verification") != "verified"]

        print(f"real agents: {args.agents} started together ({started_s:.1f} s to start them), "
              f"--skip-software-probe, default conformance sizes, one server with TLS")
        print("verified: " + ", ".join(f"{q} % after {s:.1f} s" for q, s in sorted(quarters.items())))
        if all_s is not None:
            print(f"all {args.agents} verified {all_s:.1f} s after the start "
                  f"(target {args.target:g} s: {'met' if all_s <= args.target else 'NOT met'}, "
                  f"{all_s / args.target:.2f}x)")
        else:
            print(f"NOT all verified within {args.timeout:g} s: {len(unverified)} left "
                  f"({', '.join(unverified[:5])}...)")
        print(f"verifications that failed and were asked again: {retried}")
        print(f"server RSS {rss_server0 / 1024:.1f} MiB before, {rss_server1 / 1024:.1f} MiB "
              f"after; agents' RSS at most {peak_agents_rss / 1024:.0f} MiB together "
              f"({peak_agents_rss / max(args.agents, 1) / 1024:.1f} MiB each)")
        ok = all_s is not None
        return 0 if ok else 1
    finally:
        for a in agents:
            a.terminate()
        for a in agents:
            try:
                a.wait(20)
            except subprocess.TimeoutExpired:
                a.kill()
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
        if args.keep_tmp or not ok:
            log("kept " + tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
