"""Helpers the notebooks share: find the recorded GPU results, say where they came from, show
kernel source by definition name, and draw the two plots every stage notebook ends with (errors
against float64, timings against the copy ceiling). Plotting imports matplotlib lazily so
`import qwenref` stays light. Live timings in the notebooks come from qwenref.timing, like the
bench's."""

from __future__ import annotations

import inspect

import numpy as np

from .excerpts import kernel_excerpt, kernel_header, show_excerpt
from .floor import floor_note, floor_reason
from .nbrecords import (
    Records,
    above_floor,
    best_rungs,
    ladder_records,
    live_wanted,
    load_results,
    load_samples,
    plot_ladder,
    plot_splits,
    print_ladder,
    recorded,
    results_path,
    stage_records,
)

__all__ = [
    "results_path",
    "load_results",
    "recorded_note",
    "select_runs",
    "gpu_available",
    "show_source",
    "kernel_excerpt",
    "kernel_header",
    "show_excerpt",
    "relerr",
    "plot_errors",
    "plot_bandwidth",
    "load_samples",
    "print_runs",
    "plot_peer",
    "Records",
    "above_floor",
    "floor_reason",
    "floor_note",
    "best_rungs",
    "ladder_records",
    "live_wanted",
    "plot_ladder",
    "plot_splits",
    "print_ladder",
    "recorded",
    "stage_records",
]


def recorded_note(res):
    if not res:
        return "no GPU results recorded yet (run `python -m qwenref.bench` on a GPU machine)"
    # a run of a few stages (bench --only) merges into the file: the header is the latest run's,
    # and each run carries its own commit
    commits = {}
    for r in res.get("runs", []):
        c = str(r.get("commit", res.get("commit")))[:10]
        commits[c] = commits.get(c, 0) + 1
    mixed = (
        ""
        if len(commits) <= 1
        else " (runs by commit: " + ", ".join(f"{c}: {n}" for c, n in commits.items()) + ")"
    )
    return (
        f"recorded on {res.get('device')} on {res.get('date')} at commit "
        f"{str(res.get('commit'))[:10]}{mixed} (CuPy {res.get('cupy')}, CUDA "
        f"{res.get('cuda')}); device copy ceiling {res.get('copy_gbps', float('nan')):.0f} "
        f"GB/s in the latest run"
    )


def select_runs(res, stage=None, kernel=None, **shape):
    """The runs of one stage (and kernel substring, and shape fields equal to the given ones)."""
    out = []
    for r in (res or {}).get("runs", []):
        if stage and r.get("stage") != stage:
            continue
        if kernel and kernel not in str(r.get("kernel", "")):
            continue
        if any(r.get("shape", {}).get(k) != v for k, v in shape.items()):
            continue
        out.append(r)
    return out


def gpu_available():
    from .gpu import available

    return available()


def show_source(obj):
    """Print an object's source as the package has it (notebooks never re-type golden code)."""
    print(inspect.getsource(obj))


def relerr(a, ref):
    """Norm-wise relative error ||a - ref|| / ||ref|| in float64."""
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(a - ref) / np.linalg.norm(ref))


def plot_errors(errors, ax=None, title="", xlabel="|ours − float64 truth|"):
    """Histograms (log-x) of absolute errors, one per label: errors = {label: array}."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6, 3.2))[1]
    allv = np.concatenate([np.abs(np.ravel(v)) for v in errors.values()])
    pos = allv[allv > 0]
    lo = max(pos.min() if pos.size else 1e-12, 1e-12)
    hi = max(allv.max(), lo * 10)
    bins = np.logspace(np.log10(lo), np.log10(hi), 50)
    for label, v in errors.items():
        v = np.abs(np.ravel(v))
        ax.hist(
            np.maximum(v, lo),
            bins=bins,
            histtype="step",
            lw=1.5,
            label=f"{label} (max {v.max():.2e})",
        )
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return ax


def plot_bandwidth(runs, copy_gbps, ax=None, title="", label_key="kernel"):
    """Bars of achieved GB/s per run against the device-copy ceiling, % of copy written on top."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(7, 3.2))[1]
    labels = [_run_label(r, label_key) for r in runs]
    gb = [r.get("gbps") or 0 for r in runs]
    bars = ax.bar(range(len(runs)), gb, color="tab:blue")
    ax.axhline(copy_gbps, color="k", ls="--", lw=1, label=f"device copy {copy_gbps:.0f} GB/s")
    for b, r in zip(bars, runs):
        pct = r.get("pct_of_copy")
        if pct is not None:
            ax.text(
                b.get_x() + b.get_width() / 2,
                b.get_height(),
                f"{pct:.0f}%",
                ha="center",
                va="bottom",
                fontsize=8,
            )
    ax.set_xticks(range(len(runs)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("GB/s")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return ax


def _run_label(r, key):
    if key == "kernel":
        shape = r.get("shape", {})
        short = ",".join(f"{k}={v}" for k, v in shape.items() if k in ("T", "nb", "n", "rows"))
        return f"{r.get('kernel')}\n{short}" if short else str(r.get("kernel"))
    return str(r.get(key))


def print_runs(runs, copy_gbps=None):
    """One fixed-width line per run (bench fields; absent ones print '-')."""

    def f(v, fmt):
        return format(v, fmt) if isinstance(v, (int, float)) else "-"

    if copy_gbps:
        print(f"device copy ceiling {copy_gbps:.0f} GB/s")
    for r in runs:
        shape = ",".join(f"{k}={v}" for k, v in r.get("shape", {}).items())
        line = (
            f"{str(r.get('kernel')):<26} {shape:<30} {f(r.get('median_us'), '9.2f')} us "
            f"{f(r.get('gbps'), '7.0f')} GB/s {f(r.get('pct_of_copy'), '5.1f')}% of copy"
        )
        if r.get("rel_err") is not None:
            line += f"  rel_err {r['rel_err']:.1e}"
        if r.get("peer_median_us"):
            line += (
                f"  | {r.get('peer')}: {r['peer_median_us']:.2f} us "
                f"(ours {f(r.get('speedup'), '.2f')}x)"
            )
        if r.get("code_match") is not None:
            line += f"  | stored bytes equal to golden: {100 * r['code_match']:.4f}%"
        print(line)


def plot_peer(runs, ax, title=""):
    """Grouped bars: our median time against the peer's, where a peer was timed (log scale)."""
    runs = [r for r in runs if r.get("peer_median_us")]
    if not runs:
        ax.text(0.5, 0.5, "no peer timed", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    i = np.arange(len(runs))
    ax.bar(i - 0.2, [r["median_us"] for r in runs], 0.4, label="qwenref")
    ax.bar(i + 0.2, [r["peer_median_us"] for r in runs], 0.4, label=str(runs[0].get("peer")))
    labels = [
        f"{r['kernel']}\n" + ",".join(f"{k}={v}" for k, v in r.get("shape", {}).items())
        for r in runs
    ]
    ax.set_xticks(i, labels, rotation=30, ha="right", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("median µs (log)")
    ax.set_title(title)
    ax.legend(fontsize=8)
