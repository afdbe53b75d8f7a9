"""python -m terrace: run an ONNX model on numpy inputs and print what came out.

    python -m terrace MODEL [--input NAME=FILE.npy]... [--tier interp|cpu|gpu] [--repeat N]
                            [--output-dir DIR] [--report]

Inputs not given are random (symbolic dims 1). The C++ CLI (`terrace run`, `terrace bench`) has
more; this one needs only the Python package.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

import terrace

_DTYPES = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int8)": np.int8, "tensor(int16)": np.int16, "tensor(int32)": np.int32, "tensor(int64)": np.int64,
    "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16, "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_,
}


def _parser():
    p = argparse.ArgumentParser(prog="python -m terrace", description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="an .onnx file, or a folder holding model.onnx")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input from a .npy file (others are random)")
    p.add_argument("--tier", choices=["interp", "cpu", "gpu"], help="the highest tier (default: the highest built)")
    p.add_argument("--repeat", type=int, default=1, metavar="N", help="calls to make (default 1); N > 1 prints the median")
    p.add_argument("--output-dir", metavar="DIR", help="write the last call's outputs as DIR/NAME.npy")
    p.add_argument("--report", action="store_true", help="print the session's report after the calls")
    return p


def _random_input(arg, rng):
    dtype = _DTYPES.get(arg.type)
    if dtype is None:
        raise SystemExit(f"input '{arg.name}' is {arg.type}: give it with --input {arg.name}=FILE.npy")
    shape = [d if isinstance(d, int) and d >= 0 else 1 for d in (arg.shape or [])]
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    return (rng.random(shape) * 2 - 1).astype(dtype) if np.issubdtype(dtype, np.floating) else \
        rng.integers(0, 4, size=shape).astype(dtype)


def _feed(sess, given):
    named = {}
    for item in given:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"--input expects NAME=FILE.npy, got '{item}'")
        named[name] = np.load(path, allow_pickle=False)
    known = {a.name for a in sess.get_inputs()}
    for name in named:
        if name not in known:
            raise SystemExit(f"--input {name}: the model has no input of that name (it has {', '.join(sorted(known))})")
    rng = np.random.default_rng(0)
    return {a.name: named[a.name] if a.name in named else _random_input(a, rng) for a in sess.get_inputs()}


def _summary(name, y):
    line = f"output {name}: {y.dtype}{list(y.shape)}"
    if y.size and np.issubdtype(y.dtype, np.number):
        flat = y.reshape(-1)
        finite = flat[np.isfinite(flat)] if np.issubdtype(y.dtype, np.floating) else flat
        first = ", ".join(f"{v:.6g}" for v in flat[:5])
        line += f"  [{first}{', ...' if flat.size > 5 else ''}]"
        if finite.size:
            line += f" min {finite.min():.6g}, max {finite.max():.6g}, mean {finite.mean():.6g}"
        if np.issubdtype(y.dtype, np.floating):
            line += f", NaN {int(np.isnan(flat).sum())}"
    return line


def main(argv=None):
    args = _parser().parse_args(argv)
    if args.repeat < 1:
        raise SystemExit("--repeat must be 1 or more")
    model = os.path.join(args.model, "model.onnx") if os.path.isdir(args.model) else args.model
    try:
        sess = terrace.InferenceSession(model, tier=args.tier)
        feed = _feed(sess, args.input)
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            outs = sess.run(None, feed)
            times.append((time.perf_counter() - t0) * 1e3)
    except terrace.TerraceError as e:
        print(f"terrace: {e}", file=sys.stderr)  # the message starts with its code
        return 1
    for arg, y in zip(sess.get_outputs(), outs):
        print(_summary(arg.name, y))
        if args.output_dir:
            os.makedirs(args.output_dir, exist_ok=True)
            safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in arg.name)
            np.save(os.path.join(args.output_dir, safe + ".npy"), y)
    if args.repeat > 1:
        print(f"{args.repeat} calls: first {times[0]:.3f} ms, median {statistics.median(times):.3f} ms")
    if args.report:
        print(sess.explain(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
