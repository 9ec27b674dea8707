"""What notebooks/08_layer.ipynb imports: the parity run against transformers (quiet: no progress
bars, nothing on stderr), random weights and a filled cache for the mid-size layer, the golden
step's per-stage times, the bytes a GPU step must move, the GPU step's records per stage (eager,
graph replay), the host's share of an eager step and the GPU layer against golden (live, on a
GPU), and the errors of q8 weights. Figures and tables come in pairs: show_* prints and draws."""

from __future__ import annotations

import contextlib
import functools
import inspect
import time

import numpy as np

from .. import golden, nbutil
from ..bench.counting import layer_stage_bytes
from ..bench.inputs import random_weights as random_weights  # the bench's scales
from ..config import AttnConfig
from ..excerpts import lines_between
from .attention import show_cut as show_cut  # 07's excerpt helper
from .common import caption, side_legend
from .parity import hf_parity as hf_parity  # 08's parity with transformers
from .parity import parity as parity
from .parity import show_parity as show_parity

__all__ = """
    show_cut source_between hf_parity parity show_parity mid_config random_weights
    filled_cache StageTimer golden_stage_us GROUPS show_golden_stages print_stage_bytes
    step_table plot_gpu_steps print_step_times host_stage_us gpu_checks print_host_side
    q8_variants plot_q8_costs recorded_layer_errors plot_gpu_errors print_q8_gain take_away
""".split()


def source_between(fn, first, last):
    """fn's source from the line containing `first` through the next containing `last`."""
    return lines_between(inspect.getsource(fn), first, last)


# ---- the mid-size layer -----------------------------------------------------------------------
def mid_config(R=16, budget=64):
    """A layer between the tiny one and the 27B: hidden 1024, 8 q heads on 2 kv heads of 128,
    MLP 3072, an indexer of 4 heads x 64 with compression R and token budget `budget`."""
    return AttnConfig(
        hidden_size=1024,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=128,
        intermediate_size=3072,
        rope_theta=1e7,
        indexer_n_heads=4,
        indexer_head_dim=64,
        indexer_compress_ratio=R,
        indexer_budget=budget,
    )


def filled_cache(cfg, w, T, kind, room=16, seed=2):
    """A golden cache of `kind` holding T random tokens (keys, values, indexer keys) and their
    block keys, with room for `room` more: a context without running the layer T times."""
    rng = np.random.default_rng(seed)
    c = golden.KVCache(cfg, max_t=T + room, kind=kind)
    k, v = rng.standard_normal((2, T, cfg.nkv, cfg.head_dim)).astype(np.float32)
    ik = rng.standard_normal((T, cfg.indexer_head_dim)).astype(np.float32)
    c.append(k, v, index_k=ik)
    golden.update_block_keys(c, w["self_attn.indexer.k_norm.weight"], cfg, 0, T)
    return c


# ---- the golden step's time per stage ----------------------------------------------------------
# golden.layer's stage functions -> their stage, under the GPU step's names (gpu.layer.STAGES;
# golden's mlp is the GPU's mlp_gate_up + mlp_down). "kv_read" is golden's alone: golden
# dequantizes the whole cache each step, a kernel dequantizes as it reads.
_STAGE_OF = {
    "rms_norm": "input_norm",
    "qk_norm_rope": "qk_norm_rope",
    "indexer_project": "qkv_proj",
    "indexer_queries": "indexer_q",
    "update_block_keys": "block_keys",
    "row_selection": "select",
    "decode_attention": "attention",
    "wht_signed": "attention",
    "output_gate": "attention",
    "add_rms_norm": "post_norm",
    "mlp": "mlp",
}
_PROJ_STAGE = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "o_proj": "o_proj"}
_REST = "input_norm qk_norm_rope indexer_q kv_append block_keys select post_norm".split()
GROUPS = {
    "weights: qkv_proj, o_proj, mlp": ("qkv_proj", "o_proj", "mlp"),
    "cache read + attention": ("kv_read", "attention"),
    "the rest: norms, RoPE, indexer, append": _REST,
}


