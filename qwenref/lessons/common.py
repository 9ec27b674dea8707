"""What the lesson modules of more than one notebook share (each re-exports what its notebook
uses, so a notebook imports its own module only): the error strip, kernel excerpt lines, figure
notes, and the record printouts the ladder sections end with (fastest rung, runs above their
read floor by qwenref.floor's rule, the stage's runs, GPU-timed peers, the take-away)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .. import excerpts, floor, nbutil

__all__ = """
    error_strip caption side_legend source_below show_lines restyle_ladder print_fastest
    print_above_floor print_stage print_peers takeaway GOLDEN_NOTE note readable_log tidy_ladder
    print_recorded_errors print_takeaway_times print_decode_kinds plot_gpu_vs_golden
""".split()


def error_strip(ax, rows, title="", edge=1e-9):
    """One row per source: the median, 99th percentile and maximum of its |error| on a log
    axis, so distributions that nearly coincide stay readable. rows = {label: errors}. Exact
    elements (error 0, bit-equal to the reference) have no place on a log axis: each label says
    what share of the elements they are, and anything below `edge` (far below float32's
    resolution for values of order 1) is drawn at the left edge."""
    marks = (("median", 50, "o"), ("99th pct", 99, "s"), ("max", 100, "^"))
    errs = {k: np.abs(np.ravel(np.asarray(v, np.float64))) for k, v in rows.items()}
    labels = []
    for y, (label, e) in enumerate(errs.items()):
        zero = float(np.mean(e == 0))
        labels.append(label + (f"\n({100 * zero:.0f}% of elements exact)" if zero >= 0.005 else ""))
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


def caption(fig, text):
    """Where a figure's numbers come from, under its axes (after tight_layout)."""
    fig.tight_layout()
    fig.text(0.01, -0.02, text, fontsize=7, color="0.35")


