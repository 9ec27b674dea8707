"""Helpers of notebooks/01_norm.ipynb: float16 and float64 versions of RMSNorm to compare the
golden one with, an emulation of the v0 kernel's order of operations, the precision sweeps
and their figure, errors counted in float32 ulps, the recorded GPU error samples, a cut of a
kernel excerpt between two lines, the runs above their floor ringed on the ladder plot, the
peer lines and the take-away's lines."""

from __future__ import annotations

import numpy as np

from .. import excerpts, golden, nbutil
from ..excerpts import lines_between
from .overview import floor_flags, l2_bytes

__all__ = [
    "F16_MAX",
    "ms_half_naive",
    "ms_half_tree",
    "rms_norm_half",
    "rms_norm_f64",
    "ss_fma_chain",
    "rms_norm_v0_emulated",
    "overflow_threshold",
    "precision_sweeps",
    "plot_precision_sweeps",
    "plot_weight_decay",
    "ulps",
    "ULP_BINS",
    "plot_ulps",
    "recorded_samples",
    "lines_between",
    "show_lines",
    "l2_bytes",
    "mark_above_floor",
    "peer_lines",
    "ladder_takeaway",
]

F16_MAX = float(np.finfo(np.float16).max)  # 65504; a sum that reaches 65520 rounds to inf


def ms_half_naive(x):
    """mean(x²) as a naive half-precision kernel computes it: square in float16, add left to
    right in float16 (one running sum per row), divide by n."""
    with np.errstate(over="ignore"):  # the overflow is the point: it shows as inf
        sq = np.square(np.asarray(x).astype(np.float16))  # [rows, n]; |x| >= 256 -> inf
        return np.cumsum(sq, axis=-1, dtype=np.float16)[..., -1] / np.float16(sq.shape[-1])


def ms_half_tree(x):
    """mean(x²) with float16 squares added pairwise (a tree, as a block reduction adds): the
    most accurate order float16 allows, so it overflows only once the true sum does."""
    with np.errstate(over="ignore"):
        sq = np.square(np.asarray(x).astype(np.float16))
        n = sq.shape[-1]
        width = 1 << (n - 1).bit_length()
        sq = np.concatenate([sq, np.zeros((*sq.shape[:-1], width - n), np.float16)], -1)
        while sq.shape[-1] > 1:
            sq = sq[..., 0::2] + sq[..., 1::2]  # each add rounded to float16
        return sq[..., 0] / np.float16(n)


def rms_norm_half(x, w, ms_fn=ms_half_naive, eps=1e-6):
    """rms_norm with the mean of squares from ms_fn, the rest in float32. A mean that
    overflowed (inf) gives a row of zeros."""
    ms = np.asarray(ms_fn(x)).astype(np.float32)[..., None]  # [rows, 1]
    return (x / np.sqrt(ms + np.float32(eps)) * (1 + w)).astype(np.float32)


def rms_norm_f64(x, w, eps=1e-6):
    """The truth: the same formula in float64."""
    x64 = np.asarray(x, np.float64)
    ms = np.mean(x64**2, axis=-1, keepdims=True)
    return x64 / np.sqrt(ms + eps) * (1 + np.asarray(w, np.float64))


def ss_fma_chain(x):
    """sum(x²) per row as the v0 kernel adds it: one float32 chain ss = fma(x_i, x_i, ss),
    i = 0 .. n-1. x_i² is exact in float64 and the float64 sum is rounded once to float32,
    so this equals the fused multiply-add except in rare double-rounding ties."""
    x64 = np.asarray(x, np.float32).astype(np.float64)
    ss = np.zeros(x64.shape[:-1], np.float32)
    for i in range(x64.shape[-1]):
        ss = (ss + x64[..., i] * x64[..., i]).astype(np.float32)
    return ss


def rms_norm_v0_emulated(x, w, eps=1e-6):
    """What rms_norm_v0 computes, in numpy: the FMA chain, then r = 1 / sqrt(ss / n + eps)
    and (x · r) · (1 + w), each step one IEEE float32 operation as in the kernel."""
    x = np.asarray(x, np.float32)
    ss = ss_fma_chain(x)[..., None]
    r = np.float32(1) / np.sqrt(ss / np.float32(x.shape[-1]) + np.float32(eps))
    return (x * r) * (np.float32(1) + np.asarray(w, np.float32))


def overflow_threshold(ms_fn, make_row, lo, hi, steps=40):
    """The smallest p in [lo, hi] for which ms_fn(make_row(p)) overflows (bisection; the
    overflow must be monotone in p). ValueError when lo overflows already or hi does not."""
    if np.isinf(ms_fn(make_row(lo))) or not np.isinf(ms_fn(make_row(hi))):
        raise ValueError(f"lo must not overflow and hi must: lo={lo!r}, hi={hi!r}")
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if np.isinf(ms_fn(make_row(mid))) else (mid, hi)
    return hi


def _rel_ms(ms, x):
    truth = np.mean(np.asarray(x, np.float64) ** 2, axis=-1)
    return np.abs(np.asarray(ms, np.float64) - truth) / truth


