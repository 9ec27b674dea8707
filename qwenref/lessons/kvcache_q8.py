"""Helpers of notebooks/04_kvcache_q8.ipynb (the Q8_0 cache): the inputs and terms of the error
bound, the figures, the attention experiment, the kernel excerpts, error and timing tables read
from records, and the exercises' checkers. Notebook 05 reuses the generic ones (float64
attention, figure notes, excerpt slices, record tables). Nothing here is on the decode path."""

from __future__ import annotations

import numpy as np

from .. import excerpts, golden, nbutil
from ..config import AttnConfig

__all__ = [
    "GOLDEN_NOTE",
    "note",
    "readable_log",
    "tidy_ladder",
    "legend_outside",
    "dense_cfg",
    "stress_groups",
    "bound_terms",
    "plot_bound_ratio",
    "float16_share",
    "plot_float16_share",
    "awkward_rows",
    "draw_layouts",
    "attn64",
    "attention_by_cache",
    "plot_attention_errors",
    "show_lines",
    "bench_like_rows",
    "golden_errors",
    "samples_of",
    "print_recorded_errors",
    "print_live_errors",
    "gpu_bit_exact",
    "print_takeaway_times",
    "tie_groups",
    "count_code_differences",
    "outlier_keys",
    "compare_group_sizes",
]

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


def legend_outside(ax, **kw):
    """A legend right of the axes, never over the data."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, **kw)


def dense_cfg(cfg=None):
    """Qwen3.5-27B's attention (or cfg) without the block indexer: every row reads every token."""
    cfg = cfg or AttnConfig.qwen35_27b()
    return cfg.replace(
        indexer_n_heads=0, indexer_head_dim=0, indexer_compress_ratio=0, indexer_budget=0
    )


# ---- the error bound ----------------------------------------------------------------------
def stress_groups(n_groups=20_000, seed=1):
    """float32 [n_groups, 32]: half Gaussian, half Student-t with 3 degrees of freedom (one
    element often dominates), each group scaled by 10**U(-4, 4) so the float16 scale runs from
    subnormal to large."""
    rng = np.random.default_rng(seed)
    scale = (10.0 ** rng.uniform(-4, 4, n_groups)).astype(np.float32)
    gauss = rng.standard_normal((n_groups, 32))
    heavy = rng.standard_t(3, (n_groups, 32))
    pick = rng.random(n_groups)[:, None] < 0.5
    return np.where(pick, gauss, heavy).astype(np.float32) * scale[:, None]


def bound_terms(x):
    """Groups x float32 [G, 32] through golden Q8_0 -> dict of float64 arrays: d32 (the float32
    scale, exactly), d16 (the stored one), err = |x - q·d| [G, 32], bound = d32/2 + 127|d32 - d16|
    [G], ratio = err / bound, safe_ratio = err / (d32(1/2 + 2^-16) + 127|d32 - d16|) (0/0 read
    as 0: an all-zero group), and q, deq."""
    q, d = golden.q8_quantize(x)
    deq = golden.q8_dequantize(q, d)
    d32 = (np.abs(x).max(-1) / np.float32(127)).astype(np.float64)
    d16 = d[:, 0].astype(np.float64)
    err = np.abs(x.astype(np.float64) - deq)
    bound = d32 / 2 + 127 * np.abs(d32 - d16)
    safe = bound + d32 * 2.0**-16

    def over(b):
        return err / np.where(b > 0, b, 1.0)[:, None]

    return dict(
        q=q,
        deq=deq,
        d32=d32,
        d16=d16,
        err=err,
        bound=bound,
        ratio=over(bound),
        safe_ratio=over(safe),
    )


def plot_bound_ratio(ratio):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.0))
    ax.hist(ratio.ravel(), bins=np.linspace(0, 1.05, 106), color="tab:blue", label="elements")
    ax.axvline(1, color="k", ls="--", lw=1, label="the bound (err ≤ bound:\nequality allowed)")
    ax.set_yscale("log")
    ax.set_xlabel("|x − q·d| / (d32/2 + 127·|d32 − d|)")
    ax.set_ylabel("elements (log)")
    ax.set_title(f"Q8_0 error relative to its bound ({ratio.size:,} elements)", fontsize=9)
    legend_outside(ax)
    note(ax, GOLDEN_NOTE + "; stress_groups(seed=1)")
    return fig


def float16_share(t):
    """From bound_terms: (amax [G], the float16 term q·(d32 - d) as a share of each group's
    squared error [G], subnormal [G]: the group's scale is a float16 subnormal)."""
    e_f16 = t["q"] * (t["d32"] - t["d16"])[:, None]
    share = (e_f16**2).mean(-1) / np.maximum((t["err"] ** 2).mean(-1), 1e-300)
    amax = 127 * t["d32"]
    return amax, share, amax < 127 * 2.0**-14


