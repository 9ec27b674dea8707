"""Drawings and printouts of notebooks/01_norm.ipynb: the weight-decay sketch, the precision
sweeps' figure, errors in float32 ulps as bars, a cut of a kernel excerpt between two lines,
the runs above their floor ringed on the ladder plot, the peer lines and the take-away's
lines. What the figures show is computed in the notebook."""

from __future__ import annotations

import numpy as np

from .. import floor, nbutil

__all__ = [
    "plot_precision_sweeps",
    "plot_weight_decay",
    "ULP_BINS",
    "plot_ulps",
    "mark_above_floor",
    "peer_lines",
    "ladder_takeaway",
]


def _mark(ax, x, text, color="0.4"):
    """A dotted vertical line at x, named in the legend (clear of the data and the ticks)."""
    ax.axvline(x, color=color, ls=":", lw=1.2, label=text)


def plot_precision_sweeps(d, marks):
    """Three panels from precision_sweeps(); marks = {"n": 5120, "rms": .., "sum": ..,
    "square": ..}: where the derivation says float16 overflows (the sum, the squares). Each
    panel's legend sits in a row of its own below the panels, clear of the axes."""
    import matplotlib.pyplot as plt

    fig, grid = plt.subplots(
        2, 3, figsize=(13, 5.8), gridspec_kw=dict(height_ratios=[3, 1.1]), layout="constrained"
    )
    axs, keys = grid[0], grid[1]
    for k, v in d["by_n"].items():
        axs[0].loglog(d["sizes"], np.maximum(v, 1e-10), "o-", ms=4, label=k)
    _mark(axs[0], marks["n"], f"n = {marks['n']}")
    axs[0].set(xlabel="row length n", ylabel="median relative error of mean(x²)")
    axs[0].set_title("swamping: error against row length", fontsize=10)
    for ax, key, xs, xl in (
        (axs[1], "by_rms", d["rmss"], f"rms of the row (n = {marks['n']}, no outliers)"),
        (axs[2], "by_amp", d["amps"], "size of 4 outliers (row of rms 1)"),
    ):
        for (k, v), st in zip(d[key].items(), ("o-", "s--", "^-")):
            ax.semilogy(xs, np.maximum(v, 1e-10), st, ms=3.5, label=k)
        ax.set(xlabel=xl, ylabel="relative error of y vs float64")
    _mark(axs[1], marks["rms"], f"sum = 65504: rms = {marks['rms']:.2f}")
    axs[1].set_title("the sum overflows: error against rms", fontsize=10)
    _mark(axs[2], marks["sum"], f"sum = 65504: outliers of {marks['sum']:.1f}")
    _mark(axs[2], marks["square"], f"x² = 65504: x = {marks['square']:.1f}", "tab:red")
    axs[2].set_xscale("log")
    axs[2].set_title("outliers: the sum overflows first", fontsize=10)
    # past a threshold the float16 curves reach 1, the pairwise one first: the legend says so
    same = (
        "right of the grey dotted line the pairwise float16 sum\n"
        "gives 1 (the row is zeroed); the sequential one\nfollows once it overflows too"
    )
    for ax, key_ax, title in zip(axs, keys, (None, same, same)):
        key_ax.set_axis_off()
        key_ax.legend(
            *ax.get_legend_handles_labels(),
            fontsize=8.5,
            title=title,
            title_fontsize=8.5,
            loc="upper center",
            frameon=False,
        )
    return fig


