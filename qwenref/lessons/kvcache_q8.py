"""Drawings and printouts of notebooks/04_kvcache_q8.ipynb (the Q8_0 cache): the bound and
float16-share figures, the layout drawing, the attention-error figure and table, kernel excerpt
slices, the recorded bit-exactness check and the attention speed read from records. What the
figures show is computed in the notebook. The figure notes, log axes and the error and timing
tables it shares with notebook 05 come from lessons.common. Nothing here is on the decode path."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .common import (
    GOLDEN_NOTE,
    note,
    plot_gpu_vs_golden,
    print_recorded_errors,
    print_takeaway_times,
    readable_log,
    side_legend,
    tidy_ladder,
)

__all__ = [
    "plot_bound_ratio",
    "plot_float16_share",
    "draw_layouts",
    "print_attention_errors",
    "plot_attention_errors",
    "print_recorded_bit_exact",
    "print_attention_speed",
    # from lessons.common, shared with notebook 05
    "plot_gpu_vs_golden",
    "tidy_ladder",
    "print_recorded_errors",
    "print_takeaway_times",
]


# ---- figures -------------------------------------------------------------------------------
def plot_bound_ratio(ratio):
    fig, ax = plt.subplots(figsize=(6.5, 3.0))
    ax.hist(ratio.ravel(), bins=np.linspace(0, 1.05, 106), color="tab:blue", label="elements")
    ax.axvline(1, color="k", ls="--", lw=1, label="the bound (err ≤ bound:\nequality allowed)")
    ax.set_yscale("log")
    ax.set_xlabel("|x − q·d| / (d32/2 + 127·|d32 − d|)")
    ax.set_ylabel("elements (log)")
    ax.set_title(f"Q8_0 error relative to its bound ({ratio.size:,} elements)", fontsize=9)
    side_legend(ax)
    note(ax, GOLDEN_NOTE + "; stress_groups(seed=1)")
    return fig


def plot_float16_share(amax, share):
    fig, ax = plt.subplots(figsize=(6.5, 3.0))
    ax.scatter(amax, np.maximum(share, 1e-7), s=1, alpha=0.3, label="one group")
    ax.axvline(127 * 2.0**-14, color="k", ls="--", lw=1, label="scale becomes\nfloat16 subnormal")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("group amax")
    ax.set_ylabel("float16 term / group MSE")
    ax.set_title("share of each group's error due to storing the scale in float16", fontsize=9)
    ax.legend(
        fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, markerscale=6
    )
    note(ax, GOLDEN_NOTE + "; shares below 1e-7 drawn at 1e-7")
    return fig


# ---- the layout ----------------------------------------------------------------------------
def _strip(ax, order, read, title, label_heads):
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
    side_legend(ax)
    note(ax, GOLDEN_NOTE + "; attention_by_cache(seed=3), 3 query rows × 24 heads")
    return fig


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


def print_attention_speed(recs):
    """Per T of the attention records: bf16's fastest rung against q8 on that same rung (v1 in
    the H200 records) and q8's fastest rung; a ratio below 1 means q8 is slower."""
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
