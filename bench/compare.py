#!/usr/bin/env python3
"""Runs the zoo models in Terrace and its peers side by side and writes one table (markdown + JSON).

  bench/compare.py [--models mlp,resnet50] [--batch 1] [--calls 50] [--device cpu|cuda]
                   [--threads N] [--tiers interp,cpu] [--peers pytorch-eager,onnxruntime] [--rounds N]
                   [--interleave N [--block K]]
                   [--terrace build/tools/terrace] [--small] [--out bench-out]

Peers: PyTorch eager (the real nn.Module, rebuilt by tools/make_models.py with the zoo's seed),
TorchScript (torch.jit.trace), torch.compile (default, reduce-overhead, max-autotune) where the
installed torch has it, and ONNX Runtime (CPU) where it is installed; Terrace runs as
`terrace bench --json` per tier (tier 2 with --device-io: its input on the device and its output
left there, as the GPU peers' are; --host-io times the copies too). Every peer is timed the same way: the first call after setup
separately, then `--warmup` calls, then the median (and p90) of `--calls` calls, each a wall clock
around a synchronised call (CUDA events when torch runs on a GPU). Outputs are checked against eager
PyTorch (Terrace's through `terrace bench --expect`, with the tolerances of ARCHITECTURE.md's "Rules the code keeps").
Terrace and ONNX Runtime run in processes of their own (bench/ort_child.py for ONNX Runtime), whose
peak resident memory (each process's own VmHWM, which it reports itself: getrusage's ru_maxrss
keeps the parent's peak across fork and exec, and so showed this process's PyTorch model) is the
table's `peak RSS MB`: model, runtime and the Python interpreter around ONNX Runtime included; for
Terrace up to the end of its tiered run (the interpreter baseline `terrace bench` runs after it
in the same process is not what a process serving the model holds); the PyTorch peers share this
process and have none.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_models  # noqa: E402  (tools/ is not a package)

RTOL, ATOL = 1e-3, 1e-5  # ARCHITECTURE.md's fp32 tolerances, as Terrace's own checks use
COMPILE_MODES = ["default", "reduce-overhead", "max-autotune"]


def zoo_model(name, models_dir, small):
    """make_models.export is the one definition of a zoo model (weights, input, output); run it with
    its file writes intercepted, exporting ONNX only when the file is missing. Returns the module,
    the input name, the saved input, and the ONNX path."""
    folder = os.path.join(models_dir, name + ("_small" if small else ""))
    onnx_path = os.path.join(folder, "model.onnx")
    seen = {}
    real_export, real_save = make_models.torch.onnx.export, make_models.save_pb

    def export(model, args, path, **kwargs):
        seen["model"], seen["input_name"] = model, kwargs["input_names"][0]
        if not os.path.exists(path):
            real_export(model, args, path, **kwargs)

    def save_pb(array, path, pb_name):
        seen.setdefault("input", array)  # input first, then output
        if not os.path.exists(path):
            real_save(array, path, pb_name)

    make_models.torch.onnx.export, make_models.save_pb = export, save_pb
    try:
        make_models.export(name, models_dir, small)
    finally:
        make_models.torch.onnx.export, make_models.save_pb = real_export, real_save
    return seen["model"], seen["input_name"], seen["input"], onnx_path


def model_input(saved, batch, small):
    """The zoo's saved input when its batch matches, else a fresh one of the same kind."""
    if batch == saved.shape[0]:
        return saved
    rng = np.random.default_rng(1)
    shape = (batch,) + saved.shape[1:]
    if saved.dtype == np.int64:
        return rng.integers(0, 100 if small else 1000, shape, dtype=np.int64)
    return rng.standard_normal(shape, dtype=np.float32)


def time_calls(fn, calls, warmup, cuda):
    """(first call ms, [ms per timed call], the first call's output as numpy) with synchronised calls."""
    def timed():
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end), out
        t0 = time.perf_counter()
        out = fn()
        return (time.perf_counter() - t0) * 1e3, out
    first, out = timed()
    # A copy now: torch.compile's CUDA graphs (reduce-overhead) overwrite their output buffers on
    # the next call.
    out = out.detach().cpu().numpy().copy() if isinstance(out, torch.Tensor) else np.array(out)
    for _ in range(warmup):
        timed()
    return first, [timed()[0] for _ in range(calls)], out


