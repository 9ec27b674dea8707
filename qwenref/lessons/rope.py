"""Helpers of notebooks/02_rope.ipynb (per-head q/k RMSNorm + partial RoPE): the float64 and
float32-angle rotations the notebook measures against, its sweeps and figures, the kernel
rungs run on the notebook's inputs, how v1 and v2 split the work at a batch size, and the
exercises' checkers. The record printouts and figure pieces it shares with the WHT notebook
live in lessons.common and are re-exported here."""

from __future__ import annotations

import numpy as np

from .. import golden, nbutil
from ..nbutil import recorded_pairs
from .common import (
    error_strip,
    print_above_floor,
    print_fastest,
    print_peers,
    print_stage,
    restyle_ladder,
    show_lines,
    source_below,
    takeaway,
)

__all__ = [
    "show",
    "rope_f64",
    "rope_f32_angles",
    "norm_f64",
    "plot_wavelengths",
    "score_shift_table",
    "angle_sweep",
    "plot_angle_sweep",
    "sweep_inputs",
    "sweep_outputs",
    "run_rungs",
    "merge_identical",
    "row_max_err",
    "plot_rope_errors",
    "rungs_on_example",
    "work_split",
    "rope_interleaved",
    "check_interleaved",
    # from lessons.common
    "error_strip",
    "print_above_floor",
    "print_fastest",
    "print_peers",
    "print_stage",
    "recorded_pairs",
    "restyle_ladder",
    "show_lines",
    "takeaway",
]

EPS = 1e-6  # the layer's q/k norm epsilon


def show(name, a):
    """Print an array under its name and shape (the worked examples' intermediates)."""
    a = np.asarray(a)
    body = np.array2string(a, precision=3, suppress_small=True, max_line_width=96)
    print(f"{name} {tuple(a.shape)}:\n{body}")


def _rotate(x, cos, sin, rd):
    """Rotate-half on the first rd dims of x (float64), cos/sin broadcast to [..., rd / 2]."""
    x = np.asarray(x, np.float64)
    h = rd // 2
    y = x.copy()
    y[..., :h] = x[..., :h] * cos - x[..., h:rd] * sin
    y[..., h:rd] = x[..., h:rd] * cos + x[..., :h] * sin
    return y