class StageTimer:
    """Times the functions golden.layer calls, by stage (the outermost call only); the layer's
    code runs unchanged."""

    def __init__(self, layer):
        self.proj = {id(a): _PROJ_STAGE.get(n.split(".")[-2], n) for n, a in layer.w.items()}
        self.t, self.depth = {}, 0

    def _wrap(self, fn, label):
        @functools.wraps(fn)
        def inner(*args, **kw):
            if self.depth:
                return fn(*args, **kw)
            lab = label(*args) if callable(label) else label
            self.depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                self.depth -= 1
                self.t[lab] = self.t.get(lab, 0.0) + time.perf_counter() - t0

        return inner

    @contextlib.contextmanager
    def timing(self, cache):
        from ..golden import layer as golden_layer

        plan = dict(_STAGE_OF, linear=lambda x, w: self.proj.get(id(w), "linear"))
        saved = {n: getattr(golden_layer, n) for n in plan}
        try:
            for n, lab in plan.items():
                setattr(golden_layer, n, self._wrap(saved[n], lab))
            for meth, lab in (("append", "kv_append"), ("keys", "kv_read"), ("values", "kv_read")):
                setattr(cache, meth, self._wrap(getattr(type(cache), meth).__get__(cache), lab))
            yield self
        finally:
            for n, f in saved.items():
                setattr(golden_layer, n, f)
            for meth in ("append", "keys", "values"):
                delattr(cache, meth)


def golden_stage_us(layer, cache, x, steps=5):
    """Best-of-`steps` microseconds per stage of a golden decode step (one row per step, the
    cache growing by one each), each step checked against an untimed one on a copy of the
    cache. -> ({stage: us} in call order, whether every timed output equals the untimed)."""
    times, same = [], True
    for s in range(steps):
        pos = len(cache)
        untimed = layer.forward(x[s : s + 1], pos, cache.copy())
        st = StageTimer(layer)
        with st.timing(cache):
            y = layer.forward(x[s : s + 1], pos, cache)
        same &= bool(np.array_equal(y, untimed))
        times.append(st.t)
    return {n: 1e6 * min(t[n] for t in times) for n in times[0]}, same


def show_golden_stages(us, T, kind):
    """Print the groups' shares of the golden step and plot the stages, coloured by group."""
    import matplotlib.pyplot as plt

    total = sum(us.values())
    print(f"golden step on this CPU: the stages' best times add up to {total / 1e3:.2f} ms")
    for g, names in GROUPS.items():
        group = sum(us.get(n, 0.0) for n in names)
        print(f"  {100 * group / total:5.1f}%  {g}  ({group / 1e3:.2f} ms)")
    colors = dict(zip(GROUPS, ("tab:blue", "tab:orange", "tab:grey")))
    group_of = {n: g for g, names in GROUPS.items() for n in names}
    fig, ax = plt.subplots(figsize=(7, 3.6))
    names = list(us)
    ax.barh(names, [us[n] / 1e3 for n in names], color=[colors[group_of[n]] for n in names])
    for g, c in colors.items():
        ax.barh([names[0]], [0], color=c, label=g)  # legend entries only
    ax.invert_yaxis()
    ax.set_xlabel("ms (best of the steps)")
    ax.set_title(f"golden decode step on this CPU, T = {T}, {kind} cache")
    side_legend(ax)
    caption(fig, "golden model, timed on this machine just now")


# ---- bytes of a GPU step ------------------------------------------------------------------------
def print_stage_bytes(cfg, T, nb=1):
    """The bytes each stage of one step must move (q8 weights, q8 cache, T cached tokens), with
    the indexer as configured and with every row dense (no indexer), in MiB and shares."""
    from ..gpu.layer import STAGES

    dense = cfg.replace(
        indexer_n_heads=0, indexer_head_dim=0, indexer_compress_ratio=0, indexer_budget=0
    )
    sel, den = layer_stage_bytes(cfg, nb, T, "q8", "q8"), layer_stage_bytes(dense, nb, T, "q8")
    print(
        f"{'stage':<14}{'indexer (budget ' + str(cfg.indexer_budget) + ')':>26}{'dense rows':>22}"
    )
    for st in STAGES + ("total",):
        a, b = sel.get(st, 0), den.get(st, 0)
        print(
            f"{st:<14}{a / 2**20:12.2f} MiB {100 * a / sel['total']:5.1f} %"
            f"{b / 2**20:12.2f} MiB {100 * b / den['total']:5.1f} %"
        )


