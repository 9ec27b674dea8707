"""Drawings and printouts of notebooks/03_wht.ipynb (the Walsh–Hadamard transform): the
butterfly diagram beside H_n, the outlier figure, the quantization figure, the error figure
against float64, the recorded errors of the rungs, v0's work against its time, and the record
printouts and figure pieces it shares with the rope notebook (lessons.common, re-exported here).
What the figures show is computed in the notebook."""

from __future__ import annotations

import numpy as np

from .common import (
    error_strip,
    print_above_floor,
    print_fastest,
    print_peers,
    print_stage,
    restyle_ladder,
    source_below,
    takeaway,
)

__all__ = [
    "plot_butterfly",
    "plot_outliers",
    "plot_quantization",
    "plot_wht_errors",
    "print_recorded_errors",
    "work_ratio",
    # from lessons.common
    "error_strip",
    "print_above_floor",
    "print_fastest",
    "print_peers",
    "print_stage",
    "restyle_ladder",
    "takeaway",
]


PLUS, MINUS = "tab:blue", "tab:red"  # one colour per sign, in both panels of plot_butterfly


def plot_butterfly(hm):
    """Left: the butterfly's data flow for n = len(hm) (pass h pairs i with i + h: sum up,
    difference down); right: hm = H_n, whose row i is the sign pattern the passes build for
    output i. Blue is + and red is − in both panels."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    n = len(hm)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.5, 3.9), gridspec_kw=dict(width_ratios=[3, 2]))
    stages = int(np.log2(n))
    for s in range(stages):
        h = 1 << s
        for a in (i for i in range(n) if not i & h):
            b = a + h
            for src in (a, b):  # both inputs feed the sum, which lands on a
                a1.plot([s, s + 1], [-src, -a], c=PLUS, lw=1.2)
            a1.plot([s, s + 1], [-a, -b], c=PLUS, lw=1.2)  # a enters b's difference with +
            a1.plot([s, s + 1], [-b, -b], c=MINUS, lw=1.2, ls="--")  # b enters it with −
        a1.text(s + 0.5, 0.8, f"pass h = {h}", ha="center", fontsize=9)
    for s in range(stages + 1):
        a1.scatter([s] * n, -np.arange(n), c="k", s=18, zorder=3)
    a1.set_yticks(-np.arange(n), [f"x[{i}]" for i in range(n)])
    ticks = ["input"] + [f"after h={1 << s}" for s in range(stages)]
    a1.set_xticks(range(stages + 1), ticks[:-1] + [ticks[-1] + f"\n(· 1/√{n})"])
    a1.set_ylim(-n + 0.5, 1.3)
    a1.set_title("butterfly: blue = +, red dashed = − (lower input negated)", fontsize=10)
    a2.imshow(hm, cmap=ListedColormap([MINUS, PLUS]), vmin=-1, vmax=1, alpha=0.45)
    for (r, c), v in np.ndenumerate(hm):
        a2.text(c, r, "+" if v > 0 else "−", ha="center", va="center", fontsize=10)
    a2.set_title(f"H_{n} (Sylvester order): blue = +1, red = −1", fontsize=10)
    a2.set_xticks(range(n))
    a2.set_yticks(range(n))
    fig.tight_layout()
    return fig


def plot_outliers(keys, rot, n_show=64):
    """Top: |keys| before and after the WHT (first n_show keys), each with its own colour
    scale; bottom left: per-channel rms (before as a line over the bars of after); bottom
    right: the distribution of all values (log counts) with a Gaussian of the same energy."""
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(11, 6), layout="constrained")
    gs = fig.add_gridspec(2, 2)
    for col, (name, a) in enumerate((("keys", keys), ("keys after WHT", rot))):
        ax = fig.add_subplot(gs[0, col])
        im = ax.imshow(np.abs(a[:n_show]), aspect="auto", cmap="magma", vmin=0)
        ax.set(title=f"|{name}|, first {n_show} of {len(a)}", xlabel="channel", ylabel="key")
        fig.colorbar(im, ax=ax, fraction=0.04, label="|value| (own scale)")
    ax = fig.add_subplot(gs[1, 0])
    ch = np.arange(keys.shape[1])
    rms = lambda a: np.sqrt(np.mean(np.asarray(a, np.float64) ** 2, 0))  # noqa: E731
    ax.bar(ch, rms(rot), width=1, label="after WHT", color="tab:blue", alpha=0.6)
    ax.step(ch, rms(keys), where="mid", lw=1.2, label="before", color="tab:orange")
    ax.set(xlabel="channel", ylabel=f"rms over the {len(keys)} keys", title="per-channel rms")
    ax.set_ylim(0, 1.4 * rms(keys).max())  # head room: the legend sits above the bars
    ax.legend(fontsize=8, loc="upper center", ncol=2)
    ax = fig.add_subplot(gs[1, 1])
    lim = float(np.ceil(np.abs(keys).max() / 10) * 10)
    bins = np.linspace(-lim, lim, 161)
    ax.hist(keys.ravel(), bins=bins, histtype="step", lw=1.4, label="before", color="tab:orange")
    ax.hist(rot.ravel(), bins=bins, histtype="step", lw=1.4, label="after WHT", color="tab:blue")
    sd = float(np.sqrt(np.mean(np.asarray(rot, np.float64) ** 2)))
    xs = np.linspace(-lim, lim, 400)
    gauss = keys.size * (bins[1] - bins[0]) * np.exp(-(xs**2) / (2 * sd**2)) / (sd * 2.5066)
    ax.plot(xs, gauss, "k:", lw=1, label=f"Gaussian, σ = {sd:.2f}")
    ax.set(yscale="log", ylim=(0.5, 3e5), xlabel="value", ylabel="count (log)")
    ax.set_title("distribution of all values")
    ax.legend(fontsize=8)
    fig.text(0.01, -0.02, "computed here by golden.wht", fontsize=7, color="0.35")
    return fig


def plot_quantization(groups, errs, bits=4):
    """Left: each group's relative error against its max/rms at `bits` (groups = {"keys":
    (max/rms, error), "after WHT": (max/rms, error)}), with the uniform quantizer's estimate;
    right: the keys' relative error against bits, with and without the rotation (errs =
    {bits: (plain, rotated)})."""
    import matplotlib.pyplot as plt

    levels = ((1 << bits) - 1) / 2
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.5, 3.7))
    for (label, (mr, er)), c in zip(groups.items(), ("tab:orange", "tab:blue")):
        a1.scatter(mr, er, s=2, alpha=0.3, label=label, color=c)
    m = np.linspace(1, 4, 50)
    a1.plot(m, m / (levels * np.sqrt(12)), "k--", lw=1, label=f"max/rms / ({levels}·√12)")
    a1.set(xlabel="group max/rms (16 values)", ylabel="group rms error / group rms")
    a1.set_title(f"{bits}-bit: a group's error follows its max/rms", fontsize=10)
    a1.legend(fontsize=8, markerscale=4)
    b = np.array(sorted(errs))
    a2.semilogy(b, [errs[k][0] for k in b], "o-", color="tab:orange", label="quantize the keys")
    a2.semilogy(b, [errs[k][1] for k in b], "s--", color="tab:blue", label="WHT, quantize, back")
    a2.set_xticks(b)
    a2.set(xlabel="bits per value", ylabel="relative error of the keys")
    a2.set_title("turbo-n quantizer on the keys", fontsize=10)
    a2.legend(fontsize=8)
    fig.text(0.01, -0.02, "computed here by golden.turbo_quantize", fontsize=7, color="0.35")
    fig.tight_layout()
    return fig


def plot_wht_errors(sizes, curves, strip, source, strip_n=256):
    """Left: relative error against n (CPU ways as wide pale lines, GPU rungs as markers on
    top, so identical ones stay visible); right: error_strip of the elements at strip_n."""
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.9), gridspec_kw=dict(width_ratios=[5, 4]))
    marks = [dict(marker="o", ms=9, mfc="none"), dict(marker="x", ms=7), dict(marker="+", ms=9)]
    n_gpu = 0
    for label, v in curves.items():
        style = dict(lw=4, alpha=0.45)
        if label.startswith("GPU"):
            style = dict(ls="none", **marks[n_gpu % len(marks)])
            n_gpu += 1
        a1.plot(sizes, v, label=label, **style)
    a1.plot(sizes, np.log2(sizes) / 2 * 2.0**-24, "k:", lw=1, label="log2(n)/2 · 2⁻²⁴")
    a1.set(xscale="log", yscale="log", xlabel="n", ylabel="‖out − float64‖ / ‖float64‖")
    a1.set_xscale("log", base=2)
    a1.set_title("error against the float64 truth, by n", fontsize=10)
    a1.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.2), ncol=2)
    error_strip(a2, strip, f"n = {strip_n}, every element: golden and GPU side by side")
    fig.tight_layout()
    source_below(fig, a1, f"CPU rows computed here; GPU rows {source}")
    return fig


def print_recorded_errors(recs):
    """Each rung's recorded error (rel_err, norm-wise against golden) at each of the bench's
    sizes."""
    print("no GPU here; " + recs.source)
    for r in sorted(recs.runs, key=lambda r: (r["bytes"], r["rung"])):
        sh = r["shape"]
        print(
            f"  rows {sh['rows']:>6} × n {sh['n']}  rung {r['rung']}: {r['kernel']:<14}"
            f"  rel_err {r['rel_err']:.1e}"
        )


def work_ratio(ladder):
    """v0's additions per row (n²) against the butterfly's (n log2 n), beside the measured time
    ratio of rung 0 to rung 1 at each recorded size."""
    by = {}
    for r in ladder.runs:
        by.setdefault((r["shape"]["rows"], r["shape"]["n"]), {})[r["rung"]] = r["median_us"]
    for (rows, n), t in sorted(by.items()):
        work = n / np.log2(n)
        timed = f"{t[0] / t[1]:.0f}x" if 0 in t and 1 in t else "not both recorded"
        print(
            f"rows {rows:>6}, n {n}: v0 does {work:.0f}x the additions; it takes {timed} v1's time"
        )