def _bcast(positions, x, rd):
    return (len(positions),) + (1,) * (np.ndim(x) - 2) + (rd // 2,)


def rope_f64(x, positions, rd, theta):
    """The rotation with float64 angles, kept in float64 (no final rounding): the truth."""
    cos, sin = golden.rope_cos_sin(positions, rd, theta)  # [nb, rd/2] each
    shp = _bcast(positions, x, rd)
    return _rotate(x, cos.reshape(shp), sin.reshape(shp), rd)


def rope_f32_angles(x, positions, rd, theta):
    """The rotation with the kernel's float32 angles a_j = float32(p) * float32(f_j), one
    rounding; cos, sin and the rotation in float64, so only the angle's error is left."""
    f32 = golden.rope_inv_freq(rd, theta).astype(np.float32)  # [rd/2]
    p32 = np.asarray(positions).astype(np.float32)
    a = (p32[:, None] * f32[None, :]).astype(np.float64)  # [nb, rd/2], rounded once
    shp = _bcast(positions, x, rd)
    return _rotate(x, np.cos(a).reshape(shp), np.sin(a).reshape(shp), rd)


def norm_f64(x, w, eps=EPS):
    """The zero-centred per-head RMSNorm in float64: x / sqrt(mean(x²) + eps) · (1 + w)."""
    x = np.asarray(x, np.float64)
    ms = np.mean(x**2, -1, keepdims=True)
    return x / np.sqrt(ms + eps) * (1 + np.asarray(w, np.float64))


def plot_wavelengths(cfg):
    """Which dims of a head turn and how fast: wavelength 2π / f_j per dim (log), the
    pass-through dims shaded, and a strip that colours each rotary dim by its pair."""
    import matplotlib.pyplot as plt

    hd, rd, theta = cfg.head_dim, cfg.rotary_dim, cfg.rope_theta
    wl = 2 * np.pi / golden.rope_inv_freq(rd, theta)  # [rd/2] tokens per turn
    fig, (a1, a2) = plt.subplots(
        2, 1, figsize=(9, 4.2), sharex=True, gridspec_kw=dict(height_ratios=[3, 1])
    )
    half = rd // 2
    a1.semilogy(np.arange(half), wl, "o", ms=3, label=f"dims j < {half}")
    a1.semilogy(np.arange(half, rd), wl, "s", ms=3, label=f"partners j + {half}")
    a1.axvspan(rd - 0.5, hd - 0.5, color="0.9")
    a1.text((rd + hd) / 2, 1e3, f"dims {rd}..{hd - 1}: pass through", ha="center")
    for n_tok, name in ((4096, "4k"), (262144, "256k")):
        a1.axhline(n_tok, c="gray", ls=":", lw=1)
        a1.text(hd - 2, n_tok * 1.4, f"{name} tokens", ha="right", fontsize=8, color="gray")
    a1.set_ylabel("tokens per turn (log)")
    a1.set_title(f"which of the {hd} dims of a head turn, and how fast (θ = {theta:.0e})")
    a1.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    strip = np.full(hd, np.nan)
    strip[:rd] = np.tile(np.arange(half), 2)
    a2.imshow(strip[None, :], aspect="auto", cmap="viridis", extent=(-0.5, hd - 0.5, 0, 1))
    a2.set_yticks([])
    a2.set_xlabel(f"dim within the head (colour: pair j, shared by j and j + {half})")
    fig.text(0.01, -0.02, "computed here by golden.rope_inv_freq", fontsize=7, color="0.35")
    fig.tight_layout()
    return fig


def _score(q, k, m, n, rd, theta, rope):
    hd = q.shape[-1]
    a, b = rope(q, np.array([m]), rd, theta), rope(k, np.array([n]), rd, theta)
    return float(np.dot(np.ravel(a).astype(np.float64), np.ravel(b))) / np.sqrt(hd)


def score_shift_table(q, k, shifts, rd, theta, m=100, n=37):
    """Print q·k/√d with q at m + s and k at n + s for each shift s: golden (float64 angles,
    rounded once) and float32 angles, each with its change from s = 0."""
    print(f"{'shift s':>9} | {'golden':>9} {'Δ vs s=0':>9} | {'f32 angles':>10} {'Δ vs s=0':>9}")
    base = None
    for s in shifts:
        g = _score(q, k, m + s, n + s, rd, theta, golden.apply_rope)
        a = _score(q, k, m + s, n + s, rd, theta, rope_f32_angles)
        base = base or (g, a)
        dg = abs(g - base[0])
        dgs = "< 1e-6" if dg < 1e-6 else f"{dg:.0e}"
        print(f"{s:>9} | {g:9.5f} {dgs:>9} | {a:10.5f} {abs(a - base[1]):9.0e}")


def angle_sweep(cfg, n_pos=60, n_pairs=64, lag=100, seed=2):
    """Float32 angles against float64 ones at positions 1 .. 256k (log-spaced): the worst angle
    error over the pairs, pair 1's, and the error they cause in q·k/√d for n_pairs random
    unit-rms (q, k) with k `lag` tokens behind q."""
    hd, rd, theta = cfg.head_dim, cfg.rotary_dim, cfg.rope_theta
    pos = np.unique(np.round(np.logspace(0, np.log10(262144), n_pos)).astype(np.int64))
    f64 = golden.rope_inv_freq(rd, theta)  # [rd/2]
    a64 = pos[:, None] * f64[None, :]  # [P, rd/2] exact
    a32 = (pos.astype(np.float32)[:, None] * f64.astype(np.float32)[None, :]).astype(np.float64)
    rng = np.random.default_rng(seed)
    qs = rng.standard_normal((len(pos), n_pairs, hd))  # [P, pairs, hd]
    ks = rng.standard_normal((len(pos), n_pairs, hd))
    kpos = np.maximum(pos - lag, 0)

    def scores(rope):
        return np.einsum("pnd,pnd->pn", rope(qs, pos, rd, theta), rope(ks, kpos, rd, theta))

    s_err = np.abs(scores(rope_f32_angles) - scores(rope_f64)) / np.sqrt(hd)  # [P, pairs]
    return {"pos": pos, "ang_err": np.abs(a32 - a64), "score_err": s_err, "f": f64}


def plot_angle_sweep(sw):
    """Left: angle error against position with its bound p · 2⁻²³; right: the score error."""
    import matplotlib.pyplot as plt

    pos, ang, sc = sw["pos"], sw["ang_err"], sw["score_err"]
    tiny = 1e-12  # exact values (error 0) drawn at the bottom of the log axis
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.5, 3.6))
    a1.loglog(pos, np.maximum(ang.max(1), tiny), "o-", ms=3, label="max over the pairs")
    f1 = f"pair j = 1 (f₁ = {sw['f'][1]:.2f}: the largest angle\nthat is not exact, p · f₁)"
    a1.loglog(pos, np.maximum(ang[:, 1], tiny), "x", ms=4, label=f1)
    a1.loglog(pos, pos * 2.0**-23, "k--", lw=1, label="bound p · 2⁻²³")
    a1.set_xlabel("position p (tokens)")
    a1.set_ylabel("|angle f32 − f64| (rad)")
    a1.set_title("angle error grows with position")
    a1.legend(fontsize=8)
    n_qk = sc.shape[1]
    a2.loglog(
        pos, np.maximum(np.median(sc, 1), tiny), "o-", ms=3, label=f"median over {n_qk} (q, k)"
    )
    a2.loglog(pos, np.maximum(sc.max(1), tiny), "x", ms=4, label=f"max over the {n_qk}")
    a2.set_xlabel("position p (tokens)")
    a2.set_ylabel("|Δ q·k/√d|")
    a2.set_title("resulting error of a score (unit-rms q, k)")
    a2.legend(fontsize=8)
    fig.text(0.01, -0.02, "computed here (CPU, float64 against float32 angles)", fontsize=7)
    fig.tight_layout()
    return fig


