"""Drawings and printouts of notebooks/00_overview.ipynb: the map of one decode step, the queued
timing sketch, each cache kind's decode cost, the L2 size, the read floor's table and the
ladder's summary (each family's v0 against its fastest rung). What they show is computed in
the notebook."""

from __future__ import annotations

import numpy as np

__all__ = """
draw_decode_step draw_queued_timing plot_cache_costs print_l2 print_floor_runs size_text
print_ladder_summary plot_ladder_summary
""".split()

# ---- the map of one decode step --------------------------------------------------------------

_COLOURS = {
    "norm": "#cfe2f3",
    "gemv": "#eeeeee",
    "rope": "#d9ead3",
    "wht": "#fff2cc",
    "kvcache": "#fce5cd",
    "indexer": "#ead1dc",
    "attention": "#f4cccc",
    "io": "#ffffff",
}
_WIDE, _NARROW, _HB, _SIDE = 4.8, 3.1, 0.74, 3.9
# key: (x centre, y centre, width, text, stage)
_BOXES = {
    "x": (0, 11.0, _WIDE, "x  [nb, H]", "io"),
    "n1": (0, 10.0, _WIDE, "input_layernorm (zero-centred RMSNorm)\nnorm · 01", "norm"),
    "proj": (
        0,
        9.0,
        _WIDE,
        "q_proj → [q | gate] per head,  k_proj,  v_proj,\nindexer.qk_proj      gemv · 08",
        "gemv",
    ),
    "q": (-_SIDE, 7.8, _NARROW, "q_norm + RoPE → q\n(gate kept aside)\nrope · 02", "rope"),
    "k": (0, 7.8, _NARROW, "k_norm + RoPE → k ;   v\nrope · 02", "rope"),
    "iq": (
        _SIDE,
        7.8,
        _NARROW,
        "indexer q: norm + RoPE ;\nraw indexer key → cache\nindexer · 06",
        "indexer",
    ),
    "wht": (0, 6.6, _NARROW, "WHT over head_dim\n(turbo, tq; bf16k-turbo V only)\nwht · 03", "wht"),
    "bk": (_SIDE, 6.6, _NARROW, "block keys of completed\nblocks → cache\nindexer · 06", "indexer"),
    "app": (0, 5.4, _NARROW, "quantize + append K, V\nto the KVCache\nkvcache · 04, 05", "kvcache"),
    "sel": (
        _SIDE,
        5.4,
        _NARROW,
        "block scores → keep kblk\nblocks + tail\nindexer · 06",
        "indexer",
    ),
    "att": (
        0,
        4.1,
        _WIDE,
        "split-T decode attention + LSE combine\n"
        "over the cache as stored (q rotated if K is)\nattention · 07",
        "attention",
    ),
    "inv": (
        0,
        3.0,
        _WIDE,
        "inverse WHT (if V rotated),  · sigmoid(gate)\nwht · 03,  attention · 07",
        "attention",
    ),
    "o": (0, 2.0, _WIDE, "o_proj\ngemv · 08", "gemv"),
    "n2": (
        0,
        1.0,
        _WIDE,
        "s = x + attn ;  post_attention_layernorm(s)   (fused)\nnorm · 01",
        "norm",
    ),
    "mlp": (0, 0.0, _WIDE, "SwiGLU MLP ;  y = s + mlp(·)\nlayer · 08", "gemv"),
}
_STRAIGHT = [
    ("x", "n1"),
    ("n1", "proj"),
    ("proj", "k"),
    ("k", "wht"),
    ("wht", "app"),
    ("app", "att"),
    ("iq", "bk"),
    ("bk", "sel"),
    ("att", "inv"),
    ("inv", "o"),
    ("o", "n2"),
    ("n2", "mlp"),
    ("proj", "q"),
    ("proj", "iq"),
]


def _top(k):
    return _BOXES[k][0], _BOXES[k][1] + _HB / 2 + 0.04


def _bottom(k):
    return _BOXES[k][0], _BOXES[k][1] - _HB / 2 - 0.04


def _side(k, sign):
    bx, by, bw = _BOXES[k][:3]
    return bx + sign * (bw / 2 + 0.04), by


def _path(ax, points, color="k", ls="-"):
    """A polyline whose last segment ends in an arrowhead."""
    xs, ys = zip(*points)
    ax.plot(xs[:-1], ys[:-1], color=color, ls=ls, lw=1)
    ax.annotate(
        "",
        xy=points[-1],
        xytext=points[-2],
        arrowprops=dict(arrowstyle="->", lw=1, color=color, ls=ls, shrinkA=0, shrinkB=0),
    )


