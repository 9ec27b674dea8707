"""Helpers of notebooks/05_kvcache_turbo.ipynb (the turbo-n cache: a WHT rotation, then 2-8 bits):
the format's figures, the quantization-error knob, the bits / rotation / key-or-value
experiments, the figures of the tq-b section (what they show is computed in the notebook), the
float32-rotation emulation, the append's timing read from records, and the exercises'
checkers. Generic helpers come from kvcache_q8."""

from __future__ import annotations

import math

import numpy as np

from .. import golden
from ..nbutil import relerr
from .kvcache_q8 import GOLDEN_NOTE, attn64, legend_outside, note, readable_log

__all__ = [
    "plot_staircase",
    "draw_bit_layout",
    "quant_error",
    "plot_quant_error",
    "error_knob",
    "static_error_figure",
    "KIND_BITS",
    "key_sets",
    "queries",
    "side_roundtrip",
    "bits_experiment",
    "plot_bits_experiment",
    "kv_sweep",
    "plot_kv_sweep",
    "plot_rotation_probes",
    "plot_codebooks",
    "plot_rate_distortion",
    "plot_kinds_in_attention",
    "wht_f32_kernel_order",
    "code_disagreements",
    "gpu_rotation_check",
    "print_append_gap",
]

# bits per value with the scales counted, per cache kind (both sides the same kind)
KIND_BITS = {"bf16": 16, "q8": 8.5, "turbo8": 9, "turbo4": 5, "turbo3": 4, "turbo2": 3}