def plot_float16_share(amax, share):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.0))
    ax.scatter(amax, np.maximum(share, 1e-7), s=1, alpha=0.3, label="one group")
    ax.axvline(127 * 2.0**-14, color="k", ls="--", lw=1, label="scale becomes\nfloat16 subnormal")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("group amax")
    ax.set_ylabel("float16 term / group MSE")
    ax.set_title("share of each group's error due to storing the scale in float16", fontsize=9)
    legend_outside(ax, markerscale=6)
    note(ax, GOLDEN_NOTE + "; shares below 1e-7 drawn at 1e-7")
    return fig


def awkward_rows(rng, nb, nkv, hd):
    """float32 [nb, nkv, hd] built to break a careless kernel: a channel at ~±1000, an all-zero
    group, float16-subnormal scales, and (last kv head, channels 96..127) exact ties: amax
    127/64, so d32 = 1/64 exactly and every other value sits on a half step."""
    x = rng.standard_normal((nb, nkv, hd)).astype(np.float32)
    x[:, :, 7] *= 1000
    x[:, 0, 32:64] = 0
    x[::2, 1, 64:96] *= np.float32(1e-4)
    tie = x[:, -1, 96:128]
    tie[:] = np.round(rng.uniform(-126, 126, tie.shape)) / 64 + np.float32(0.5 / 64)
    tie[:, 0] = 127 / 64
    return x


# ---- the layout ----------------------------------------------------------------------------
def _strip(ax, order, read, title, label_heads):
    import matplotlib.pyplot as plt

    colors = plt.cm.tab10(np.arange(10))
    for addr, (g, t) in enumerate(order):
        hit = (g, t) in read
        ax.add_patch(
            plt.Rectangle(
                (addr, 0),
                1,
                1,
                facecolor=colors[g],
                alpha=0.9 if hit else 0.25,
                edgecolor="k" if hit else "w",
                lw=1.2 if hit else 0.5,
            )
        )
        if t % 4 == 0 and g in label_heads:
            ax.text(addr + 0.5, -0.35, f"t{t}", ha="center", va="center", fontsize=7)
    ax.set_xlim(0, len(order))
    ax.set_ylim(-0.7, 1.1)
    ax.set_yticks([])
    ax.set_xlabel("memory address (one cell = one token's hd codes of one kv head)", fontsize=8)
    ax.set_title(title, fontsize=9)


def draw_layouts(nkv=4, T=16, head=2, t0=4, t1=12):
    """Head-major against token-major: the rows one split-T block reads, in address order."""
    import matplotlib.pyplot as plt

    read = {(head, t) for t in range(t0, t1)}
    fig, axes = plt.subplots(2, 1, figsize=(10, 2.9))
    hm = [(g, t) for g in range(nkv) for t in range(T)]
    tm = [(g, t) for t in range(T) for g in range(nkv)]
    _strip(
        axes[0],
        hm,
        read,
        f"head-major [nkv, max_t, hd]: head {head}, tokens {t0}..{t1 - 1} is one contiguous run",
        range(nkv),
    )
    _strip(
        axes[1], tm, read, f"token-major [max_t, nkv, hd]: the same read is {t1 - t0} pieces", (0,)
    )
    handles = [plt.Rectangle((0, 0), 1, 1, color=plt.cm.tab10(g)) for g in range(nkv)]
    fig.legend(
        handles,
        [f"kv head {g}" for g in range(nkv)],
        loc="center left",
        fontsize=7,
        bbox_to_anchor=(1.0, 0.5),
    )
    fig.tight_layout()
    note(axes[1], "a drawing of the layout (no measured data)")
    return fig


