#!/usr/bin/env python3
"""ONNX Runtime (CPU) as a peer in a process of its own, for bench/compare.py: its peak RSS is then
ONNX Runtime's alone (not the comparing process's PyTorch), and no other runtime's threads share its
cores. Imports only numpy and onnxruntime.

  ort_child.py MODEL.onnx INPUT_NAME INPUT.npy OUTPUT.npy THREADS CALLS WARMUP [--serve]
  ort_child.py MODEL.onnx - INPUTS.npz OUTPUT.npy THREADS CALLS WARMUP [--serve]   (every input by name)

Prints one JSON object: peer, setup_ms, first_call_ms, times_ms (the timed calls), peak_rss_mb
(this process's VmHWM after the last call), or {"status": reason} when ONNX Runtime
cannot be imported or run. With --serve (compare.py --interleave), after the warm-up calls: a line
{"ready": true}, then for each line of stdin holding a count N, N calls and a line {"times_ms":
[...]}; at the end of stdin the JSON object above (its times_ms: every served call's).
"""
import json
import resource
import sys
import time

import numpy as np


def peak_rss_mb():
    """This process's own peak RSS (VmHWM). Not ru_maxrss: across fork and exec it keeps the peak of
    the parent (compare.py, holding a PyTorch model), so a small child reported the parent's size."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    model, input_name, in_npy, out_npy, threads, calls, warmup = sys.argv[1:8]
    serve = "--serve" in sys.argv[8:]
    threads, calls, warmup = int(threads), int(calls), int(warmup)
    try:
        import onnxruntime as ort
    except ImportError as e:
        print(json.dumps({"peer": "onnxruntime", "status": f"unavailable ({e})"}))
        return
    feeds = dict(np.load(in_npy)) if input_name == "-" else {input_name: np.load(in_npy)}
    t0 = time.perf_counter()
    # Thread settings as compare.py records them: intra-op THREADS, inter-op 1, sequential (without
    # them ONNX Runtime sizes its pool by the machine's cores, escaping OMP_NUM_THREADS and taskset).
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])
    setup = (time.perf_counter() - t0) * 1e3

    def timed():
        t = time.perf_counter()
        out = sess.run(None, feeds)[0]
        return (time.perf_counter() - t) * 1e3, out

    first, out = timed()
    np.save(out_npy, out)
    for _ in range(warmup):
        timed()
    if serve:
        print(json.dumps({"ready": True}), flush=True)
        times = []
        for line in sys.stdin:
            if line.strip():
                block = [timed()[0] for _ in range(int(line))]
                times += block
                print(json.dumps({"times_ms": block}), flush=True)
    else:
        times = [timed()[0] for _ in range(calls)]
    print(json.dumps({"peer": f"onnxruntime-{ort.__version__}-cpu", "setup_ms": setup, "first_call_ms": first,
                      "times_ms": times, "peak_rss_mb": peak_rss_mb()}))


if __name__ == "__main__":
    main()
