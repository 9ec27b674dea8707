"""Drawings of notebooks/05_kvcache_turbo.ipynb (turbo-n: a WHT, then 2-8 bits; and tq-b): the
quantizer's staircase and bit layout, the rotation knob, the bits and key-or-value experiments,
the tq-b figures, the GPU's stored values against golden's. What they show is computed in the
notebook; what it shares with 04 (figure notes, record printouts) comes from lessons.common."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import NullFormatter

from .common import GOLDEN_NOTE, note, readable_log, side_legend
from .common import plot_gpu_vs_golden as plot_gpu_vs_golden  # these five re-exported for the
from .common import print_decode_kinds as print_decode_kinds  # notebook, as notebook 04 uses
from .common import print_recorded_errors as print_recorded_errors  # them
from .common import print_takeaway_times as print_takeaway_times
from .common import tidy_ladder as tidy_ladder

__all__ = """
    plot_staircase draw_bit_layout plot_quant_error plot_bits_experiment plot_kv_sweep
    plot_rotation_probes plot_codebooks plot_rate_distortion plot_kinds_in_attention
    plot_gpu_vs_golden print_decode_kinds print_recorded_errors print_takeaway_times tidy_ladder
""".split()


def _finish(fig, legend_ax, note_ax, source):
    """A legend beside legend_ax, the layout tightened, then where the data came from."""
    side_legend(legend_ax)
    fig.tight_layout()
    note(note_ax, source)
    return fig


# ---- the format ----------------------------------------------------------------------------
def plot_staircase(y, stairs):
    """stairs {n: ŷ}: y (one group whose amax is 1) quantized to n bits and read back."""
    fig, axes = plt.subplots(1, len(stairs), figsize=(10, 3.0))
    for ax, (n, yh) in zip(axes, stairs.items()):
        L = (2**n - 1) / 2
        ax.plot(y, yh, label="dequantized")
        ax.plot(y, y, "k:", lw=0.8, label="identity")
        ax.grid(alpha=0.3)
        ax.set_yticks((np.arange(2**n) - L) / L, [f"{(c - L) / L:+.2f}" for c in range(2**n)])
        ax.set(xlabel="y / amax", ylabel="ŷ / amax")
        ax.set_title(f"turbo{n} ({2**n} levels): (c − {L:g})·d, d = amax/{L:g}", fontsize=9)
    return _finish(fig, axes[-1], axes[0], GOLDEN_NOTE + "; golden.turbo_quantize / dequantize")


def draw_bit_layout(codes, n):
    """The 16 codes of one group as the little-endian bit stream they are packed into."""
    stream = [(int(codes[i]) >> j) & 1 for i in range(16) for j in range(n)]
    fig, ax = plt.subplots(figsize=(11, 2.0))
    for k, bit in enumerate(stream):
        color = plt.cm.tab20(k // n % 20)
        ax.add_patch(plt.Rectangle((k, 0), 1, 1, facecolor=color, edgecolor="w"))
        ax.text(k + 0.5, 0.5, str(bit), ha="center", va="center", fontsize=8)
    for i in range(16):
        ax.text(n * i + n / 2, 1.15 + 0.3 * (i % 2), f"c{i}={codes[i]}", ha="center", fontsize=8)
    for b in range(2 * n + 1):
        ax.vlines(8 * b, -0.6, 1.05, color="k", lw=2)  # below the code labels
        if b < 2 * n:
            ax.text(8 * b + 4, -0.45, f"byte {b} (bits 0→7)", ha="center", fontsize=8)
    ax.set(xlim=(0, 16 * n), ylim=(-0.8, 1.8))
    ax.axis("off")
    title = f"turbo{n} group: 16 codes × {n} bits in {2 * n} bytes, least significant bit first"
    ax.set_title(title + " (thick lines: byte boundaries)", fontsize=9)
    fig.text(0.01, 0.0, GOLDEN_NOTE + "; golden.turbo_pack", fontsize=7, color="0.35")
    return fig


def plot_quant_error(results):
    """One row per result of the notebook's quant_error: left, row 0 as the quantizer sees it
    (rotated or raw) and its dequantized values, groups of 16 between dotted lines; right, the
    rms error per channel over the rows, in the raw basis, the outlier channels marked."""
    fig, axes = plt.subplots(len(results), 2, figsize=(11, 2.7 * len(results)), squeeze=False)
    for (a, b), r in zip(axes, results):
        ch, out = np.arange(r["seen"].size), r["channels"]
        how = "WHT first" if r["rotate"] else "no rotation"
        h = a.plot(ch, r["seen"], ".", ms=3, color="0.5", label="value (row 0)")
        h += a.plot(ch, r["seen_hat"], "_", ms=4, color="C3", label="dequantized")
        for g in range(16, ch.size, 16):
            a.axvline(g, color="0.85", lw=0.6, ls=":")
        ylabel = "rotated value" if r["rotate"] else "raw value"
        a.set(xlabel="coordinate (groups of 16 between dotted lines)", ylabel=ylabel)
        a.set_title(f"turbo{r['bits']}, {how}: what is quantized (row 0)", fontsize=9)
        h += b.semilogy(ch, np.maximum(r["rms"], 1e-4), color="C0", lw=0.8, label="rms error")
        label = f"outlier channels (×{r['outlier']:g})"
        h += b.semilogy(out, np.maximum(r["rms"][out], 1e-4), "rv", ms=5, label=label)
        # the same y scale for every setting of the knobs
        b.set(ylim=(1e-4, 30), xlabel="channel (raw basis)", ylabel="rms error over 64 rows")
        b.set_title(f"turbo{r['bits']}, {how}: relative MSE {r['rel_mse']:.2e}", fontsize=9)
        b.legend(handles=h, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    fig.tight_layout()
    note(axes[-1, 0], GOLDEN_NOTE + "; quant_error(seed=11) of section 4")
    return fig


# ---- bits, rotation, and which side the error comes from ------------------------------------
def plot_bits_experiment(mse, att, bits):
    """mse, att {(key set, kind, rotated): x} against bits {kind: bits per value}: the turbo
    kinds with and without the WHT as lines, q8 and bf16 as hollow squares."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    turbo = [k for k in bits if k.startswith("turbo")]
    xb = [bits[k] for k in turbo]
    panels = ((axes[0], mse, "key relative MSE"), (axes[1], att, "attention rel. error"))
    for ax, tab, ylabel in panels:
        for color, name in zip(("C0", "C3"), dict.fromkeys(k[0] for k in mse)):
            for rot, style, how in ((True, "-o", "WHT"), (False, "--x", "no rotation")):
                ys = [tab[name, k, rot] for k in turbo]
                ax.plot(xb, ys, style, color=color, label=f"{name}, {how}")
            ys = [tab[name, "q8", True], tab[name, "bf16", True]]
            label = f"{name}: q8 ({bits['q8']:g}), bf16 ({bits['bf16']:g})"
            ax.plot([bits["q8"], bits["bf16"]], ys, "s", color=color, mfc="none", label=label)
        ax.set(yscale="log", xlabel="bits per value (scales included)", ylabel=ylabel)
        ax.grid(alpha=0.3, which="both")
    slope = [5.0 * 4.0 ** -(b - 3) for b in xb]  # drawn above the data, for its slope
    axes[0].plot(xb, slope, ":", color="0.5", lw=1, label="slope 4^-n (6 dB per bit)")
    xy = (bits["bf16"], mse["outlier keys", "bf16", True])
    kw = dict(xytext=(-8, 10), textcoords="offset points", ha="right", fontsize=7)
    axes[0].annotate("bf16: both key sets\n(the same value)", xy, **kw)
    axes[0].set_title("what the stored keys lose (turbo8 .. turbo2 from the right)", fontsize=9)
    axes[1].set_title("what attention loses (T = 512, score std 2.5)", fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 0.95))
    fig.tight_layout()
    note(axes[0], GOLDEN_NOTE + "; key_sets(seed=1), queries(seed=2)")
    return fig