# ---- what q8 does to attention -------------------------------------------------------------
def attn64(q, K, V):
    """softmax(q·k/√hd)·v in float64 with GQA. q [n, nh, hd], K, V [nkv, T, hd] ->
    (out [n, nh, hd], N_eff = mean over rows of 1/Σp², how many tokens carry the softmax)."""
    n, nh, hd = q.shape
    nkv = K.shape[0]
    qg = q.astype(np.float64).reshape(n, nkv, nh // nkv, hd).transpose(1, 0, 2, 3)
    qg = qg.reshape(nkv, -1, hd)  # [G, n·R, D]: each kv head's query rows, one matmul
    K, V = K.astype(np.float64, copy=False), V.astype(np.float64, copy=False)
    s = (qg @ K.transpose(0, 2, 1)) / np.sqrt(hd)  # [G, n·R, T]
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    n_eff = float(np.mean(1 / (p**2).sum(-1)))
    o = (p @ V).reshape(nkv, n, nh // nkv, hd).transpose(1, 0, 2, 3)
    return o.reshape(n, nh, hd), n_eff


def attention_by_cache(cfg, Ts=(64, 256, 1024, 4096), n_q=3, seed=3, score_std=2.5):
    """Keys with log-normal channel scales, unit Gaussian values, queries scaled so the scores
    have std score_std; stored in bf16 and q8 caches (golden). -> ({case: [rel. error at each T]},
    [N_eff at each T]), errors of float64 attention on the dequantized cache against float64
    attention on the float32 K, V."""
    rng = np.random.default_rng(seed)
    nkv, hd, T_max = cfg.nkv, cfg.head_dim, max(Ts)
    ch = np.exp(0.5 * rng.standard_normal(hd)).astype(np.float32)
    k = (rng.standard_normal((T_max, nkv, hd)) * ch).astype(np.float32)
    v = rng.standard_normal((T_max, nkv, hd)).astype(np.float32)
    scale = score_std / np.sqrt((ch**2).mean())
    qs = (rng.standard_normal((n_q, cfg.nh, hd)) * scale).astype(np.float32)
    stored = {}
    for kind in ("bf16", "q8"):
        c = golden.KVCache(cfg, max_t=T_max, kind=kind)
        c.append(k, v)
        stored[kind] = (c.keys(), c.values())
    f64 = lambda a: np.ascontiguousarray(a, np.float64)
    K, V = f64(k.transpose(1, 0, 2)), f64(v.transpose(1, 0, 2))
    (Kb, Vb), (Kq, Vq) = [(f64(a), f64(b)) for a, b in stored.values()]
    cases = {
        "bf16 cache": (Kb, Vb),
        "q8 cache": (Kq, Vq),
        "q8 K, exact V": (Kq, V),
        "exact K, q8 V": (K, Vq),
    }
    errs, n_eff = {name: [] for name in cases}, []
    for T in Ts:
        ref, ne = attn64(qs, K[:, :T], V[:, :T])
        n_eff.append(ne)
        for name, (Kc, Vc) in cases.items():
            errs[name].append(nbutil.relerr(attn64(qs, Kc[:, :T], Vc[:, :T])[0], ref))
    return errs, n_eff


def plot_attention_errors(Ts, errs):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.3))
    styles = {
        "bf16 cache": "C1-o",
        "q8 cache": "C0-o",
        "q8 K, exact V": "C2--^",
        "exact K, q8 V": "C3--v",
    }
    for name, e in errs.items():
        ax.plot(Ts, e, styles.get(name, "-o"), ms=4, label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context length T (tokens)")
    ax.set_ylabel("‖out − out₆₄‖ / ‖out₆₄‖")
    readable_log(ax.yaxis)
    from matplotlib.ticker import LogLocator

    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))  # bf16 sits low
    ax.set_title("attention output error by cache kind (Qwen3.5-27B shape)", fontsize=9)
    legend_outside(ax)
    note(ax, GOLDEN_NOTE + "; attention_by_cache(seed=3), 3 query rows × 24 heads")
    return fig


# ---- kernel excerpts -----------------------------------------------------------------------
def show_lines(file, name, first, last):
    """Show the lines of one definition from the first containing `first` through the next one
    containing `last` (the part of a rung that changed), dedented."""
    excerpts.show_kernel_lines(file, name, first, last, dedent=True)


# ---- errors: golden against float64, GPU against golden ------------------------------------
def bench_like_rows(nb, cfg, seed=5):
    """K and V float32 [nb, nkv, hd] drawn like the bench's inputs: unit normals with every
    (size // 37)-th value ×8 (a few outliers)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(2):
        x = rng.standard_normal((nb, cfg.nkv, cfg.head_dim)).astype(np.float32)
        x.reshape(-1)[:: max(1, x.size // 37)] *= np.float32(8)
        out.append(x)
    return out


def _stored_values(cache, nb):
    """K then V of a golden cache's first nb tokens, dequantized and un-rotated, flat float32."""
    sides = []
    for vals, rotated in ((cache.keys(nb), cache.k_rotated), (cache.values(nb), cache.v_rotated)):
        sides.append((golden.wht(vals) if rotated else vals).ravel())
    return np.concatenate(sides)


