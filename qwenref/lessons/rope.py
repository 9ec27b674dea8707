"""Helpers of notebooks/02_rope.ipynb (per-head q/k RMSNorm + partial RoPE): the float64 and
float32-angle rotations the notebook measures against, its sweeps and figures, the kernel
rungs run on the notebook's inputs, and the exercises' checkers.

Also the pieces the WHT notebook reuses (lessons.wht imports them): recorded_pairs (the
bench's (golden, GPU) samples of a record), error_strip (one row of error percentiles per
source, so no two distributions hide each other), restyle_ladder (markers that keep
coinciding ladder points visible), show_lines (a few lines of a kernel excerpt),
print_peers (peer comparisons, GPU-timed records only) and takeaway (the numbers a take-away
quotes, from the records)."""

from __future__ import annotations

import numpy as np

from .. import golden, nbutil

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
    "recorded_pairs",
    "error_strip",
    "plot_rope_errors",
    "show_lines",
    "rungs_on_example",
    "restyle_ladder",
    "print_peers",
    "takeaway",
    "rope_interleaved",
    "check_interleaved",
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
    a1.loglog(pos, np.maximum(ang[:, 1], tiny), "x", ms=4, label=f"pair 1 (f = {sw['f'][1]:.2f})")
    a1.loglog(pos, pos * 2.0**-23, "k--", lw=1, label="bound p · 2⁻²³")
    a1.set_xlabel("position p (tokens)")
    a1.set_ylabel("|angle f32 − f64| (rad)")
    a1.set_title("angle error grows with position")
    a1.legend(fontsize=8)
    a2.loglog(pos, np.maximum(np.median(sc, 1), tiny), "o-", ms=3, label="median over pairs")
    a2.loglog(pos, np.maximum(sc.max(1), tiny), "x", ms=4, label="max")
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


def recorded_pairs(recs):
    """{rung label: (golden, gpu)} value samples the bench stored beside the records
    (results/*.npz; the largest recorded size of each rung); {} when none were stored."""
    res, samples = nbutil.load_results() or {}, nbutil.load_samples()
    runs = res.get("runs", [])
    keys = [str(k) for k in samples.get("run_keys", [])]
    best = {}
    for r in recs.runs:
        if r in runs:
            i = runs.index(r)
            ok = i < len(keys) and keys[i].startswith(f"{i}|{r['stage']}|")
            if ok and f"{i}_golden" in samples:
                label = f"rung {r.get('rung')}: {r['kernel']}"
                if label not in best or r["bytes"] > best[label][0]:
                    best[label] = (r["bytes"], samples[f"{i}_golden"], samples[f"{i}_gpu"])
    return {k: (g, x) for k, (_, g, x) in sorted(best.items())}