def plot_kv_sweep(score_stds, cases):
    fig, ax = plt.subplots(figsize=(8.8, 3.2))
    for (name, e), style in zip(cases.items(), ("C0-o", "C3--^", "C2-s")):
        label = name + (" (≈ exact K, turbo V)" if name.startswith("bf16k") else "")
        ax.plot(score_stds, e, style, ms=5, label=label)
    ax.set(xscale="log", yscale="log", xlabel="score std (spread of q·k/√hd over the tokens)")
    ax.set_xticks(score_stds, [f"{s:g}" for s in score_stds])
    ax.xaxis.set_minor_formatter(NullFormatter())
    readable_log(ax.yaxis)
    ax.set_ylabel("attention rel. error")
    ax.set_title("which side's error attention feels (outlier keys, T = 512)", fontsize=9)
    return _finish(fig, ax, ax, GOLDEN_NOTE + "; key_sets(seed=1), queries(seed=2)")


# ---- tq-b: TurboQuant's quantizer as a cache kind ------------------------------------------
def plot_rotation_probes(seen):
    """seen {probe name: (√hd·wht(x), √hd·wht(s ⊙ x))}: each probe's coordinates after the
    plain WHT and after the signed one, as histograms over N(0, 1)."""
    fig, axes = plt.subplots(1, len(seen), figsize=(11, 2.7), sharey=True)
    zz, kw = np.linspace(-4, 4, 200), dict(bins=np.linspace(-4.2, 4.2, 43), density=True)
    pdf = np.exp(-zz * zz / 2) / np.sqrt(2 * np.pi)  # N(0, 1)
    for ax, (name, (y_fixed, y_signed)) in zip(axes, seen.items()):
        ax.hist(np.clip(y_fixed, -4.1, 4.1), alpha=0.5, label="√hd · WHT(x)", **kw)
        signed = "√hd · WHT(s ⊙ x), s = tq_signs"
        ax.hist(np.clip(y_signed, -4.1, 4.1), histtype="step", lw=1.5, label=signed, **kw)
        ax.plot(zz, pdf, "k:", lw=1, label="N(0, 1)")
        top = float(np.abs(y_fixed).max())
        if top > 4.1:  # a spike the clipped axis cannot show
            arrow = dict(arrowstyle="->")
            ax.annotate(f"1 value at {top:.0f}", (4.1, 0.02), (0.8, 1.5), arrowprops=arrow, size=8)
        ax.set_title(f"{name}: max|√hd·WHT(x)| = {top:.1f}", fontsize=9)
        ax.set_xlabel("coordinate × √hd (clipped at ±4.1)")
    axes[0].set_ylabel("density")
    return _finish(fig, axes[-1], axes[0], GOLDEN_NOTE + "; golden.wht, golden.wht_signed")