# ---- the format ----------------------------------------------------------------------------
def plot_staircase(widths=(2, 3)):
    """The mid-rise quantizer of one group whose amax is 1: dequantized against input."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(widths), figsize=(10, 3.0))
    y = np.linspace(-1, 1, 2001, dtype=np.float32)
    for ax, n in zip(axes, widths):
        g = np.zeros((y.size, 16), np.float32)  # one group per value of y: y, and a 1 (amax)
        g[:, 0], g[:, 1] = y, 1.0
        yh = golden.turbo_dequantize(*golden.turbo_quantize(g, n), n)[:, 0]
        L = (2**n - 1) / 2
        ax.plot(y, yh, label=f"dequantized ({2**n} levels)")
        ax.plot(y, y, "k:", lw=0.8, label="identity")
        ax.set_yticks((np.arange(2**n) - L) / L, [f"{(c - L) / L:+.2f}" for c in range(2**n)])
        ax.grid(alpha=0.3)
        ax.set_xlabel("y / amax")
        ax.set_ylabel("ŷ / amax")
        ax.set_title(f"turbo{n}: levels (c − {L:g})·d, d = amax/{L:g}", fontsize=9)
    legend_outside(axes[-1])
    fig.tight_layout()
    note(axes[0], GOLDEN_NOTE + "; golden.turbo_quantize / turbo_dequantize")
    return fig


def draw_bit_layout(codes, n):
    """The 16 codes of one group as the little-endian bit stream they are packed into."""
    import matplotlib.pyplot as plt

    stream = [(int(codes[i]) >> j) & 1 for i in range(16) for j in range(n)]
    fig, ax = plt.subplots(figsize=(11, 2.0))
    for k, bit in enumerate(stream):
        i = k // n
        ax.add_patch(plt.Rectangle((k, 0), 1, 1, facecolor=plt.cm.tab20(i % 20), edgecolor="w"))
        ax.text(k + 0.5, 0.5, str(bit), ha="center", va="center", fontsize=8)
    for i in range(16):
        ax.text(n * i + n / 2, 1.15 + 0.3 * (i % 2), f"c{i}={codes[i]}", ha="center", fontsize=8)
    for b in range(2 * n + 1):
        ax.vlines(8 * b, -0.6, 1.05, color="k", lw=2)  # below the code labels
        if b < 2 * n:
            ax.text(8 * b + 4, -0.45, f"byte {b} (bits 0→7)", ha="center", fontsize=8)
    ax.set_xlim(0, 16 * n)
    ax.set_ylim(-0.8, 1.8)
    ax.axis("off")
    ax.set_title(
        f"turbo{n} group: 16 codes × {n} bits in {2 * n} bytes, least significant bit first "
        "(thick lines: byte boundaries)",
        fontsize=9,
    )
    fig.text(0.01, 0.0, GOLDEN_NOTE + "; golden.turbo_pack", fontsize=7, color="0.35")
    return fig


# ---- the knob: quantization error with and without the rotation -----------------------------
def quant_error(bits, rotate, outlier, rows=64, hd=256, seed=11):
    """Key rows with log-normal channel scales and 4 channels × outlier, quantized to turbo-bits
    (rotate: the WHT first, as the cache does; else the raw rows, the ablation) and read back
    in the raw basis. -> dict(x, seen (what the quantizer saw), seen_hat, x_hat, rms per
    channel, rel_mse, channels (the outlier ones))."""
    rng = np.random.default_rng(seed)
    ch = np.exp(0.5 * rng.standard_normal(hd))
    out = np.sort(rng.choice(hd, 4, replace=False))
    ch[out] *= outlier
    x = (rng.standard_normal((rows, hd)) * ch).astype(np.float32)
    seen = golden.wht(x) if rotate else x
    seen_hat = golden.turbo_dequantize(*golden.turbo_quantize(seen, bits), bits)
    x_hat = golden.wht(seen_hat) if rotate else seen_hat
    e = x_hat.astype(np.float64) - x
    rel_mse = float((e**2).sum() / (x.astype(np.float64) ** 2).sum())
    return dict(
        x=x,
        seen=seen,
        seen_hat=seen_hat,
        x_hat=x_hat,
        rms=np.sqrt((e**2).mean(0)),
        rel_mse=rel_mse,
        channels=out,
    )


def plot_quant_error(bits=3, rotate=True, outlier=20.0, axes=None):
    """Left: one row as the quantizer sees it (rotated or raw) and its dequantized values, the
    groups of 16 between dotted lines. Right: the rms error per channel over 64 rows, in the
    raw basis. Draws into two given axes, else into a new figure it shows (a slider callback:
    returns None)."""
    import matplotlib.pyplot as plt

    r = quant_error(bits, rotate, outlier)
    own = axes is None
    if own:
        fig, axes = plt.subplots(1, 2, figsize=(11, 2.9))
    a, b = axes
    ch = np.arange(r["x"].shape[1])
    (h1,) = a.plot(ch, r["seen"][0], ".", ms=3, color="0.5", label="value (row 0)")
    (h2,) = a.plot(ch, r["seen_hat"][0], "_", ms=4, color="C3", label="dequantized")
    for g in range(16, ch.size, 16):
        a.axvline(g, color="0.85", lw=0.6, ls=":")
    a.set_xlabel("coordinate (groups of 16 between dotted lines)")
    a.set_ylabel("rotated value" if rotate else "raw value")
    how = "WHT first" if rotate else "no rotation"
    a.set_title(f"turbo{bits}, {how}: what is quantized (row 0)", fontsize=9)
    (h3,) = b.semilogy(ch, np.maximum(r["rms"], 1e-4), color="C0", lw=0.8, label="rms error")
    (h4,) = b.semilogy(
        r["channels"],
        np.maximum(r["rms"][r["channels"]], 1e-4),
        "rv",
        ms=5,
        label=f"outlier channels (×{outlier:g})",
    )
    b.set_ylim(1e-4, 30)  # the same scale for every setting of the knobs
    b.set_xlabel("channel (raw basis)")
    b.set_ylabel("rms error over 64 rows")
    b.set_title(f"turbo{bits}, {how}: relative MSE {r['rel_mse']:.2e}", fontsize=9)
    legend_outside(b, handles=[h1, h2, h3, h4])
    if own:
        fig.tight_layout()
        note(a, GOLDEN_NOTE + "; lessons.kvcache_turbo.quant_error(seed=11)")
        plt.show()


def error_knob(bits=3, rotate=True, outlier=20.0):
    """The sliders' callback: plot_quant_error in a new figure."""
    plot_quant_error(bits, rotate, outlier)