def sweep_inputs(cfg, n_pos=40, seed=3):
    """One row per position from 1 to 256k (log-spaced), 27B heads: qg [nb, nh, 2·hd] (q |
    gate), k [nb, nkv, hd], weights [hd] (zero-centred, ~0.1), positions int32 [nb]."""
    rng = np.random.default_rng(seed)
    hd = cfg.head_dim
    pos = np.unique(np.round(np.logspace(0, np.log10(262143), n_pos)).astype(np.int32))
    nb = len(pos)
    return {
        "qg": rng.standard_normal((nb, cfg.nh, 2 * hd)).astype(np.float32),
        "k": rng.standard_normal((nb, cfg.nkv, hd)).astype(np.float32),
        "qw": (0.1 * rng.standard_normal(hd)).astype(np.float32),
        "kw": (0.1 * rng.standard_normal(hd)).astype(np.float32),
        "pos": pos,
    }


def _qk(q, k):
    return np.concatenate([np.asarray(q), np.asarray(k)], axis=1)  # [nb, nh + nkv, hd]


def sweep_outputs(inp, cfg):
    """(truth, golden, float32-angle simulation), each [nb, nh + nkv, hd]: the truth is norm
    and rotation in float64; the simulation rounds nothing but the angle."""
    hd, rd, th = cfg.head_dim, cfg.rotary_dim, cfg.rope_theta
    qn, kn = norm_f64(inp["qg"][..., :hd], inp["qw"]), norm_f64(inp["k"], inp["kw"])
    pos = inp["pos"]
    truth = _qk(rope_f64(qn, pos, rd, th), rope_f64(kn, pos, rd, th))
    sim = _qk(rope_f32_angles(qn, pos, rd, th), rope_f32_angles(kn, pos, rd, th))
    gq, gk = golden.qk_norm_rope(inp["qg"], inp["k"], inp["qw"], inp["kw"], pos, rd, th, EPS)
    return truth, _qk(gq, gk), sim


def run_rungs(inp, cfg, impls=None):
    """{"rung i": output [nb, nh + nkv, hd]} of every rung of gpu.qk_norm_rope on the inputs
    (needs a GPU); outputs poisoned with NaN first, so an unwritten element shows."""
    import cupy as cp

    from .. import gpu
    from ..gpu.rope import RUNGS

    hd, nb = cfg.head_dim, len(inp["pos"])
    dev = {n: cp.asarray(inp[n]) for n in ("qg", "k", "qw", "kw", "pos")}
    outs = {}
    for i, impl in enumerate(impls or RUNGS["qk_norm_rope"]):
        qo = cp.full((nb, cfg.nh, hd), cp.nan, cp.float32)
        ko = cp.full((nb, cfg.nkv, hd), cp.nan, cp.float32)
        args = (dev["qg"], dev["k"], dev["qw"], dev["kw"], dev["pos"])
        gpu.qk_norm_rope(*args, cfg.rotary_dim, cfg.rope_theta, EPS, q_out=qo, k_out=ko, impl=impl)
        outs[f"rung {i}"] = _qk(qo.get(), ko.get())
    return outs


