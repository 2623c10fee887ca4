#!/usr/bin/env python3
"""bench/cli_start: how long one `sluice` client command takes, end to end, for two builds.

Starts `sluice server --tls` on loopback (from the first build), makes a user account, then runs
`sluice jobs --limit 1` (process start, flags, token file, OpenSSL context, TLS handshake, one
authenticated GET, print) alternately with each build's `sluice`, so the host's drift hits both
alike. Prints p10/p50/p90 per build and the ratio of p50s to the first (the baseline).

    python3 bench/cli_start/run.py --runs 150 BASELINE/sluice CANDIDATE/sluice

Each build's directory must hold what `sluice` needs beside it (sluice-node, for the server).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def wait_for(pred, secs, what):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.05)
    sys.exit(f"cli_start: timed out waiting for {what}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=150)
    ap.add_argument("sluice", nargs="+", help="`sluice` binaries; the first is the baseline")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="bench-cli-start-")
    server = None
    try:
        sdir = os.path.join(d, "server")
        log = open(os.path.join(d, "server.log"), "w")
        server = subprocess.Popen([a.sluice[0], "server", "--listen", "127.0.0.1:0", "--data-dir",
                                   sdir, "--tls"], stdout=log, stderr=subprocess.STDOUT)
        url_file = os.path.join(sdir, "server.url")
        wait_for(lambda: os.path.exists(url_file) and open(url_file).read().strip(), 30,
                 "server.url")
        url = open(url_file).read().strip()
        admin = dict(os.environ, SLUICE_SERVER=url,
                     SLUICE_TOKEN=open(os.path.join(sdir, "admin.token")).read().strip())
        user_tok = os.path.join(d, "user.token")
        subprocess.run([a.sluice[0], "account", "create", "bench", "--out", user_tok], env=admin,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        env = dict(os.environ, SLUICE_SERVER=url, SLUICE_TOKEN_FILE=user_tok)
        env.pop("SLUICE_TOKEN", None)
        samples = {b: [] for b in a.sluice}
        for b in a.sluice:  # warm-up, untimed
            subprocess.run([b, "jobs", "--limit", "1"], env=env, check=True,
                           stdout=subprocess.DEVNULL)
        for _ in range(a.runs):
            for b in a.sluice:
                t = time.perf_counter()
                r = subprocess.run([b, "jobs", "--limit", "1"], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                samples[b].append((time.perf_counter() - t) * 1000)
                if r.returncode != 0:
                    sys.exit(f"cli_start: {b} jobs failed: {r.stderr.decode()[-500:]}")
        base = statistics.median(samples[a.sluice[0]])
        print(f"`sluice jobs --limit 1` over HTTPS, {a.runs} runs each, alternated")
        for b in a.sluice:
            v = sorted(samples[b])
            p50 = statistics.median(v)
            print(f"{b}: p10={v[len(v) // 10]:.2f} ms  p50={p50:.2f} ms  "
                  f"p90={v[len(v) * 9 // 10]:.2f} ms  p50 vs baseline: {p50 / base:.3f}x")
    finally:
        if server is not None:
            server.terminate()
            server.wait()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