def plot_codebooks(u, u_raw, codebooks):
    """Left: the unit-rms coordinates of the vectors without rotation (log density). Then one
    panel per codebook {bits: levels}: the histogram of the rotated coordinates u, N(0, 1),
    the levels (red) and the cell edges between them (grey)."""
    fig, axes = plt.subplots(1, 1 + len(codebooks), figsize=(12, 2.9))
    zz = np.linspace(-4.5, 4.5, 300)
    pdf = np.exp(-zz * zz / 2) / np.sqrt(2 * np.pi)  # N(0, 1)
    lim = float(np.abs(u_raw).max()) * 1.05
    axes[0].hist(u_raw.ravel(), bins=np.linspace(-lim, lim, 121), density=True, color="0.6")
    axes[0].set(yscale="log", xlabel="coordinate", ylabel="density")
    axes[0].set_title("without rotation: x·√hd/‖x‖", fontsize=9)
    for ax, (b, cb) in zip(axes[1:], codebooks.items()):
        ax.hist(u.ravel(), bins=np.linspace(-4.5, 4.5, 91), density=True, alpha=0.45, label="u")
        ax.plot(zz, pdf, "k:", lw=1, label="N(0, 1)")
        for t in (cb[1:] + cb[:-1]) / 2:
            ax.axvline(t, color="0.55", lw=0.7, ls="--")
        ax.plot(cb, np.zeros_like(cb), "rv", ms=6, clip_on=False, label="levels C")
        for c in cb:
            ax.axvline(c, color="C3", lw=0.9, alpha=0.7)
        ax.set(xlim=(-4.5, 4.5), ylim=(0, 0.5), xlabel="u (grey dashed: cell edges)")
        ax.set_title(f"tq{b}: {cb.size} levels over u = y·√hd/‖y‖", fontsize=9)
    return _finish(fig, axes[-1], axes[0], GOLDEN_NOTE + "; golden.tq_codebook, wht_signed")