# ---- the GPU step's records --------------------------------------------------------------------
def step_table(recs):
    """{nb: {"stages": {stage: run}, "eager": run, "graph": run}} from the layer's records
    ("step: <stage>", "step eager (host launches)", "step graph replay")."""
    out = {}
    for r in recs.runs:
        if r.get("error") or not r.get("median_us"):
            continue
        row = out.setdefault(r["shape"]["nb"], {"stages": {}, "eager": None, "graph": None})
        k = str(r["kernel"])
        if k.startswith("step: "):
            row["stages"][k[len("step: ") :]] = r
        elif k.startswith(("step eager", "step graph")):
            row["eager" if "eager" in k else "graph"] = r
    return dict(sorted(out.items()))


def _step_us(row, kind):
    """The step's µs: "busy" (the stages' sum), "graph" or "eager"; NaN when not recorded."""
    r = row["stages"].get("total") if kind == "busy" else row[kind]
    return r["median_us"] if r else np.nan


def plot_gpu_steps(recs):
    """Left: GPU time per stage, one bar per row count, stages in order; right: per row count,
    the stages' sum (the GPU busy), graph replay and the eager step."""
    import matplotlib.pyplot as plt

    from ..gpu.layer import STAGES

    tab = step_table(recs)
    fig, axs = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [3, 2]})
    if not tab:
        for ax in axs:
            ax.text(0.5, 0.5, "no layer runs: " + recs.source, ha="center", va="center")
            ax.set_axis_off()
        return
    names = [s for s in STAGES if any(s in row["stages"] for row in tab.values())]
    y, h = np.arange(len(names)), 0.8 / len(tab)
    for j, (nb, row) in enumerate(tab.items()):
        us = [row["stages"][s]["median_us"] if s in row["stages"] else 0 for s in names]
        axs[0].barh(y + (j - (len(tab) - 1) / 2) * h, us, h, label=f"nb = {nb}")
    axs[0].set_yticks(y, names, fontsize=8)
    axs[0].invert_yaxis()
    axs[0].set_xlabel("GPU µs per stage (queued: events after each stage)")
    axs[0].set_title("one decode step of the 27B layer, q8 weights and cache")
    x, wd = np.arange(len(tab)), 0.8 / 3
    for i, (kind, label) in enumerate((("busy", "sum of stages"), ("graph", "graph replay"))):
        axs[1].bar(x + (i - 1) * wd, [_step_us(r, kind) for r in tab.values()], wd, label=label)
    axs[1].bar(x + wd, [_step_us(r, "eager") for r in tab.values()], wd, label="eager")
    axs[1].set_xticks(x, [f"nb = {nb}" for nb in tab])
    axs[1].set_ylabel("µs per step")
    axs[1].set_title("the whole step three ways")
    for ax in axs:
        side_legend(ax)
    caption(fig, recs.source)


def print_step_times(recs):
    """Per stage: the bytes it must move, its time and % of the copy rate, per row count; then
    per row count the eager step, graph replay and the stages' sum, and eager - graph."""
    from ..gpu.layer import STAGES

    tab = step_table(recs)
    print(recs.source)
    if not tab:
        print("no layer runs in these records")
        return
    head = "".join(f"{'nb=' + str(nb) + ': us':>12}{'% copy':>8}" for nb in tab)
    print(f"{'stage':<14}{'MiB (nb=' + str(min(tab)) + ')':>13}{head}")
    for s in STAGES + ("total",):
        rows = [tab[nb]["stages"].get(s) for nb in tab]
        if any(rows):
            cells = "".join(
                f"{r['median_us']:12.1f}{r['pct_of_copy']:8.1f}" if r else f"{'-':>12}{'-':>8}"
                for r in rows
            )
            print(f"{s:<14}{next(r for r in rows if r)['bytes'] / 2**20:13.2f}{cells}")
    for nb, row in tab.items():
        eager, graph, busy = (_step_us(row, k) for k in ("eager", "graph", "busy"))
        n = len(row["stages"]) - ("total" in row["stages"])
        print(
            f"nb={nb}: eager {eager:.0f} us, graph replay {graph:.0f} us, stages' sum {busy:.0f} "
            f"us; eager - graph = {eager - graph:.0f} us over {n} stages, "
            f"{(eager - graph) / n:.0f} us a stage"
        )