def golden_errors(kind, cfg, nb=1024):
    """Relative error of golden's stored K and V (dequantized, un-rotated) against the float32
    input taken as exact, on bench-like rows; with the input and cache for reuse."""
    k, v = bench_like_rows(nb, cfg)
    c = golden.KVCache(cfg, max_t=nb, kind=kind)
    c.append(k, v)
    truth = np.concatenate([k.transpose(1, 0, 2).ravel(), v.transpose(1, 0, 2).ravel()])
    return nbutil.relerr(_stored_values(c, nb), truth), (k, v, c, truth)


def samples_of(run):
    """The (golden, GPU) value samples the bench recorded with this run, or (None, None)."""
    res = nbutil.load_results() or {}
    for i, r in enumerate(res.get("runs", [])):
        if r == run:
            smp = nbutil.load_samples()
            return smp.get(f"{i}_golden"), smp.get(f"{i}_gpu")
    return None, None


def _shape_text(r):
    sh = r.get("shape", {})
    return ", ".join(f"{k}={sh[k]}" for k in ("nb", "kind") if k in sh)


def print_recorded_errors(recs, golden_err):
    """Side by side per recorded run: golden vs float64 (measured here, bench-like input), GPU
    vs golden (the bench's rel_err and its recorded samples)."""
    print(recs.source)
    print(f"golden vs float64 input, here: {golden_err:.2e} (rel.)")
    for r in sorted(recs.runs, key=lambda r: (r.get("bytes", 0), r.get("rung", 0))):
        g, m = samples_of(r)
        smp = "no samples recorded"
        if g is not None:
            diff = np.abs(g.astype(np.float64) - m)
            smp = f"{int((diff > 0).sum())} of {g.size} samples differ, max |Δ| {diff.max():.1e}"
        print(
            f"rung {r.get('rung')} {r['kernel']:<22} {_shape_text(r):<18} GPU vs golden: "
            f"rel {r.get('rel_err', float('nan')):.1e}; {smp}"
        )


def _bytes_equal(got, ref):
    """Share of the stored arrays' elements (codes, scales; K and V) equal in two caches."""
    pairs = [
        (getattr(got, s)[n], getattr(ref, s)[n])
        for s in ("k_store", "v_store")
        for n in getattr(ref, s)
    ]
    return sum(int((a == b).sum()) for a, b in pairs) / sum(b.size for _, b in pairs)


def print_live_errors(kind, family, cfg, nb=1024):
    """On a GPU, every rung of `family` on the same bench-like rows: golden vs float64, GPU vs
    golden, GPU vs float64 (relative), and the share of stored elements equal to golden's."""
    import cupy as cp

    from .. import gpu
    from ..gpu import kvcache as gkv

    g_err, (k, v, gc, truth) = golden_errors(kind, cfg, nb)
    gold = _stored_values(gc, nb)
    print(f"measured just now on this GPU, {kind}, nb={nb}; golden vs float64: {g_err:.2e}")
    for impl in gkv.RUNGS[family]:
        c = gpu.KVCache(cfg, max_t=nb, kind=kind)
        c.append(cp.asarray(k), cp.asarray(v), impl=impl)
        got = c.to_golden()
        mine = _stored_values(got, nb)
        name = gkv.rung_kernel(family, impl, head_dim=cfg.head_dim)
        print(
            f"{impl} {name:<22} GPU vs golden {nbutil.relerr(mine, gold):.1e}  GPU vs float64 "
            f"{nbutil.relerr(mine, truth):.2e}  stored equal {100 * _bytes_equal(got, gc):.4f}%"
        )


def _mismatches(got, ref):
    """Stored q8 codes and scales of two golden caches that differ, bit for bit: (codes, scales)."""
    codes = scales = 0
    for side in ("k_store", "v_store"):
        a, b = getattr(got, side), getattr(ref, side)
        codes += int((a["q"] != b["q"]).sum())
        scales += int((a["d"].view(np.uint16) != b["d"].view(np.uint16)).sum())
    return codes, scales