def summary(first_ms, setup_ms, times):
    times = sorted(times)
    return {"setup_ms": setup_ms, "first_call_ms": first_ms, "first_result_ms": setup_ms + first_ms,
            "median_ms": statistics.median(times), "p90_ms": times[max(0, int(np.ceil(0.9 * len(times))) - 1)],
            "calls": len(times)}


def agreement(out, want):
    """(agrees, max abs err) of a peer's output against eager PyTorch's."""
    got = out.detach().cpu().numpy() if isinstance(out, torch.Tensor) else np.asarray(out)
    if got.shape != want.shape:
        return False, float("inf")
    err = np.abs(got.astype(np.float64) - want)
    return bool(np.all(err <= ATOL + RTOL * np.abs(want))), float(err.max())


def torch_peers(module, x_np, args):
    """Yields (peer, setup_ms, callable or reason-unavailable)."""
    dev = torch.device(args.device)
    module = module.to(dev).eval()
    x = torch.from_numpy(x_np).to(dev)
    yield "pytorch-eager", 0.0, lambda: module(x)
    t0 = time.perf_counter()
    traced = torch.jit.trace(module, (x,))
    yield "torchscript", (time.perf_counter() - t0) * 1e3, lambda: traced(x)
    for mode in COMPILE_MODES:
        peer = f"torch.compile-{mode}"
        if not hasattr(torch, "compile"):
            yield peer, 0.0, f"unavailable (torch {torch.__version__} has no torch.compile)"
            continue
        compiled = torch.compile(module, mode=mode)  # compiles lazily: the first call pays
        yield peer, 0.0, lambda c=compiled: c(x)


def run_ort(onnx_path, input_name, x_np, want, args, out_dir, model):
    """ONNX Runtime's row, from bench/ort_child.py in a process of its own (its thread settings there)."""
    in_npy, out_npy = (os.path.join(out_dir, f"{model}_ort_{k}.npy") for k in ("input", "output"))
    np.save(in_npy, x_np)
    cmd = [sys.executable, os.path.join(ROOT, "bench", "ort_child.py"), onnx_path, input_name, in_npy, out_npy,
           str(args.threads), str(args.calls), str(args.warmup)]
    print("compare:", " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    try:
        r = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"peer": "onnxruntime", "status": f"failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"}
    if "status" in r:
        return r
    ok, err = agreement(np.load(out_npy), want)
    if not ok:
        print(f"compare: MISMATCH {r['peer']} {model}: max abs err {err:.3g} vs eager PyTorch")
    return dict(peer=r["peer"], status="ok", agrees=ok, max_abs_err=err, peak_rss_mb=r["peak_rss_mb"],
                **summary(r["first_call_ms"], r["setup_ms"], r["times_ms"]))


def run_terrace(tier, onnx_path, input_name, in_pb, want_pb, args, out_dir, model):
    json_path = os.path.join(out_dir, f"terrace_{model}_{tier}.json")
    # As many steady calls as the peers get, however long the warm-up (compiles) takes.
    cmd = [args.terrace, "bench", onnx_path, "--tier", tier, "--calls", str(1 + args.warmup + args.calls),
           "--steady-calls", str(args.calls),
           "--baseline-calls", str(min(5, args.calls)), "--input", f"{input_name}={in_pb}",
           "--expect", f"output={want_pb}", "--json", json_path, "--quiet"]
    if tier == "gpu" and not args.host_io:
        # As the GPU peers run: their input is on the device and their output stays there.
        cmd.append("--device-io")
    print("compare:", " ".join(cmd), flush=True)
    try:  # waited for with wait4, for the child's own peak RSS
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        stderr = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    except OSError as e:
        return {"status": f"failed: {e}"}
    if not os.path.exists(json_path) or proc.returncode not in (0, 1):
        return {"status": f"failed (exit {proc.returncode}): {stderr.strip()[-300:]}"}
    with open(json_path) as f:
        r = json.load(f)
    expect = [c for c in r["checks"] if c["against"] != "interp"]
    row = {"setup_ms": r["load_ms"], "first_call_ms": r["first_call_ms"],
           "first_result_ms": r["time_to_first_result_ms"], "median_ms": r["steady"]["median_ms"],
           "p90_ms": r["steady"]["p90_ms"], "calls": r["steady"]["count"], "status": "ok",
           "agrees": all(c["equal"] for c in expect), "max_abs_err": max(c["max_abs_err"] for c in expect),
           "break_even_call": r["break_even_call"],
           # terrace bench's own VmHWM at the end of its tiered run (its interpreter baseline follows);
           # wait4's ru_maxrss keeps this process's peak across fork and exec
           "peak_rss_mb": r["peak_rss_mb"] if r.get("peak_rss_mb", -1) > 0 else usage.ru_maxrss / 1024}
    for c in r["checks"]:
        if not c["equal"]:
            print(f"compare: MISMATCH terrace-{tier} {model} vs {c['against']}: {c['message']}")
    return row