# ---- live, on a GPU: the host's share of an eager step, the layer against golden --------------
def host_stage_us(layer, x, cache, reps=10):
    """Host microseconds from each on_stage mark of an eager step to the next (the GPU idle
    before the step), median over reps steps; "before start" is the step's argument checks
    and position upload, "after the last stage" its return. The cache grows by len(x) a step."""
    from ..gpu._runtime import cupy

    cp, per = cupy(), {}
    for _ in range(reps):
        cp.cuda.Device().synchronize()
        marks = []
        t0 = time.perf_counter()
        layer.forward(
            x, len(cache), cache, on_stage=lambda n: marks.append((n, time.perf_counter()))
        )
        t_end = time.perf_counter()
        cp.cuda.Device().synchronize()
        prev = t0
        for name, t in marks:
            per.setdefault("before start" if name == "start" else name, []).append(t - prev)
            prev = t
        per.setdefault("after the last stage", []).append(t_end - prev)
    return {n: 1e6 * float(np.median(v)) for n, v in per.items()}


def gpu_checks(cfg, w, x, T, outs, n_dec=4):
    """On a GPU, the variants of q8_variants on gpu.FullAttentionLayer and gpu.KVCache, each
    against golden's output; then, on the q8 / q8 one, the host's time per stage of eager steps
    beside the GPU's (timing.stage_us) and the eager step's time.
    -> ({variant: rel. error}, {"host": {stage: us}, "gpu": {stage: us}, "eager": us})."""
    from .. import gpu, timing
    from ..gpu._runtime import cupy

    cp, err = cupy(), {}
    for (wname, kind), y_gold in outs.items():
        lay = gpu.FullAttentionLayer(cfg, w, weight_format=wname.split()[0])
        c = gpu.KVCache(cfg, max_t=T + n_dec + 64, kind=kind)  # + room for the timed steps
        lay.forward(cp.asarray(x[:T]), 0, c)
        ys = [lay.forward(cp.asarray(x[T + s : T + s + 1]), T + s, c).get() for s in range(n_dec)]
        err[f"{wname}, {kind} cache"] = nbutil.relerr(np.concatenate(ys), y_gold)
    xg = cp.asarray(x[T : T + 1])  # lay, c: the q8 / q8 variant, the last one above
    host = host_stage_us(lay, xg, c)
    dev = timing.stage_us(lay, xg, len(c), c)[1]
    eager = timing.eager_us(lambda: lay.forward(xg, len(c), c), 10).us
    return err, {"host": host, "gpu": dev, "eager": eager}


def print_host_side(side):
    """gpu_checks' timing: per stage the host's µs to queue it and the GPU's to run it."""
    host, dev = side["host"], side["gpu"]
    print(f"{'stage':<22}{'host us':>9}{'GPU us':>9}   (the host queues, the GPU runs)")
    for name, us in host.items():
        print(f"{name:<22}{us:9.1f}{dev.get(name, np.nan):9.1f}")
    print(
        f"{'total':<22}{sum(host.values()):9.1f}{dev['total']:9.1f}   eager: {side['eager']:.0f} us"
    )


# ---- q8 weights and the GPU layer against golden ----------------------------------------------
def q8_variants(cfg, w, x, T, n_dec=4):
    """The layer with f32 / q8 weights and an f32 / q8 cache: a T-row prefill of x, then n_dec
    decode steps -> {(weights, cache kind): y of the decode steps [n_dec, H]}."""
    outs = {}
    for wf in ("f32", "q8"):
        lay = golden.FullAttentionLayer(cfg, w, weight_format=wf)
        for kind in ("f32", "q8"):
            c = golden.KVCache(cfg, max_t=T + n_dec, kind=kind)
            lay.forward(x[:T], 0, c)
            ys = [lay.forward(x[T + s : T + s + 1], T + s, c) for s in range(n_dec)]
            outs[(f"{wf} weights", kind)] = np.concatenate(ys)
    return outs


