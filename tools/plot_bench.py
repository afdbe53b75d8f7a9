#!/usr/bin/env python3
"""Plots Terrace benchmark results (matplotlib, Agg backend), as PNG and SVG.

  tools/plot_bench.py RESULT.json [RESULT.json ...] --out FILE.png

Each RESULT.json is either `terrace bench --json` output (a warm-up timeline: latency per call,
log scale, regions becoming ready marked by vertical lines, the interpreter's steady median as a
reference) or `bench/compare.py` output (steady-state medians per model against the peers). Timelines
go to FILE.png/.svg; a comparison goes there too when there is no timeline, else to
FILE_peers.png/.svg.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import matplotlib.ticker  # noqa: E402

TIER_COLOURS = {"interp": "tab:blue", "cpu": "tab:orange", "gpu": "tab:green"}
TIER_ORDER = ["interp", "cpu", "gpu"]


def best_tier(tiers):
    """The highest tier that ran during a call (its colour in the timeline)."""
    ranked = [t for t in TIER_ORDER if t in tiers]
    return ranked[-1] if ranked else "interp"


def save(fig, out):
    stem, _ = os.path.splitext(out)
    fig.savefig(stem + ".png", dpi=130, bbox_inches="tight")
    fig.savefig(stem + ".svg", bbox_inches="tight")
    plt.close(fig)
    print(f"plot_bench: wrote {stem}.png and {stem}.svg")


def log_scale_plain(ax):
    """A log y axis labelled with plain numbers (0.5, 20, 300) rather than powers of ten."""
    ax.set_yscale("log")
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    lo, hi = ax.get_ylim()
    if hi / lo < 30:  # over a wider range, labelled minor ticks crowd each other
        ax.yaxis.set_minor_formatter(plain)
        ax.tick_params(axis="y", which="minor", labelsize=7)
    else:
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def model_label(path):
    """models/bert/model.onnx -> bert."""
    parts = os.path.normpath(path).split(os.sep)
    return parts[-2] if len(parts) > 1 and parts[-1] == "model.onnx" else parts[-1]


def plot_timeline(ax, run, line_style):
    calls = run["calls"]
    x = [c["index"] for c in calls]
    y = [max(c["ms"], 1e-3) for c in calls]
    label = f"{model_label(run['model'])} --tier {run['tier']}"
    ax.plot(x, y, line_style, color="0.6", linewidth=1, label=label, zorder=1)
    for tier in TIER_ORDER:  # markers coloured by the best tier each call ran
        pts = [(i, v) for i, v, c in zip(x, y, calls) if best_tier(c["tiers"]) == tier]
        if pts:
            ax.scatter(*zip(*pts), s=14, color=TIER_COLOURS[tier], zorder=2,
                       label=f"calls reaching {tier}" if tier not in ax.get_legend_handles_labels()[1] else None)
    ready = sorted({r["ready_at_call"] for r in run["regions"] if 0 <= r["ready_at_call"] < len(calls)})
    for k, call in enumerate(ready):
        n = sum(1 for r in run["regions"] if r["ready_at_call"] == call)
        ax.axvline(call - 0.5, color="tab:red", linestyle="--", linewidth=0.8,
                   label="compiled regions ready" if k == 0 else None)
        ax.annotate(f"{n} ready", (call - 0.5, 0.02), xycoords=("data", "axes fraction"), fontsize=7,
                    rotation=90, va="bottom", ha="right", color="tab:red")
    base = run["baseline"]["steady"]["median_ms"]
    if run["tier"] != "interp" and base:
        ax.axhline(base, color="tab:blue", linestyle=":", linewidth=1,
                   label=f"interpreter median {base:.4g} ms")
    steady = run["steady"]
    ax.axvspan(steady["first_call"] - 0.5, x[-1] + 0.5, color="0.9", zorder=0,
               label=f"steady: median {steady['median_ms']:.4g} ms, p90 {steady['p90_ms']:.4g} ms")


def timeline_figure(runs, out):
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for k, run in enumerate(runs):
        plot_timeline(ax, run, "-" if k == 0 else "--")
    log_scale_plain(ax)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("call")
    ax.set_ylabel("latency (ms, log scale)")
    first = runs[0]
    title = f"Warm-up timeline: {model_label(first['model'])}"
    notes = [f"first result {first['time_to_first_result_ms']:.0f} ms (load {first['load_ms']:.0f} ms)"]
    if first["tier"] != "interp":
        notes.append(f"break-even call: {first['break_even_call']}")
    ax.set_title(title + "\n" + ", ".join(notes), fontsize=10)
    ax.grid(True, which="both", axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    save(fig, out)


def comparison_figure(table, out):
    rows = [r for r in table["rows"] if r.get("median_ms")]
    if not rows:
        sys.exit("plot_bench: the comparison has no measured rows")
    models = list(dict.fromkeys(r["model"] for r in rows))
    peers = list(dict.fromkeys(r["peer"] for r in rows))
    width = 0.8 / len(peers)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(models) * max(1, len(peers) / 3)), 4.5))
    cmap = plt.get_cmap("tab10")
    for p, peer in enumerate(peers):
        xs, ys = [], []
        for m, model in enumerate(models):
            hit = [r for r in rows if r["model"] == model and r["peer"] == peer]
            if hit:
                xs.append(m + (p - (len(peers) - 1) / 2) * width)
                ys.append(hit[0]["median_ms"])
        bars = ax.bar(xs, ys, width, label=peer, color=cmap(p % 10))
        ax.bar_label(bars, labels=[f"{y:.4g}" for y in ys], fontsize=6, rotation=90, padding=2)
    ax.set_xticks(range(len(models)))
    ax.set_xticklabels(models)
    top = max(r["median_ms"] for r in rows)
    ax.set_yscale("log")
    ax.set_ylim(top=top * 4)  # room for the bar labels under the title
    log_scale_plain(ax)
    ax.set_ylabel("steady-state median latency (ms, log scale)")
    ax.set_title(f"Steady state against peers ({table.get('device', 'cpu')}, batch {table.get('batch', 1)})",
                 fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(True, which="both", axis="y", alpha=0.3)
    save(fig, out)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", help="terrace bench --json or bench/compare.py JSON files")
    parser.add_argument("--out", required=True, help="FILE.png (an .svg is written beside it)")
    args = parser.parse_args()
    runs, tables = [], []
    for path in args.results:
        with open(path) as f:
            data = json.load(f)
        (tables if "rows" in data else runs).append(data)
    if runs:
        timeline_figure(runs, args.out)
    for k, table in enumerate(tables):
        stem, ext = os.path.splitext(args.out)
        suffix = ("_peers" if runs else "") + (f"_{k}" if k else "")
        comparison_figure(table, stem + suffix + (ext or ".png"))


if __name__ == "__main__":
    main()