def read_json_line(proc):
    """The next line of the child's stdout that is a JSON object, or None at its end."""
    for line in proc.stdout:
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


def interleaved(tier, onnx_path, input_name, x_np, in_pb, args, out_dir, model):
    """Terrace (`terrace run --serve` on `tier`) and ONNX Runtime (ort_child.py --serve) resident in
    two processes at once, both warmed up, their calls in blocks that alternate: --interleave rounds,
    each a block of --block calls in each (which goes first alternating too), after a 250 ms pause in
    which both runtimes' idle threads stop spinning; a block's first call is not counted (it wakes them).
    Terrace / ONNX Runtime is taken per round, from the two blocks' medians: on a machine whose speed
    drifts from one minute or process to the next (bench/RESULTS.md: the 2-core VM, up to 2x) both
    blocks of a round see the same machine. Reports the median ratio and its quartiles."""
    in_npy = os.path.join(out_dir, f"{model}_ort_input.npy")
    np.save(in_npy, x_np)
    cmds = {"terrace": [args.terrace, "run", onnx_path, "--tier", tier, "--input", f"{input_name}={in_pb}",
                        "--warm", "--quiet", "--serve"],
            "onnxruntime": [sys.executable, os.path.join(ROOT, "bench", "ort_child.py"), onnx_path, input_name, in_npy,
                            os.path.join(out_dir, f"{model}_ort_interleaved_output.npy"), str(args.threads), "0",
                            str(args.warmup), "--serve"]}
    procs, logs = {}, {}
    try:
        for name, cmd in cmds.items():
            print("compare:", " ".join(cmd), flush=True)
            logs[name] = open(os.path.join(out_dir, f"{model}_{name}_interleaved.stderr"), "w")
            procs[name] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logs[name],
                                           text=True)
            ready = read_json_line(procs[name])
            if not ready or not ready.get("ready"):
                return {"status": f"{name} did not start serving: {ready}"}
        # A block lasts at least 25 ms of the slower runtime's calls (the MLP's are 50 microseconds:
        # ten of them measured the waking threads more than the model), judged from the fastest
        # call of a first block of each (its median was once a waking team's 5 ms on 16 cores,
        # which left the MLP blocks of 5 calls).
        slowest = 0.0
        for name, p in procs.items():
            p.stdin.write("5\n")
            p.stdin.flush()
            reply = read_json_line(p)
            if not reply or "times_ms" not in reply:
                return {"status": f"{name} stopped serving: {reply}"}
            slowest = max(slowest, min(reply["times_ms"]))
        block_calls = max(args.block, int(25.0 / max(slowest, 1e-3)) + 1)
        times = {name: [] for name in procs}
        ratios = []
        for r in range(args.interleave):
            medians = {}
            for name in (["terrace", "onnxruntime"] if r % 2 == 0 else ["onnxruntime", "terrace"]):
                time.sleep(0.25)  # 50 ms left ONNX Runtime's 16 threads spinning into Terrace's MLP block
                procs[name].stdin.write(f"{block_calls + 1}\n")
                procs[name].stdin.flush()
                reply = read_json_line(procs[name])
                if not reply or "times_ms" not in reply:
                    return {"status": f"{name} stopped serving: {reply}"}
                block = reply["times_ms"][1:]
                times[name] += block
                medians[name] = statistics.median(block)
            ratios.append(medians["terrace"] / medians["onnxruntime"])
        peaks = {}
        for name, p in procs.items():
            p.stdin.close()
            while (j := read_json_line(p)) is not None:
                if "peak_rss_mb" in j:
                    peaks[name] = j["peak_rss_mb"]
            p.wait(timeout=60)
        q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        return {"status": "ok", "tier": tier, "rounds": args.interleave, "block": block_calls,
                "terrace_median_ms": statistics.median(times["terrace"]),
                "onnxruntime_median_ms": statistics.median(times["onnxruntime"]),
                "ratio_median": statistics.median(ratios), "ratio_p25": q[0], "ratio_p75": q[2], "ratios": ratios,
                "terrace_peak_rss_mb": peaks.get("terrace"), "onnxruntime_peak_rss_mb": peaks.get("onnxruntime")}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        for f in logs.values():
            f.close()


