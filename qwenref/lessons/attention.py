"""What notebooks/07_attention_split_t.ipynb draws and prints: the error against the split
count, the split rule against one wave of CTAs, the sparse-V sweep, the slider figure, the cache
kinds' errors and bytes, the dispatch plans, and the GPU ladder's records rung by rung with the
take-away. Every number they show is computed in the notebook's cells or read from records."""

from __future__ import annotations

import numpy as np

from ..gpu.attention import RUNGS, TOL_ATTN, TOL_ATTN_MMA
from ..layout import side_bytes_per_head, side_kinds
from .common import caption, side_legend
from .common import print_decode_kinds as print_decode_kinds  # shared with notebook 05

__all__ = """
    plot_split_errors plot_split_rule plot_sparse_v plot_knob knob_sliders print_side_costs
    print_bf16_keys plot_kinds print_plans show_rung missing_rungs ladder_title plot_errors
    print_v0_growth print_kind_times print_decode_kinds print_floor_shares take_away
""".split()

LADDER = RUNGS["attention"]  # a record's "rung" is its index here: v0 0, split 1, v1 2, mma 3


def _ok(recs):
    """The records' runs that have a time and no error."""
    return [r for r in recs.runs if r.get("median_us") and not r.get("error")]


def plot_split_errors(splits, err_golden, err_f32, T):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.3))
    ax.plot(splits, err_golden, "o-", label="golden (float64 sums, float32 out)")
    ax.plot(splits, err_f32, "s-", label="float32, sequential sums per split (model)")
    ax.axhline(np.finfo(np.float32).eps / 2, color="grey", ls=":", lw=1, label="float32 unit")
    ax.set_xscale("log", base=2)
    ax.set(yscale="log", xlabel="n_splits", ylabel="rel. error vs float64 softmax")
    ax.set_title(f"error against the split count, T = {T}")
    ax.grid(alpha=0.3)
    side_legend(ax)
    caption(fig, "golden model and a float32 model of a naive kernel, on this machine")
    return fig


def plot_split_rule(Ts, rule, need, n_sm):
    """Left: the rule's n_splits against T beside the splits that fill n_sm SMs once, per
    (nkv, nb) of `need`; right: the CTAs the rule launches against one and four per SM."""
    import matplotlib.pyplot as plt

    fig, axs = plt.subplots(1, 2, figsize=(11, 3.4))
    axs[0].plot(Ts, rule, "k-", lw=2.5, zorder=3, label="qwen4_exp: ceil(T / 96), at most 64")
    for ((nkv, nb), splits), c in zip(need.items(), ("tab:blue", "tab:orange", "tab:green")):
        lab = f"1 CTA per SM at nkv={nkv}, nb={nb}" + (" (never)" if splits > rule.max() else "")
        axs[0].axhline(splits, color=c, ls="--", lw=1, label=lab)
        axs[1].plot(Ts, rule * nkv * nb, color=c, lw=2.5, label=f"rule, nkv={nkv}, nb={nb}")
    for per_sm, ls in ((1, "--"), (4, ":")):
        axs[1].axhline(n_sm * per_sm, color="k", ls=ls, lw=0.8, label=f"{n_sm} SMs x {per_sm} CTA")
    axs[0].set(ylabel="n_splits", title="splits")
    axs[1].set(ylabel="CTAs = nb x nkv x n_splits", title="CTAs the qwen4_exp rule launches")
    for ax in axs:
        ax.loglog(base=2)  # no data: both axes log 2
        ax.set_xlabel("T (visible tokens)")
        side_legend(ax)
    caption(fig, f"golden.default_n_splits; an H200 has {n_sm} SMs")
    return fig