def merge_identical(outs):
    """{label: array} with bit-identical arrays merged under one label ("a = b (identical
    bits)"), so a figure never draws two curves exactly on top of each other."""
    merged = {}
    for label, a in outs.items():
        same = next((k for k, b in merged.items() if np.array_equal(a, b, equal_nan=True)), None)
        if same is None:
            merged[label] = a
        else:
            merged[f"{same.split(' (identical')[0]} = {label} (identical bits)"] = merged.pop(same)
    return merged


def row_max_err(a, ref):
    """Each row's largest |a − ref| over all its heads and dims."""
    d = np.abs(np.asarray(a, np.float64) - np.asarray(ref, np.float64))
    return d.reshape(len(d), -1).max(1)


def plot_rope_errors(pos, curves, strip, source):
    """Left: each row's worst error against float64 by position (curves = {label: [nb]});
    right: error_strip(strip). source: where the GPU rows came from."""
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw=dict(width_ratios=[5, 4]))
    # the CPU curves as lines, the GPU rungs as markers of decreasing size on top of them, so a
    # rung that lies exactly on the simulation (as a correct one does) stays visible
    lines = [dict(ls="-", lw=5, alpha=0.35), dict(ls="-", marker=".", ms=4)]
    marks = [dict(marker="o", ms=8, mfc="none"), dict(marker="x", ms=5), dict(marker="+", ms=9)]
    styles = lines + [dict(ls="none", **marks[i % len(marks)]) for i in range(len(curves))]
    for (label, v), style in zip(curves.items(), styles):
        a1.loglog(pos, np.maximum(v, 1e-9), label=label, **style)
    a1.set_xlabel("position p (tokens)")
    a1.set_ylabel("max |out − float64| in the row")
    a1.set_title("error against the float64 truth, by position", fontsize=10)
    a1.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.2), ncol=2)
    error_strip(a2, strip, "every element: golden and GPU side by side")
    fig.tight_layout()
    source_below(fig, a1, f"CPU rows computed here; GPU rows {source}")
    return fig


def rungs_on_example(qg, k, w, pos, rd, theta, cfg):
    """Each rung of gpu.qk_norm_rope on a small example: run now against golden on a GPU;
    else each rung's recorded error (rel_err, norm-wise against golden) at the ladder's sizes,
    beside the float32-angle simulation's error at the same positions (the ladder's: uniform
    in [0, 131072), from default_rng(1)), computed here on random 27B heads."""
    from ..gpu.rope import RUNGS, rung_kernel

    hd = k.shape[-1]
    if not nbutil.gpu_available():
        recs = nbutil.recorded(lambda r: r.get("family") == "qk_norm_rope")
        print("no GPU here; " + recs.source)
        for r in sorted(recs.runs, key=lambda r: (r["bytes"], r["rung"])):
            nb = r["shape"]["nb"]
            print(f"  nb {nb:>5}  rung {r['rung']}: {r['kernel']:<22} rel_err {r['rel_err']:.1e}")
        print(f"float32 angles alone (CPU simulation, nb 256): rel_err {_sim_rel_err(cfg):.1e}")
        return
    import cupy as cp

    from .. import gpu

    gq, gk = golden.qk_norm_rope(qg, k, w, w, pos, rd, theta, EPS)
    d = [cp.asarray(a) for a in (qg, k, w, w, np.asarray(pos, np.int32))]
    for i, impl in enumerate(RUNGS["qk_norm_rope"]):
        q, kk = gpu.qk_norm_rope(*d, rd, theta, EPS, impl=impl)
        err = max(np.abs(q.get() - gq).max(), np.abs(kk.get() - gk).max())
        name = rung_kernel("qk_norm_rope", impl, head_dim=hd)
        print(f"  rung {i} ({impl}): {name:<22} max |gpu − golden| = {err:.1e}")