def draw_decode_step(ax=None):
    """The data flow of one decode step: a box per stage (stage name · notebook), arrows for
    the data, the gate (purple) and the residual (blue) drawn where they skip stages."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    ax = ax or plt.subplots(figsize=(12, 10))[1]
    for bx, by, bw, text, stage in _BOXES.values():
        box = (bx - bw / 2, by - _HB / 2)
        ax.add_patch(
            FancyBboxPatch(
                box, bw, _HB, boxstyle="round,pad=0.04", fc=_COLOURS[stage], ec="k", lw=0.8
            )
        )
        ax.text(bx, by, text, ha="center", va="center", fontsize=8)
    for a, b in _STRAIGHT:
        _path(ax, [_bottom(a), _top(b)])
    qx, gx, rx = -_SIDE + 0.6, -_SIDE - 0.6, -5.9
    _path(ax, [(qx, _bottom("q")[1]), (qx, 4.1), _side("att", -1)])  # q down to the attention
    gate = [(gx, _bottom("q")[1]), (gx, 3.0), _side("inv", -1)]  # the gate skips it
    _path(ax, gate, color="tab:purple", ls="--")
    ax.text(
        gx - 0.12, 5.4, "gate", rotation=90, color="tab:purple", fontsize=8, va="center", ha="right"
    )
    ax.text(qx + 0.1, 6.0, "q", fontsize=8)
    _path(ax, [_bottom("sel"), (_SIDE, 4.1), _side("att", 1)])  # the tokens the indexer keeps
    ax.text(_SIDE + 0.1, 4.6, "visible tokens", fontsize=7.5)
    residual = [_side("x", -1), (rx, 11.0), (rx, 1.0), _side("n2", -1)]  # skips the block
    _path(ax, residual, color="tab:blue", ls=":")
    ax.text(rx + 0.12, 8.6, "residual x", rotation=90, color="tab:blue", fontsize=8, va="center")
    ax.set_xlim(-6.3, 6.0)
    ax.set_ylim(-0.6, 11.6)
    ax.set_axis_off()
    ax.set_title("one decode step (stage · notebook)", fontsize=11)
    return ax


# ---- queued timing, sketched -------------------------------------------------------------------


def _lane(ax, y, spans, color, labels=True):
    """Boxes [(start, end, text)] on one lane at height y."""
    from matplotlib.patches import Rectangle

    for t0, t1, text in spans:
        ax.add_patch(Rectangle((t0, y - 0.3), t1 - t0, 0.6, fc=color, ec="k", lw=0.6))
        if labels and text:
            ax.text((t0 + t1) / 2, y, text, ha="center", va="center", fontsize=7)


def draw_queued_timing(spans, per_call, host_us, kernel_us, calls, axes=None):
    """Two sketches on one time axis (not measured: host_us per launch, kernel_us per kernel):
    spans {"queued" | "eager": (host spans, GPU spans, event a, event b)}, each span (start,
    end, text) in µs. Top, queued: the host queues a spin kernel, event a, the calls and event
    b; the GPU spins until all of them are queued, then runs the calls back to back, so
    (b − a) / calls is the GPU's time per call. Bottom, eager: each launch reaches an idle GPU,
    the host's launch cost sits between the kernels and (b − a) counts it. Each title says what
    (b − a) / calls comes to (per_call {"queued" | "eager": µs})."""
    import matplotlib.pyplot as plt

    axes = axes if axes is not None else plt.subplots(2, 1, figsize=(10, 3.8), sharex=True)[1]
    titles = {
        "queued": f"queued: (b − a) / {calls} = {per_call['queued']:g} µs, the kernel's own time",
        "eager": f"eager: (b − a) / {calls} = {per_call['eager']:g} µs for a {kernel_us:g} µs "
        "kernel: the GPU waits for each launch",
    }
    for ax, (how, (h, g, ta, tb)) in zip(axes, spans.items()):
        _lane(ax, 1, h, "#eeeeee")
        _lane(ax, 0, g, "#cfe2f3")
        for t, name in ((ta, "event a"), (tb, "event b")):
            ax.axvline(t, color="tab:red", lw=1, ls="--")
            ax.text(t, 1.55, name, color="tab:red", fontsize=7.5, ha="center")
        ax.set_yticks([0, 1], ["GPU", "host"])
        ax.set_ylim(-0.6, 1.8)
        ax.set_title(titles[how], fontsize=9.5, loc="left")
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    end = max(b for *_, b in spans.values())
    axes[-1].set_xlim(0, end + 2)
    axes[-1].set_xlabel(
        f"time in µs (sketch: {host_us:g} µs of host time per launch, {kernel_us:g} µs per kernel)"
    )
    axes[0].figure.tight_layout()
    return axes


# ---- what each cache kind costs a decode (golden, CPU) -----------------------------------------


def plot_cache_costs(positions, errors, masks, bytes_per_token, block_tokens):
    """Left: each decode step's relative error of attn_out against the f32 cache, per cache
    kind (errors {kind: [err]}). Right: the indexer's kept blocks per step (masks: one
    boolean row per step, complete blocks only)."""
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw=dict(width_ratios=[3, 2]))
    for kind, err in errors.items():
        label = f"{kind} cache ({bytes_per_token[kind]} B/token)"
        a1.semilogy(positions, err, "o-", ms=3, label=label)
    a1.set_xlabel("decode position")
    a1.set_ylabel("relative error of attn_out vs f32 cache")
    a1.set_title("what the cache format costs, step by step")
    a1.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, -0.18), ncol=2, frameon=False)
    nblk = len(masks[-1])
    img = np.full((len(masks), nblk), np.nan)
    for i, m in enumerate(masks):
        img[i, : len(m)] = m  # 1 kept, 0 complete but skipped, NaN not complete yet
    extent = (-0.5, nblk - 0.5, positions[-1] + 0.5, positions[0] - 0.5)
    a2.imshow(img, aspect="auto", cmap="Greens", vmin=-0.3, vmax=1, extent=extent)
    a2.set_xlabel(f"block j ({block_tokens} tokens each)")
    a2.set_ylabel("decode position")
    a2.set_title("indexer: kept blocks (dark) per step")
    fig.tight_layout()
    return fig


# ---- the L2, the copy rate and the read floor ---------------------------------------------------

_MIB = 1 << 20


def print_l2(l2, whose):
    """One line: the L2 size in MiB (l2 in bytes, None: not recorded), and whose it is."""
    if l2 is None:
        print("L2 size: not recorded in results/nvidia-h200.json")
        return
    print(f"L2 of {whose}: {l2 / _MIB:.0f} MiB ({l2} bytes)")


def print_floor_runs(recs):
    """One line per floor run: bytes, timing, µs, GB/s, % of copy."""
    print(recs.source)
    print(f"copy rate {recs.copy_gbps:.0f} GB/s (2 x bytes / time of a 1 GiB device copy)")
    for r in sorted(recs.runs, key=lambda r: (r["bytes"], r.get("timing", ""))):
        print(
            f"  read {r['bytes'] / 1e6:8.1f} MB  {r.get('timing', '?'):<7} "
            f"{r['median_us']:8.2f} us  {r['gbps']:6.0f} GB/s  {r['pct_of_copy']:6.1f}% of copy"
        )


# ---- the ladder, summarised ------------------------------------------------------------------


def size_text(sh):
    """A run's size as text, from its shape: "rows=.., nb=.., T=.., proj=..", those it has."""
    keys = ("rows", "nb", "T", "proj")
    return ", ".join(f"{k}={sh[k]}" for k in keys if k in sh)


