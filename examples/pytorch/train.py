#!/usr/bin/env python3
"""A small, deterministic PyTorch training job that survives preemption.

It implements the job's half of Sluice's checkpoint contract (see README.md):

* every --checkpoint-every steps it saves the model, the optimizer, every RNG state and the step
  into $SLUICE_CHECKPOINT_DIR (./checkpoints when unset), atomically, keeping the last two;
* on start it resumes from the newest checkpoint that verifies, falling back to the one before
  when the newest is truncated or corrupt;
* on SIGTERM it finishes the current step, saves a checkpoint and exits with 143 (or the code
  --exit-code-on-sigterm gives: Sluice treats an exit during a preemption as preempted, even 0);
* at the end it writes the final weights and prints `final sha256 <hex>`, which is the same for
  an uninterrupted run and for any run that was stopped and resumed, however often.

It runs on one CPU thread with deterministic algorithms, on synthetic data drawn from a seeded
torch.Generator, so nothing is downloaded.
"""
import argparse
import hashlib
import io
import os
import pickle
import random
import re
import signal
import sys
import time

# Raise a flag on SIGTERM and act on it at the next step boundary, never in the middle of a step
# or a save. Installed before the slow `import torch`, so an early SIGTERM also ends in exit 143.
_stop = {"signal": None}


def _on_sigterm(signum, frame):
    _stop["signal"] = signum


signal.signal(signal.SIGTERM, _on_sigterm)

import torch  # noqa: E402

# One thread and deterministic kernels: the same steps give the same bits, on every machine with
# the same PyTorch build.
torch.set_num_threads(1)
try:
    torch.set_num_interop_threads(1)
except RuntimeError:  # already set (e.g. when imported twice in one process)
    pass
torch.use_deterministic_algorithms(True)

FEATURES, HIDDEN, CLASSES = 32, 128, 8
EXIT_PREEMPTED = 143  # 128 + SIGTERM, like a process the signal killed, but after saving (default)

# ckpt-<step, 8 digits>-<first 16 hex digits of the file's SHA-256>.pt: the name carries the
# checksum of the bytes, and a rename is atomic, so a checkpoint verifies by itself.
CKPT_RE = re.compile(r"^ckpt-(\d{8})-([0-9a-f]{16})\.pt$")
KEEP = 2


def log(msg):
    print(msg, flush=True)


class Task:
    """The synthetic task: CLASSES overlapping Gaussian clusters in FEATURES dimensions."""

    NOISE = 2.0

    def __init__(self, seed):
        self.centers = torch.randn(CLASSES, FEATURES, generator=torch.Generator().manual_seed(seed))

    def batch(self, n, gen):
        y = torch.randint(0, CLASSES, (n,), generator=gen)
        x = self.centers[y] + self.NOISE * torch.randn(n, FEATURES, generator=gen)
        return x, y


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.1),  # draws from torch's global CPU RNG, which checkpoints carry
        torch.nn.Linear(HIDDEN, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, CLASSES),
    )


