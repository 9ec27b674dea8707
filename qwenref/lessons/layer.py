"""Drawings and printouts of notebooks/08_layer.ipynb (the decoder layer): the parity run with
transformers, the golden step's time per stage, the GEMV ladder's joined kernels, the bytes of
each GPU stage, the GPU step per stage (eager, graph replay) and the host's share of an eager
step, what q8 weights and the cache kinds cost, and the GPU layer against golden. What they
show (the parity run itself in qwenref.parity, the stage times in qwenref.stage_time, the
layer's records read by qwenref.nbrecords.layer_steps, the variants' errors) is computed in the
notebook."""

from __future__ import annotations

import os

import numpy as np

from ..gpu.layer import STAGES
from .common import caption, side_legend

__all__ = """
    show_parity plot_golden_stages caption_joined_kernels print_stage_bytes plot_gpu_steps
    print_step_times print_host_side plot_q8_costs plot_gpu_errors
""".split()


def show_parity(p):
    """Print each variant's errors against transformers and plot them per row."""
    import matplotlib.pyplot as plt

    print(
        f"the layer's update |ref - x| / |x| = {p['update_norm']:.2f} (parity is not the residual)"
    )
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for (name, v), st in zip(p["variants"].items(), "osv^D<>p"):
        print(
            f"{name:<24} all rows {v['all']:.1e}   worst row {max(v['per_row']):.1e}   "
            f"update (y - x) {v['update']:.1e}"
        )
        ax.plot(v["per_row"], st + "-", ms=4, label=name)
    ax.axhline(p["tolerance"], color="k", ls="--", lw=1, label=f"test tolerance {p['tolerance']}")
    ax.axhline(np.finfo(np.float32).eps, color="grey", ls=":", lw=1, label="float32 eps")
    ax.axvline(p["chunks"][0] - 0.5, color="grey", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel(f"row (position); decode steps right of the line at {p['chunks'][0]}")
    ax.set_ylabel("rel. error vs transformers")
    ax.set_title("golden layer vs transformers' Qwen3_5DecoderLayer, per row")
    side_legend(ax)
    caption(fig, f"torch {p['torch']}, transformers {p['transformers']}, {p['date']}")


def plot_golden_stages(us, groups, title):
    """The golden step's stages (us: {stage: µs} in call order) as bars in ms, coloured by
    their group (groups: {group: stage names})."""
    import matplotlib.pyplot as plt

    colors = dict(zip(groups, ("tab:blue", "tab:orange", "tab:grey")))
    group_of = {n: g for g, names in groups.items() for n in names}
    fig, ax = plt.subplots(figsize=(7, 3.6))
    names = list(us)
    ax.barh(names, [us[n] / 1e3 for n in names], color=[colors[group_of[n]] for n in names])
    for g, c in colors.items():
        ax.barh([names[0]], [0], color=c, label=g)  # legend entries only
    ax.invert_yaxis()
    ax.set_xlabel("ms (best of the steps)")
    ax.set_title(title)
    side_legend(ax)
    caption(fig, "golden model, timed on this machine just now")


def caption_joined_kernels(fig, recs):
    """Under a ladder figure (nbutil.plot_ladder): a legend line ending in * joins the kernels
    one rung picks per matrix shape (their names' common stem); name them, each with the
    projections it ran."""
    groups = {}  # (rung, weights) -> {kernel: [proj, ...]}
    for r in (r for r in recs.runs if r.get("gbps") and r.get("bytes")):
        key = (r.get("rung", 0), r["shape"].get("weights"))
        groups.setdefault(key, {}).setdefault(r["kernel"], []).append(r["shape"].get("proj"))
    lines = []
    for (rung, _), kernels in sorted(groups.items(), key=str):
        if len(kernels) > 1:
            stem = os.path.commonprefix(sorted(kernels)).rstrip("_") + "*"
            each = ", ".join(f"{k} ({', '.join(p)})" for k, p in sorted(kernels.items()))
            lines.append(
                f"rung {rung}: {stem} joins {len(kernels)} kernels, picked per shape: {each}"
            )
    if lines:
        caption(fig, "\n".join(lines))


def print_stage_bytes(sel, dense, budget):
    """Per stage, the bytes of one step with the indexer (sel) and with every row dense
    (dense), each {stage: bytes, "total": bytes}, in MiB and shares of the step."""
    print(f"{'stage':<14}{'indexer (budget ' + str(budget) + ')':>26}{'dense rows':>22}")
    for st in STAGES + ("total",):
        a, b = sel.get(st, 0), dense.get(st, 0)
        print(
            f"{st:<14}{a / 2**20:12.2f} MiB {100 * a / sel['total']:5.1f} %"
            f"{b / 2**20:12.2f} MiB {100 * b / dense['total']:5.1f} %"
        )


def _step_us(row, kind):
    """The step's µs: "busy" (the stages' sum), "graph" or "eager"; NaN when not recorded."""
    r = row["stages"].get("total") if kind == "busy" else row[kind]
    return r["median_us"] if r else np.nan


def plot_gpu_steps(steps, source):
    """steps: nbrecords.layer_steps. Left: GPU time per stage, one bar per row count, stages in
    order; right: per row count, the stages' sum (the GPU busy), graph replay and eager step."""
    import matplotlib.pyplot as plt

    fig, axs = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [3, 2]})
    if not steps:
        for ax in axs:
            ax.text(0.5, 0.5, "no layer runs: " + source, ha="center", va="center")
            ax.set_axis_off()
        return
    names = [s for s in STAGES if any(s in row["stages"] for row in steps.values())]
    y, h = np.arange(len(names)), 0.8 / len(steps)
    for j, (nb, row) in enumerate(steps.items()):
        us = [row["stages"][s]["median_us"] if s in row["stages"] else 0 for s in names]
        axs[0].barh(y + (j - (len(steps) - 1) / 2) * h, us, h, label=f"nb = {nb}")
    axs[0].set_yticks(y, names, fontsize=8)
    axs[0].invert_yaxis()
    axs[0].set_xlabel("GPU µs per stage (queued: events after each stage)")
    axs[0].set_title("one decode step of the 27B layer, q8 weights and cache")
    x, wd = np.arange(len(steps)), 0.8 / 3
    bars = (("busy", "sum of stages"), ("graph", "graph replay"), ("eager", "eager"))
    for i, (kind, label) in enumerate(bars):
        axs[1].bar(x + (i - 1) * wd, [_step_us(r, kind) for r in steps.values()], wd, label=label)
    axs[1].set_xticks(x, [f"nb = {nb}" for nb in steps])
    axs[1].set_ylabel("µs per step")
    axs[1].set_title("the whole step three ways")
    for ax in axs:
        side_legend(ax)
    caption(fig, source)


