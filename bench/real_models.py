#!/usr/bin/env python3
"""The real-model corpus (tools/fetch_real_models.sh) on Terrace and ONNX Runtime, side by side.

For each model: the largest error of Terrace's outputs against ONNX Runtime's saved ones, per data
set and tier (`terrace run --output-dir`; tier 1 after `--warm`, so the compiled regions serve),
with the tiers that ran and how many regions settled on tier 1; then steady-state latency of
`terrace bench --tier cpu --threads T` against ONNX Runtime (bench/ort_child.py, T intra-op threads)
on the same inputs, in rounds whose order alternates so that background load hits both alike.
Run with bench/setup_peers.sh's Python (onnxruntime, onnx, numpy):
  "$(bash bench/setup_peers.sh)" bench/real_models.py [--dir DIR] [--models a,b] [--rounds 3]
Writes OUT/real_models.json and OUT/real_models.md (a Markdown table) and prints the table.
"""
import argparse
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
RTOL = 1e-3  # terrace conformance's (ONNX's); the ctest adds --atol 1e-4


def read_pb(path):
    t = onnx.TensorProto()
    t.ParseFromString(Path(path).read_bytes())
    return t.name, numpy_helper.to_array(t)


def data_set(model_dir, i):
    """The set's inputs as terrace --input arguments, its inputs by name, and its outputs."""
    s = model_dir / f"test_data_set_{i}"
    args, feeds = [], {}
    for p in sorted(s.glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1])):
        name, a = read_pb(p)
        args += ["--input", f"{name}={p}"]
        feeds[name] = a
    outs = [read_pb(p)[1] for p in sorted(s.glob("output_*.pb"), key=lambda p: int(p.stem.split("_")[1]))]
    return args, feeds, outs


def errors(got, want):
    """Largest |got - want|, and the largest atol that conformance would need at ONNX's rtol."""
    abs_err, need = 0.0, 0.0
    for g, w in zip(got, want):
        if g.shape != w.shape:
            return float("inf"), float("inf")
        if g.size == 0:
            continue
        d = np.abs(g.astype(np.float64) - w.astype(np.float64))
        abs_err = max(abs_err, float(d.max()))
        need = max(need, float((d - RTOL * np.abs(w.astype(np.float64))).max()))
    return abs_err, max(need, 0.0)


