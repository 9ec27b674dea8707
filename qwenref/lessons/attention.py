"""What notebooks/07_attention_split_t.ipynb imports: the float64 truth and a float32 model of a
naive kernel, the merge of split states, the rows the notebook studies (peaked and spread
attention), the sweeps over the split count, the sparse-V threshold and the cache kinds with
their figures, the slider figure, the dispatch plans of a few calls, the GPU ladder's records
rung by rung, and the take-away printed from the records."""

from __future__ import annotations

import numpy as np

from .. import excerpts, golden, nbutil
from ..layout import GPU_CACHE_KINDS, side_bytes_per_head, side_kinds

__all__ = """
    truth64 merge_states f32_sequential split_errors plot_split_errors plot_split_rule
    designed_row study_rows row_shapes sparse_v_sweep plot_sparse_v knob_figure knob_sliders
    cache_row kind_errors print_side_costs print_bf16_keys plot_kinds plan_calls print_plans
    show_cut show_rung print_v0_growth plot_errors print_kind_times
    take_away
""".split()

N_SM = 132  # an H200's SMs: the split rule's figure is drawn for it


def _caption(fig, text):
    """Where a figure's numbers come from, under its axes."""
    fig.text(0.01, -0.02, text, fontsize=7, color="0.35")


def _legend(ax, **kw):
    """A legend beside the axes, never over the data."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, **kw)


# ---- the truth, a naive float32 kernel, the merge ------------------------------------------
def truth64(q, k, v):
    """Softmax attention in float64 with GQA: q [nh, hd], k, v [nkv, T, hd] -> [nh, hd]
    (q head h reads kv head h // (nh // nkv))."""
    nkv, _, hd = k.shape
    qg = np.asarray(q, np.float64).reshape(nkv, -1, hd)  # [G, R, D]
    s = np.einsum("grd,gtd->grt", qg, np.asarray(k, np.float64)) / np.sqrt(hd)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("grt,gtd->grd", p, np.asarray(v, np.float64)).reshape(np.shape(q))


def merge_states(*states):
    """Merge split states (m [s, nh], l [s, nh], o [s, nh, hd]) into ONE state with golden's
    combine: a merged state is (lse2, 1, out), since 2^(lse2 - M) = L."""
    m, l, o = (np.concatenate([s[i] for s in states]) for i in range(3))
    out, lse2 = golden.attn_combine(m, l, o)
    return lse2[None], np.ones_like(lse2)[None], out[None]


def f32_sequential(q, k, v, n_splits):
    """A float32 model of a naive kernel: per split, the scores, their max, then l and o added
    one token after another (cumsum) in float32; the splits merged in float32."""
    nkv, _, hd = k.shape
    qg = q.reshape(nkv, -1, hd)  # [G, R, D]
    s = np.einsum("grd,gtd->grt", qg, k) * np.float32(hd**-0.5 * np.log2(np.e))
    ms, ls, os_ = [], [], []
    bounds = golden.split_bounds(k.shape[1], n_splits)
    for a, b in zip(bounds[:-1], bounds[1:]):
        if a == b:  # an empty split adds nothing
            continue
        mi = s[..., a:b].max(-1)  # [G, R]
        e = np.exp2(s[..., a:b] - mi[..., None])  # [G, R, W] float32
        ls.append(np.cumsum(e, -1, dtype=np.float32)[..., -1])
        os_.append(np.cumsum(e[..., None] * v[:, None, a:b], axis=2, dtype=np.float32)[:, :, -1])
        ms.append(mi)
    ms, ls, os_ = np.array(ms), np.array(ls), np.array(os_)
    w = np.exp2(ms - ms.max(0)).astype(np.float32)
    return ((w[..., None] * os_).sum(0) / (w * ls).sum(0)[..., None]).reshape(q.shape)


def split_errors(splits, T=2048, nh=8, nkv=2, hd=128, seed=1):
    """Relative error against float64 of golden and of the float32 model at each split count,
    on one row with a peaked softmax (keys scaled by 2.5). -> (err_golden, err_f32)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((nh, hd)).astype(np.float32)
    k = (2.5 * rng.standard_normal((nkv, T, hd))).astype(np.float32)
    v = rng.standard_normal((nkv, T, hd)).astype(np.float32)
    ref = truth64(q, k, v)
    err_golden = [nbutil.relerr(golden.decode_attention(q, k, v, n_splits=S), ref) for S in splits]
    err_f32 = [nbutil.relerr(f32_sequential(q, k, v, S), ref) for S in splits]
    return err_golden, err_f32


def plot_split_errors(splits, err_golden, err_f32, T):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.3))
    ax.plot(splits, err_golden, "o-", label="golden (float64 sums, float32 out)")
    ax.plot(splits, err_f32, "s-", label="float32, sequential sums per split (model)")
    ax.axhline(np.finfo(np.float32).eps / 2, color="grey", ls=":", lw=1, label="float32 unit")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("n_splits")
    ax.set_ylabel("rel. error vs float64 softmax")
    ax.set_title(f"error against the split count, T = {T}")
    ax.grid(alpha=0.3)
    _legend(ax)
    fig.tight_layout()
    _caption(fig, "golden model and a float32 model of a naive kernel, on this machine")
    return fig


def plot_split_rule(n_sm=N_SM):
    """n_splits and CTAs against T: qwen4_exp's length-only rule against one wave of CTAs."""
    import matplotlib.pyplot as plt

    Ts = np.unique(np.round(np.logspace(5, 17.01, 200, base=2)).astype(int))
    rule = np.array([golden.default_n_splits(int(t)) for t in Ts])
    fig, axs = plt.subplots(1, 2, figsize=(11, 3.4))
    axs[0].plot(Ts, rule, "k-", lw=2.5, zorder=3, label="qwen4_exp: ceil(T / 96), at most 64")
    cases = ((4, 1, "tab:blue"), (2, 1, "tab:orange"), (4, 4, "tab:green"))
    for nkv, nb, c in cases:
        need, lab = -(-n_sm // (nkv * nb)), f"1 CTA per SM at nkv={nkv}, nb={nb}"
        axs[0].axhline(need, color=c, ls="--", lw=1, label=lab + " (never)" * (need > 64))
        axs[1].plot(Ts, rule * nkv * nb, color=c, lw=2.5, label=f"rule, nkv={nkv}, nb={nb}")
    axs[0].set_ylabel("n_splits")
    axs[0].set_title("splits")
    for per_sm, ls in ((1, "--"), (4, ":")):
        axs[1].axhline(n_sm * per_sm, color="k", ls=ls, lw=0.8, label=f"{n_sm} SMs x {per_sm} CTA")
    axs[1].set_ylabel("CTAs = nb x nkv x n_splits")
    axs[1].set_title("CTAs the qwen4_exp rule launches")
    for ax in axs:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("T (visible tokens)")
        _legend(ax)
    fig.tight_layout()
    _caption(fig, f"golden.default_n_splits; an H200 has {n_sm} SMs")
    return fig


# ---- the rows studied: peaked and spread attention -----------------------------------------
def designed_row(logits, rng, nh_per_kv=2):
    """q [nkv * 2, hd] (rms 1 per element, like a normed q) and k [nkv, T, hd] whose scores
    q.k / sqrt(hd) are `logits` [nkv, T] for the first q head of each kv head and 0.8 x that
    for the second (a softer head). hd 128."""
    nkv, T = logits.shape
    hd = 128
    k = rng.standard_normal((nkv, T, hd))
    q = np.empty((nkv * nh_per_kv, hd))
    for g in range(nkv):
        u = rng.standard_normal(hd)
        u /= np.linalg.norm(u)  # this group's query direction
        k[g] += np.outer(logits[g] - k[g] @ u, u)  # now k . u = logit
        q[2 * g], q[2 * g + 1] = u * np.sqrt(hd), 0.8 * u * np.sqrt(hd)
    return q.astype(np.float32), k.astype(np.float32)


def study_rows(T=1024, seed=2):
    """The rows the notebook studies, 4 q heads on 2 kv heads, hd 128, T tokens, one V:
    "peaked": a dozen strong keys (+6 to +11 over a background of spread 1.5);
    "spread": random q and k with scores of standard deviation 2.5 (no key stands out);
    "flat": random unit q and k (scores of spread 1: every p close to 1/T).
    -> ({name: (q [4, 128], k [2, T, 128])}, v [2, T, 128])."""
    rng = np.random.default_rng(seed)
    strong = rng.choice(T, 12, replace=False)
    logits = 1.5 * rng.standard_normal((2, T))
    logits[:, strong] += rng.uniform(6, 11, (2, 12))
    rows = {"peaked": designed_row(logits, rng)}
    v = rng.standard_normal((2, T, 128)).astype(np.float32)
    q = rng.standard_normal((4, 128)).astype(np.float32)
    k = rng.standard_normal((2, T, 128)).astype(np.float32)
    rows["spread"] = ((2.5 * q).astype(np.float32), k)
    rows["flat"] = (q, k)
    return rows, v


def row_shapes(rows):
    """Per row, the mean over its q heads of: the score spread sigma_s (std of q.k / sqrt(hd)),
    N_eff = 1 / sum p^2 and the mass of the 12 largest p (how peaked the softmax is)."""
    print(f"{'row':<8}{'sigma_s':>8}{'N_eff':>9}{'top-12 mass':>13}")
    for name, (q, k) in rows.items():
        nkv, _, hd = k.shape
        qg = np.asarray(q, np.float64).reshape(nkv, -1, hd)
        sc = np.einsum("grd,gtd->grt", qg, np.asarray(k, np.float64)).reshape(len(q), -1)
        p = _probs(q, k)
        sigma = (sc / np.sqrt(hd)).std(-1).mean()
        n_eff = (1 / (p**2).sum(-1)).mean()
        top12 = np.sort(p, -1)[:, -12:].sum(-1).mean()
        print(f"{name:<8}{sigma:8.2f}{n_eff:9.1f}{top12:13.2f}")


def _probs(q, k):
    """The exact softmax p [nh, T] of q over k (GQA), float64."""
    nkv, _, hd = k.shape
    qg = np.asarray(q, np.float64).reshape(nkv, -1, hd)
    s = np.einsum("grd,gtd->grt", qg, np.asarray(k, np.float64)).reshape(len(q), -1)
    p = np.exp((s - s.max(-1, keepdims=True)) / np.sqrt(hd))
    return p / p.sum(-1, keepdims=True)


def sparse_v_sweep(rows, v, thresholds, names=("peaked", "flat")):
    """Per row and threshold: the output's error against exact attention, the fraction of V
    rows skipped, and the bound sum_{p < thr} p |v| / |out|; plus the mass of the 12 largest p."""
    out = {}
    for name in names:
        q, k = rows[name]
        exact = golden.decode_attention(q, k, v)
        p = _probs(q, k)  # [nh, T]
        vn = np.repeat(np.linalg.norm(v, axis=-1), len(q) // len(k), axis=0)  # |v_t| per head
        err, skipped, bound = [], [], []
        for thr in thresholds:
            got = golden.decode_attention(q, k, v, sparse_v=float(thr))
            err.append(nbutil.relerr(got, exact))
            skipped.append(float((p < thr).mean()))
            tail = np.where(p < thr, p * vn, 0).sum(-1)
            bound.append(float(np.linalg.norm(tail) / np.linalg.norm(exact)))
        top12 = float(np.sort(p, -1)[:, -12:].sum(-1).mean())
        out[name] = dict(err=err, skipped=skipped, bound=bound, top12=top12)
    return out


def plot_sparse_v(sv, thresholds, T):
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
        _legend(ax)
    axs[0].set_yscale("log")
    axs[0].set_ylabel("rel. error vs exact")
    axs[0].set_title("what it costs")
    axs[1].set_ylabel("fraction of V rows skipped")
    axs[1].set_title("what it saves")
    fig.tight_layout()
    _caption(fig, f"golden model on this machine, T = {T}, 4 q heads on 2 kv heads, hd 128")
    return fig


# ---- the sliders ---------------------------------------------------------------------------
_KNOB = {}


def _knob_row():
    """One peaked row of 512 tokens (2 q heads on 1 kv head, hd 128), made once."""
    if not _KNOB:
        rng = np.random.default_rng(7)
        logits = 1.5 * rng.standard_normal((1, 512))
        logits[:, rng.choice(512, 8, replace=False)] += rng.uniform(5, 9, (1, 8))
        q, k = designed_row(logits, rng)
        v = rng.standard_normal((1, 512, 128)).astype(np.float32)
        _KNOB.update(q=q, k=k, v=v, p=_probs(q, k)[0], ref=truth64(q, k, v))
    return _KNOB


def knob_figure(n_splits=8, sparse_v=1e-3):
    """Head 0 of a peaked 512-token row: each token's softmax weight with the split bounds and
    the tokens sparse V skips, and each split's share of the softmax mass, from golden's
    partials; the title gives the output's error against float64."""
    import matplotlib.pyplot as plt

    r = _knob_row()
    m, l, o = golden.attn_partials(r["q"], r["k"], r["v"], n_splits, sparse_v)
    out, _ = golden.attn_combine(m, l, o)
    w = np.exp2(m[:, 0].astype(np.float64) - m[:, 0].max()) * l[:, 0]
    keep = r["p"] >= sparse_v
    # no tight_layout (it lays the text out twice): fixed margins keep a redraw fast
    fig, axs = plt.subplots(1, 2, figsize=(11, 3.2), gridspec_kw={"width_ratios": [3, 2]})
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.16, top=0.86, wspace=0.55)
    t = np.arange(r["p"].size)
    axs[0].semilogy(t[keep], r["p"][keep], ".", ms=3, label="V read")
    axs[0].semilogy(t[~keep], r["p"][~keep], ".", ms=3, color="0.7", label="V skipped")
    axs[0].axhline(sparse_v, color="tab:red", lw=1, label=f"sparse_v = {sparse_v:.1e}")
    for b in golden.split_bounds(t.size, n_splits)[1:-1]:
        axs[0].axvline(b, color="k", lw=0.5, ls=":")
    axs[0].set_xlabel("token (dotted: split bounds)")
    axs[0].set_ylabel("softmax weight p, head 0")
    _legend(axs[0])
    axs[1].bar(np.arange(len(w)), w / w.sum(), color="tab:green")
    axs[1].set_xlabel("split")
    axs[1].set_ylabel("share of the softmax mass")
    err = nbutil.relerr(out, r["ref"])
    fig.suptitle(
        f"n_splits = {n_splits}: error vs float64 {err:.1e}, V rows skipped "
        f"{100 * (1 - keep.mean()):.0f}%",
        fontsize=10,
    )
    _caption(fig, "golden model on this machine: one peaked row, T = 512, hd 128")
    plt.show()


def knob_sliders():
    """The sliders of knob_figure: n_splits 1..64, sparse_v 1e-6..1e-1 (log)."""
    import ipywidgets as w

    return dict(
        n_splits=w.IntSlider(value=8, min=1, max=64, description="n_splits"),
        sparse_v=w.FloatLogSlider(
            value=1e-3, base=10, min=-6, max=-1, step=0.25, description="sparse_v"
        ),
    )


# ---- cache kinds: error and bytes, key side against value side ------------------------------
def cache_row(cfg, kind, k, v):
    """A golden cache of `kind` holding k, v [nkv, T, hd] (head-major, as the rows are)."""
    c = golden.KVCache(cfg, max_t=k.shape[1], kind=kind)
    c.append(np.ascontiguousarray(k.transpose(1, 0, 2)), np.ascontiguousarray(v.transpose(1, 0, 2)))
    return c


def _attend(q, K, V, k_rot, v_rot):
    """One row as the layer reads a cache: q rotated when K is, the output un-rotated when V
    is (the WHT is orthonormal: (Hq).(Hk) = q.k and sum p Hv = H sum p v)."""
    o = golden.decode_attention(golden.wht(q) if k_rot else q, K, V)
    return golden.wht(o, inverse=True) if v_rot else o


def kind_errors(cfg, rows, v, names=("peaked", "spread")):
    """For each row and cache kind with attention kernels (layout.GPU_CACHE_KINDS, the kinds
    this notebook's kernels read): the attention output's error against float64 on the exact
    K, V; with the cache's K and exact V (the key side's share); with exact K and the cache's
    V (the value side's share); and golden's own error against float64 on the stored values.
    -> {name: {kind: dict(err, k_only, v_only, golden_stored)}}."""
    out = {}
    for name in names:
        q, k = rows[name]
        exact = truth64(q, k, v)
        rot = {False: (k, v), True: (golden.wht(k), golden.wht(v))}  # exact K, V per domain
        res = out[name] = {}
        for kind in GPU_CACHE_KINDS:
            c = cache_row(cfg, kind, k, v)
            K, V, kr, vr = c.keys(), c.values(), c.k_rotated, c.v_rotated
            q_in = golden.wht(q) if kr else q
            stored = truth64(q_in, K, V)
            stored = golden.wht(stored, inverse=True) if vr else stored
            got = _attend(q, K, V, kr, vr)
            res[kind] = dict(
                err=nbutil.relerr(got, exact),
                k_only=nbutil.relerr(_attend(q, K, rot[vr][1], kr, vr), exact),
                v_only=nbutil.relerr(_attend(q, rot[kr][0], V, kr, vr), exact),
                golden_stored=nbutil.relerr(got, stored),
            )
    return out


def print_side_costs(errs, hd=128):
    """Per side format: stored bytes per token per kv head, and the attention error when only
    that side is stored in it (the other exact), on each row."""
    names = list(errs)
    head = "".join(f"{'K only, ' + n:>17}{'V only, ' + n:>17}" for n in names)
    print(f"{'side':<8}{'bytes':>6}{head}")
    for side in ("bf16", "q8", "turbo8", "turbo4", "turbo3", "turbo2"):
        cells = "".join(
            f"{errs[n][side]['k_only']:17.1e}{errs[n][side]['v_only']:17.1e}" for n in names
        )
        print(f"{side:<8}{side_bytes_per_head(side, hd):6d}{cells}")


def print_bf16_keys(errs, hd=128):
    """What bf16 keys buy: turbo-n on both sides against bf16 K with turbo-n V, per row, and
    the bytes per token per kv head the bf16 keys add."""
    for n in (4, 3, 2):
        extra = side_bytes_per_head("bf16", hd) - side_bytes_per_head(f"turbo{n}", hd)
        for name in errs:
            a, b = errs[name][f"turbo{n}"]["err"], errs[name][f"bf16k-turbo{n}v"]["err"]
            gain = f"{a / b:.2f}x less" if a / b >= 1.05 else f"no gain: {a / b:.2f}x"
            print(
                f"{name:<7} turbo{n} -> bf16k-turbo{n}v: error {a:.1e} -> {b:.1e} "
                f"({gain}) for {extra} more bytes per token per kv head"
            )


def plot_kinds(errs, hd=128):
    """Two panels over the cache kinds: the attention error (one bar per row, log scale) and
    the kind's stored bytes per token per kv head (linear)."""
    import matplotlib.pyplot as plt

    kinds = list(GPU_CACHE_KINDS)
    fig, (ax, axb) = plt.subplots(1, 2, figsize=(10, 3.4), width_ratios=(3, 2))
    x = np.arange(len(kinds))
    for j, (name, res) in enumerate(errs.items()):
        ax.bar(x + (j - 0.5) * 0.4, [res[k]["err"] for k in kinds], 0.4, label=f"{name} row")
    ax.set_yscale("log")
    ax.set_ylabel("rel. error vs float64 on exact K, V")
    ax.set_xticks(x, kinds, rotation=30, ha="right", fontsize=8)
    ax.set_title("attention error per cache kind", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    nbytes = [sum(side_bytes_per_head(s, hd) for s in side_kinds(k)) for k in kinds]
    axb.bar(x, nbytes, 0.6, color="0.5")
    axb.set_xticks(x, kinds, rotation=30, ha="right", fontsize=8)
    axb.set_ylabel("bytes per token per kv head (K+V)")
    axb.set_title("its size", fontsize=10)
    fig.tight_layout()
    _caption(fig, f"golden model on this machine: 4 q heads on 2 kv heads, hd {hd}")
    return fig


# ---- the dispatch plan, kernel excerpts ----------------------------------------------------
def plan_calls(cfg):
    """A few decode-attention calls on cfg's shape: (label, cache kind, nb, plan keywords)."""
    return [
        ("q8, one row", "q8", 1, {}),
        ("q8, 4 rows", "q8", 4, {}),
        ("q8, 8 rows", "q8", 8, {}),
        ("q8, one selective row", "q8", 1, {"selective": True, "width": 2112}),
        ("q8, sparse V", "q8", 1, {"sparse_v": 1e-3}),
        ("bf16", "bf16", 1, {}),
        ("turbo4", "turbo4", 1, {}),
        ("bf16k-turbo3v", "bf16k-turbo3v", 1, {}),
        ("q8, impl='v0'", "q8", 1, {"impl": "v0"}),
    ]


def print_plans(cfg, T=32768, live=None):
    """The plan of each of plan_calls(cfg) at T tokens: with its split count (plan, on a GPU)
    or without (plan_rung: everything that needs no GPU)."""
    from ..gpu.attention import plan, plan_rung

    live = nbutil.gpu_available() if live is None else live
    print(("plan(...) on this GPU" if live else "plan_rung(...): no GPU here, so no n_splits"))
    print(f"{'call':<22}{'rung':<5}{'kernel':<28}{'S':>4}{'tol':>8}  why not a faster rung")
    for label, kind, nb, kw in plan_calls(cfg):
        cache = golden.KVCache(cfg, max_t=32, kind=kind)  # a plan reads cfg and the kinds
        if live:
            p = plan(cache, nb, base_pos=T - nb, **kw)
        else:
            kw = {k: v for k, v in kw.items() if k != "width"}
            p = plan_rung(cache, nb, **kw)
        s = "-" if p.n_splits is None else str(p.n_splits)
        print(f"{label:<22}{p.rung:<5}{p.kernel:<28}{s:>4}{p.tol:8.0e}  {p.why or ''}")


def show_cut(title, text, first, last):
    """Show lines_between(text, first, last) under a title, as show_excerpt shows a whole
    definition."""
    excerpts.show_lines(text, f"{title} (lines cut)", first, last, numbered=False)


# ---- the GPU ladder's records ------------------------------------------------------------------
def show_rung(recs, impl):
    """One rung's runs among the records: kernel, size, time, % of copy and floor, error
    against golden (and the tolerance its precision implies)."""
    from ..gpu.attention import RUNGS

    runs = [r for r in recs.runs if r.get("rung") == RUNGS["attention"].index(impl)]
    print(recs.source if runs else f"no runs of rung {impl!r} in: {recs.source}")
    for r in sorted(runs, key=lambda r: (r["shape"].get("kind", ""), r["shape"].get("T", 0))):
        size = f"T={r['shape'].get('T')}, {r['shape'].get('kind')}"
        if r.get("error"):
            print(f"{r.get('kernel')} {size}: failed ({r['error']})")
            continue
        print(
            f"{r['kernel']:<28}{size:<20}{r['median_us']:10.1f} us "
            f"{r['pct_of_copy']:5.1f}% copy {r.get('pct_of_floor', np.nan):5.1f}% floor  "
            f"vs golden {r['rel_err']:.1e} (tol {r['tol']:.0e})"
        )


def _worst(good, rung, kind):
    """The run of `rung` on `kind` with the largest error against golden, or None."""
    rs = [r for r in good if r["rung"] == rung and r["shape"]["kind"] == kind]
    return max(rs, key=lambda r: r["rel_err"]) if rs else None


def plot_errors(recs, errs, row="peaked"):
    """Per cache kind of the records: golden against float64 on the same stored values (this
    machine) beside each GPU rung against golden (the records: the worst over the recorded
    lengths, its T written on the bar)."""
    import matplotlib.pyplot as plt

    from ..gpu.attention import RUNGS, TOL_ATTN, TOL_ATTN_MMA

    good = [r for r in recs.runs if r.get("rel_err") is not None and not r.get("error")]
    kinds = sorted({r["shape"]["kind"] for r in good})
    fig, ax = plt.subplots(figsize=(7.5, 3.3))
    bars = {"golden vs float64, T = 1024": ([errs[row][k]["golden_stored"] for k in kinds], None)}
    for i, impl in enumerate(RUNGS["attention"]):
        worst = [_worst(good, i, k) for k in kinds]
        vals = [r["rel_err"] if r else np.nan for r in worst]
        bars[f"GPU {impl} vs golden, worst over T"] = (vals, worst)
    x, wd = np.arange(len(kinds)), 0.8 / len(bars)
    for j, (label, (vals, runs)) in enumerate(bars.items()):
        xs = x + (j - (len(bars) - 1) / 2) * wd
        ax.bar(xs, vals, wd, label=label)
        for xi, r in zip(xs, runs or []):
            if r:
                t = r["shape"]["T"]
                ax.text(xi, r["rel_err"] * 1.15, f"{t // 1024}k", ha="center", fontsize=6)
    ax.axhline(TOL_ATTN, color="k", ls="--", lw=1, label=f"tol v0, v1 ({TOL_ATTN:.0e})")
    ax.axhline(TOL_ATTN_MMA, color="k", ls=":", lw=1, label=f"tol mma ({TOL_ATTN_MMA:.0e})")
    ax.set_xticks(x, kinds)
    ax.set_yscale("log")
    ax.set_ylabel("norm-wise rel. error")
    ax.set_title("golden against float64, each GPU rung against golden (T on each GPU bar)")
    _legend(ax)
    fig.tight_layout()
    _caption(fig, "golden: this machine, T = 1024; GPU: " + recs.source)
    return fig


def print_v0_growth(recs):
    """v0's error at the shortest and the longest recorded T, per kind, against sqrt(T)."""
    good = [r for r in recs.runs if r.get("rel_err") and r.get("rung") == 0 and not r.get("error")]
    for kind in sorted({r["shape"]["kind"] for r in good}):
        rs = sorted((r for r in good if r["shape"]["kind"] == kind), key=lambda r: r["shape"]["T"])
        a, b = rs[0], rs[-1]
        if a is b:
            print(f"v0 {kind}: one length recorded (T={a['shape']['T']}), no growth to show")
            continue
        ta, tb = a["shape"]["T"], b["shape"]["T"]
        print(
            f"v0 {kind:<7}T {ta} -> {tb} ({tb / ta:.0f}x): error {a['rel_err']:.1e} -> "
            f"{b['rel_err']:.1e}, {b['rel_err'] / a['rel_err']:.1f}x (sqrt(T) would give "
            f"{np.sqrt(tb / ta):.1f}x)"
        )


def print_kind_times(recs):
    """Per rung and T, each kind's time and its ratio to v1 bf16's; then the bytes ratios."""
    from ..gpu.attention import RUNGS

    ok = [r for r in recs.runs if r.get("median_us") and not r.get("error")]
    kinds = sorted({r["shape"]["kind"] for r in ok}, key=lambda k: k != "bf16")
    bf16_v1 = {
        r["shape"]["T"]: r["median_us"]
        for r in ok
        if r["rung"] == 1 and r["shape"]["kind"] == "bf16"
    }
    print(recs.source)
    print(f"{'rung':<5}{'T':>7}" + "".join(f"{k:>22}" for k in kinds))
    for rung in sorted({r["rung"] for r in ok}):
        for t in sorted({r["shape"]["T"] for r in ok if r["rung"] == rung}):
            at = {r["shape"]["kind"]: r for r in ok if r["rung"] == rung and r["shape"]["T"] == t}
            cells = ""
            for k in kinds:
                r = at.get(k)
                if r is None:
                    cells += f"{'-':>22}"
                    continue
                ref = bf16_v1.get(t)
                rel = f" ({r['median_us'] / ref:.2f}x)" if ref else ""
                cells += f"{r['median_us']:>12.1f} us{rel:>8}"
            print(f"{RUNGS['attention'][rung]:<5}{t:>7}{cells}")
    print("(x) = time / v1 bf16's time at the same T")
    t = max(bf16_v1, default=None)
    by = {r["shape"]["kind"]: r["bytes"] for r in ok if r["rung"] == 1 and r["shape"]["T"] == t}
    for kind in (k for k in kinds if k != "bf16" and "bf16" in by and k in by):
        print(f"{kind}: {by['bf16'] / by[kind]:.2f}x fewer bytes than bf16 per call (T={t})")


def take_away(recs, sweep):
    """The take-away's numbers, from the records: per size and kind the fastest rung against
    v0 and the copy rate; mma against v1 on q8; the sweep's best split count against the
    plan's."""
    print(recs.source)
    ok = [r for r in recs.runs if r.get("median_us") and not r.get("error")]
    for key in sorted({(r["shape"]["kind"], r["shape"]["T"]) for r in ok}):
        rs = {r["rung"]: r for r in ok if (r["shape"]["kind"], r["shape"]["T"]) == key}
        best = min(rs.values(), key=lambda r: r["median_us"])
        v0 = rs.get(0)
        vs = f", {v0['median_us'] / best['median_us']:.0f}x v0" if v0 and v0 is not best else ""
        line = (
            f"{key[0]:<7}T={key[1]:<7} fastest {best['kernel']:<26} "
            f"{best['median_us']:8.1f} us, {best['pct_of_copy']:4.1f}% of copy{vs}"
        )
        if 1 in rs and 2 in rs:
            line += f"; mma {rs[1]['median_us'] / rs[2]['median_us']:.1f}x v1"
        print(line)
    if not sweep.runs:
        print("n_splits sweep: none recorded here")
        return
    good = [r for r in sweep.runs if r.get("median_us") and not r.get("error")]
    for rung in sorted({r["rung"] for r in good}):
        rs = [r for r in good if r["rung"] == rung]
        best = min(rs, key=lambda r: r["median_us"])
        mine = [f", the plan's {r['shape']['n_splits']}: {r['median_us']:.1f} us" for r in rs]
        plan_txt = next((t for t, r in zip(mine, rs) if r["shape"].get("plan")), "")
        print(
            f"sweep {best['kernel']}: best n_splits {best['shape']['n_splits']} "
            f"({best['median_us']:.1f} us){plan_txt}"
        )