def compare_model(name, args):
    module, input_name, saved, onnx_path = zoo_model(name, args.models_dir, args.small)
    x = model_input(saved, args.batch, args.small)
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy().astype(np.float64)
    out_dir = args.out
    in_pb, want_pb = (os.path.join(out_dir, f"{name}_{k}.pb") for k in ("input", "expected"))
    make_models.save_pb(x, in_pb, input_name)
    make_models.save_pb(want.astype(np.float32), want_pb, "output")
    rows = []
    base = {"model": name + ("_small" if args.small else ""), "batch": args.batch, "input": list(x.shape)}

    def measure(peer, setup_ms, fn):
        if args.peers and not any(peer.startswith(p) for p in args.peers):
            return
        row = dict(base, peer=peer)
        if isinstance(fn, str):
            rows.append(dict(row, status=fn))
            return
        print(f"compare: {base['model']} on {peer}", flush=True)
        try:
            with torch.no_grad():
                first, times, out = time_calls(fn, args.calls, args.warmup, args.device == "cuda")
        except Exception as e:  # a peer that cannot run this model is a row, not the end of the run
            rows.append(dict(row, status=f"failed: {type(e).__name__}: {str(e)[:200]}"))
            return
        ok, err = agreement(out, want)
        if not ok:
            print(f"compare: MISMATCH {peer} {base['model']}: max abs err {err:.3g} vs eager PyTorch")
        rows.append(dict(row, status="ok", agrees=ok, max_abs_err=err, **summary(first, setup_ms, times)))

    # Terrace first, in a process of its own, before this one holds torch.compile's worker pool, a
    # CUDA context or ONNX Runtime's spinning threads pool: the GPU run saw Terrace's batch-1 MLP
    # take 15 ms a call after them against 0.06 ms before. With --rounds, Terrace's and ONNX
    # Runtime's processes alternate (both run in children), and the PyTorch peers come after.
    with_ort = not args.peers or any("onnxruntime".startswith(p) or p.startswith("onnxruntime") for p in args.peers)
    terrace_rounds, ort_rounds = [], []
    for _ in range(args.rounds):
        terrace_rounds.append([dict(base, peer=f"terrace-{tier}",
                                    **run_terrace(tier, onnx_path, input_name, in_pb, want_pb, args, out_dir, name))
                               for tier in args.tiers])
        if with_ort:
            ort_rounds.append(dict(base, **run_ort(onnx_path, input_name, x, want, args, out_dir, name)))
    with torch.no_grad():
        for peer in torch_peers(module, x, args):
            measure(*peer)
    if with_ort:
        rows.append(merge_rounds(ort_rounds))
    rows += [merge_rounds([r[i] for r in terrace_rounds]) for i in range(len(args.tiers))]
    add_ratios(rows, args.tiers)
    add_eager_error_bound(rows, args.device)
    if args.interleave and with_ort:
        tier = next((t for t in args.tiers if t != "interp"), args.tiers[0])
        res = interleaved(tier, onnx_path, input_name, x, in_pb, args, out_dir, name)
        print(f"compare: {base['model']} interleaved: {json.dumps({k: v for k, v in res.items() if k != 'ratios'})}",
              flush=True)
        for r in rows:
            if r["peer"] == f"terrace-{tier}":
                r["interleaved"] = res
    return rows