def static_error_figure(bits=3, outlier=20.0):
    """plot_quant_error without and with the rotation, one above the other."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 5.4))
    for row, rotate in zip(axes, (False, True)):
        plot_quant_error(bits, rotate, outlier, axes=row)
    fig.tight_layout()
    note(axes[1, 0], GOLDEN_NOTE + "; lessons.kvcache_turbo.quant_error(seed=11)")
    return fig


# ---- bits, rotation, and which side the error comes from ------------------------------------
def key_sets(cfg, T=512, seed=1):
    """Keys [T, nkv, hd] with log-normal channel scales ("channel-scaled"), the same with 4
    channels × 20 ("outlier"), unit Gaussian values, and the outlier channels."""
    rng = np.random.default_rng(seed)
    hd = cfg.head_dim
    ch = np.exp(0.5 * rng.standard_normal(hd)).astype(np.float32)
    k_ch = (rng.standard_normal((T, cfg.nkv, hd)) * ch).astype(np.float32)
    out = np.sort(rng.choice(hd, 4, replace=False))
    k_out = k_ch.copy()
    k_out[..., out] *= 20
    v = rng.standard_normal((T, cfg.nkv, hd)).astype(np.float32)
    return {"channel-scaled keys": k_ch, "outlier keys": k_out}, v, out


def queries(k, nh, n=3, score_std=2.5, seed=2):
    """n query rows [n, nh, hd] scaled so q·k/√hd over the keys k [T, nkv, hd] of kv head 0 has
    standard deviation score_std."""
    rng = np.random.default_rng(seed)
    hd = k.shape[-1]
    q = rng.standard_normal((n, nh, hd))
    s = np.einsum("nhd,td->nht", q, k[:, 0, :].astype(np.float64)) / np.sqrt(hd)
    return (q * (score_std / s.std())).astype(np.float32)


def side_roundtrip(x, side, rotated=None):
    """x float32 [..., hd] stored as a cache side of kind `side` and read back: bf16 and q8 in
    the raw basis, turbo-n in the rotated one (rotated: golden.wht(x), given to reuse it)."""
    if side == "f32":
        return x
    if side == "bf16":
        return golden.bf16_round(x)
    if side == "q8":
        return golden.q8_dequantize(*golden.q8_quantize(x))
    n = int(side[len("turbo") :])
    y = golden.wht(x) if rotated is None else rotated
    return golden.turbo_dequantize(*golden.turbo_quantize(y, n), n)


def _attend(q, K, V, k_rot, v_rot):
    """Float64 attention as the layer reads a cache: q rotated when K is, the output rotated
    back when V is."""
    o, _ = attn64(golden.wht(q) if k_rot else q, K, V)
    return golden.wht(o) if v_rot else o


def _relmse(a, ref):
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    return float(((a - ref) ** 2).sum() / (ref**2).sum())


def bits_experiment(cfg, keys, v, score_std=2.5):
    """Per key set and kind: the keys' relative MSE and the attention output's relative error
    (3 query rows against float64 attention on the exact K, V), with the WHT (the cache) and,
    for turbo kinds, without it (rotated=False); also bf16 keys with turbo-n values
    ("bf16k-turbo{n}v") and turbo-n keys with exact values ("turbo{n} K, exact V").
    -> (mse, att) {(keyset, kind, rotated): x}."""
    V = v.transpose(1, 0, 2)
    Vr = golden.wht(V)
    turbo = [k for k in KIND_BITS if k.startswith("turbo")]
    v_rot = {kind: side_roundtrip(V, kind, Vr) for kind in KIND_BITS}  # values, as stored
    v_raw = {kind: side_roundtrip(V, kind, V) for kind in turbo}  # the ablation's
    mse, att = {}, {}
    for name, k in keys.items():
        K = k.transpose(1, 0, 2)
        Kr, Kb = golden.wht(K), golden.bf16_round(K)
        qs = queries(k, cfg.nh, score_std=score_std)
        ref, _ = attn64(qs, K, V)
        err = lambda Kh, Vh, kr, vr: relerr(_attend(qs, Kh, Vh, kr, vr), ref)
        for kind in KIND_BITS:
            rot = kind in turbo
            Kh = side_roundtrip(K, kind, Kr)
            mse[name, kind, True] = _relmse(Kh, Kr if rot else K)
            att[name, kind, True] = err(Kh, v_rot[kind], rot, rot)
            if rot:  # the ablation: the same quantizer on the raw rows
                Kn = side_roundtrip(K, kind, K)
                mse[name, kind, False] = _relmse(Kn, K)
                att[name, kind, False] = err(Kn, v_raw[kind], False, False)
            if kind in ("turbo4", "turbo3", "turbo2"):  # bf16 keys; turbo keys, exact values
                att[name, f"bf16k-{kind}v", True] = err(Kb, v_rot[kind], False, True)
                att[name, f"{kind} K, exact V", True] = err(Kh, Vr, True, True)
    return mse, att


def plot_bits_experiment(mse, att, keysets):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    turbo = [k for k in KIND_BITS if k.startswith("turbo")]
    xb = [KIND_BITS[k] for k in turbo]
    for ax, tab, ylabel in (
        (axes[0], mse, "key relative MSE"),
        (axes[1], att, "attention rel. error"),
    ):
        for color, name in zip(("C0", "C3"), keysets):
            ax.plot(
                xb, [tab[name, k, True] for k in turbo], "-o", color=color, label=f"{name}, WHT"
            )
            ax.plot(
                xb,
                [tab[name, k, False] for k in turbo],
                "--x",
                color=color,
                label=f"{name}, no rotation",
            )
            ax.plot(
                [KIND_BITS["q8"], KIND_BITS["bf16"]],
                [tab[name, "q8", True], tab[name, "bf16", True]],
                "s",
                color=color,
                mfc="none",
                label=f"{name}: q8 (8.5), bf16 (16)",
            )
        ax.set_yscale("log")
        ax.set_xlabel("bits per value (scales included)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
    slope = [5.0 * 4.0 ** -(b - 3) for b in xb]  # drawn above the data, for its slope
    axes[0].plot(xb, slope, ":", color="0.5", lw=1, label="slope 4^-n (6 dB per bit)")
    axes[0].annotate(
        "bf16: both key sets\n(the same value)",
        (16, mse["outlier keys", "bf16", True]),
        xytext=(-8, 10),
        textcoords="offset points",
        ha="right",
        fontsize=7,
    )
    axes[0].set_title("what the stored keys lose (turbo8 .. turbo2 from the right)", fontsize=9)
    axes[1].set_title("what attention loses (T = 512, score std 2.5)", fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 0.95))
    fig.tight_layout()
    note(axes[0], GOLDEN_NOTE + "; key_sets(seed=1), queries(seed=2)")
    return fig


def kv_sweep(cfg, k, v, n=3, score_stds=(0.5, 1.0, 2.5, 5.0)):
    """Attention rel. error against the score std: turbo-n on both sides, turbo-n keys with
    exact values, bf16 keys with turbo-n values (the bf16k-turbo{n}v cache). -> {case: [err]}."""
    K, V = k.transpose(1, 0, 2), v.transpose(1, 0, 2)
    Kr, Vr = golden.wht(K), golden.wht(V)
    Kt, Vt = side_roundtrip(K, f"turbo{n}", Kr), side_roundtrip(V, f"turbo{n}", Vr)
    Kb = golden.bf16_round(K)
    cases = {f"turbo{n} K and V": [], f"turbo{n} K, exact V": [], f"bf16k-turbo{n}v": []}
    for sd in score_stds:
        qs = queries(k, cfg.nh, score_std=sd)
        ref, _ = attn64(qs, K, V)
        cases[f"turbo{n} K and V"].append(relerr(_attend(qs, Kt, Vt, True, True), ref))
        cases[f"turbo{n} K, exact V"].append(relerr(_attend(qs, Kt, Vr, True, True), ref))
        cases[f"bf16k-turbo{n}v"].append(relerr(_attend(qs, Kb, Vt, False, True), ref))
    return cases


def plot_kv_sweep(score_stds, cases):
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    for (name, e), style in zip(cases.items(), ("C0-o", "C3--^", "C2-s")):
        label = name + (" (≈ exact K, turbo V)" if name.startswith("bf16k") else "")
        ax.plot(score_stds, e, style, ms=5, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(score_stds, [f"{s:g}" for s in score_stds])
    ax.xaxis.set_minor_formatter(NullFormatter())
    readable_log(ax.yaxis)
    ax.set_xlabel("score std (spread of q·k/√hd over the tokens)")
    ax.set_ylabel("attention rel. error")
    ax.set_title("which side's error attention feels (outlier keys, T = 512)", fontsize=9)
    legend_outside(ax)
    note(ax, GOLDEN_NOTE + "; key_sets(seed=1), queries(seed=2)")
    return fig


# ---- tq-b: TurboQuant's quantizer as a cache kind (the notebook computes, these draw) --------
def _normal_pdf(t):
    return np.exp(-0.5 * np.square(t)) / math.sqrt(2 * math.pi)


SIGNED = "√d · WHT(s ⊙ x), s = tq_signs"


def plot_rotation_probes(seen):
    """seen {probe name: (√d·wht(x), √d·wht(s ⊙ x))}: each probe's coordinates after the
    plain WHT and after the signed one, as histograms over N(0, 1)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(seen), figsize=(11, 2.7), sharey=True)
    zz, bins = np.linspace(-4, 4, 200), np.linspace(-4.2, 4.2, 43)
    for ax, (name, (y_fixed, y_signed)) in zip(axes, seen.items()):
        kw = dict(bins=bins, density=True)
        ax.hist(np.clip(y_fixed, -4.1, 4.1), alpha=0.5, label="√d · WHT(x)", **kw)
        ax.hist(np.clip(y_signed, -4.1, 4.1), histtype="step", lw=1.5, label=SIGNED, **kw)
        ax.plot(zz, _normal_pdf(zz), "k:", lw=1, label="N(0, 1)")
        top = float(np.abs(y_fixed).max())
        if top > 4.1:  # a spike the clipped axis cannot show
            arrow = dict(arrowstyle="->")
            ax.annotate(f"1 value at {top:.0f}", (4.1, 0.02), (0.8, 1.5), arrowprops=arrow, size=8)
        ax.set_title(f"{name}: max|√d·WHT(x)| = {top:.1f}", fontsize=9)
        ax.set_xlabel("coordinate × √d (clipped at ±4.1)")
    axes[0].set_ylabel("density")
    legend_outside(axes[-1])
    fig.tight_layout()
    note(axes[0], GOLDEN_NOTE + "; golden.wht, golden.wht_signed")
    return fig