def plot_sparse_v(sv, thresholds, T):
    """sv = {row: dict(err, bound, skipped)} over the thresholds: error and bound, rows skipped."""
    import matplotlib.pyplot as plt

    fig, axs = plt.subplots(1, 2, figsize=(11, 3.4))
    for (name, r), c in zip(sv.items(), ("tab:blue", "tab:red")):
        axs[0].plot(thresholds, r["err"], "o-", color=c, label=f"{name}: output error")
        axs[0].plot(thresholds, r["bound"], ":", color=c, label=f"{name}: bound")
        axs[1].plot(thresholds, r["skipped"], "o-", color=c, label=name)
    for ax in axs:
        ax.axvline(1e-3, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_xlabel("sparse_v threshold (dashed: spark_model's 1e-3)")
        ax.grid(alpha=0.3)
        side_legend(ax)
    axs[0].set(yscale="log", ylabel="rel. error vs exact", title="what it costs")
    axs[1].set(ylabel="fraction of V rows skipped", title="what it saves")
    caption(fig, f"golden model on this machine, T = {T}, 4 q heads on 2 kv heads, hd 128")
    return fig


def plot_knob(p, bounds, share, keep, sparse_v, err):
    """Left: each token's softmax weight p (read or skipped by sparse V: keep) with the split
    bounds; right: each split's share of the softmax mass; the title gives the error."""
    import matplotlib.pyplot as plt

    # no tight_layout (it lays the text out twice): fixed margins keep a redraw fast
    fig, axs = plt.subplots(1, 2, figsize=(11, 3.2), gridspec_kw={"width_ratios": [3, 2]})
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.16, top=0.86, wspace=0.55)
    t = np.arange(p.size)
    axs[0].semilogy(t[keep], p[keep], ".", ms=3, label="V read")
    axs[0].semilogy(t[~keep], p[~keep], ".", ms=3, color="0.7", label="V skipped")
    axs[0].axhline(sparse_v, color="tab:red", lw=1, label=f"sparse_v = {sparse_v:.1e}")
    for b in bounds[1:-1]:
        axs[0].axvline(b, color="k", lw=0.5, ls=":")
    axs[0].set(xlabel="token (dotted: split bounds)", ylabel="softmax weight p, head 0")
    side_legend(axs[0])
    axs[1].bar(np.arange(len(share)), share, color="tab:green")
    axs[1].set(xlabel="split", ylabel="share of the softmax mass")
    skipped = 100 * (1 - keep.mean())
    title = f"n_splits = {len(share)}: error vs float64 {err:.1e}, V rows skipped {skipped:.0f}%"
    fig.suptitle(title, fontsize=10)
    src = f"golden model on this machine: one peaked row, T = {p.size}, hd 128"
    fig.text(0.01, -0.02, src, fontsize=7, color="0.35")
    plt.show()


def knob_sliders():
    """The sliders of the knob figure: n_splits 1..64, sparse_v 1e-6..1e-1 (log)."""
    import ipywidgets as w

    ns = w.IntSlider(value=8, min=1, max=64, description="n_splits")
    sv = w.FloatLogSlider(value=1e-3, base=10, min=-6, max=-1, step=0.25, description="sparse_v")
    return dict(n_splits=ns, sparse_v=sv)


def print_side_costs(errs, hd=128):
    """Per side format: stored bytes per token per kv head, and the attention error when only
    that side is stored in it (the other exact), on each row."""
    head = "".join(f"{'K only, ' + n:>17}{'V only, ' + n:>17}" for n in errs)
    print(f"{'side':<8}{'bytes':>6}{head}")
    for side in ("bf16", "q8", "turbo8", "turbo4", "turbo3", "turbo2"):
        cells = "".join(
            f"{e[side]['k_only']:17.1e}{e[side]['v_only']:17.1e}" for e in errs.values()
        )
        print(f"{side:<8}{side_bytes_per_head(side, hd):6d}{cells}")


def print_bf16_keys(errs, hd=128):
    """What bf16 keys buy: turbo-n on both sides against bf16 K with turbo-n V, per row, and
    the bytes per token per kv head the bf16 keys add."""
    for n in (4, 3, 2):
        extra = side_bytes_per_head("bf16", hd) - side_bytes_per_head(f"turbo{n}", hd)
        for name, e in errs.items():
            a, b = e[f"turbo{n}"]["err"], e[f"bf16k-turbo{n}v"]["err"]
            gain = f"{a / b:.2f}x less" if a / b >= 1.05 else f"no gain: {a / b:.2f}x"
            print(
                f"{name:<7} turbo{n} -> bf16k-turbo{n}v: error {a:.1e} -> {b:.1e} "
                f"({gain}) for {extra} more bytes per token per kv head"
            )