def gpu_bit_exact(cfg, seed=4):
    """On a GPU: awkward rows appended in chunks of 1, 7, 33, 200 tokens by each rung, and 16 M
    values through gpu.q8_quantize; stored codes and scales compared bit for bit with golden's."""
    import cupy as cp

    from .. import gpu
    from ..gpu import kvcache as gkv

    rng = np.random.default_rng(seed)
    shape = (cfg.nkv, cfg.head_dim)
    chunks = [
        (awkward_rows(rng, nb, *shape), awkward_rows(rng, nb, *shape)) for nb in (1, 7, 33, 200)
    ]
    ref = golden.KVCache(cfg, max_t=256, kind="q8")
    for k, v in chunks:
        ref.append(k, v)
    for impl in gkv.RUNGS["q8_append"]:
        c = gpu.KVCache(cfg, max_t=256, kind="q8")
        for k, v in chunks:
            c.append(cp.asarray(k), cp.asarray(v), impl=impl)
        codes, scales = _mismatches(c.to_golden(), ref)
        kernel = gkv.rung_kernel("q8_append", impl)
        print(
            f"append {impl} ({kernel}): {codes} codes and {scales} scales differ from golden "
            f"in {len(ref)} tokens"
        )
    x = awkward_rows(rng, 16384, *shape).reshape(-1, cfg.head_dim)
    qg, dg = gpu.q8_quantize(cp.asarray(x))
    qr, dr = golden.q8_quantize(x)
    print(
        f"gpu.q8_quantize: {int((qg.get() != qr).sum())} of {qr.size} codes and "
        f"{int((dg.get().view(np.uint16) != dr.view(np.uint16)).sum())} scales differ"
    )


# ---- timing take-away ----------------------------------------------------------------------
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


# ---- exercises -----------------------------------------------------------------------------
def tie_groups(n_groups=1000, seed=6):
    """float32 [n_groups, 32] whose scale is exactly 1/64 (amax 127/64) and whose other values
    sit on half steps: every code is a tie that roundf and round-to-even decide differently
    half of the time."""
    rng = np.random.default_rng(seed)
    x = (np.round(rng.uniform(-126, 126, (n_groups, 32))) + 0.5) / 64
    x[:, 0] = 127 / 64
    return x.astype(np.float32)


def count_code_differences(codes_fn, x):
    """How many of codes_fn(x)'s int8 codes differ from golden.q8_quantize(x)'s."""
    mine = np.asarray(codes_fn(x))
    ref, _ = golden.q8_quantize(x)
    if mine.shape != ref.shape:
        raise ValueError(f"codes_fn must return codes of shape {ref.shape}, got {mine.shape}")
    n = int((mine != ref).sum())
    print(f"{n} of {ref.size} codes differ from golden ({n / ref.size:.1%})")


def outlier_keys(n_rows=512, hd=256, strength=20.0, seed=7):
    """float32 [n_rows, hd]: channel-scaled Gaussian key rows with 4 outlier channels × strength."""
    rng = np.random.default_rng(seed)
    ch = np.exp(0.5 * rng.standard_normal(hd))
    ch[rng.choice(hd, 4, replace=False)] *= strength
    return (rng.standard_normal((n_rows, hd)) * ch).astype(np.float32)


def compare_group_sizes(roundtrip_fn, sizes=(16, 32, 64, 128)):
    """roundtrip_fn(x, g) -> x̂ (Q8_0's rule with groups of g) on outlier_keys(): bits per
    value and relative MSE per g; g = 32 is checked against golden's round trip."""
    x = outlier_keys()
    gold = golden.q8_dequantize(*golden.q8_quantize(x))
    print(f"g = 32 equals golden's round trip: {np.array_equal(roundtrip_fn(x, 32), gold)}")
    print(f"{'g':>4} {'bits/value':>11} {'rel. MSE':>10}")
    for g in sizes:
        xh = np.asarray(roundtrip_fn(x, g), np.float64)
        mse = ((xh - x) ** 2).sum() / (x.astype(np.float64) ** 2).sum()
        print(f"{g:4d} {8 + 16 / g:11.3f} {mse:10.2e}")


def print_attention_speed(recs):
    """Per T of the attention records: bf16's fastest rung against q8 on the same CUDA-core
    split-T rung and q8's fastest rung; a ratio below 1 means q8 is slower."""
    print(recs.source)
    runs = [r for r in recs.runs if r.get("median_us") and r["shape"].get("kind") in ("bf16", "q8")]
    if not runs:
        print("no attention runs recorded: nothing to compare")
        return
    for T in sorted({r["shape"]["T"] for r in runs}):
        at = [r for r in runs if r["shape"]["T"] == T]
        bf = [r for r in at if r["shape"]["kind"] == "bf16"]
        q8 = {r["rung"]: r for r in at if r["shape"]["kind"] == "q8"}
        if not bf or not q8:
            continue
        b = min(bf, key=lambda r: r["median_us"])
        line = f"T={T:>6}: bf16 {b['kernel']} {b['median_us']:.1f} µs"
        for r in (q8.get(b["rung"]), min(q8.values(), key=lambda r: r["median_us"])):
            if r is not None and r["kernel"] not in line:
                line += f"; q8 {r['kernel']} {r['median_us']:.1f} µs = "
                line += f"{b['median_us'] / r['median_us']:.2f}× bf16's speed"
        print(line)