def plot_rate_distortion(rd, d_lm, shannon_bits=(1, 9.2)):
    """One panel: relative MSE against bits per value with the scales counted. rd {kind: (bits,
    rel. MSE)} (turbo-n and tq-b kinds), d_lm {b: the normal's Lloyd–Max distortion at b bits},
    and the Shannon bound 4^-R of a normal source."""
    fig, ax = plt.subplots(figsize=(10.5, 3.8))
    r = np.linspace(*shannon_bits, 100)
    ax.plot(r, 4.0**-r, "k-", lw=1, label="Shannon bound 4^-R (normal source)")
    lm = "Lloyd–Max on N(0, 1), no scale (b bits)"
    ax.plot(list(d_lm), list(d_lm.values()), "kD", mfc="none", ms=6, label=lm)
    turbo = ("turbo", "C3-s", "turbo-n: groups of 16, f16 scale (n + 1 bits)")
    tq = ("tq", "C0-o", "tq-b: one codebook, one f16 γ (b + 16/hd bits)")
    for fam, style, lab in (turbo, tq):
        ax.plot(*zip(*sorted(v for k, v in rd.items() if k.startswith(fam))), style, label=lab)
    for k, (x, y) in rd.items():
        ax.annotate(k, (x, y), xytext=(5, 4), textcoords="offset points", fontsize=7)
    ax.set(yscale="log", xlabel="bits per value, scales counted (hd = head_dim = 256)")
    ax.set_ylabel("relative MSE ‖x̂ − x‖² / ‖x‖²")
    ax.set_title("rate–distortion at equal storage (1024 vectors, 4 channels ×10)", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    return _finish(fig, ax, ax, GOLDEN_NOTE + "; golden.tq_quantize, golden.turbo_quantize")


def plot_kinds_in_attention(bits, err, weights, threshold=0.5, exact=0.75):
    """Left: attention output rel. error per cache kind against its bits per value ({kind: x}),
    the turbo and tq kinds joined by lines. Right: each needle's softmax weight per kind (one
    dot per needle query), the share above threshold written over each kind."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 3.8), gridspec_kw=dict(width_ratios=[1, 1.3]))
    floor = 2e-3  # below: drawn on the bottom edge, its value written (f32: rounding only)
    for fam, style in (("turbo", "C3-s"), ("tq", "C0-o")):
        ks = sorted((k for k in err if k.startswith(fam)), key=bits.get)
        a.plot([bits[k] for k in ks], [err[k] for k in ks], style, label=f"{fam} kinds")
    for k in err:
        y = max(err[k], floor)
        if not k.startswith(("turbo", "tq")):
            a.plot(bits[k], y, "k^" if err[k] >= floor else "kv", mfc="none", clip_on=False)
        text = k if err[k] >= floor else f"{k}: {err[k]:.0e}"
        off = (4, -10) if k.startswith("tq") else (4, 4)  # tq labels below their points
        a.annotate(text, (bits[k], y), xytext=off, textcoords="offset points", fontsize=7)
    a.set_xscale("log", base=2)
    a.set_xticks([2, 3, 4, 5, 8, 16, 32], ["2", "3", "4", "5", "8", "16", "32"])
    a.set(yscale="log", ylim=(floor, 2), xlabel="bits per value, scales counted")
    a.set_ylabel("attention output rel. error")
    a.set_title("attention error per kind (score std 2.5, T = 512)", fontsize=9)
    a.grid(alpha=0.3, which="both")
    a.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0, 0.08))
    kinds = list(weights)
    jitter = np.random.default_rng(0).uniform(-0.25, 0.25, len(weights[kinds[0]]))
    for i, k in enumerate(kinds):
        w = np.asarray(weights[k])
        color = "C0" if k.startswith("tq") else "C3" if k.startswith("turbo") else "0.3"
        b.plot(i + jitter, w, ".", ms=3, color=color)
        b.text(i, 1.02, f"{np.mean(w > threshold):.0%}", ha="center", fontsize=7)
    b.axhline(threshold, color="k", lw=0.8, ls="--", label=f"recall: weight > {threshold:g}")
    b.axhline(exact, color="0.5", lw=0.8, ls=":", label=f"exact keys: {exact:g}")
    b.set_xticks(range(len(kinds)), kinds, rotation=45, fontsize=8)
    b.set(ylim=(0, 1.1), ylabel="softmax weight on the needle")
    b.set_title("needle recall per kind (share above the dashed line on top)", fontsize=9)
    return _finish(fig, b, a, GOLDEN_NOTE + "; golden.KVCache, golden.decode_attention")