def _sources(by_family):
    return list(dict.fromkeys(recs.source for recs in by_family.values()))


def print_ladder_summary(rows, by_family):
    """The summary rows as a table, the records' sources first, then the larger sizes where v0
    was not recorded (the fastest rung's run there is in the stage notebook)."""
    for s in _sources(by_family):
        print(s)
    if not rows:
        print("no ladder runs recorded")
        return
    print(
        f"{'family':<21}{'size':<22}{'v0 us':>10}  {'fastest rung':<32}"
        f"{'us':>7}{'x v0':>7}{'% copy':>7}{'% floor':>8}"
    )
    for r in rows:
        print(
            f"{r['label']:<21}{r['size']:<22}{r['v0_us']:10.1f}  "
            f"{r['best_rung']}: {r['best']:<29}{r['best_us']:7.1f}"
            f"{r['v0_us'] / r['best_us']:7.1f}{r['best_pct']:7.1f}{r['best_floor']:8.1f}"
        )
    for r in rows:
        if r["skipped"]:
            print(f"{r['label']}: v0 not recorded at {'; '.join(r['skipped'])} (not in the table)")


def _dots(ax, rows, y, key_v0, key_best):
    v0 = np.array([r[key_v0] for r in rows])
    best = np.array([r[key_best] for r in rows])
    ax.hlines(y, v0, best, color="0.75", lw=2)
    # v0 an open ring, the fastest rung a dot inside it: where both are equal both stay visible
    ax.plot(
        v0,
        y,
        "o",
        ms=9,
        mfc="none",
        mec="0.35",
        mew=1.5,
        label="v0 (the golden formula, translated directly)",
    )
    ax.plot(best, y, "o", ms=5, color="tab:blue", label="fastest rung")
    ax.axvline(
        100, color="k", ls="--", lw=1, label="100% (left: of the copy rate, right: of the floor)"
    )
    ax.set_xscale("log")


def plot_ladder_summary(rows, by_family):
    """Per family: v0 (grey ring) and the fastest rung (blue dot), joined by a line, at the
    size of the table; left in % of the copy rate, right in % of the read floor (log x: the
    steps span several decades). The records' sources under the title."""
    import matplotlib.pyplot as plt

    sources = "; ".join(_sources(by_family))
    if not rows:
        ax = plt.subplots(figsize=(8, 2))[1]
        ax.text(0.5, 0.5, "no ladder runs: " + sources, ha="center", va="center")
        ax.set_axis_off()
        return ax
    height = 0.32 * max(len(rows), 3) + 1.6
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, height), sharey=True)
    y = np.arange(len(rows))[::-1]
    _dots(a1, rows, y, "v0_pct", "best_pct")
    _dots(a2, rows, y, "v0_floor", "best_floor")
    a1.set_yticks(y, [r["label"] for r in rows], fontsize=8.5)
    a1.set_xlabel("% of the copy rate (log)")
    a2.set_xlabel("% of the read floor (log)")
    a2.legend(
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0,
    )
    fig.suptitle("the ladder: from v0 to the fastest rung, at each row's size in the table")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.text(0.5, 0.93, sources, ha="center", fontsize=7.5, color="0.35")
    return fig
