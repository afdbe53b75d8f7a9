"""A bounded load test of serve_model.py: a fixed number of requests from K concurrent clients,
each answer checked against a local terrace.InferenceSession on the same inputs.

    PYTHONPATH=python:build/python python examples/ray_serve/load_test.py models/mlp --requests 400 --concurrency 4

Prints the latency of a request as a client sees it (send to last byte read, over a kept-alive
connection: HTTP, Serve's proxy and routing, the replica's decode, run and encode) at p50, p90
and p99 (nearest rank, as `terrace bench`), min and max; the throughput (requests / wall time of
the timed part); and beside them the p50 of the session's run in the replicas. --warmup requests
go first, checked but not timed. Needs numpy and terrace, not ray. Exits 1 if any answer failed
or differed.
"""
import argparse
import http.client
import io
import json
import math
import os
import sys
import threading
import time
import urllib.parse
from collections import Counter

import numpy as np

import terrace

_DTYPES = {"float": np.float32, "double": np.float64}


def model_path(path):
    return os.path.join(path, "model.onnx") if os.path.isdir(path) else path


def make_inputs(session, count, dims, seed=0):
    """`count` distinct feeds for the session's inputs, symbolic dims from `dims` (default 1)."""
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(count):
        feed = {}
        for i in session.get_inputs():
            elem = i.type[i.type.index("(") + 1:-1]
            dtype = np.dtype(_DTYPES.get(elem, elem))
            shape = [d if isinstance(d, int) else dims.get(d, 1) for d in i.shape]
            if dtype.kind == "f":
                feed[i.name] = rng.standard_normal(shape).astype(dtype)
            else:  # bools, and ids kept small so that they index any embedding table
                feed[i.name] = rng.integers(0, 2, shape).astype(dtype)
        feeds.append(feed)
    return feeds


def encode(feed, fmt):
    if fmt == "json":
        return json.dumps({"inputs": {k: v.tolist() for k, v in feed.items()}}).encode(), "application/json"
    out = io.BytesIO()
    if fmt == "npy":
        (value,) = feed.values()
        np.save(out, value)
    else:
        np.savez(out, **feed)
    return out.getvalue(), "application/octet-stream"


def decode(body, content_type):
    if content_type.startswith("application/json"):
        return {k: np.asarray(v) for k, v in json.loads(body)["outputs"].items()}
    with np.load(io.BytesIO(body), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def mismatch(got, want, rtol, atol):
    """Why `got` (outputs by name) differs from `want`; None where every output is within tolerance."""
    if sorted(got) != sorted(want):
        return f"outputs {sorted(got)}, expected {sorted(want)}"
    for name, w in want.items():
        g = got[name]
        if g.shape != w.shape:
            return f"{name}: shape {g.shape}, expected {w.shape}"
        if not np.allclose(g.astype(w.dtype), w, rtol=rtol, atol=atol, equal_nan=True):
            err = float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64))))
            return f"{name}: max abs error {err:g} over rtol {rtol:g}, atol {atol:g}"
    return None


def nearest_rank(sorted_ms, p):
    return sorted_ms[max(0, math.ceil(p * len(sorted_ms)) - 1)]