def params_sha256(model):
    """SHA-256 of every state_dict tensor's bytes, in state_dict order."""
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path, data):
    """Writes bytes to path so that path is either the old file or the complete new one."""
    d = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(d, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(d)


def serialize(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def load_bytes(data):
    """Unpickles checkpoint bytes whose checksum has already been verified."""
    # Checkpoints hold only tensors and plain containers, which the safe loader of PyTorch 2
    # reads. Older builds either lack weights_only (TypeError) or have a restricted unpickler that
    # cannot read floats (Debian 12's 1.13: "Unsupported operand 71"); those get the full one.
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except (TypeError, pickle.UnpicklingError):
        return torch.load(io.BytesIO(data), map_location="cpu")


def list_checkpoints(ckpt_dir):
    """[(step, name, digest)] newest first."""
    out = []
    for name in os.listdir(ckpt_dir):
        m = CKPT_RE.match(name)
        if m:
            out.append((int(m.group(1)), name, m.group(2)))
    out.sort(reverse=True)
    return out


def save_checkpoint(ckpt_dir, step, model, opt, data_gen):
    state = {
        "format": 1,
        "step": step,
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
        "data_rng": data_gen.get_state(),
    }
    data = serialize(state)
    name = f"ckpt-{step:08d}-{hashlib.sha256(data).hexdigest()[:16]}.pt"
    write_atomic(os.path.join(ckpt_dir, name), data)
    # Keep the newest KEEP, so a damaged newest one still has one to fall back to.
    for _, old, _ in list_checkpoints(ckpt_dir)[KEEP:]:
        try:
            os.remove(os.path.join(ckpt_dir, old))
        except FileNotFoundError:
            pass
    fsync_dir(ckpt_dir)
    return name


def verify(ckpt_dir, name, digest):
    """Reads and checks a checkpoint; returns (state, None, False) or (None, why, damaged)."""
    path = os.path.join(ckpt_dir, name)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return None, f"unreadable: {e}", False
    actual = hashlib.sha256(data).hexdigest()[:16]
    if actual != digest:
        return None, (f"checksum mismatch: its name says {digest}, its {len(data)} bytes "
                      f"hash to {actual}"), True
    try:
        state = load_bytes(data)
    except Exception as e:  # noqa: BLE001 - any load failure means "not usable"
        return None, f"intact but does not load: {type(e).__name__}: {e}", False
    needed = {"format", "step", "model", "optimizer", "torch_rng", "python_rng", "data_rng"}
    if not isinstance(state, dict) or not needed <= state.keys() or state["format"] != 1:
        return None, "intact but not a checkpoint of this script", False
    return state, None, False


def restore(ckpt_dir, model, opt, data_gen):
    """Restores the newest checkpoint that verifies; returns its step, or 0 when there is none."""
    for step, name, digest in list_checkpoints(ckpt_dir):
        state, why, damaged = verify(ckpt_dir, name, digest)
        if state is None:
            log(f"warning: checkpoint {name} is not usable ({why}); trying the one before it")
            if damaged:  # out of the way, so it is neither retried nor counted among the kept
                try:
                    os.replace(os.path.join(ckpt_dir, name),
                               os.path.join(ckpt_dir, name + ".corrupt"))
                except OSError:
                    pass
            continue
        if state["step"] != step:
            log(f"warning: checkpoint {name} holds step {state['step']}; trying the one before it")
            continue
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        py = state["python_rng"]
        random.setstate((py[0], tuple(py[1]), py[2]))
        data_gen.set_state(state["data_rng"])
        log(f"resumed from step {step} ({name})")
        return step
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300, help="training steps in all (default 300)")
    p.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--log-every", type=int, default=10, help="steps between progress lines")
    p.add_argument("--out", help="where to write the final weights (default "
                   "$SLUICE_CHECKPOINT_DIR/final.pt)")
    p.add_argument("--step-delay", type=float, default=0.0,
                   help="seconds to sleep after each step, to make a short run long enough to "
                   "preempt by hand or in tests; does not change the result")
    p.add_argument("--exit-code-on-sigterm", type=int, default=EXIT_PREEMPTED,
                   help="exit code after saving on SIGTERM (default 143; many scripts exit 0, "
                   "which Sluice still records as preempted and resumes)")
    args = p.parse_args()
    if not 0 <= args.exit_code_on_sigterm <= 255:
        p.error("--exit-code-on-sigterm must be between 0 and 255")
    if args.steps < 0 or args.checkpoint_every < 1 or args.log_every < 1:
        p.error("--steps must be >= 0, --checkpoint-every and --log-every >= 1")

    ckpt_dir = os.environ.get("SLUICE_CHECKPOINT_DIR") or "./checkpoints"
    os.makedirs(ckpt_dir, exist_ok=True)
    for name in os.listdir(ckpt_dir):  # left by a save that was killed before its rename
        if name.startswith(".") and name.endswith(".tmp"):
            os.remove(os.path.join(ckpt_dir, name))
    out = args.out or os.path.join(ckpt_dir, "final.pt")

    env = os.environ.get
    log(f"job {env('SLUICE_JOB_ID', '-')} attempt {env('SLUICE_ATTEMPT', '-')}"
        f" resumed={env('SLUICE_RESUMED', '0')} checkpoint_dir={ckpt_dir}"
        f" torch {torch.__version__}")

    random.seed(args.seed)
    task = Task(args.seed + 1)
    model = make_model(args.seed + 2)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    data_gen = torch.Generator().manual_seed(args.seed + 3)
    torch.manual_seed(args.seed + 4)  # the dropout masks

    step = restore(ckpt_dir, model, opt, data_gen)
    if step == 0 and os.environ.get("SLUICE_RESUMED") == "1":
        log("warning: SLUICE_RESUMED=1 but no usable checkpoint was found; starting from step 0")
    last_saved = step if step > 0 else None

    model.train()
    loss_fn = torch.nn.CrossEntropyLoss()
    start = time.monotonic()
    while step < args.steps:
        if _stop["signal"] is not None:
            break
        x, y = task.batch(args.batch_size, data_gen)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        step += 1
        if step % args.log_every == 0 or step == args.steps:
            log(f"step {step} loss {loss.item():.6f}")
        if step % args.checkpoint_every == 0 or step == args.steps:
            name = save_checkpoint(ckpt_dir, step, model, opt, data_gen)
            last_saved = step
            log(f"checkpoint step {step} {name}")
        if args.step_delay > 0:
            time.sleep(args.step_delay)

    if _stop["signal"] is not None and step < args.steps:
        if last_saved != step:
            name = save_checkpoint(ckpt_dir, step, model, opt, data_gen)
            log(f"checkpoint step {step} {name}")
        log(f"preempted: got SIGTERM, saved step {step} of {args.steps}; "
            f"exiting {args.exit_code_on_sigterm}")
        sys.stdout.flush()
        sys.exit(args.exit_code_on_sigterm)

    # Held-out accuracy, from its own generator so it disturbs no training state.
    model.eval()
    with torch.no_grad():
        xe, ye = task.batch(2048, torch.Generator().manual_seed(args.seed + 5))
        acc = (model(xe).argmax(dim=1) == ye).float().mean().item()
    write_atomic(out, serialize(model.state_dict()))
    log(f"done: {step} steps, held-out accuracy {acc:.4f}, {time.monotonic() - start:.1f}s, "
        f"weights in {out}")
    log(f"final sha256 {params_sha256(model)}")


if __name__ == "__main__":
    main()