def _sim_rel_err(cfg, nb=256, seed=5):
    """Norm-wise error against golden of rope_f32_angles (norm in float64) on random 27B
    heads at the ladder's positions: what float32 angles alone cost there."""
    hd, rd, th = cfg.head_dim, cfg.rotary_dim, cfg.rope_theta
    pos = np.random.default_rng(1).integers(0, 131072, nb).astype(np.int32)
    rng = np.random.default_rng(seed)
    qg = rng.standard_normal((nb, cfg.nh, 2 * hd)).astype(np.float32)
    k = rng.standard_normal((nb, cfg.nkv, hd)).astype(np.float32)
    w = (0.1 * rng.standard_normal(hd)).astype(np.float32)
    gq, gk = golden.qk_norm_rope(qg, k, w, w, pos, rd, th, EPS)
    sq = rope_f32_angles(norm_f64(qg[..., :hd], w), pos, rd, th)
    sk = rope_f32_angles(norm_f64(k, w), pos, rd, th)
    return nbutil.relerr(_qk(sq, sk), _qk(gq, gk))


# v2 at head_dim <= 256 (qk_norm_rope_pipe_v2 in rope.cu): items of 2 heads, blocks of 8 warps,
# and __launch_bounds__(256, 3): its 80 registers a thread let 3 blocks share an SM's 64k
PIPE_HEADS, PIPE_WARPS, PIPE_BLOCKS_PER_SM = 2, 8, 3


def work_split(cfg, sizes, sms=132):
    """How v1 and v2 split nb rows of 27B heads: v1 one warp per head; v2 items of PIPE_HEADS
    heads in blocks of PIPE_WARPS warps, as many blocks as items need up to what fits on `sms`
    SMs at once (the H200's), and then the most items one warp runs through, one after the
    other (docs/design/rope.md)."""
    heads = cfg.nh + cfg.nkv
    print(f"{'nb':>6}  {'v1 warps':>9}  {'v2 items':>9}  {'v2 blocks':>9}  most items per v2 warp")
    for nb in sorted(sizes):
        items = nb * -(-heads // PIPE_HEADS)
        blocks = min(-(-items // PIPE_WARPS), sms * PIPE_BLOCKS_PER_SM)
        per_warp = -(-items // (blocks * PIPE_WARPS))
        print(f"{nb:>6}  {nb * heads:>9}  {items:>9}  {blocks:>9}  {per_warp:>22}")
    print(
        f"(v1: one head per warp; v2: {PIPE_HEADS} heads per item, {PIPE_WARPS} warps per block, "
        f"at most {PIPE_BLOCKS_PER_SM} blocks on each of {sms} SMs at once)"
    )


def rope_interleaved(x, positions, rd, theta):
    """Exercise 2's reference: RoPE with the GPT-J ("interleaved") pairing, dim 2j with dim
    2j + 1 turned by f_j, in float64."""
    cos, sin = golden.rope_cos_sin(positions, rd, theta)  # [nb, rd/2]
    shp = _bcast(positions, x, rd)
    cos, sin = cos.reshape(shp), sin.reshape(shp)
    x = np.asarray(x, np.float64)
    y = x.copy()
    y[..., 0:rd:2] = x[..., 0:rd:2] * cos - x[..., 1:rd:2] * sin
    y[..., 1:rd:2] = x[..., 1:rd:2] * cos + x[..., 0:rd:2] * sin
    return y


def check_interleaved(perm, rd=8, hd=12, theta=1e4, seed=0):
    """True when permuting dims by `perm`, applying golden's rotate-half RoPE and permuting
    back gives the interleaved RoPE (exercise 2)."""
    perm = np.asarray(perm)
    if sorted(perm.tolist()) != list(range(hd)):
        raise ValueError(f"perm must be a permutation of range({hd}), got {perm.tolist()}")
    x = np.random.default_rng(seed).standard_normal((3, 1, hd))
    pos = np.array([0, 5, 1000])
    y = golden.apply_rope(x[..., perm], pos, rd, theta).astype(np.float64)
    back = np.empty_like(y)
    back[..., perm] = y
    return bool(np.allclose(back, rope_interleaved(x, pos, rd, theta), atol=1e-6))