def merge_rounds(rounds):
    """One row from a peer's --rounds runs: the median of the rounds' medians and of their p90s, the
    largest peak RSS and error, agreement in every round; the rounds' medians are kept beside."""
    if len(rounds) == 1:
        return rounds[0]
    ok = [r for r in rounds if r.get("status") == "ok"]
    if len(ok) < len(rounds):
        return next(r for r in rounds if r.get("status") != "ok")
    row = dict(ok[0])
    for key in ("median_ms", "p90_ms", "setup_ms", "first_call_ms", "first_result_ms"):
        if all(r.get(key) is not None for r in ok):
            row[key] = statistics.median(r[key] for r in ok)
    row["round_medians_ms"] = [r["median_ms"] for r in ok]
    row["peak_rss_mb"] = max(r["peak_rss_mb"] for r in ok)
    row["max_abs_err"] = max(r["max_abs_err"] for r in ok)
    row["agrees"] = all(r["agrees"] for r in ok)
    row["calls"] = sum(r["calls"] for r in ok)
    return row


def add_eager_error_bound(rows, device):
    """On the GPU, the reference is eager PyTorch on the CPU, and a fresh random input (any batch but
    the zoo's saved one) can leave eager PyTorch's own GPU result outside RTOL/ATOL of it (ResNet-50
    at batch 32 on the H100: max abs err 4.0e-4, summation orders differ between cuDNN and the CPU).
    A row that does not agree then also says whether its error is within eager PyTorch's own on the
    device (`within_eager_error`): the tolerance is not loosened, the comparison is reported beside it.
    On the CPU the reference is eager PyTorch itself, and ONNX Runtime's error is the yardstick: on
    the 2-core AVX2 machine (2026-11-26) ResNet-50's logits, up to 411 in size, left one element of
    1,000 (-0.0518) outside RTOL/ATOL on tier 1 (max abs err 4.4e-4) while ONNX Runtime's max abs
    err was 5.2e-4; such a row says whether its error is within ONNX Runtime's
    (`within_onnxruntime_error`)."""
    if device == "cuda":
        ref, key = next((r for r in rows if r["peer"] == "pytorch-eager" and r.get("max_abs_err") is not None), None), \
            "within_eager_error"
    else:
        ref, key = next((r for r in rows if r["peer"].startswith("onnxruntime") and r.get("max_abs_err") is not None),
                        None), "within_onnxruntime_error"
    if not ref or (device == "cuda" and ref.get("agrees")):
        return
    for r in rows:
        if r.get("agrees") is False and r is not ref:
            r[key] = r["max_abs_err"] <= ref["max_abs_err"]


def add_ratios(rows, tiers):
    """ratio_<tier> = Terrace's steady median on that tier / the peer's (below 1: Terrace is faster)."""
    for tier in tiers:
        t = next((r for r in rows if r["peer"] == f"terrace-{tier}" and r.get("median_ms")), None)
        for r in rows:
            if t and r.get("median_ms"):
                r[f"ratio_{tier}"] = t["median_ms"] / r["median_ms"]


def fmt(v, digits=3):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "NO"
    return f"{v:.{digits}g}" if isinstance(v, float) else str(v)