def plot_kinds(errs, hd=128):
    """Two panels over the cache kinds: the attention error (one bar per row, log scale) and
    the kind's stored bytes per token per kv head (linear)."""
    import matplotlib.pyplot as plt

    kinds = list(next(iter(errs.values())))
    fig, (ax, axb) = plt.subplots(1, 2, figsize=(10, 3.4), width_ratios=(3, 2))
    x = np.arange(len(kinds))
    for j, (name, res) in enumerate(errs.items()):
        ax.bar(x + (j - 0.5) * 0.4, [res[k]["err"] for k in kinds], 0.4, label=f"{name} row")
    ax.set(yscale="log", ylabel="rel. error vs float64 on exact K, V")
    ax.set_title("attention error per cache kind", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    nbytes = [sum(side_bytes_per_head(s, hd) for s in side_kinds(k)) for k in kinds]
    axb.bar(x, nbytes, 0.6, color="0.5")
    axb.set_ylabel("bytes per token per kv head (K+V)")
    axb.set_title("its size", fontsize=10)
    for a in (ax, axb):
        a.set_xticks(x, kinds, rotation=30, ha="right", fontsize=8)
    caption(fig, f"golden model on this machine: 4 q heads on 2 kv heads, hd {hd}")
    return fig


def print_plans(plans, live):
    """One line per (label, AttentionPlan): rung, kernel, split count, tolerance, why."""
    print("plan(...) on this GPU" if live else "plan_rung(...): no GPU here, so no n_splits")
    print(f"{'call':<22}{'rung':<6}{'kernel':<33}{'S':>4}{'tol':>8}  why not a faster rung")
    for label, p in plans:
        s = "-" if p.n_splits is None else str(p.n_splits)
        print(f"{label:<22}{p.rung:<6}{p.kernel:<33}{s:>4}{p.tol:8.0e}  {p.why or ''}")


def show_rung(recs, impl):
    """One rung's runs among the records: kernel, size, time, % of copy and floor, error
    against golden (and the tolerance its precision implies)."""
    runs = [r for r in recs.runs if r.get("rung") == LADDER.index(impl)]
    print(recs.source if runs else f"no runs of rung {impl!r} in: {recs.source}")
    for r in sorted(runs, key=lambda r: (r["shape"].get("kind", ""), r["shape"].get("T", 0))):
        size = f"T={r['shape'].get('T')}, {r['shape'].get('kind')}"
        if r.get("error"):
            print(f"{r.get('kernel')} {size}: failed ({r['error']})")
            continue
        print(
            f"{r['kernel']:<34}{size:<20}{r['median_us']:10.1f} us "
            f"{r['pct_of_copy']:5.1f}% copy {r.get('pct_of_floor', np.nan):5.1f}% floor  "
            f"vs golden {r['rel_err']:.1e} (tol {r['tol']:.0e})"
        )


def missing_rungs(recs):
    """The attention rungs with no timed run in the records, in ladder order."""
    ok = _ok(recs)
    return [impl for i, impl in enumerate(LADDER) if not any(r.get("rung") == i for r in ok)]


def _no_runs(recs):
    """'' or a note naming the rungs the records hold no runs of."""
    missing = [f"rung {LADDER.index(impl)} ({impl})" for impl in missing_rungs(recs)]
    return f"{', '.join(missing)}: no runs in these records" if missing else ""


def ladder_title(recs):
    """The ladder figure's title, naming the rungs it cannot show (no runs recorded)."""
    note = _no_runs(recs)
    return "attention: every rung, every cache kind" + (f"; {note}" if note else "")


def plot_errors(recs, golden_err):
    """Per cache kind of the records: golden against float64 on the same stored values
    (golden_err = {kind: error}, this machine) beside each recorded GPU rung against golden
    (the worst over the recorded lengths, its T written on the bar)."""
    import matplotlib.pyplot as plt

    good = [r for r in _ok(recs) if r.get("rel_err") is not None]
    kinds = sorted({r["shape"]["kind"] for r in good})
    bars = {"golden vs float64, T = 1024": ([golden_err[k] for k in kinds], [])}
    for i in sorted({r["rung"] for r in good}):
        rs = [[r for r in good if r["rung"] == i and r["shape"]["kind"] == k] for k in kinds]
        worst = [max(x, key=lambda r: r["rel_err"], default=None) for x in rs]
        bars[f"GPU {LADDER[i]} vs golden, worst over T"] = (
            [w and w["rel_err"] for w in worst],
            worst,
        )
    fig, ax = plt.subplots(figsize=(7.5, 3.3))
    x, wd = np.arange(len(kinds)), 0.8 / len(bars)
    for j, (label, (vals, runs)) in enumerate(bars.items()):
        xs = x + (j - (len(bars) - 1) / 2) * wd
        ax.bar(xs, [np.nan if v is None else v for v in vals], wd, label=label)
        for xi, r in ((xi, r) for xi, r in zip(xs, runs) if r):
            ax.text(xi, r["rel_err"] * 1.15, f"{r['shape']['T'] // 1024}k", ha="center", size=6)
    ax.axhline(TOL_ATTN, color="k", ls="--", lw=1, label=f"tol v0, split, v1 ({TOL_ATTN:.0e})")
    ax.axhline(TOL_ATTN_MMA, color="k", ls=":", lw=1, label=f"tol mma ({TOL_ATTN_MMA:.0e})")
    ax.set_xticks(x, kinds)
    ax.set(yscale="log", ylabel="norm-wise rel. error")
    note = _no_runs(recs)  # a rung with no runs has no bar: the title names it
    ax.set_title(
        "golden against float64, each GPU rung against golden (T on each GPU bar)"
        + (f"\n{note}" if note else "")
    )
    side_legend(ax)
    caption(fig, "golden: this machine, T = 1024; GPU: " + recs.source)
    return fig


def print_v0_growth(recs):
    """v0's error at the shortest and the longest recorded T, per kind, against sqrt(T)."""
    good = [r for r in _ok(recs) if r.get("rel_err") and r["rung"] == LADDER.index("v0")]
    for kind in sorted({r["shape"]["kind"] for r in good}):
        rs = sorted((r for r in good if r["shape"]["kind"] == kind), key=lambda r: r["shape"]["T"])
        a, b = rs[0], rs[-1]
        ta, tb = a["shape"]["T"], b["shape"]["T"]
        if a is b:
            print(f"v0 {kind}: one length recorded (T={ta}), no growth to show")
            continue
        print(
            f"v0 {kind:<7}T {ta} -> {tb} ({tb / ta:.0f}x): error {a['rel_err']:.1e} -> "
            f"{b['rel_err']:.1e}, {b['rel_err'] / a['rel_err']:.1f}x (sqrt(T) would give "
            f"{np.sqrt(tb / ta):.1f}x)"
        )


def print_kind_times(recs):
    """Per rung and T, each kind's time and its ratio to v1 bf16's; then the bytes ratios."""
    ok, v1 = _ok(recs), LADDER.index("v1")
    kinds = sorted({r["shape"]["kind"] for r in ok}, key=lambda k: (k != "bf16", k))
    at = {(r["rung"], r["shape"]["T"], r["shape"]["kind"]): r for r in ok}
    ref = {t: r["median_us"] for (i, t, k), r in at.items() if i == v1 and k == "bf16"}
    print(recs.source)
    print((f"{'rung':<6}{'T':>7}" + "".join(f"{k:>15}{'':10}" for k in kinds)).rstrip())
    for i, t in sorted({(i, t) for i, t, _ in at}):
        cells = ""
        for k in kinds:
            r = at.get((i, t, k))
            rel = f"({r['median_us'] / ref[t]:.2f}x)" if r and t in ref else ""
            cells += f"{r['median_us']:>12.1f} us {rel:<10}" if r else f"{'-':>15}{'':10}"
        print(f"{LADDER[i]:<6}{t:>7}{cells}".rstrip())
    print("(x) = time / v1 bf16's time at the same T")
    t = max(ref, default=None)
    by = {k: r["bytes"] for (i, tt, k), r in at.items() if i == v1 and tt == t}
    for kind in (k for k in kinds if k != "bf16" and "bf16" in by and k in by):
        print(f"{kind}: {by['bf16'] / by[kind]:.2f}x fewer bytes than bf16 per call (T={t})")


def print_floor_shares(recs, other, name):
    """Per kind and T of the ladder records recs: v1's and mma's % of their read floor, beside
    the one-row decode_attention runs of `other`, another device's records (`name`) each on its
    own device's floor: a share of the floor compares across devices, a time does not."""
    ok, (v1, mma) = _ok(recs), (LADDER.index(i) for i in ("v1", "mma"))
    pct = {(r["rung"], r["shape"]["kind"], r["shape"]["T"]): r["pct_of_floor"] for r in ok}
    theirs = {
        (r["shape"]["kind"], r["shape"]["T"]): r
        for r in other.runs
        if str(r.get("kernel")).startswith("decode_attention") and r["shape"].get("nb") == 1
    }
    print(f"ladder: {recs.source}\n{name}: {other.source}")
    print(f"% of the read floor, one row; {name}: the rung whose tolerance its run carries")
    print(f"{'kind':<8}{'T':>7}{'v1, ladder':>12}{'mma, ladder':>13}{name:>14}")
    for kind, t in sorted({(k, t) for i, k, t in pct if i == v1 and (k, t) in theirs}):
        r = theirs[(kind, t)]
        rung = "mma" if r["tol"] == TOL_ATTN_MMA else "v1"
        m = f"{pct[(mma, kind, t)]:.1f}%" if (mma, kind, t) in pct else "-"
        theirs_pct = f"{rung} {r['pct_of_floor']:.1f}%"
        print(f"{kind:<8}{t:>7}{pct[(v1, kind, t)]:11.1f}%{m:>13}{theirs_pct:>14}")


def take_away(recs, sweep):
    """The take-away's numbers, from the records: per kind and size the fastest rung against
    v0 and the copy rate, mma against v1; the rungs with no runs; the sweep's best split count
    against the plan's."""
    print(recs.source)
    ok, (v0, v1, mma) = _ok(recs), (LADDER.index(i) for i in ("v0", "v1", "mma"))
    for key in sorted({(r["shape"]["kind"], r["shape"]["T"]) for r in ok}):
        rs = {r["rung"]: r for r in ok if (r["shape"]["kind"], r["shape"]["T"]) == key}
        best = min(rs.values(), key=lambda r: r["median_us"])
        line = (
            f"{key[0]:<7}T={key[1]:<7} fastest {LADDER[best['rung']]:<4} {best['kernel']:<28} "
            f"{best['median_us']:7.1f} us, {best['pct_of_copy']:4.1f}% of copy"
        )
        if v0 in rs and rs[v0] is not best:
            line += f", {rs[v0]['median_us'] / best['median_us']:.0f}x v0"
        if v1 in rs and mma in rs:
            line += f"; mma {rs[v1]['median_us'] / rs[mma]['median_us']:.1f}x v1"
        print(line)
    print("rungs with no runs in these records:", ", ".join(missing_rungs(recs)) or "none")
    good = _ok(sweep)
    if not good:
        print("n_splits sweep: none recorded here")
    for i in sorted({r["rung"] for r in good}):
        rs = [r for r in good if r["rung"] == i]
        b = min(rs, key=lambda r: r["median_us"])
        line = f"sweep {LADDER[i]} {b['kernel']}: best n_splits {b['shape']['n_splits']}"
        line += f" ({b['median_us']:.1f} us)"
        for r in (r for r in rs if r["shape"].get("plan")):
            line += f", the plan's {r['shape']['n_splits']}: {r['median_us']:.1f} us"
        print(line)
