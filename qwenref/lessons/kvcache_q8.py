"""Drawings and printouts of notebooks/04_kvcache_q8.ipynb (the Q8_0 cache): figure notes and
readable log axes, the bound and float16-share figures, the layout drawing, the attention-error
figure, kernel excerpt slices, the recorded bit-exactness check, and error and timing tables
read from records. What the figures show is computed in the notebook. Notebook 05 reuses the
generic ones (figure notes, excerpt slices, record tables) and, through this module, the
library's cache measurements it shares with 04 (nbutil: float64 attention, the dense config,
golden's stored error, the rungs' live errors). Nothing here is on the decode path."""

from __future__ import annotations

import numpy as np

from .. import excerpts, nbutil
from ..nbutil import attn64, dense_cfg, golden_errors, print_live_errors

__all__ = [
    "GOLDEN_NOTE",
    "note",
    "readable_log",
    "tidy_ladder",
    "legend_outside",
    "plot_bound_ratio",
    "plot_float16_share",
    "draw_layouts",
    "print_attention_errors",
    "plot_attention_errors",
    "show_lines",
    "print_recorded_bit_exact",
    "print_recorded_errors",
    "print_takeaway_times",
    "print_attention_speed",
    # from the library (nbutil), for notebook 05 and lessons.kvcache_turbo
    "attn64",
    "dense_cfg",
    "golden_errors",
    "print_live_errors",
]

GOLDEN_NOTE = "data: golden model (numpy), computed on this machine's CPU"


def note(ax, text=GOLDEN_NOTE):
    """Say under a figure where its data came from: a grey line below the x label of ax (the
    lowest axes of the figure), left-aligned with the figure."""
    ax.annotate(
        text,
        xy=(0.01, 0),
        xycoords=("figure fraction", ax.xaxis.label),
        xytext=(0, -4),
        textcoords="offset points",
        ha="left",
        va="top",
        fontsize=7,
        color="0.35",
    )


def readable_log(axis, fmt=None):
    """Label a log axis at 1-2-5 steps with plain numbers (fmt: value -> text), no crowded
    minor labels."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: (fmt or "{:g}".format)(v)))
    axis.set_minor_formatter(NullFormatter())


def _bytes_text(v):
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if v >= size:
            return f"{v / size:g} {unit}"
    return f"{v:g} B"


def tidy_ladder(ax):
    """After nbutil.plot_ladder: label both log axes readably, and widen the x range to at
    least a decade (one recorded size would leave it without a tick label)."""
    lo, hi = ax.get_xlim()
    mid = np.sqrt(lo * hi)
    ax.set_xlim(min(lo, mid / 10**0.5), max(hi, mid * 10**0.5))
    readable_log(ax.xaxis, _bytes_text)
    readable_log(ax.yaxis)
    return ax


def legend_outside(ax, **kw):
    """A legend right of the axes, never over the data."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, **kw)


# ---- figures -------------------------------------------------------------------------------
def plot_bound_ratio(ratio):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.0))
    ax.hist(ratio.ravel(), bins=np.linspace(0, 1.05, 106), color="tab:blue", label="elements")
    ax.axvline(1, color="k", ls="--", lw=1, label="the bound (err ≤ bound:\nequality allowed)")
    ax.set_yscale("log")
    ax.set_xlabel("|x − q·d| / (d32/2 + 127·|d32 − d|)")
    ax.set_ylabel("elements (log)")
    ax.set_title(f"Q8_0 error relative to its bound ({ratio.size:,} elements)", fontsize=9)
    legend_outside(ax)
    note(ax, GOLDEN_NOTE + "; stress_groups(seed=1)")
    return fig


def plot_float16_share(amax, share):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.0))
    ax.scatter(amax, np.maximum(share, 1e-7), s=1, alpha=0.3, label="one group")
    ax.axvline(127 * 2.0**-14, color="k", ls="--", lw=1, label="scale becomes\nfloat16 subnormal")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("group amax")
    ax.set_ylabel("float16 term / group MSE")
    ax.set_title("share of each group's error due to storing the scale in float16", fontsize=9)
    legend_outside(ax, markerscale=6)
    note(ax, GOLDEN_NOTE + "; shares below 1e-7 drawn at 1e-7")
    return fig