def markdown(table, tiers):
    cols = ["model", "peer", "setup_ms", "first_call_ms", "median_ms", "p90_ms", "calls", "agrees", "peak_rss_mb"] + \
           [f"ratio_{t}" for t in tiers]
    head = ["model", "peer", "setup ms", "first call ms", "median ms", "p90 ms", "n", "agrees", "peak RSS MB"] + \
           [f"Terrace {t} / peer" for t in tiers]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table["rows"]:
        cells = [fmt(r.get(c)) for c in cols]
        if "within_eager_error" in r:  # see add_eager_error_bound
            cells[cols.index("agrees")] += " (within eager's own error)" if r["within_eager_error"] else " (beyond eager's error)"
        if "within_onnxruntime_error" in r:
            cells[cols.index("agrees")] += (" (within ONNX Runtime's error)" if r["within_onnxruntime_error"]
                                            else " (beyond ONNX Runtime's error)")
        if r["status"] != "ok":
            cells[2:] = [r["status"]] + [""] * (len(cols) - 3)
        lines.append("| " + " | ".join(cells) + " |")
    inter = [r for r in table["rows"] if "interleaved" in r]
    if inter:
        lines += ["", "Interleaved (both resident, blocks of calls alternating; the ratio per round):", "",
                  "| model | Terrace tier | rounds x calls | Terrace median ms | ONNX Runtime median ms | "
                  "Terrace / ORT median (p25-p75) | peak RSS MB Terrace / ORT |", "|---|---|---|---|---|---|---|"]
        for r in inter:
            i = r["interleaved"]
            if i["status"] != "ok":
                lines.append(f"| {r['model']} | | {i['status']} | | | | |")
                continue
            lines.append(f"| {r['model']} | {i['tier']} | {i['rounds']} x {i['block']} | {fmt(i['terrace_median_ms'])} | "
                         f"{fmt(i['onnxruntime_median_ms'])} | {fmt(i['ratio_median'])} ({fmt(i['ratio_p25'])}-"
                         f"{fmt(i['ratio_p75'])}) | {fmt(i['terrace_peak_rss_mb'])} / {fmt(i['onnxruntime_peak_rss_mb'])} |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="mlp", help="comma-separated zoo names (%s)" % ",".join(make_models.MODELS))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--calls", type=int, default=50, help="timed calls after warm-up (the issue asks for >= 50)")
    p.add_argument("--rounds", type=int, default=1,
                   help="runs of Terrace's and ONNX Runtime's processes, alternating; each row then gives the "
                        "median of the rounds' medians (a machine whose speed drifts from minute to minute slows "
                        "both alike)")
    p.add_argument("--interleave", type=int, default=0,
                   help="after the rounds, N rounds with Terrace (its first compiled tier) and ONNX Runtime resident "
                        "at once, blocks of --block calls alternating between them; the ratio is taken per round")
    p.add_argument("--block", type=int, default=5,
                   help="calls in a block of --interleave (default 5; more where 5 take under 25 ms)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="CPU threads for every peer (torch.set_num_threads, OMP_NUM_THREADS, ONNX Runtime's "
                        "intra_op_num_threads with inter_op 1; default all cores)")
    p.add_argument("--tiers", default=None, help="Terrace tiers (default interp,cpu; plus gpu with --device cuda)")
    p.add_argument("--peers", default="",
                   help="comma-separated peers to run (prefixes: pytorch-eager, torchscript, torch.compile-default, "
                        "torch.compile-reduce-overhead, torch.compile-max-autotune, onnxruntime); default all")
    p.add_argument("--terrace", default=os.path.join(ROOT, "build", "tools", "terrace"))
    p.add_argument("--models-dir", default=os.path.join(ROOT, "models"))
    p.add_argument("--small", action="store_true", help="the zoo's reduced models (for tests)")
    p.add_argument("--host-io", action="store_true",
                   help="tier 2 takes host inputs and returns host outputs (default: --device-io, as the GPU peers)")
    p.add_argument("--out", default="bench-out")
    args = p.parse_args()
    args.peers = [x for x in args.peers.split(",") if x]
    args.tiers = (args.tiers or ("interp,cpu,gpu" if args.device == "cuda" else "interp,cpu")).split(",")
    os.makedirs(args.out, exist_ok=True)
    # Same threads for all: Debian's torch otherwise starts with one, Terrace's OpenMP with all cores.
    torch.set_num_threads(args.threads)
    # float32 means float32: TF32 convolutions and matmuls on the GPU miss fp32 tolerances (ResNet-50's
    # logits by 0.2), and Terrace computes in full float32.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # inherited by the terrace subprocesses
    table = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "host": platform.node(),
             "cpu": platform.processor() or platform.machine(), "torch": torch.__version__,
             "torch_threads": torch.get_num_threads(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
             "onnxruntime_threads": {"intra_op_num_threads": args.threads, "inter_op_num_threads": 1,
                                     "execution_mode": "ORT_SEQUENTIAL"},
             "device": args.device, "tf32": False, "batch": args.batch,
             "calls": args.calls, "warmup": args.warmup, "rounds": args.rounds, "interleave": args.interleave,
             "block": args.block, "command": " ".join(sys.argv), "rows": []}
    for name in args.models.split(","):
        table["rows"] += compare_model(name, args)
    with open(os.path.join(args.out, "compare.json"), "w") as f:
        json.dump(table, f, indent=1)
    md = markdown(table, args.tiers)
    with open(os.path.join(args.out, "compare.md"), "w") as f:
        f.write(md)
    print(md)
    bad = [r for r in table["rows"] if r.get("agrees") is False and not r.get("within_eager_error")
           and not r.get("within_onnxruntime_error")]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