def precision_sweeps(seed=3, n=5120):
    """The data of the three precision panels: the mean of squares' error against the row
    length (float16 sequential, float32 sequential = v0's order, float32 pairwise = golden),
    and y's error against the row's rms and against four outliers' size, at width n."""
    rng = np.random.default_rng(seed)
    sizes = 2 ** np.arange(7, 15)  # 128 .. 16384
    by_n = {
        "float16 sequential": [],
        "float32 sequential (v0's order)": [],
        "float32 pairwise (golden)": [],
    }
    for m in sizes:
        x = rng.standard_normal((16, m)).astype(np.float32)
        seq32 = np.cumsum(np.square(x), -1, dtype=np.float32)[:, -1] / np.float32(m)
        by_n["float16 sequential"].append(np.median(_rel_ms(ms_half_naive(x), x)))
        by_n["float32 sequential (v0's order)"].append(np.median(_rel_ms(seq32, x)))
        pair32 = np.mean(np.square(x), -1, dtype=np.float32)
        by_n["float32 pairwise (golden)"].append(np.median(_rel_ms(pair32, x)))
    base = rng.standard_normal(n).astype(np.float32)
    base /= np.float32(np.sqrt(np.mean(base.astype(np.float64) ** 2)))  # rms 1
    w = (0.1 * rng.standard_normal(n)).astype(np.float32)
    rmss = np.linspace(1.0, 5.0, 33)
    amps = np.array([10, 30, 60, 90, 110, 120, 125, 130, 160, 200, 255, 256, 300, 1000])
    by_rms = _y_errors(rmss, lambda s: base * np.float32(s), w)
    outliers = [17, 1234, 2600, 4999]

    def with_outliers(a):
        x = base.copy()
        x[outliers] = a
        return x

    by_amp = _y_errors(amps, with_outliers, w)
    return dict(sizes=sizes, by_n=by_n, rmss=rmss, by_rms=by_rms, amps=amps, by_amp=by_amp)


def _y_errors(params, make_row, w):
    out = {"float16 sequential": [], "float16 pairwise": [], "float32 (golden)": []}
    for p in params:
        x = make_row(p)[None, :]
        ref = rms_norm_f64(x, w)
        out["float16 sequential"].append(nbutil.relerr(rms_norm_half(x, w, ms_half_naive), ref))
        out["float16 pairwise"].append(nbutil.relerr(rms_norm_half(x, w, ms_half_tree), ref))
        out["float32 (golden)"].append(nbutil.relerr(golden.rms_norm(x, w), ref))
    return out


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


def plot_weight_decay(ax=None, lr=1e-3, wd=0.1, steps=30000):
    """AdamW's decoupled decay alone (zero gradient, p <- p - lr · wd · p) on two learned
    scales, stored plainly (g) and zero-centred (1 + w)."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6.5, 3.2))[1]
    t = np.arange(0, steps + 1, 500)
    decay = (1 - lr * wd) ** t
    for scale0, c in ((1.3, "tab:blue"), (0.7, "tab:orange")):
        ax.plot(t, scale0 * decay, c=c, ls="--", label=f"plain g, g0 = {scale0}: scale = g")
        label = f"zero-centred, w0 = {scale0 - 1:+.1f}: scale = 1 + w"
        ax.plot(t, 1 + (scale0 - 1) * decay, c=c, label=label)
    ax.axhline(1, c="k", lw=0.5)
    ax.set_xlabel(f"optimizer steps (lr {lr:g}, weight decay {wd:g}, zero gradient)")
    ax.set_ylabel("effective channel scale")
    ax.set_title("weight decay pulls a plain scale to 0, a zero-centred one to 1")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return ax


def ulps(a, ref):
    """|a − ref| in units of the float32 spacing at ref (ref may be float64): scale-free, so
    errors of inputs of different sizes compare."""
    ref = np.asarray(ref, np.float64)
    step = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    return np.abs(np.asarray(a, np.float64) - ref) / step


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


def recorded_samples(stage, kernels):
    """{kernel: (golden, gpu, shapes)} of the bench's recorded sample pairs (results/*.npz,
    keyed "<i>|<stage>|<kernel>", i the run's index in the results file) for those kernels of
    the stage; the runs of one kernel at several sizes are concatenated and their shapes
    listed. Empty when nothing was recorded."""
    s = nbutil.load_samples()
    runs = (nbutil.load_results() or {}).get("runs", [])
    out = {}
    for key in s.get("run_keys", []):
        i, st, kernel = str(key).split("|", 2)
        if st == stage and kernel in kernels and f"{i}_golden" in s:
            g, d, shapes = out.get(kernel, (np.empty(0, np.float32), np.empty(0, np.float32), []))
            shape = runs[int(i)].get("shape", {}) if int(i) < len(runs) else {}
            out[kernel] = (
                np.concatenate([g, s[f"{i}_golden"]]),
                np.concatenate([d, s[f"{i}_gpu"]]),
                shapes + [shape],
            )
    return out


def show_lines(text, title, first, last):
    """Show lines_between(text, first, last) under a title (no line numbers)."""
    excerpts.show_lines(text, title, first, last, numbered=False)


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


def ladder_takeaway(recs, l2=None):
    """Lines for the take-away, sizes ascending: the fastest rung's time, % of copy, % of
    floor (where recorded) and speed-up over v0; then every run above 100% of its floor with
    its likely reason (overview.floor_flags: l2 is the L2 size in bytes)."""
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
    return lines + floor_flags(recs, l2)
