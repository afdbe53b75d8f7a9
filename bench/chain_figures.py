#!/usr/bin/env python3
"""Tier 1's convolution chains, two builds side by side: regions, oneDNN reorders per steady call and
reference (ref:) kernels per steady call, then steady-state latency of each build against ONNX
Runtime with the same threads, in rounds whose order alternates so that background load hits all
alike.

A model is a folder holding model.onnx and either test_data_set_0/ (the real-model corpus) or x.npy
(one input). Reorders are counted from DNNL_VERBOSE=1: the executions of a warmed session's three
calls less those of one call, halved. Run with bench/setup_peers.sh's Python (onnxruntime, onnx):
  "$(bash bench/setup_peers.sh)" bench/chain_figures.py --before OLD/terrace --after build/tools/terrace \\
      ~/.cache/terrace/real-models/nudenet_320n [--rounds 3] [--isa AVX2]
"""
import argparse
import collections
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parent.parent


def inputs(model):
    """terrace --input arguments and the same inputs by name for ONNX Runtime."""
    if (model / "x.npy").exists():
        name = onnx.load(str(model / "model.onnx"), load_external_data=False).graph.input[0].name
        return ["--input", f"{name}={model / 'x.npy'}"], {name: np.load(model / "x.npy")}
    args, feeds = [], {}
    for p in sorted(glob.glob(str(model / "test_data_set_0" / "input_*.pb"))):
        t = onnx.TensorProto()
        t.ParseFromString(Path(p).read_bytes())
        args += ["--input", f"{t.name}={p}"]
        feeds[t.name] = numpy_helper.to_array(t)
    return args, feeds


def executions(binary, model, args, repeat, env, scratch):
    """oneDNN's executions in a warmed run of `repeat` calls, by primitive kind and implementation."""
    cmd = [binary, "run", str(model), "--tier", "cpu", "--warm", "--repeat", str(repeat), "--threads", "2", "--quiet",
           "--json", f"{scratch}/run.json"] + args
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(env, DNNL_VERBOSE="1"))
    lines = [l.split(",") for l in p.stdout.splitlines() if l.startswith("onednn_verbose,exec")]
    report = json.loads(Path(f"{scratch}/run.json").read_text())
    return collections.Counter((f[3], f[4].split(":")[0]) for f in lines), report


def structure(binary, model, args, env, scratch):
    one, report = executions(binary, model, args, 1, env, scratch)
    three, _ = executions(binary, model, args, 3, env, scratch)
    per_call = {k: (three[k] - one[k]) / 2 for k in three if three[k] > one[k]}
    regions = report["report"]["regions"]
    return {"regions": len(regions),
            "off_tier1": sum(r["tier"] != "cpu" or r["validation"] != "passed" for r in regions),
            "reorders": sum(v for (kind, _), v in per_call.items() if kind == "reorder"),
            "ref": sum(v for (_, impl), v in per_call.items() if impl == "ref"),
            "passed": report["passed"]}


def bench_terrace(binary, model, args, calls, env, scratch):
    cmd = [binary, "bench", str(model), "--tier", "cpu", "--threads", "2", "--steady-calls", str(calls),
           "--baseline-calls", "1", "--quiet", "--json", f"{scratch}/bench.json"] + args
    if subprocess.run(cmd, capture_output=True, text=True, env=env).returncode != 0:
        return None
    return json.loads(Path(f"{scratch}/bench.json").read_text())["steady"]["p50_ms"]


def bench_ort(model, feeds, calls, scratch):
    np.savez(f"{scratch}/inputs.npz", **feeds)
    cmd = [sys.executable, str(ROOT / "bench" / "ort_child.py"), str(model / "model.onnx"), "-",
           f"{scratch}/inputs.npz", f"{scratch}/ort_out.npy", "2", str(calls), "5"]
    j = json.loads(subprocess.run(cmd, capture_output=True, text=True).stdout.strip().splitlines()[-1])
    return statistics.median(j["times_ms"]) if "times_ms" in j else None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="+", type=Path)
    p.add_argument("--before", required=True)
    p.add_argument("--after", default=str(ROOT / "build" / "tools" / "terrace"))
    p.add_argument("--rounds", type=int, default=3, help="alternating timing rounds (0: structure only)")
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--isa", default="", help="DNNL_MAX_CPU_ISA for both builds (structure and timing)")
    a = p.parse_args()
    env = dict(os.environ, **({"DNNL_MAX_CPU_ISA": a.isa} if a.isa else {}))
    builds = {"before": a.before, "after": a.after}
    with tempfile.TemporaryDirectory() as scratch:
        for model in a.models:
            args, feeds = inputs(model)
            row = {"model": model.name}
            for name, binary in builds.items():
                row[name] = structure(binary, model, args, env, scratch)
            times = {"before": [], "after": [], "ort": []}
            runs = [("before", lambda: bench_terrace(a.before, model, args, a.calls, env, scratch)),
                    ("after", lambda: bench_terrace(a.after, model, args, a.calls, env, scratch)),
                    ("ort", lambda: bench_ort(model, feeds, a.calls, scratch))]
            for r in range(a.rounds):
                for name, run in runs if r % 2 == 0 else runs[::-1]:
                    times[name].append(run())
            for name, t in times.items():
                t = [x for x in t if x is not None]
                row[f"{name}_p50_ms"] = statistics.median(t) if t else None
            row["rounds"] = times
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