def load(url, bodies, expected, requests, concurrency, warmup=0, rtol=1e-4, atol=1e-5, timeout=60):
    """Sends `warmup` then `requests` requests from `concurrency` threads (request i carries body
    i % len(bodies)); returns a summary dict: latencies, throughput, failures, replicas seen."""
    u = urllib.parse.urlsplit(url)
    if u.scheme != "http":
        raise ValueError(f"{url}: http:// URLs only")
    path = u.path or "/"
    lock = threading.Lock()
    state = {"next": 0}
    failures, replicas, run_ms = [], Counter(), []

    def worker(total, latencies):
        conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
        try:
            while True:
                with lock:
                    i = state["next"]
                    if i >= total:
                        return
                    state["next"] = i + 1
                body, ctype = bodies[i % len(bodies)]
                t0 = time.perf_counter()
                try:
                    conn.request("POST", path, body=body, headers={"Content-Type": ctype})
                    r = conn.getresponse()
                    data = r.read()
                except (OSError, http.client.HTTPException) as e:
                    conn.close()  # a new connection for the next request
                    with lock:
                        failures.append(f"request {i}: {type(e).__name__}: {e}")
                    continue
                ms = (time.perf_counter() - t0) * 1e3
                # Checked after the clock stopped: the comparison is the client's work, not the server's.
                if r.status != 200:
                    why = f"HTTP {r.status}: {data[:200]!r}"
                else:
                    try:
                        why = mismatch(decode(data, r.getheader("Content-Type", "")), expected[i % len(bodies)],
                                       rtol, atol)
                    except (ValueError, KeyError, OSError) as e:
                        why = f"undecodable answer: {e}"
                with lock:
                    latencies.append(ms)
                    run_ms.append(float(r.getheader("X-Terrace-Run-Ms", "nan")))
                    replicas[r.getheader("X-Terrace-Replica", "?")] += 1
                    if why:
                        failures.append(f"request {i}: {why}")
        finally:
            conn.close()

    def phase(total):
        state["next"] = 0
        latencies = []
        threads = [threading.Thread(target=worker, args=(total, latencies)) for _ in range(concurrency)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return latencies, time.perf_counter() - t0

    if warmup:
        phase(warmup)
    # The warm-up's answers are checked too, but kept apart from the timed requests'.
    warm_failures, warm_replicas, replicas = failures[:], replicas, Counter()
    del run_ms[:], failures[:]
    latencies, wall = phase(requests)
    ms = sorted(latencies)
    summary = {"url": url, "requests": requests, "concurrency": concurrency, "warmup": warmup,
               "answered": len(ms), "failed": len(failures), "failures": failures[:20],
               "warmup_failed": len(warm_failures), "warmup_failures": warm_failures[:20],
               "wall_s": wall, "per_s": len(ms) / wall if wall > 0 else 0.0,
               "replicas": dict(replicas), "warmup_replicas": dict(warm_replicas)}
    if ms:
        summary.update(p50_ms=nearest_rank(ms, 0.5), p90_ms=nearest_rank(ms, 0.9), p99_ms=nearest_rank(ms, 0.99),
                       min_ms=ms[0], max_ms=ms[-1], mean_ms=sum(ms) / len(ms),
                       run_p50_ms=nearest_rank(sorted(x for x in run_ms if x == x) or [math.nan], 0.5))
    return summary


def prepare(model, fmt, dims, distinct=16, tier=None, threads=1, seed=0):
    """Request bodies and the outputs a local session gives for them."""
    session = terrace.InferenceSession(model_path(model), tier=tier, threads=threads)
    if fmt == "npy" and len(session.get_inputs()) != 1:
        raise ValueError("--format npy needs a model with one input (use npz)")
    names = [o.name for o in session.get_outputs()]
    feeds = make_inputs(session, distinct, dims, seed)
    expected = [dict(zip(names, session.run(None, f))) for f in feeds]
    return [encode(f, fmt) for f in feeds], expected


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", help="the served model (a file or a folder with model.onnx): the expected outputs' source")
    p.add_argument("--url", default="http://127.0.0.1:8000/")
    p.add_argument("--requests", type=int, default=200, help="timed requests")
    p.add_argument("--concurrency", type=int, default=2, help="clients, each with one request in flight")
    p.add_argument("--warmup", type=int, default=20, help="requests before the timed ones (checked, not timed)")
    p.add_argument("--format", choices=("json", "npy", "npz"), default="json")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=N", help="a symbolic dim (default 1)")
    p.add_argument("--distinct", type=int, default=16, help="distinct inputs, sent in turn")
    p.add_argument("--tier", choices=("interp", "cpu", "gpu"), help="the local session's (default: the best here)")
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--atol", type=float, default=1e-5)
    p.add_argument("--json", metavar="FILE", help="write the summary there")
    a = p.parse_args(argv)
    if a.requests < 1 or a.concurrency < 1:
        p.error("--requests and --concurrency must be at least 1")
    dims = {}
    for d in a.dim:
        name, _, n = d.partition("=")
        dims[name] = int(n)
    bodies, expected = prepare(a.model, a.format, dims, a.distinct, a.tier)
    s = load(a.url, bodies, expected, a.requests, a.concurrency, a.warmup, a.rtol, a.atol)
    print(f"{s['answered']} of {s['requests']} requests answered, {s['concurrency']} concurrent, {a.format}, "
          f"after {s['warmup']} warm-up; {s['failed']} failed or differed from the local session")
    if s["warmup_failed"]:
        print(f"{s['warmup_failed']} of the {s['warmup']} warm-up requests failed or differed")
    for f in s["warmup_failures"][:5] + s["failures"]:
        print("  " + f)
    if s["answered"]:
        print(f"latency: p50 {s['p50_ms']:.2f} ms, p90 {s['p90_ms']:.2f} ms, p99 {s['p99_ms']:.2f} ms, "
              f"min {s['min_ms']:.2f} ms, max {s['max_ms']:.2f} ms; {s['per_s']:.1f} requests/s "
              f"over {s['wall_s']:.2f} s")
        print(f"in the replicas, the session's run: p50 {s['run_p50_ms']:.3f} ms")
        print("replicas: " + ", ".join(f"{k} {v}" for k, v in sorted(s["replicas"].items())))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(s, f, indent=1)
    return 1 if s["failed"] or s["warmup_failed"] or s["answered"] < s["requests"] else 0


if __name__ == "__main__":
    sys.exit(main())
