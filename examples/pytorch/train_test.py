#!/usr/bin/env python3
"""Proves train.py's half of the Sluice checkpoint contract.

An uninterrupted run gives the reference hash H. Runs that are stopped part-way — by SIGTERM
(preemption with a grace period), by SIGKILL (no warning), or whose newest checkpoint is then
truncated or corrupted — are restarted with the same SLUICE_CHECKPOINT_DIR and must end with H,
and must log the very same losses as the reference for every step after the resume.

Run: /usr/bin/python3 examples/pytorch/train_test.py   (needs Debian's python3-torch)
"""
import hashlib
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

try:
    import torch
except ImportError as e:  # a failure, not a skip: CI installs python3-torch (install-deps.sh)
    sys.exit(f"FAIL: cannot import torch ({e}); install python3-torch (scripts/install-deps.sh)")

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "train.py")
STEPS, EVERY = 200, 50
ARGS = ["--steps", str(STEPS), "--checkpoint-every", str(EVERY), "--log-every", "10"]
# Interrupted runs sleep after each step so that a signal sent after step N reliably lands well
# before the end; the sleep does not change what is computed.
SLOW = ["--step-delay", "0.02"]
DEADLINE_S = 120  # per wait; generous, for a loaded 2-core machine

STEP_RE = re.compile(r"^step (\d+) loss (\S+)$")
HASH_RE = re.compile(r"^final sha256 ([0-9a-f]{64})$")
RESUMED_RE = re.compile(r"^resumed from step (\d+) ")
PREEMPTED_RE = re.compile(r"^preempted: got SIGTERM, saved step (\d+) of (\d+)")


class Run:
    """train.py in a subprocess, its stdout and stderr read line by line on a thread."""

    def __init__(self, ckpt_dir, attempt, extra=(), out=None):
        env = dict(os.environ)
        env.update(SLUICE_JOB_ID="job-test", SLUICE_ATTEMPT=str(attempt),
                   SLUICE_CHECKPOINT_DIR=ckpt_dir)
        env.pop("SLUICE_RESUMED", None)
        if attempt > 1:
            env["SLUICE_RESUMED"] = "1"
        cmd = [sys.executable, TRAIN, *ARGS, *extra]
        if out:
            cmd += ["--out", out]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.lines = []
        self._q = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        with self.proc.stdout:
            for line in self.proc.stdout:
                self._q.put(line.rstrip("\n"))
        self._q.put(None)

    def output(self):
        return "\n".join(self.lines)

    def wait_for_step(self, min_step):
        """Reads lines until a progress line for step >= min_step; returns that step."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.proc.kill()
                raise AssertionError(f"no step {min_step} within {DEADLINE_S}s:\n{self.output()}")
            try:
                line = self._q.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"train.py ended before step {min_step} "
                                     f"(rc {self.proc.wait()}):\n{self.output()}")
            self.lines.append(line)
            m = STEP_RE.match(line)
            if m and int(m.group(1)) >= min_step:
                return int(m.group(1))

    def finish(self):
        """Reads to the end; returns the exit status."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.proc.kill()
                raise AssertionError(f"train.py did not end within {DEADLINE_S}s:\n{self.output()}")
            try:
                line = self._q.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                break
            self.lines.append(line)
        return self.proc.wait(timeout=DEADLINE_S)

    def match(self, regex):
        """The last match of regex among the lines read, or None."""
        found = None
        for line in self.lines:
            m = regex.match(line)
            if m:
                found = m
        return found

    def losses(self):
        return {int(m.group(1)): m.group(2) for m in map(STEP_RE.match, self.lines) if m}


def ckpt_files(d):
    return sorted(n for n in os.listdir(d) if n.startswith("ckpt-") and n.endswith(".pt"))


class ResumeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sluice-pytorch-test-")
        # (a) The reference, one uninterrupted attempt, runs alongside the first test's attempts
        # (2 cores); reference() waits for it.
        cls.reference_dir = os.path.join(cls.tmp, "reference")
        cls._reference_run = Run(cls.reference_dir, attempt=1)
        cls._reference = None

    @classmethod
    def tearDownClass(cls):
        if cls._reference_run.proc.poll() is None:
            cls._reference_run.proc.kill()
            cls._reference_run.proc.wait()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def reference(cls):
        """(H, {step: loss}, output) of the uninterrupted run."""
        if cls._reference is None:
            run = cls._reference_run
            rc = run.finish()
            if rc != 0:
                raise AssertionError(f"the reference run failed (rc {rc}):\n{run.output()}")
            m = run.match(HASH_RE)
            if not m:
                raise AssertionError(f"the reference run printed no final sha256:\n{run.output()}")
            cls._reference = (m.group(1), run.losses(), run.output())
            print(f"\nreference: final sha256 {m.group(1)}", flush=True)
        return cls._reference

    def ckpt_dir(self, name):
        d = os.path.join(self.tmp, name)
        os.makedirs(d)
        return d

    def check_resumed(self, run, expect_from):
        """Attempt 2 must resume from step expect_from, log the reference's losses for every step
        after it and end with H."""
        rc = run.finish()
        self.assertEqual(rc, 0, run.output())
        m = run.match(RESUMED_RE)
        self.assertIsNotNone(m, run.output())
        self.assertEqual(int(m.group(1)), expect_from, run.output())
        H, reference_losses, _ = self.reference()
        losses = run.losses()
        self.assertEqual(sorted(losses), [s for s in range(10, STEPS + 1, 10) if s > expect_from],
                         run.output())
        for s, loss in losses.items():
            self.assertEqual(loss, reference_losses[s], f"step {s}:\n{run.output()}")
        h = run.match(HASH_RE)
        self.assertIsNotNone(h, run.output())
        self.assertEqual(h.group(1), H, run.output())
        print(f"{self.id().split('.')[-1]}: resumed from step {expect_from}, "
              f"final sha256 {h.group(1)} == reference", flush=True)

    def resume(self, d, expect_from):
        run = Run(d, attempt=2)
        self.check_resumed(run, expect_from)
        return run

    def preempt(self, d, after_step):
        """Attempt 1 in d, sent SIGTERM after it logs after_step; returns the step it saved."""
        run = Run(d, attempt=1, extra=SLOW)
        run.wait_for_step(after_step)
        run.proc.send_signal(signal.SIGTERM)
        rc = run.finish()
        self.assertEqual(rc, 143, run.output())
        m = run.match(PREEMPTED_RE)
        self.assertIsNotNone(m, run.output())
        saved = int(m.group(1))
        self.assertGreaterEqual(saved, after_step, run.output())
        self.assertLess(saved, STEPS, run.output())
        self.assertTrue(any(n.startswith(f"ckpt-{saved:08d}-") for n in ckpt_files(d)),
                        f"{ckpt_files(d)}\n{run.output()}")
        self.assertFalse(os.path.exists(os.path.join(d, "final.pt")))
        return saved

    def test_b_sigterm_then_resume(self):
        d = self.ckpt_dir("sigterm")
        saved = self.preempt(d, after_step=EVERY + 10)
        self.resume(d, expect_from=saved)

    def test_c_sigkill_then_resume_from_last_periodic_checkpoint(self):
        d = self.ckpt_dir("sigkill")
        run = Run(d, attempt=1, extra=SLOW)
        run.wait_for_step(2 * EVERY + 10)
        run.proc.kill()
        self.assertEqual(run.finish(), -signal.SIGKILL)
        # The newest periodic checkpoint on disk (normally step 100; 150 if it got that far).
        steps = [int(n[5:13]) for n in ckpt_files(d)]
        self.assertTrue(steps, run.output())
        last_step = max(steps)
        self.assertGreaterEqual(last_step, 2 * EVERY, run.output())
        self.assertEqual(last_step % EVERY, 0, run.output())
        # What a kill in the middle of a save leaves behind: a partial temp file, never renamed.
        stray = os.path.join(d, f".ckpt-{last_step + EVERY:08d}-0123456789abcdef.pt.999.tmp")
        with open(stray, "wb") as f:
            f.write(b"PK\x03\x04 partial")
        self.resume(d, expect_from=last_step)
        self.assertFalse(os.path.exists(stray))

    def test_d_corrupt_newest_checkpoint_falls_back_to_previous(self):
        truncated = self.ckpt_dir("truncated")
        saved = self.preempt(truncated, after_step=3 * EVERY + 10)
        previous = saved // EVERY * EVERY
        files = ckpt_files(truncated)
        self.assertEqual([n[:13] for n in files], [f"ckpt-{previous:08d}", f"ckpt-{saved:08d}"])
        newest = files[-1]
        flipped = os.path.join(self.tmp, "flipped")
        shutil.copytree(truncated, flipped)

        # Truncated to half its size, as by a disk that filled up or a copy that was cut short.
        path = os.path.join(truncated, newest)
        os.truncate(path, os.path.getsize(path) // 2)
        # Same size, one byte changed in the middle: only a checksum notices.
        path = os.path.join(flipped, newest)
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            b = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([b[0] ^ 0xFF]))

        runs = {d: Run(d, attempt=2) for d in (truncated, flipped)}  # both at once: 2 cores
        for d, run in runs.items():
            self.check_resumed(run, expect_from=previous)
            self.assertIn(f"warning: checkpoint {newest} is not usable (checksum mismatch",
                          run.output())
            self.assertTrue(os.path.exists(os.path.join(d, newest + ".corrupt")))
            self.assertEqual([n[:13] for n in ckpt_files(d)],
                             ["ckpt-00000150", "ckpt-00000200"], run.output())

    def test_e_reference_final_weights(self):
        # (a), checked last: the reference runs alongside the other tests until they need it.
        H, losses, output = self.reference()
        # The weights written to final.pt hash to what the run printed.
        state = torch.load(os.path.join(self.reference_dir, "final.pt"))
        h = hashlib.sha256()
        for t in state.values():
            h.update(t.numpy().tobytes())
        self.assertEqual(h.hexdigest(), H)
        # Checkpoints every 50 steps, the last two kept, the one at the end among them.
        self.assertEqual([n[:13] for n in ckpt_files(self.reference_dir)],
                         ["ckpt-00000150", "ckpt-00000200"], output)
        self.assertEqual(sorted(losses), list(range(10, STEPS + 1, 10)))


if __name__ == "__main__":
    unittest.main(verbosity=2)