def plot_weight_decay(t, curves, lr, wd, ax=None):
    """The curves {label: effective scale at steps t}, in pairs (plain, zero-centred) of one
    colour each: the plain one dashed."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6.5, 3.2))[1]
    for i, (label, y) in enumerate(curves.items()):
        ax.plot(t, y, c=f"C{i // 2}", ls="--" if label.startswith("plain") else "-", label=label)
    ax.axhline(1, c="k", lw=0.5)
    ax.set_xlabel(f"optimizer steps (lr {lr:g}, weight decay {wd:g}, zero gradient)")
    ax.set_ylabel("effective channel scale")
    ax.set_title("weight decay pulls a plain scale to 0, a zero-centred one to 1")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return ax


ULP_BINS = np.array([0, 0.5, 1, 2, 4, 8, 16, 32, 64, 128, np.inf])


def plot_ulps(panels, title=""):
    """Grouped bars, one panel per (panel title, {label: ulps array}) in panels: the share of
    elements whose error falls in each ulp bin; each label carries its maximum. One panel per
    input and reference, so no bars of different inputs share an axis."""
    import matplotlib.pyplot as plt

    fig, axs = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.4), squeeze=False)
    names = [f"{a:g}–{b:g}" for a, b in zip(ULP_BINS[:-2], ULP_BINS[1:-1])] + [
        f"≥ {ULP_BINS[-2]:g}"
    ]
    x = np.arange(len(names))
    labels = list(dict.fromkeys(k for _, series in panels for k in series))
    colour = {k: f"C{i}" for i, k in enumerate(labels)}  # one colour per series in every panel
    for ax, (panel_title, series) in zip(axs[0], panels):
        width = 0.8 / max(len(series), 1)
        for i, (label, u) in enumerate(series.items()):
            u = np.ravel(u)
            share = np.histogram(u, bins=ULP_BINS)[0] / max(u.size, 1)
            off = (i - (len(series) - 1) / 2) * width
            ax.bar(x + off, share, width, color=colour[label], label=f"{label} (max {u.max():.1f})")
        if not series:
            ax.text(0.5, 0.5, "no samples recorded", ha="center", transform=ax.transAxes)
        ax.set_xticks(x, names, fontsize=8, rotation=30)
        ax.set_xlabel("error in float32 ulps of the reference")
        ax.set_ylabel("share of elements")
        ax.set_title(panel_title, fontsize=9.5)
        if series:
            ax.legend(fontsize=8.5, loc="upper center", bbox_to_anchor=(0.5, -0.3), frameon=False)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def mark_above_floor(ax, recs):
    """A red ring around each run of a plot_ladder figure that is above its read floor
    (nbutil.above_floor), named in the legend; nothing when there is none."""
    over = nbutil.above_floor(recs)
    if not over:
        return
    ax.plot(
        [r["bytes"] for r in over],
        [r["gbps"] for r in over],
        "o",
        ms=13,
        mfc="none",
        mec="tab:red",
        mew=1.5,
        label="above its read floor (see the take-away)",
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def peer_lines(peers, recs):
    """Lines for the stage bench's peer runs (queued or graph, on the GPU), each with the
    ladder's own time of the fastest rung at the same rows when the ladder timed that size."""
    best = {r.get("shape", {}).get("rows"): r for r in nbutil.best_rungs(recs).values()}
    lines = []
    for r in sorted(peers, key=lambda r: r["shape"]["rows"]):
        rows = r["shape"]["rows"]
        lad = best.get(rows)
        also = (
            f"; the ladder's {lad['kernel']}: {lad['median_us']:.1f} us"
            if lad
            else "; the ladder has no run at this size"
        )
        lines.append(
            f"rows={rows}, {r['timing']}: {r['peer']} {r['peer_median_us']:.1f} us, "
            f"ours ({r['kernel']}) {r['median_us']:.1f} us, torch / ours = {r['speedup']:.2f}"
            + also
        )
    return lines


def ladder_takeaway(recs):
    """Lines for the take-away, sizes ascending: the fastest rung's time, % of copy, % of
    floor (where recorded) and speed-up over v0; then every run above 100% of its floor with
    its likely reason (qwenref.floor's rule, with the records' L2 size)."""
    lines = []
    ranked = sorted(nbutil.best_rungs(recs).items(), key=lambda kv: kv[1].get("bytes", 0))
    for size, best in ranked:
        v0 = next(
            (r for r in recs.runs if r.get("rung") == 0 and r.get("shape") == best.get("shape")),
            None,
        )
        pf, fl = best.get("pct_of_floor"), best.get("floor_us")
        floor_copy = 100 * best["bytes"] / fl / 1e3 / recs.copy_gbps if fl else 0.0
        floor_copy = floor_copy if np.isfinite(floor_copy) else 0.0  # no copy rate recorded
        lines.append(
            f"{best.get('family')} at {size}: fastest {best['kernel']} "
            f"{best['median_us']:.1f} us = {best['pct_of_copy']:.0f}% of copy"
            + (f", {pf:.0f}% of floor" if pf is not None else ", floor not recorded")
            + (f" (the floor: {floor_copy:.0f}% of copy)" if floor_copy else "")
            + (f", {v0['median_us'] / best['median_us']:.0f}x v0" if v0 else "")
        )
    for r in sorted(floor.above_floor(recs.runs), key=lambda r: r.get("bytes", 0)):
        size = ", ".join(f"{k}={v}" for k, v in r.get("shape", {}).items() if k == "rows")
        lines.append(
            f"{r['kernel']} at {size} reaches {r['pct_of_floor']:.0f}% of its floor "
            f"(likely: {floor.floor_note(r, recs.l2_bytes)})"
        )
    return lines