# ---- the layout ----------------------------------------------------------------------------
def _strip(ax, order, read, title, label_heads):
    import matplotlib.pyplot as plt

    colors = plt.cm.tab10(np.arange(10))
    for addr, (g, t) in enumerate(order):
        hit = (g, t) in read
        ax.add_patch(
            plt.Rectangle(
                (addr, 0),
                1,
                1,
                facecolor=colors[g],
                alpha=0.9 if hit else 0.25,
                edgecolor="k" if hit else "w",
                lw=1.2 if hit else 0.5,
            )
        )
        if t % 4 == 0 and g in label_heads:
            ax.text(addr + 0.5, -0.35, f"t{t}", ha="center", va="center", fontsize=7)
    ax.set_xlim(0, len(order))
    ax.set_ylim(-0.7, 1.1)
    ax.set_yticks([])
    ax.set_xlabel("memory address (one cell = one token's hd codes of one kv head)", fontsize=8)
    ax.set_title(title, fontsize=9)


def draw_layouts(nkv=4, T=16, head=2, t0=4, t1=12):
    """Head-major against token-major: the rows one split-T block reads, in address order."""
    import matplotlib.pyplot as plt

    read = {(head, t) for t in range(t0, t1)}
    fig, axes = plt.subplots(2, 1, figsize=(10, 2.9))
    hm = [(g, t) for g in range(nkv) for t in range(T)]
    tm = [(g, t) for t in range(T) for g in range(nkv)]
    _strip(
        axes[0],
        hm,
        read,
        f"head-major [nkv, max_t, hd]: head {head}, tokens {t0}..{t1 - 1} is one contiguous run",
        range(nkv),
    )
    _strip(
        axes[1], tm, read, f"token-major [max_t, nkv, hd]: the same read is {t1 - t0} pieces", (0,)
    )
    handles = [plt.Rectangle((0, 0), 1, 1, color=plt.cm.tab10(g)) for g in range(nkv)]
    fig.legend(
        handles,
        [f"kv head {g}" for g in range(nkv)],
        loc="center left",
        fontsize=7,
        bbox_to_anchor=(1.0, 0.5),
    )
    fig.tight_layout()
    note(axes[1], "a drawing of the layout (no measured data)")
    return fig


# ---- what q8 does to attention -------------------------------------------------------------
def print_attention_errors(Ts, n_eff, errs):
    """A table: per context length T, N_eff and each case's relative error."""
    print(f"{'T':>6}{'N_eff':>7}" + "".join(f"{n:>15}" for n in errs))
    for i, T in enumerate(Ts):
        print(f"{T:6d}{n_eff[i]:7.1f}" + "".join(f"{errs[n][i]:15.2e}" for n in errs))


def plot_attention_errors(Ts, errs):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.3))
    styles = {
        "bf16 cache": "C1-o",
        "q8 cache": "C0-o",
        "q8 K, exact V": "C2--^",
        "exact K, q8 V": "C3--v",
    }
    for name, e in errs.items():
        ax.plot(Ts, e, styles.get(name, "-o"), ms=4, label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context length T (tokens)")
    ax.set_ylabel("‖out − out₆₄‖ / ‖out₆₄‖")
    readable_log(ax.yaxis)
    from matplotlib.ticker import LogLocator

    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))  # bf16 sits low
    ax.set_title("attention output error by cache kind (Qwen3.5-27B shape)", fontsize=9)
    legend_outside(ax)
    note(ax, GOLDEN_NOTE + "; attention_by_cache(seed=3), 3 query rows × 24 heads")
    return fig