def error_strip(ax, rows, title="", edge=1e-9):
    """One row per source: the median, 99th percentile and maximum of its |error| on a log
    axis, so distributions that nearly coincide stay readable. rows = {label: errors}. Exact
    elements (error 0) have no place on a log axis: each label says what share they are, and
    anything below `edge` (far below float32's resolution for values of order 1) is drawn at
    the left edge."""
    marks = (("median", 50, "o"), ("99th pct", 99, "s"), ("max", 100, "^"))
    errs = {k: np.abs(np.ravel(np.asarray(v, np.float64))) for k, v in rows.items()}
    labels = []
    for y, (label, e) in enumerate(errs.items()):
        zero = float(np.mean(e == 0))
        labels.append(label + (f"\n({100 * zero:.0f}% exact)" if zero >= 0.005 else ""))
        ax.plot([max(e.min(), edge), max(e.max(), edge)], [y, y], c="0.7", lw=1)
        for i, (name, q, m) in enumerate(marks):
            ax.plot(max(np.percentile(e, q), edge), y, m, c=f"C{i}", label=name if y == 0 else None)
    ax.set_yticks(range(len(errs)), labels, fontsize=8)
    ax.set_ylim(len(errs) - 0.5, -0.5)
    ax.set_xscale("log")
    ax.set_xlabel(f"|error| per element (log; below {edge:.0e} at the left edge)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return ax


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
    below = a1.get_legend().get_window_extent(fig.canvas.get_renderer())
    y = fig.transFigure.inverted().transform((0, below.y0))[1] - 0.06
    fig.text(0.01, y, f"CPU rows computed here; GPU rows {source}", fontsize=7)
    return fig


def show_lines(excerpt, title, first, last, more=0):
    """Display the lines of a kernel excerpt from the first one containing `first` to the
    next one containing `last`, and `more` lines after it (the closing brace of a block);
    ValueError naming the marker when one is missing."""
    from ..excerpts import Excerpts

    lines = excerpt.split("\n")
    i = next((n for n, line in enumerate(lines) if first in line), None)
    if i is None:
        raise ValueError(f"first: {first!r} is not in the excerpt {title!r}")
    j = next((n for n in range(i, len(lines)) if last in lines[n]), None)
    if j is None:
        raise ValueError(f"last: {last!r} is not in the excerpt {title!r} after {first!r}")
    j = min(j + more, len(lines) - 1)
    part = Excerpts(
        [(f"// kernels_cuda/{title}, lines {i + 1}-{j + 1}", "\n".join(lines[i : j + 1]))]
    )
    if _in_notebook():
        from IPython.display import display

        display(part)
    else:
        print(part)


def _in_notebook():
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def rungs_on_example(qg, k, w, pos, rd, theta):
    """Each rung of gpu.qk_norm_rope on a small example: run now against golden on a GPU;
    else each rung's recorded error (rel_err, norm-wise against golden) at the bench's size."""
    from ..gpu.rope import RUNGS, rung_kernel

    hd = k.shape[-1]
    if not nbutil.gpu_available():
        recs = nbutil.recorded(lambda r: r.get("family") == "qk_norm_rope")
        print("no GPU here; " + recs.source)
        for r in sorted(recs.runs, key=lambda r: (r["rung"], r["bytes"])):
            nb = r["shape"]["nb"]
            print(f"  rung {r['rung']}: {r['kernel']:<22} nb {nb:>5}  rel_err {r['rel_err']:.1e}")
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


def restyle_ladder(ax):
    """After nbutil.plot_ladder: a distinct marker per rung, larger and hollow for the earlier
    rungs, so points that coincide (a launch-bound size) stay visible; the read floor drawn
    with markers, so a single recorded size still shows it, and a legend line saying so when
    the records carry no floor; the source line moved clear of the x label."""
    from matplotlib.lines import Line2D

    marks = ["o", "s", "^", "D", "v"]
    rungs = [ln for ln in ax.get_lines() if str(ln.get_label()).startswith("rung ")]
    for i, ln in enumerate(rungs):
        ln.set_marker(marks[i % len(marks)])
        ln.set_markersize(max(11 - 2.5 * i, 5))
        ln.set_markerfacecolor("none" if i < len(rungs) - 1 else ln.get_color())
    floor = [ln for ln in ax.get_lines() if str(ln.get_label()).startswith("read floor")]
    for ln in floor:
        ln.set_marker("_")
        ln.set_markersize(16)
    handles, labels = ax.get_legend_handles_labels()
    if rungs and not floor:
        handles.append(Line2D([], [], ls="none"))
        labels.append("read floor: not in these records")
    if handles:
        ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    for t in ax.figure.texts:
        if t.get_position()[1] < 0:
            t.set_y(-0.08)
    return ax


def print_peers(recs):
    """The records' peer comparisons whose times were taken on the GPU (queued or graph
    replay); a host-timed loop measures Python's launch rate, not the GPU, so it is left out."""
    gpu_timed = [r for r in recs.runs if r.get("peer") and r.get("timing") in ("queued", "graph")]
    if not gpu_timed:
        print("no peer timed on the GPU is recorded for this stage: nothing to compare with")
    for r in gpu_timed:
        print(
            f"{r['kernel']} {_size_text(r)}: {r['median_us']:.2f} us; {r['peer']} "
            f"{r['peer_median_us']:.2f} us ({r['timing']} timing, both)"
        )


def takeaway(ladder, stage):
    """The numbers the take-away quotes, from the records: the fastest rung at each size (% of
    copy, % of the read floor, × rung 0), then the stage's own runs."""
    print(ladder.source)
    v0 = {}
    for r in ladder.runs:
        if r.get("rung") == 0:
            v0[r["shape"].get("nb", r["shape"].get("rows"))] = r["median_us"]
    for size, r in sorted(nbutil.best_rungs(ladder).items(), key=lambda kv: kv[1]["bytes"]):
        sz = r["shape"].get("nb", r["shape"].get("rows"))
        x0 = v0.get(sz)
        pf = r.get("pct_of_floor")
        print(
            f"  {size}: fastest rung {r['rung']} ({r['kernel']}) {r['median_us']:.1f} us, "
            f"{r['pct_of_copy']:.0f}% of copy"
            + (f", {pf:.0f}% of the floor" if pf else "")
            + (f", {x0 / r['median_us']:.1f}x rung 0" if x0 else "")
        )
    print(stage.source)
    for r in sorted(stage.runs, key=lambda r: r["bytes"]):
        print(
            f"  {r['kernel']} {_size_text(r)}: {r['median_us']:.1f} us, "
            f"{r['pct_of_copy']:.1f}% of copy"
        )


def _size_text(r):
    sh = r.get("shape", {})
    return ", ".join(f"{k}={sh[k]}" for k in ("nb", "rows", "n") if k in sh)


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