def plot_codebooks(u, u_raw, codebooks):
    """Left: the unit-rms coordinates of the vectors without rotation (log density). Then one
    panel per codebook {bits: levels}: the histogram of the rotated coordinates u, N(0, 1),
    the levels (red) and the cell edges between them (grey)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 1 + len(codebooks), figsize=(12, 2.9))
    zz = np.linspace(-4.5, 4.5, 300)
    lim = float(np.abs(u_raw).max()) * 1.05
    axes[0].hist(u_raw.ravel(), bins=np.linspace(-lim, lim, 121), density=True, color="0.6")
    axes[0].set_yscale("log")
    axes[0].set(title="without rotation: x·√n/‖x‖", xlabel="coordinate", ylabel="density")
    axes[0].title.set_fontsize(9)
    for ax, (b, cb) in zip(axes[1:], codebooks.items()):
        ax.hist(u.ravel(), bins=np.linspace(-4.5, 4.5, 91), density=True, alpha=0.45, label="u")
        ax.plot(zz, _normal_pdf(zz), "k:", lw=1, label="N(0, 1)")
        for t in (cb[1:] + cb[:-1]) / 2:
            ax.axvline(t, color="0.55", lw=0.7, ls="--")
        ax.plot(cb, np.zeros_like(cb), "rv", ms=6, clip_on=False, label="levels C")
        for c in cb:
            ax.axvline(c, color="C3", lw=0.9, alpha=0.7)
        ax.set(xlim=(-4.5, 4.5), ylim=(0, 0.5))
        ax.set_title(f"tq{b}: {cb.size} levels over u = y·√n/‖y‖", fontsize=9)
        ax.set_xlabel("u (grey dashed: cell edges)")
    legend_outside(axes[-1])
    fig.tight_layout()
    note(axes[0], GOLDEN_NOTE + "; golden.tq_codebook, golden.wht_signed")
    return fig


def plot_rate_distortion(rd, d_lm, shannon_bits=(1, 9.2)):
    """One panel: relative MSE against bits per value with the scales counted. rd {kind: (bits,
    rel. MSE)} (turbo-n and tq-b kinds), d_lm {b: the normal's Lloyd–Max distortion at b bits},
    and the Shannon bound 4^-R of a normal source."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    r = np.linspace(*shannon_bits, 100)
    ax.plot(r, 4.0**-r, "k-", lw=1, label="Shannon bound 4^-R (normal source)")
    lm = "Lloyd–Max on N(0, 1), no scale (b bits)"
    ax.plot(list(d_lm), list(d_lm.values()), "kD", mfc="none", ms=6, label=lm)
    for fam, style, lab in (
        ("turbo", "C3-s", "turbo-n: groups of 16, f16 scale (n + 1 bits)"),
        ("tq", "C0-o", "tq-b: one codebook, one f16 γ (b + 16/n bits)"),
    ):
        pts = sorted(v for k, v in rd.items() if k.startswith(fam))
        ax.plot(*zip(*pts), style, label=lab)
    for k, (x, y) in rd.items():
        ax.annotate(k, (x, y), xytext=(5, 4), textcoords="offset points", fontsize=7)
    ax.set_yscale("log")
    ax.set_xlabel("bits per value, scales counted (n = head_dim = 256)")
    ax.set_ylabel("relative MSE ‖x̂ − x‖² / ‖x‖²")
    ax.set_title("rate–distortion at equal storage (1024 vectors, 4 channels ×10)", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    legend_outside(ax)
    note(ax, GOLDEN_NOTE + "; golden.tq_quantize, golden.turbo_quantize")
    return fig


def plot_kinds_in_attention(bits, err, weights, threshold=0.5, exact=0.75):
    """Left: attention output rel. error per cache kind against its bits per value ({kind: x}),
    the turbo and tq kinds joined by lines. Right: each needle's softmax weight per kind (one
    dot per needle query), the share above threshold written over each kind."""
    import matplotlib.pyplot as plt

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
    legend_outside(b)
    fig.tight_layout()
    note(a, GOLDEN_NOTE + "; golden.KVCache, golden.decode_attention")
    return fig


# ---- the kernel's float32 rotation ---------------------------------------------------------
def wht_f32_kernel_order(x):
    """The append kernel's rotation, bit for bit: float32 butterflies, passes h = 1, 2, 4, ...,
    then × float32(1/√n) (wht_regs.cuh's order; golden's WHT is float64, rounded once)."""
    n = x.shape[-1]
    y = np.ascontiguousarray(x, np.float32).reshape(-1, n)
    h = 1
    while h < n:
        y = y.reshape(-1, n // (2 * h), 2, h)
        a, b = y[:, :, 0, :], y[:, :, 1, :]
        y = np.stack((a + b, a - b), axis=2)  # float32 adds
        h *= 2
    scale = np.float32(1) / np.sqrt(np.float32(n))
    return (y.reshape(x.shape) * scale).astype(np.float32)


def code_disagreements(rows, widths=(8, 4, 3, 2)):
    """Quantize rows [N, hd] after golden's float64 rotation and after the kernel's float32 one.
    -> (fraction of rotated values that differ, max |f32 - f64| in float32 eps of the row rms,
    {bits: (codes differing, codes, max |Δcode|, scales differing)})."""
    y64 = golden.wht(rows)
    y32 = wht_f32_kernel_order(rows)
    rms = np.sqrt(np.mean(y64.astype(np.float64) ** 2, axis=-1, keepdims=True))
    dev = float((np.abs(y32.astype(np.float64) - y64) / rms).max() / 2.0**-23)
    out = {}
    for n in widths:
        (c64, d64), (c32, d32) = golden.turbo_quantize(y64, n), golden.turbo_quantize(y32, n)
        u64 = golden.turbo_unpack(c64, n).astype(int)
        u32 = golden.turbo_unpack(c32, n).astype(int)
        out[n] = (
            int((u64 != u32).sum()),
            u64.size,
            int(np.abs(u64 - u32).max()),
            int((d64.view(np.uint16) != d32.view(np.uint16)).sum()),
        )
    return float(np.mean(y32 != y64)), dev, out


def gpu_rotation_check(cfg, k, v, kinds=("turbo8", "turbo4", "turbo3", "turbo2")):
    """On a GPU: append k, v [T, nkv, hd] in chunks with the default rung; compare the stored
    codes with the golden cache's (a rare one-step flip expected) and with the golden quantizer
    applied to the emulated float32 rotation (0 expected)."""
    import cupy as cp

    from .. import gpu

    T = k.shape[0]
    for kind in kinds:
        n = int(kind[len("turbo") :])
        gc, ref = gpu.KVCache(cfg, max_t=T, kind=kind), golden.KVCache(cfg, max_t=T, kind=kind)
        for a, b in ((0, 1), (1, 8), (8, 41), (41, T)):
            gc.append(cp.asarray(k[a:b]), cp.asarray(v[a:b]))
            ref.append(k[a:b], v[a:b])
        got = gc.to_golden()
        for side, raw in (("k_store", k), ("v_store", v)):
            mine, gold = getattr(got, side), getattr(ref, side)
            um, ug = (golden.turbo_unpack(s["codes"], n).astype(int) for s in (mine, gold))
            emu, _ = golden.turbo_quantize(wht_f32_kernel_order(raw.transpose(1, 0, 2)), n)
            print(
                f"{kind} {side}: vs golden {int((um != ug).sum())} codes differ (max step "
                f"{int(np.abs(um - ug).max())}); vs the emulated float32 rotation "
                f"{int((mine['codes'] != emu).sum())} bytes differ"
            )


# ---- time: why the append runs below the quantizer's rate --------------------------------
def _largest(runs):
    runs = [r for r in runs if r.get("median_us")]
    return max(runs, key=lambda r: r.get("bytes", 0)) if runs else None


def print_append_gap(turbo, q8, quant):
    """From records: the standalone quantizer's rate, the turbo4 append's (default rung, largest
    size), the read floor at the append's bytes when recorded, and the q8 append of the same
    tokens; the difference in time is the rotation's work."""
    qz = _largest(r for r in quant.runs if "bits=4" in str(r.get("kernel")))
    ta = _largest(r for r in turbo.runs if r.get("default") and r["shape"].get("kind") == "turbo4")
    if qz is None or ta is None:
        print("the records lack the turbo quantizer or the turbo4 append: nothing to compare")
        return
    qa = [r for r in q8.runs if r.get("default") and r["shape"].get("nb") == ta["shape"]["nb"]]
    mb = lambda r: r["bytes"] / 1e6
    rate = lambda r: f"{mb(r):.1f} MB in {r['median_us']:.1f} µs, {r['pct_of_copy']:.0f}% of copy"
    rows = qz["shape"].get("rows")
    print(f"quantizer {qz['kernel']} ({rows} rows of 256): {rate(qz)}")
    print(f"turbo4 append {ta['kernel']} (nb={ta['shape']['nb']}, K and V): {rate(ta)}")
    at_q = ta["bytes"] * qz["median_us"] / qz["bytes"]
    print(
        f"  size: {qz['bytes'] / ta['bytes']:.1f}x fewer bytes than the quantizer's; at its "
        f"rate they would take {at_q:.1f} µs"
    )
    if ta.get("floor_us"):
        pct = 100 * ta["bytes"] / ta["floor_us"] / 1e3 / turbo.copy_gbps
        print(
            f"  floor: one launch that only reads {mb(ta):.1f} MB takes {ta['floor_us']:.1f} µs, "
            f"{pct:.0f}% of copy"
        )
    else:
        print("  floor: not recorded with these runs")
    if qa:
        print(
            f"  work: the q8 append of the same tokens (v1): {rate(qa[0])}; the turbo append's "
            f"time minus it: {ta['median_us'] - qa[0]['median_us']:+.1f} µs"
        )