# ---- kernel excerpts -----------------------------------------------------------------------
def show_lines(file, name, first, last):
    """Show the lines of one definition from the first containing `first` through the next one
    containing `last` (the part of a rung that changed), dedented."""
    excerpts.show_kernel_lines(file, name, first, last, dedent=True)


# ---- errors and timing, from records ------------------------------------------------------
def print_recorded_bit_exact(st):
    """The bench's recorded check of the stored bytes against golden, run by run."""
    print("no GPU here; the check runs live on a GPU (and in tests/test_gpu_kvcache.py).")
    print(st.source)
    for r in st.runs:
        print(
            f"{r['kernel']:<20} {str(r['shape']):<55} stored bytes equal to golden: "
            f"{100 * r.get('code_match', float('nan')):.4f}%"
        )


def _shape_text(r):
    sh = r.get("shape", {})
    return ", ".join(f"{k}={sh[k]}" for k in ("nb", "kind") if k in sh)


def print_recorded_errors(recs, golden_err):
    """Side by side per recorded run: golden vs float64 (measured here, bench-like input), GPU
    vs golden (the bench's rel_err and its recorded samples)."""
    print(recs.source)
    print(f"golden vs float64 input, here: {golden_err:.2e} (rel.)")
    for r in sorted(recs.runs, key=lambda r: (r.get("bytes", 0), r.get("rung", 0))):
        g, m = nbutil.run_samples(r)
        smp = "no samples recorded"
        if g is not None:
            diff = np.abs(g.astype(np.float64) - m)
            smp = f"{int((diff > 0).sum())} of {g.size} samples differ, max |Δ| {diff.max():.1e}"
        print(
            f"rung {r.get('rung')} {r['kernel']:<22} {_shape_text(r):<18} GPU vs golden: "
            f"rel {r.get('rel_err', float('nan')):.1e}; {smp}"
        )


def print_takeaway_times(recs):
    """Per size of the records: the fastest rung, its µs, GB/s, % of copy and × rung 0."""
    print(recs.source)
    timed = [r for r in recs.runs if r.get("median_us")]
    if not timed:
        print("no timed runs: nothing to quote")
        return
    for r in sorted(nbutil.best_rungs(recs).values(), key=lambda r: r.get("bytes", 0)):
        v0 = [x for x in timed if x.get("rung") == 0 and x.get("shape") == r.get("shape")]
        speed = f", {v0[0]['median_us'] / r['median_us']:.1f}× rung 0" if v0 else ""
        print(
            f"{_shape_text(r)}: {r['kernel']} {r['median_us']:.1f} µs for "
            f"{r['bytes'] / 1e6:.1f} MB = {r['gbps']:.0f} GB/s, "
            f"{r['pct_of_copy']:.0f}% of copy{speed}"
        )


def print_attention_speed(recs):
    """Per T of the attention records: bf16's fastest rung against q8 on the same CUDA-core
    split-T rung and q8's fastest rung; a ratio below 1 means q8 is slower."""
    print(recs.source)
    runs = [r for r in recs.runs if r.get("median_us") and r["shape"].get("kind") in ("bf16", "q8")]
    if not runs:
        print("no attention runs recorded: nothing to compare")
        return
    for T in sorted({r["shape"]["T"] for r in runs}):
        at = [r for r in runs if r["shape"]["T"] == T]
        bf = [r for r in at if r["shape"]["kind"] == "bf16"]
        q8 = {r["rung"]: r for r in at if r["shape"]["kind"] == "q8"}
        if not bf or not q8:
            continue
        b = min(bf, key=lambda r: r["median_us"])
        line = f"T={T:>6}: bf16 {b['kernel']} {b['median_us']:.1f} µs"
        for r in (q8.get(b["rung"]), min(q8.values(), key=lambda r: r["median_us"])):
            if r is not None and r["kernel"] not in line:
                line += f"; q8 {r['kernel']} {r['median_us']:.1f} µs = "
                line += f"{b['median_us'] / r['median_us']:.2f}× bf16's speed"
        print(line)
