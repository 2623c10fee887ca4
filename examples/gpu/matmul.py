"""Checks and times the GPU a Sluice job was given, through PyTorch.

Prints one `result {json}` line: exact-answer check, FP16 (FP32 accumulate) and BF16 matrix
product TFLOP/s, and device-to-device copy GB/s (bytes read plus written). Exits 1 when CUDA is
unusable or an answer is wrong, so the job's state says whether the GPU worked.
"""
import json
import sys

import torch


def timed_ms(fn, warmups=3, runs=10):
    for _ in range(warmups):
        fn()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(runs):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / runs


def main():
    print(f"torch {torch.__version__}, CUDA build {torch.version.cuda}", flush=True)
    if not torch.cuda.is_available():
        print("error: CUDA is not available to this job", flush=True)
        return 1
    props = torch.cuda.get_device_properties(0)
    print(f"device 0: {props.name}, {props.total_memory / 2**30:.1f} GiB, "
          f"compute capability {props.major}.{props.minor}, {props.multi_processor_count} SMs",
          flush=True)

    # Exactness: small integers, so every product and sum is exact in FP32 and TF32 alike.
    gen = torch.Generator().manual_seed(7)
    a = torch.randint(-8, 8, (1024, 1024), generator=gen).float()
    b = torch.randint(-8, 8, (1024, 1024), generator=gen).float()
    wrong = int((a.cuda() @ b.cuda()).cpu().ne(a @ b).sum())
    print(f"exact check: {wrong} wrong elements of {a.numel()}", flush=True)

    # Same accumulate mode as the agent's gpu-perf check: FP16 inputs, FP32 accumulate.
    # Older PyTorch builds lack one or both switches.
    for switch in ("allow_fp16_reduced_precision_reduction",
                   "allow_bf16_reduced_precision_reduction"):
        try:
            setattr(torch.backends.cuda.matmul, switch, False)
        except (AssertionError, AttributeError):
            pass
    n = 8192
    result = {"device": props.name, "wrong_elements": wrong}
    for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        x = torch.randn(n, n, device="cuda", dtype=dtype)
        y = torch.randn(n, n, device="cuda", dtype=dtype)
        ms = timed_ms(lambda: torch.mm(x, y))
        result[f"{name}_tflops"] = round(2 * n**3 / (ms / 1e3) / 1e12, 1)
        del x, y
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")  # 1 GiB
    dst = torch.empty_like(src)
    ms = timed_ms(lambda: dst.copy_(src))
    result["copy_gb_s"] = round(2 * src.numel() / (ms / 1e3) / 1e9, 1)
    print("result " + json.dumps(result), flush=True)
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
