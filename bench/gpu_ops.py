#!/usr/bin/env python3
"""PyTorch's side of issue 11's kernel targets on the GPU: softmax and layernorm over 8192x4096 fp32,
the elementwise chain y = a*sigmoid(a) + b; out = tanh(y)*0.5 + y*y over 16M elements, and the
device-to-device copy, each in eager mode and through torch.compile (default mode), timed with CUDA
events over back-to-back calls (the same way ops_bench's `/gpu` cases are timed: queued calls, one
synchronisation at the end). fp32 without TF32. Prints one JSON line per case.

  python3 bench/gpu_ops.py [--reps 200]
"""
import argparse
import json

import torch


def timed(fn, reps):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps  # ms per call


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=200)
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    x = torch.randn(8192, 4096, device=dev)
    w, b = torch.randn(4096, device=dev), torch.randn(4096, device=dev)
    a16, b16 = torch.randn(1 << 24, device=dev), torch.randn(1 << 24, device=dev)

    def chain(a, b):
        y = a * torch.sigmoid(a) + b
        return torch.tanh(y) * 0.5 + y * y

    cases = {
        "softmax_8192x4096": (lambda t: torch.softmax(t, -1), (x,), 2 * x.numel() * 4),
        "layernorm_8192x4096": (lambda t: torch.nn.functional.layer_norm(t, (4096,), w, b, 1e-5), (x,), 2 * x.numel() * 4),
        "chain_16M": (chain, (a16, b16), 3 * a16.numel() * 4),
    }
    src, dst = torch.empty(64 << 20, device=dev), torch.empty(64 << 20, device=dev)
    copy_ms = timed(lambda: dst.copy_(src), args.reps)
    copy_bw = 2 * src.numel() * 4 / (copy_ms / 1e3)
    print(json.dumps({"case": "d2d_copy_256MiB", "ms": copy_ms, "GBps": copy_bw / 1e9}))
    for name, (fn, inputs, nbytes) in cases.items():
        for mode, f in (("eager", fn), ("torch.compile", torch.compile(fn))):
            ms = timed(lambda: f(*inputs), args.reps)
            print(json.dumps({"case": name, "peer": mode, "ms": ms, "of_d2d_copy": nbytes / (ms / 1e3) / copy_bw}))


if __name__ == "__main__":
    main()