def plot_q8_costs(w_err, wq_err, T, n_dec):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.0))
    names = list(w_err)
    xx = np.arange(len(names))
    ax.bar(xx - 0.2, [w_err[n][0] for n in names], 0.4, label="output y")
    ax.bar(xx + 0.2, [w_err[n][1] for n in names], 0.4, label="the layer's update y - x")
    ax.axhline(wq_err, color="k", ls="--", lw=1, label="Q8_0 error of the weights")
    ax.set_xticks(xx, names, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("rel. error vs f32/f32")
    ax.set_title(f"what q8 costs, {n_dec} decode steps after a {T}-token prefill")
    side_legend(ax)
    caption(fig, "golden model on this machine")


def recorded_layer_errors(recs):
    """{"nb=<n>, eager" | "nb=<n>, graph replay": rel. error against golden} of the records
    (one validated step each: the stage records repeat the eager step's error)."""
    err = {}
    for nb, row in step_table(recs).items():
        for kind, name in (("eager", "eager"), ("graph", "graph replay")):
            if row[kind] is not None:
                err[f"nb={nb}, {name}"] = row[kind]["rel_err"]
    return err


def plot_gpu_errors(err, source, what):
    import matplotlib.pyplot as plt

    from ..bench.tolerances import TOL_LAYER

    fig, ax = plt.subplots(figsize=(7, 0.9 + 0.35 * max(len(err), 1)))
    ax.barh(list(err), list(err.values()), color="tab:green")
    ax.axvline(TOL_LAYER, color="k", ls="--", lw=1, label=f"the bench's tolerance {TOL_LAYER}")
    ax.set_xscale("log")
    ax.invert_yaxis()
    ax.set_xlabel("rel. error, GPU layer vs golden layer")
    ax.set_title(f"GPU layer against golden: {what}")
    ax.tick_params(axis="y", labelsize=8)
    side_legend(ax)
    caption(fig, source)


def q8_gains(grecs):
    """{proj: (f32 us, q8 us, f32 bytes / q8 bytes)}, each format's fastest GEMV rung."""
    ok = [r for r in grecs.runs if r.get("median_us") and not r.get("error")]
    best = {}
    for r in ok:
        key = (r["shape"]["proj"], r["shape"]["weights"])
        if key not in best or r["median_us"] < best[key]["median_us"]:
            best[key] = r
    out = {}
    for proj in dict.fromkeys(r["shape"]["proj"] for r in ok):
        f, q = best.get((proj, "f32")), best.get((proj, "q8"))
        if f and q:
            out[proj] = (f["median_us"], q["median_us"], f["bytes"] / q["bytes"])
    return out


def print_q8_gain(grecs):
    """Per projection: the fastest f32 and q8 GEMV, the time ratio beside the bytes ratio."""
    for proj, (f, q, b) in q8_gains(grecs).items():
        print(
            f"{proj:<10} f32 {f:6.1f} us, q8 {q:6.1f} us: q8 is {f / q:.1f}x faster "
            f"for {b:.1f}x fewer bytes"
        )


def take_away(recs, grecs):
    """The take-away's numbers, from the records: per row count the graph-replayed step and its
    share of the copy rate, eager against graph, the largest stages; the GEMV's best rung."""
    print(recs.source)
    for nb, row in step_table(recs).items():
        g, e = row["graph"], row["eager"]
        stages = {s: r["median_us"] for s, r in row["stages"].items() if s != "total"}
        top = sorted(stages, key=lambda s: -stages[s])[:3]
        if g and e:
            print(
                f"nb={nb}: graph replay {g['median_us']:.0f} us ({g['pct_of_copy']:.0f}% of copy),"
                f" eager {e['median_us'] / g['median_us']:.1f}x that"
            )
        shares = ", ".join(f"{s} {100 * stages[s] / sum(stages.values()):.0f}%" for s in top)
        print(f"  largest stages: {shares} of the GPU's busy time")
    print(grecs.source)
    for size, r in nbutil.best_rungs(grecs).items():
        us, pct = r["median_us"], r["pct_of_copy"]
        print(f"gemv {size}: fastest {r['kernel']} {us:.1f} us, {pct:.0f}% of copy")
    gains = q8_gains(grecs)
    if gains:
        ratios = [f / q for f, q, _ in gains.values()]
        print(f"q8 weights against f32: the GEMV {min(ratios):.1f}-{max(ratios):.1f}x faster")