def run_terrace(args, model_dir, tier, set_args):
    """terrace run on `tier` (tier 1 warmed): outputs, tiers that ran, regions on tier 1, error text."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [args.terrace, "run", str(model_dir), "--tier", tier, "--threads", str(args.threads), "--quiet",
               "--output-dir", out, "--json", f"{out}/run.json"] + set_args + (["--warm"] if tier != "interp" else [])
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0 or not Path(f"{out}/run.json").exists():
            lines = [line for line in (p.stdout + p.stderr).splitlines() if line.strip()]
            return None, [], "", (lines[-2] if len(lines) > 1 else "".join(lines))[:300]
        j = json.loads(Path(f"{out}/run.json").read_text())
        regions = j["report"]["regions"]
        on_cpu = f"{sum(r['tier'] == 'cpu' for r in regions)}/{len(regions)}"
        files = sorted(Path(out).glob("output_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
        return [read_pb(f)[1] for f in files], j["tiers_ran"], on_cpu, ""


def bench_terrace(args, model_dir, set_args, json_path):
    cmd = [args.terrace, "bench", str(model_dir), "--tier", "cpu", "--threads", str(args.threads),
           "--steady-calls", str(args.calls), "--baseline-calls", "1", "--quiet", "--json", json_path] + set_args
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None
    steady = json.loads(Path(json_path).read_text())["steady"]
    return steady["p50_ms"], steady["min_ms"]


def bench_ort(args, model_dir, feeds, scratch):
    npz = f"{scratch}/inputs.npz"
    np.savez(npz, **feeds)
    cmd = [sys.executable, str(ROOT / "bench" / "ort_child.py"), str(model_dir / "model.onnx"), "-", npz,
           f"{scratch}/ort_out.npy", str(args.threads), str(args.calls), "5"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    j = json.loads(p.stdout.strip().splitlines()[-1])
    return (statistics.median(j["times_ms"]), min(j["times_ms"])) if "times_ms" in j else None


def measure(args, name):
    model_dir = Path(args.dir) / name
    row = {"model": name, "sets": []}
    for i in (0, 1):
        set_args, feeds, want = data_set(model_dir, i)
        entry = {"set": i, "shapes": {k: list(v.shape) for k, v in feeds.items()}}
        for tier in args.tiers:
            got, tiers, on_cpu, err = run_terrace(args, model_dir, tier, set_args)
            if got is None:
                entry[tier] = {"error": err}
            else:
                abs_err, need = errors(got, want)
                entry[tier] = {"max_abs_err": abs_err, "atol_needed": need, "passes_atol_1e-4": need <= 1e-4,
                               "tiers_ran": tiers, "regions_on_cpu": on_cpu}
        row["sets"].append(entry)
        print(f"real_models: {name} set {i}: {json.dumps(entry)}", file=sys.stderr, flush=True)
    if args.rounds:
        set_args, feeds, _ = data_set(model_dir, args.bench_set)
        t, o = [], []
        with tempfile.TemporaryDirectory() as scratch:
            for r in range(args.rounds):  # the order alternates, round by round
                for who in (("terrace", "ort") if r % 2 == 0 else ("ort", "terrace")):
                    if who == "terrace":
                        t.append(bench_terrace(args, model_dir, set_args, f"{scratch}/bench.json"))
                    else:
                        o.append(bench_ort(args, model_dir, feeds, scratch))
        ok = all(x is not None for x in t + o)
        row["bench"] = {"set": args.bench_set, "threads": args.threads,
                        "terrace_cpu_ms": [x[0] for x in t] if ok else t, "onnxruntime_ms": [x[0] for x in o] if ok else o,
                        "terrace_min_ms": min(x[1] for x in t) if ok else None,
                        "onnxruntime_min_ms": min(x[1] for x in o) if ok else None}
        if ok:
            b = row["bench"]
            b["terrace_median_ms"] = statistics.median(b["terrace_cpu_ms"])
            b["onnxruntime_median_ms"] = statistics.median(b["onnxruntime_ms"])
            b["ratio_per_round"] = [a / c for a, c in zip(b["terrace_cpu_ms"], b["onnxruntime_ms"])]
        print(f"real_models: {name} bench: {json.dumps(row['bench'])}", file=sys.stderr, flush=True)
    return row


def fmt_err(e):
    if "error" in e:
        return "error"
    mark = "pass" if e["passes_atol_1e-4"] else "FAIL"
    return f"{mark} {e['max_abs_err']:.1e}"


def markdown(rows, tiers):
    head = ["model", "set 0 shapes", "set 1 shapes"] + [f"{t} set {i}" for t in tiers for i in (0, 1)]
    head += ["regions on cpu", "Terrace cpu ms", "ORT ms", "Terrace/ORT", "min ms Terrace / ORT"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["model"]] + [", ".join(f"{k}{v}" for k, v in s["shapes"].items()) for s in r["sets"]]
        cells += [fmt_err(r["sets"][i][t]) for t in tiers for i in (0, 1)]
        cpu = r["sets"][0].get("cpu", {}) if "cpu" in tiers else {}
        cells.append(cpu.get("regions_on_cpu", ""))
        b = r.get("bench", {})
        tm, om = b.get("terrace_median_ms"), b.get("onnxruntime_median_ms")
        ratio = statistics.median(b["ratio_per_round"]) if b.get("ratio_per_round") else None
        cells += [f"{tm:.3g}" if tm else "", f"{om:.3g}" if om else "", f"{ratio:.2f}" if ratio else ""]
        tn, on = b.get("terrace_min_ms"), b.get("onnxruntime_min_ms")
        cells.append(f"{tn:.3g} / {on:.3g}" if tn and on else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default=os.path.expanduser("~/.cache/terrace/real-models"))
    p.add_argument("--terrace", default=str(ROOT / "build" / "tools" / "terrace"))
    p.add_argument("--models", default="", help="comma-separated names (default: every model in --dir)")
    p.add_argument("--tiers", default="interp,cpu", help="tiers whose errors are measured (empty: none)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3, help="alternating timing rounds (0: errors only)")
    p.add_argument("--calls", type=int, default=30, help="steady-state calls timed per round and runtime")
    p.add_argument("--bench-set", type=int, default=0, help="the data set whose inputs are timed")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "real_models"))
    args = p.parse_args()
    args.tiers = [t for t in args.tiers.split(",") if t]  # empty: timings only
    names = args.models.split(",") if args.models else sorted(
        d.name for d in Path(args.dir).iterdir() if (d / ".complete").exists())
    if not names:
        sys.exit(f"real_models: no models in {args.dir} (bash tools/fetch_real_models.sh)")
    rows = [measure(args, n) for n in names]
    os.makedirs(args.out, exist_ok=True)
    Path(args.out, "real_models.json").write_text(json.dumps(rows, indent=1))
    table = markdown(rows, args.tiers)
    Path(args.out, "real_models.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