def print_step_times(steps, source):
    """Per stage: the bytes it must move, its time and % of the copy rate, per row count; then
    per row count the eager step, graph replay and the stages' sum, and eager - graph."""
    print(source)
    if not steps:
        print("no layer runs in these records")
        return
    head = "".join(f"{'nb=' + str(nb) + ': us':>12}{'% copy':>8}" for nb in steps)
    print(f"{'stage':<14}{'MiB (nb=' + str(min(steps)) + ')':>13}{head}")
    for s in STAGES + ("total",):
        rows = [steps[nb]["stages"].get(s) for nb in steps]
        if any(rows):
            cells = "".join(
                f"{r['median_us']:12.1f}{r['pct_of_copy']:8.1f}" if r else f"{'-':>12}{'-':>8}"
                for r in rows
            )
            print(f"{s:<14}{next(r for r in rows if r)['bytes'] / 2**20:13.2f}{cells}")
    for nb, row in steps.items():
        eager, graph, busy = (_step_us(row, k) for k in ("eager", "graph", "busy"))
        n = len(row["stages"]) - ("total" in row["stages"])
        print(
            f"nb={nb}: eager {eager:.0f} us, graph replay {graph:.0f} us, stages' sum {busy:.0f} "
            f"us; eager - graph = {eager - graph:.0f} us over {n} stages, "
            f"{(eager - graph) / n:.0f} us a stage"
        )


def print_host_side(host, dev, eager):
    """Per stage the host's µs to queue it (host) and the GPU's to run it (dev, with "total"),
    then the totals and the eager step's µs."""
    print(f"{'stage':<22}{'host us':>9}{'GPU us':>9}   (the host queues, the GPU runs)")
    for name, us in host.items():
        print(f"{name:<22}{us:9.1f}{dev.get(name, np.nan):9.1f}")
    print(f"{'total':<22}{sum(host.values()):9.1f}{dev['total']:9.1f}   eager: {eager:.0f} us")


def plot_q8_costs(w_err, wq_err, T, n_dec):
    """Per variant ({name: (error on y, error on y - x)}) both errors as bars, the weights'
    own Q8_0 round-trip error as a line."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = list(w_err)
    xx = np.arange(len(names))
    ax.bar(xx - 0.2, [w_err[n][0] for n in names], 0.4, label="output y")
    ax.bar(xx + 0.2, [w_err[n][1] for n in names], 0.4, label="the layer's update y - x")
    ax.axhline(wq_err, color="k", ls="--", lw=1, label="Q8_0 error of the weights")
    ax.set_xticks(xx, [n.replace(", ", ",\n") for n in names], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("rel. error vs f32/f32")
    ax.set_title(
        f"what q8 weights and the cache kinds cost: {n_dec} decode steps after a {T}-token prefill",
        fontsize=9,
    )
    side_legend(ax)
    caption(fig, "golden model on this machine")


def plot_gpu_errors(err, source, what, tol):
    """GPU layer against golden ({name: rel. error}) as bars, the tolerance `tol` as a line."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.9 + 0.35 * max(len(err), 1)))
    ax.barh(list(err), list(err.values()), color="tab:green")
    ax.axvline(tol, color="k", ls="--", lw=1, label=f"the bench's tolerance {tol}")
    ax.set_xscale("log")
    ax.invert_yaxis()
    ax.set_xlabel("rel. error, GPU layer vs golden layer")
    ax.set_title(f"GPU layer against golden: {what}")
    ax.tick_params(axis="y", labelsize=8)
    side_legend(ax)
    caption(fig, source)