def side_legend(ax):
    """A legend beside the axes, never over the data."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def source_below(fig, ax, text):
    """Write `text` (where the figure's data came from) under ax's legend, which sits below
    the axes: call after tight_layout, once the legend has its place."""
    below = ax.get_legend().get_window_extent(fig.canvas.get_renderer())
    y = fig.transFigure.inverted().transform((0, below.y0))[1] - 0.06
    fig.text(0.01, y, text, fontsize=7)


def show_lines(excerpt, title, first, last, more=0):
    """Show the lines of a kernel excerpt (titled `kernels_cuda/<title>`) from the first one
    containing `first` to the next one containing `last`, and `more` lines after it."""
    excerpts.show_lines(excerpt, f"kernels_cuda/{title}", first, last, more)


def restyle_ladder(ax, recs):
    """After nbutil.plot_ladder: the earlier rungs' markers larger and hollow, so two rungs
    at the same point (a launch-bound size) both stay visible; every run above its read floor
    ringed, with a legend line naming its reason (qwenref.floor; print_above_floor says more)."""
    rungs = [ln for ln in ax.get_lines() if str(ln.get_label()).startswith("rung ")]
    for i, ln in enumerate(rungs):
        ln.set_markersize(max(11 - 2.5 * i, 5))
        ln.set_markerfacecolor("none" if i < len(rungs) - 1 else ln.get_color())
    over = nbutil.above_floor(recs)
    if over:
        xy = [(r["bytes"], r["gbps"]) for r in over]
        why = dict.fromkeys(floor.REASONS[floor.floor_reason(r, recs.l2_bytes)] for r in over)
        label = "above its floor: " + ", ".join(why)
        ax.plot(*zip(*xy), "o", ms=17, mfc="none", mec="red", mew=1.2, ls="none", label=label)
    if ax.get_legend():  # redrawn, so its markers match the lines'
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return ax


def _size(r):
    sh = r.get("shape", {})
    return ", ".join(f"{k}={sh[k]}" for k in ("nb", "rows", "n") if k in sh)


def _by_size(recs):
    """{size: {rung: run}} in ascending bytes."""
    out = {}
    for r in sorted(recs.runs, key=lambda r: (r.get("bytes", 0), r.get("rung", 0))):
        if r.get("median_us"):
            out.setdefault(_size(r), {})[r.get("rung")] = r
    return out


def _default_text(rungs, best):
    """The default rung beside the fastest one: that it is the fastest, or its time and ratio."""
    dflt = next((r for r in rungs.values() if r.get("default")), None)
    if dflt is None or dflt is best:
        return "(it is the default rung)" if dflt else "(no default rung recorded)"
    ratio = dflt["median_us"] / best["median_us"]
    return f"default rung {dflt['rung']}: {dflt['median_us']:.1f} us, {ratio:.2f}x the fastest"


def _pct(v):
    return f"{v:.0f}%" if v is not None else "-"


def print_fastest(recs):
    """A table: at each recorded size (ascending), the fastest rung with its % of copy, % of
    floor and speed-up over rung 0, and the default rung beside it."""
    print(recs.source)
    if not recs.runs:
        return
    print(f"{'size':<18}{'fastest rung':<27}{'us':>7}{'copy':>6}{'floor':>7}{'x rung 0':>9}  |")
    for size, rungs in _by_size(recs).items():
        best = min(rungs.values(), key=lambda r: r["median_us"])
        v0 = rungs.get(0)
        x0 = f"{v0['median_us'] / best['median_us']:.1f}" if v0 else "-"
        print(
            f"{size:<18}{best['rung']} {best['kernel']:<25}{best['median_us']:7.1f}"
            f"{_pct(best.get('pct_of_copy')):>6}{_pct(best.get('pct_of_floor')):>7}{x0:>9}  | "
            + _default_text(rungs, best)
        )


def print_above_floor(recs, l2=None):
    """Name every run faster than its read floor with its reason by qwenref.floor's rule, its
    bytes beside the L2's size. l2: the L2's size in bytes (None: the records')."""
    over = nbutil.above_floor(recs)
    if not over:
        print("runs above their read floor: " + ("none" if recs.runs else "no runs recorded"))
        return
    l2 = l2 or recs.l2_bytes
    for r in sorted(over, key=lambda r: (r["bytes"], r.get("rung", 0))):
        print(
            f"above its floor: rung {r.get('rung')} at {_size(r)}, {r['pct_of_floor']:.0f}% of "
            f"floor: {floor.floor_note(r, l2)}"
        )


def _floor_text(r, ladder):
    """r's % of floor: recorded, else from the ladder's floor at the same bytes, else an upper
    bound from the ladder's smallest size above (a launch reading fewer bytes is no slower),
    with a second line saying so."""
    if r.get("pct_of_floor") is not None:
        return f"{r['pct_of_floor']:.0f}% of floor"
    above = [x for x in ladder.runs if x.get("floor_us") and x["bytes"] >= r["bytes"]]
    if not above:
        return "floor not recorded at this size"
    f = min(above, key=lambda x: x["bytes"])
    pct = 100 * f["floor_us"] / r["median_us"]
    if f["bytes"] == r["bytes"]:
        return f"{pct:.0f}% of floor (the ladder's, same bytes)"
    return (
        f"at most {pct:.0f}% of floor\n    (no floor at this size: the ladder's at "
        f"{f['bytes'] / 2**20:.2f} MiB, {f['floor_us']:.2f} us, bounds it: fewer bytes "
        "read no slower)"
    )


def print_stage(stage, ladder):
    """The stage's own bench runs (the default rung), sizes ascending, each with % of copy and
    % of floor (_floor_text); the ladder lends its floors where the stage has none."""
    print(stage.source)
    for r in sorted(stage.runs, key=lambda r: r["bytes"]):
        print(
            f"  {r['kernel']} {_size(r)} ({r['bytes'] / 2**20:.2f} MiB): {r['median_us']:.2f} us, "
            f"{r['pct_of_copy']:.1f}% of copy, {_floor_text(r, ladder)}"
        )


def print_peers(recs):
    """The records' peer comparisons whose times were taken on the GPU (queued or graph
    replay); a host-timed loop measures Python's launch rate, not the GPU, so it is left out."""
    gpu_timed = [r for r in recs.runs if r.get("peer") and r.get("timing") in ("queued", "graph")]
    if not gpu_timed:
        print("no peer timed on the GPU is recorded for this stage: nothing to compare with")
    for r in gpu_timed:
        print(
            f"{r['kernel']} {_size(r)}: {r['median_us']:.2f} us; {r['peer']} "
            f"{r['peer_median_us']:.2f} us ({r['timing']} timing, both)"
        )


def takeaway(ladder, stage):
    """The numbers the take-away quotes, from the records: at the smallest and the largest
    recorded size, the fastest rung beside the default one; the runs above their floor; the
    stage's own runs with their % of floor."""
    print(ladder.source)
    sizes = list(_by_size(ladder).items())
    picks = list(zip(("smallest", "largest"), [sizes[0], sizes[-1]])) if len(sizes) > 1 else []
    for which, (size, rungs) in picks or [("only", s) for s in sizes]:
        best = min(rungs.values(), key=lambda r: r["median_us"])
        v0 = rungs.get(0)
        print(
            f"  {which} size, {size}: fastest rung {best['rung']}, {best['median_us']:.1f} us, "
            f"{_pct(best.get('pct_of_copy'))} of copy, {_pct(best.get('pct_of_floor'))} of floor"
            + (f", {v0['median_us'] / best['median_us']:.1f}x rung 0" if v0 else "")
        )
        print(f"    {_default_text(rungs, best)}")
    print_above_floor(ladder)
    print_stage(stage, ladder)


# ---- the cache notebooks' (04, 05) figure notes, log axes and record printouts ---------------
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


# ---- decode attention's records per cache kind (notebooks 05 and 07) ------------------------


def print_decode_kinds(recs, Ts=(32768, 131072), nbs=(1, 4)):
    """The decode_attention runs of recs per cache kind, one column per (rows nb, tokens T):
    µs / % of the read floor / × SDPA (the peer's time over ours: above 1 is faster). The rung
    is the one whose tolerance the run carries (TOL_ATTN_MMA: mma, else v1)."""
    from ..gpu.attention import TOL_ATTN_MMA
    from ..layout import CACHE_KINDS

    at = {
        (r["shape"]["kind"], r["shape"]["T"], r["shape"]["nb"]): r
        for r in recs.runs
        if str(r.get("kernel")).startswith("decode_attention") and r.get("median_us")
    }
    cols = [(t, nb) for nb in nbs for t in Ts]
    print(recs.source)
    print("µs / % of floor / × SDPA per column; rung: the one whose tolerance the run carries")
    print(f"{'kind':<14}{'rung':<5}" + "".join(f"{f'T={t} nb={nb}':>22}" for t, nb in cols))
    for kind in (k for k in CACHE_KINDS if any(key[0] == k for key in at)):
        rs = [at.get((kind, t, nb)) for t, nb in cols]
        rung = "mma" if next(r for r in rs if r)["tol"] == TOL_ATTN_MMA else "v1"
        cells = "".join(
            f"{r['median_us']:10.1f} {_pct(r.get('pct_of_floor')):>4} {r['speedup']:5.2f}x"
            if r and r.get("speedup")
            else f"{'-':>22}"
            for r in rs
        )
        print(f"{kind:<14}{rung:<5}{cells}")


# ---- the GPU's stored values against golden's (notebooks 04 and 05) -------------------------
def plot_gpu_vs_golden(pairs, recs, where):
    """Left: GPU − golden against golden per kernel's value samples {kernel: (golden, gpu)}, the
    ones that differ ringed. Right: each run's ‖gpu − golden‖ / ‖golden‖ over all stored values
    (its rel_err; rung 0 left of rung 1) against its tolerance. where: the data's source. The
    first kernel's samples are rings, the others' dots inside them; a rel_err of 0 sits at 1e-9."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 3.4), gridspec_kw=dict(width_ratios=[1, 1.4]))
    for i, (kernel, (g, m)) in enumerate(pairs.items()):
        g, dv = np.asarray(g, np.float64), np.subtract(m, g, dtype=np.float64)
        st = dict(marker="o", ms=4, mfc="none", mew=0.7) if i == 0 else dict(marker=".", ms=2)
        a.plot(g, dv, ls="none", label=f"{kernel}: {(dv != 0).sum()} of {g.size} differ", **st)
        a.plot(g[dv != 0], dv[dv != 0], "o", ms=10, mfc="none", color="red", mew=1.2)
    lim = 1.4 * max([np.abs(np.subtract(m, g)).max() for g, m in pairs.values()] + [1e-6])
    a.set(ylim=(-lim, lim), xlabel="golden value (one sample)", ylabel="GPU − golden")
    a.set_title("sampled stored values: the GPU's against golden's", fontsize=9)
    a.legend(fontsize=7, loc="lower left", markerscale=2)
    cell = lambda r: (r["shape"].get("kind", ""), r["shape"].get("nb", 0))
    cells = sorted({cell(r) for r in recs.runs})
    for rung in sorted({r.get("rung", 0) for r in recs.runs}):
        rs = [r for r in recs.runs if r.get("rung", 0) == rung]
        xs = [cells.index(cell(r)) + 0.15 * (2 * rung - 1) for r in rs]
        ys = [max(r["rel_err"], 1e-9) for r in rs]
        b.plot(xs, ys, "o^sv"[rung % 4], ls="none", label=f"rung {rung}: {rs[0]['kernel']}")
    for tol in sorted({r["tol"] for r in recs.runs}):
        b.axhline(tol, color="k", ls="--", lw=1, label=f"tolerance {tol:g}")
    b.set_xticks(range(len(cells)), [f"{k}\nnb={nb}" for k, nb in cells], fontsize=8)
    b.set(yscale="log", ylabel="‖GPU − golden‖ / ‖golden‖")
    zero = "\n(0 = bit-exact, drawn at 1e-9)" * (0 in [r["rel_err"] for r in recs.runs])
    b.set_title("every run of the ladder, all its stored values" + zero, fontsize=9)
    side_legend(b)
    fig.tight_layout()
    note(b, where)
    return fig
