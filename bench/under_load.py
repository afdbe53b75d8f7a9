#!/usr/bin/env python3
"""Steady-state latency under load: Terrace's default team (adaptive), --threads 1 and 2, the old
default (TERRACE_ADAPT_THREADS=0: every core) and ONNX Runtime (1 and 2 intra-op threads), each
model timed on a quiet machine and again with busy processes holding the cores (one busy loop per
core, no pinning: the scheduler shares the cores between them and the runtime's threads, as other
engineers' builds do). Variants run in turn inside each model, in an order that alternates per round.

  "$(bash bench/setup_peers.sh)" bench/under_load.py [--models a,b] [--load 2] [--calls 40] [--rounds 1]

Models: the zoo's small models (build/models-small) and the real-model corpus
(~/.cache/terrace/real-models, tools/fetch_real_models.sh), each with its test_data_set_0 inputs.
Prints a Markdown table of steady p50 (and mean, which counts the adaptive team's probes) per
model, variant and load; writes it with the raw figures as JSON under --out.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from real_models import data_set  # noqa: E402  (the corpus' inputs as --input arguments and arrays)

ZOO = ["mlp_small", "bert_small", "mobilenetv2_small", "resnet50_small"]
REAL = ["silero_vad", "magika", "oww_embedding", "ppocr_cls"]
# name -> (runtime, extra terrace arguments or ORT threads, extra environment)
VARIANTS = {
    "terrace default": ("terrace", [], {}),
    "terrace old default": ("terrace", [], {"TERRACE_ADAPT_THREADS": "0"}),
    "terrace --threads 1": ("terrace", ["--threads", "1"], {}),
    "terrace --threads 2": ("terrace", ["--threads", "2"], {}),
    "ort 1": ("ort", 1, {}),
    "ort 2": ("ort", 2, {}),
}


def start_load(n):
    """n busy loops, each a process of its own (what a build's compilers look like to the scheduler)."""
    return [subprocess.Popen(["/bin/sh", "-c", "while :; do :; done"]) for _ in range(n)]


def stop_load(procs):
    for p in procs:
        p.kill()
        p.wait()


def bench_terrace(args, model_dir, set_args, extra, env_extra, scratch):
    out = f"{scratch}/bench.json"
    cmd = [args.terrace, "bench", str(model_dir), "--tier", "cpu", "--steady-calls", str(args.calls),
           "--baseline-calls", "1", "--quiet", "--json", out] + set_args + extra
    env = dict(os.environ, **env_extra)
    env.pop("OMP_NUM_THREADS", None)  # the adaptive default needs it unset
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout).strip().splitlines()[-1:]}
    j = json.loads(Path(out).read_text())
    threads = j["report"].get("threads", {})
    s = j["steady"]
    # The last call's outputs against the interpreter's (on the team that call ran with).
    ok = all(c["equal"] for c in j.get("checks", []))
    return {"p50": s["p50_ms"], "mean": s["mean_ms"], "team": threads.get("team"), "why": threads.get("why", ""),
            "ok": ok}


def bench_ort(args, model_dir, feeds, threads, scratch):
    npz = f"{scratch}/inputs.npz"
    np.savez(npz, **feeds)
    cmd = [sys.executable, str(ROOT / "bench" / "ort_child.py"), str(model_dir / "model.onnx"), "-", npz,
           f"{scratch}/ort_out.npy", str(threads), str(args.calls), "5"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    lines = p.stdout.strip().splitlines()
    j = json.loads(lines[-1]) if lines else {"status": p.stderr.strip()[-200:]}
    if "times_ms" not in j:
        return {"error": j.get("status", "?")}
    return {"p50": statistics.median(j["times_ms"]), "mean": statistics.fmean(j["times_ms"])}


def measure(args, model_dir, loaded, rnd, scratch):
    set_args, feeds, _ = data_set(model_dir, 0)
    names = list(VARIANTS) if rnd % 2 == 0 else list(reversed(VARIANTS))
    rows = {}
    procs = start_load(args.load) if loaded else []
    try:
        for name in names:
            runtime, extra, env_extra = VARIANTS[name]
            if runtime == "terrace":
                rows[name] = bench_terrace(args, model_dir, set_args, extra, env_extra, scratch)
            else:
                rows[name] = bench_ort(args, model_dir, feeds, extra, scratch)
            print(f"  {model_dir.name} {'load' if loaded else 'quiet'} {name}: {rows[name]}", file=sys.stderr)
    finally:
        stop_load(procs)
    return rows


def cell(r):
    if "error" in r:
        return "error"
    team = f" [{r['team']}]" if r.get("team") else ""
    bad = "" if r.get("ok", True) else " MISMATCH"
    return f"{r['p50']:.3g} / {r['mean']:.3g}{team}{bad}"


def table(results):
    head = ["model", "load"] + list(VARIANTS)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (model, load), rounds in results.items():
        merged = {}
        for name in VARIANTS:  # the median over rounds of each figure
            got = [r[name] for r in rounds if "error" not in r[name]]
            if not got:
                merged[name] = {"error": True}
                continue
            merged[name] = {k: statistics.median(g[k] for g in got) for k in ("p50", "mean")}
            merged[name]["team"] = got[-1].get("team")
            merged[name]["ok"] = all(g.get("ok", True) for g in got)
        lines.append("| " + " | ".join([model, load] + [cell(merged[n]) for n in VARIANTS]) + " |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zoo", default=str(ROOT / "build" / "models-small"))
    p.add_argument("--real", default=os.path.expanduser("~/.cache/terrace/real-models"))
    p.add_argument("--terrace", default=str(ROOT / "build" / "tools" / "terrace"))
    p.add_argument("--models", default="", help="comma-separated names (default: the zoo's and corpus' listed above)")
    p.add_argument("--load", type=int, default=os.cpu_count(), help="busy processes under load (default: one per core)")
    p.add_argument("--calls", type=int, default=40, help="steady-state calls timed per variant")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--conditions", default="quiet,load")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "under_load"))
    args = p.parse_args()
    wanted = args.models.split(",") if args.models else ZOO + REAL
    dirs = [d for d in (Path(args.zoo) / m if m in ZOO else Path(args.real) / m for m in wanted)
            if (d / "test_data_set_0").is_dir()]
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for d in dirs:
            for rnd in range(args.rounds):
                for cond in args.conditions.split(","):
                    results.setdefault((d.name, cond), []).append(measure(args, d, cond == "load", rnd, scratch))
    text = table(results)
    print(text)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "under_load.json").write_text(
        json.dumps({f"{m}/{c}": r for (m, c), r in results.items()}, indent=1))
    (Path(args.out) / "under_load.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
