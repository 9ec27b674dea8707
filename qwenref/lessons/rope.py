"""Drawings and printouts of notebooks/02_rope.ipynb (per-head q/k RMSNorm + partial RoPE): the
worked examples' arrays, the wavelength figure, the float32-angle figure, the error figure
against float64, the rungs' recorded errors, and the record printouts and figure pieces it
shares with the WHT notebook (lessons.common, re-exported here). What the figures show is
computed in the notebook."""

from __future__ import annotations

import numpy as np

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
    "plot_wavelengths",
    "plot_angle_sweep",
    "plot_rope_errors",
    "print_recorded_errors",
    # from lessons.common
    "error_strip",
    "print_above_floor",
    "print_fastest",
    "print_peers",
    "print_stage",
    "restyle_ladder",
    "show_lines",
    "takeaway",
]


def show(name, a):
    """Print an array under its name and shape (the worked examples' intermediates)."""
    a = np.asarray(a)
    body = np.array2string(a, precision=3, suppress_small=True, max_line_width=96)
    print(f"{name} {tuple(a.shape)}:\n{body}")


def plot_wavelengths(wl, hd, theta):
    """Which dims of a head of hd dims turn and how fast: wl = the wavelength 2π / f_j of each
    pair j (tokens per turn, log), the pass-through dims shaded, and a strip that colours each
    rotary dim by its pair."""
    import matplotlib.pyplot as plt

    rd = 2 * len(wl)
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


def print_recorded_errors(recs):
    """Each rung's recorded error (rel_err, norm-wise against golden) at the ladder's sizes."""
    print("no GPU here; " + recs.source)
    for r in sorted(recs.runs, key=lambda r: (r["bytes"], r["rung"])):
        nb = r["shape"]["nb"]
        print(f"  nb {nb:>5}  rung {r['rung']}: {r['kernel']:<22} rel_err {r['rel_err']:.1e}")
