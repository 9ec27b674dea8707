"""The ladder: every rung of every kernel family (v0 = the direct translation of the golden
formula, then each faster idea), validated and timed at a few sizes per family (LADDER), so a
plot of GB/s against bytes moved shows where each rung stops being launch-bound.

`python -m qwenref.bench --only ladder` runs it. Each record carries family, rung (its index in
teaching order), default and the rung's own kernel name; it keeps its pipeline stage in `stage`
and carries bench="ladder", which --only merges by. Every rung is recorded beside the read
floor of one launch that reads the same bytes (floor_us, pct_of_floor). The attention n_splits
sweep (ladder_splits) adds sweep="n_splits" and the split count to its shape.
"""

from __future__ import annotations

import numpy as np

from .. import timing
from ..layout import tq_bits, turbo_bits
from .cases_attention import golden_attention_rows
from .counting import (
    bytes_append,
    bytes_attention,
    bytes_block_scores,
    bytes_gemv_q8,
    bytes_linear,
    bytes_norm,
    bytes_rope,
    bytes_select,
    bytes_wht,
    kv_bytes_per_token,
)
from .inputs import decode_shape, dense_cfg, fill_caches, host, poisoned, qwen_cfg, randn
from .rungs import FAMILY_MODULE, family_rungs, ladder_runs, rotated_copies, rung_fields
from .tolerances import TOL_ATTN, TOL_ATTN_MMA, TOL_CODES, TOL_F32, TOL_ROPE, TOL_SELECT

__all__ = [
    "FAMILY_MODULE",
    "LADDER",
    "family_rungs",
    "rung_fields",
    "ladder_runs",
    "ladder_norm",
    "ladder_rope",
    "ladder_wht",
    "ladder_append",
    "ladder_indexer",
    "ladder_attention",
    "ladder_gemv",
    "ladder_splits",
    "ladder_cases",
]


def ladder_norm(ctx, rows=8192, n=5120):
    from .. import golden, gpu

    cp = ctx.cp
    x, r = randn(cp, (rows, n)), randn(cp, (rows, n))
    w = randn(cp, (n,), 0.1, outliers=False)
    y, s = poisoned(cp, (rows, n)), poisoned(cp, (rows, n))
    shape = {"rows": rows, "n": n}
    nr, sets = rotated_copies(ctx, bytes_norm(rows, n, True), x, r, y, s)

    def once_n(impl):
        y.fill(cp.nan)
        return host(gpu.rms_norm(x, w, 1e-6, out=y, impl=impl))

    ref = golden.rms_norm(host(x), host(w), 1e-6)
    ladder_runs(
        ctx,
        stage="norm",
        family="rms_norm",
        shape=shape,
        once=once_n,
        launch=lambda impl, i: gpu.rms_norm(sets[i][0], w, 1e-6, out=sets[i][2], impl=impl),
        ref=ref,
        nbytes=bytes_norm(rows, n),
        tol=TOL_F32,
        n_rot=nr,
        max_inner=8,
    )

    def once_a(impl):
        y.fill(cp.nan)
        s.fill(cp.nan)
        gpu.add_rms_norm(x, r, w, 1e-6, out=y, sum_out=s, impl=impl)
        return np.concatenate([host(y).ravel(), host(s).ravel()])

    ry, rs = golden.add_rms_norm(host(x), host(r), host(w), 1e-6)
    ladder_runs(
        ctx,
        stage="norm",
        family="add_rms_norm",
        shape=shape,
        once=once_a,
        launch=lambda impl, i: gpu.add_rms_norm(
            sets[i][0], sets[i][1], w, 1e-6, out=sets[i][2], sum_out=sets[i][3], impl=impl
        ),
        ref=np.concatenate([ry.ravel(), rs.ravel()]),
        nbytes=bytes_norm(rows, n, True),
        tol=TOL_F32,
        n_rot=nr,
        max_inner=8,
    )


def ladder_rope(ctx, nb=4096):
    from .. import golden, gpu

    cp = ctx.cp
    c = qwen_cfg()
    hd = c.head_dim
    qg, k = randn(cp, (nb, c.nh, 2 * hd)), randn(cp, (nb, c.nkv, hd))
    qw, kw = randn(cp, (hd,), 0.1, False), randn(cp, (hd,), 0.1, False)
    pos_h = np.random.default_rng(1).integers(0, 131072, nb).astype(np.int32)
    pos = cp.asarray(pos_h)
    qo, ko = poisoned(cp, (nb, c.nh, hd)), poisoned(cp, (nb, c.nkv, hd))
    args = (qg, k, qw, kw, pos, c.rotary_dim, c.rope_theta, 1e-6)
    nr, sets = rotated_copies(ctx, bytes_rope(nb, c.nh, c.nkv, hd), qg, k, qo, ko)

    def once(impl):
        qo.fill(cp.nan)
        ko.fill(cp.nan)
        gpu.qk_norm_rope(*args, q_out=qo, k_out=ko, impl=impl)
        return np.concatenate([host(qo).ravel(), host(ko).ravel()])

    rq, rk = golden.qk_norm_rope(
        host(qg), host(k), host(qw), host(kw), pos_h, c.rotary_dim, c.rope_theta, 1e-6
    )
    shape = {"nb": nb, "nh": c.nh, "nkv": c.nkv, "head_dim": hd, "rotary_dim": c.rotary_dim}
    ladder_runs(
        ctx,
        stage="rope",
        family="qk_norm_rope",
        shape=shape,
        once=once,
        launch=lambda impl, i: gpu.qk_norm_rope(
            sets[i][0], sets[i][1], *args[2:], q_out=sets[i][2], k_out=sets[i][3], impl=impl
        ),
        ref=np.concatenate([rq.ravel(), rk.ravel()]),
        nbytes=bytes_rope(nb, c.nh, c.nkv, hd),
        tol=TOL_ROPE,
        n_rot=nr,
        max_inner=8,
        kshape={"head_dim": hd},
    )


def ladder_wht(ctx, rows=65536, n=256):
    from .. import golden
    from ..gpu.wht import wht as gpu_wht

    cp = ctx.cp
    x = randn(cp, (rows, n))
    y = poisoned(cp, (rows, n))
    nr, sets = rotated_copies(ctx, bytes_wht(rows, n), x, y)

    def once(impl):
        y.fill(cp.nan)
        return host(gpu_wht(x, out=y, impl=impl))

    ladder_runs(
        ctx,
        stage="wht",
        family="wht",
        shape={"rows": rows, "n": n},
        once=once,
        launch=lambda impl, i: gpu_wht(sets[i][0], out=sets[i][1], impl=impl),
        ref=golden.wht(host(x)),
        nbytes=bytes_wht(rows, n),
        tol=TOL_F32,
        n_rot=nr,
        max_inner=8,
        kshape={"n": n},
    )


def ladder_append(ctx, nb=4096, kinds=("q8", "turbo4", "turbo2", "tq4", "tq2")):
    """KVCache.append of nb tokens at successive positions; the stored bytes are compared."""
    from .. import golden, gpu

    cp = ctx.cp
    c = dense_cfg()
    max_inner = 2
    calls = 3 + 1 + ctx.batches * max_inner + 2
    k, v = randn(cp, (nb, c.nkv, c.head_dim)), randn(cp, (nb, c.nkv, c.head_dim))
    nr, kv = rotated_copies(ctx, 2 * k.nbytes, k, v)  # the cache's writes never repeat a position
    for kind in kinds:
        family = "q8_append" if kind == "q8" else "tq_append" if tq_bits(kind) else "turbo_append"
        gc = golden.KVCache(c, max_t=nb, kind=kind)
        gc.append(host(k), host(v))
        ref = np.concatenate([gc.keys(nb).ravel(), gc.values(nb).ravel()])
        state = {}

        def once(impl, kind=kind, gc=gc):
            state["cache"] = cache = gpu.KVCache(c, max_t=calls * nb, kind=kind)
            cache.append(k, v, impl=impl)
            mine = cache.to_golden()
            # q8 codes are bit-exact by construction; turbo's and tq's rotation is float32
            # butterflies against golden's float64 WHT, so a code on a rounding boundary may
            # differ by one step (TOL_CODES), which the dequantized comparison below measures
            pairs = ((mine.k_store, gc.k_store), (mine.v_store, gc.v_store))
            if kind == "q8" and not all(
                (ms[n][:, :nb] == gs[n]).all() for ms, gs in pairs for n in gs
            ):
                raise AssertionError(f"q8 append ({impl}): stored bytes differ from golden")
            return np.concatenate([mine.keys(nb).ravel(), mine.values(nb).ravel()])

        bits = 8 if kind == "q8" else tq_bits(kind) or turbo_bits(kind)
        ladder_runs(
            ctx,
            stage="kvcache",
            family=family,
            shape={"nb": nb, "nkv": c.nkv, "head_dim": c.head_dim, "kind": kind},
            once=once,
            launch=lambda impl, i: state["cache"].append(*kv[i], impl=impl),
            ref=ref,
            nbytes=bytes_append(nb, c.nkv, c.head_dim, kind),
            tol=TOL_CODES,
            n_rot=nr,
            max_inner=max_inner,
            kshape={"head_dim": c.head_dim, "bits": bits},
        )
        state.clear()  # the cache's memory goes before the next kind


def ladder_indexer(ctx, T=32768, nb=1):
    """update_block_keys, block_scores and select at T tokens (27B indexer, R 64, budget 2048).
    One cache, not rotated: at T = 4k its keys (4.5 MB) and the block keys stay in the L2, so
    that size is timed warm and its % of copy can read high."""
    from .. import golden, gpu

    cp = ctx.cp
    c = qwen_cfg()
    R, kblk, inh, ihd = c.indexer_compress_ratio, c.kblk, c.indexer_n_heads, c.indexer_head_dim
    cache = gpu.KVCache(c, max_t=T, kind="q8")
    knw = randn(cp, (ihd,), 0.1, False)
    fill_caches([cache], T, knw)
    base, n_blocks = T - nb, T // R
    iq = randn(cp, (nb, inh, ihd), outliers=False)
    shape = {"T": T, "nb": nb, "R": R, "budget": c.indexer_budget, "inh": inh, "ihd": ihd}
    gc = cache.to_golden()
    gpu_bk = gc.blk_keys[:n_blocks].copy()
    golden.update_block_keys(gc, host(knw), c, 0, T)

    def once_keys(impl):
        cache.blk_keys.fill(cp.nan)
        gpu.update_block_keys(cache, knw, c, 0, T, impl=impl)
        return host(cache.blk_keys[:n_blocks])

    ladder_runs(
        ctx,
        stage="indexer",
        family="update_block_keys",
        shape=shape,
        once=once_keys,
        launch=lambda impl, i: gpu.update_block_keys(cache, knw, c, 0, T, impl=impl),
        ref=gc.blk_keys[:n_blocks],
        nbytes=4 * (T * ihd + n_blocks * ihd),
        tol=TOL_ROPE,
        max_inner=4,
    )
    gpu.update_block_keys(cache, knw, c, 0, T)  # the default rung's keys for the rest

    max_blocks = cache.blk_keys.shape[0]
    iq_h = host(iq)
    ncs = [(base + b + 1) // R for b in range(nb)]
    ref_sc = np.concatenate([golden.block_scores(iq_h[b], gpu_bk[: ncs[b]]) for b in range(nb)])
    sc = poisoned(cp, (nb, max_blocks))

    def once_scores(impl):
        sc.fill(cp.nan)
        h = host(gpu.block_scores(iq, cache, base, out=sc, impl=impl))
        return np.concatenate([h[b, : ncs[b]] for b in range(nb)])

    ladder_runs(
        ctx,
        stage="indexer",
        family="block_scores",
        shape=shape,
        once=once_scores,
        launch=lambda impl, i: gpu.block_scores(iq, cache, base, out=sc, impl=impl),
        ref=ref_sc,
        nbytes=bytes_block_scores(nb, inh, ihd, n_blocks, max_blocks),
        tol=TOL_F32,
    )

    ref_sel = [golden.row_selection(base + b, iq_h[b], gpu_bk, R, kblk)[0] for b in range(nb)]

    def once_select(impl):
        si, sn, _ = gpu.select_rows(iq, cache, base, c, impl=impl)
        si, sn = host(si), host(sn)
        return [si[b, : sn[b]] if sn[b] > 0 else np.arange(base + b + 1) for b in range(nb)]

    def differing(got, ref):
        return float(np.mean([len(np.setxor1d(g, r)) / (2 * len(r)) for g, r in zip(got, ref)]))

    ladder_runs(
        ctx,
        stage="indexer",
        family="select",
        shape=shape,
        once=once_select,
        launch=lambda impl, i: gpu.select_rows(iq, cache, base, c, impl=impl),
        ref=ref_sel,
        nbytes=bytes_select(nb, inh, ihd, n_blocks, max_blocks, R, kblk),
        tol=TOL_SELECT,
        err_fn=differing,
        kshape={"nblk": n_blocks, "kblk": kblk},
    )


def _decode_inputs(ctx, c, T, nb, kind):
    """A decode of nb rows ending at T tokens: (bytes, read floor µs, caches to rotate, the
    caches filled, q, the poisoned output, golden's answer)."""
    from .. import gpu

    nbytes = bytes_attention(nb, c.nh, c.nkv, c.head_dim, kind, T - nb)
    floor = timing.floor_us(nbytes, ctx.n_rot(nbytes), ctx.batches).us
    nr = ctx.n_rot(T * kv_bytes_per_token(kind, c.nkv, c.head_dim))
    caches = [gpu.KVCache(c, max_t=T, kind=kind) for _ in range(nr)]
    fill_caches(caches, T)
    q = randn(ctx.cp, (nb, c.nh, c.head_dim), 2.0)
    out = poisoned(ctx.cp, (nb, c.nh, c.head_dim))
    ref = golden_attention_rows(caches[0].to_golden(), host(q), T - nb)
    return nbytes, floor, nr, caches, q, out, ref


V0_MAX_T = 32768  # v0 reads every token in one warp per head: ~0.4 s a call at 128k


def ladder_attention(ctx, T=32768, nb=1, kinds=("q8", "bf16", "turbo4", "turbo2")):
    """Dense decode at T tokens on each rung (v0 one warp per (row, head) over all tokens, up
    to V0_MAX_T; split, v0's loop cut into split-T partials; v1 split-T on CUDA cores with
    prefetched tiles and a warp merge; mma tensor cores for every kind that has them)."""
    from .. import gpu
    from ..gpu.attention import MMA_KINDS, plan
    from ..layout import side_kinds

    cp = ctx.cp
    c = dense_cfg()
    for kind in kinds:
        nbytes, floor, nr, caches, q, out, ref = _decode_inputs(ctx, c, T, nb, kind)
        base = T - nb

        def once(impl):
            out.fill(cp.nan)
            return host(gpu.decode_attention(q, caches[0], base, out=out, impl=impl))

        on_tc = side_kinds(kind) in MMA_KINDS
        rungs = ("split", "v1", "mma") if on_tc else ("split", "v1")
        impls = (("v0",) if T <= V0_MAX_T else ()) + rungs
        shape = decode_shape(T, nb, c, kind)
        ladder_runs(
            ctx,
            stage="attention",
            family="attention",
            shape=shape,
            default=plan(caches[0], nb, gpu=False).rung,
            once=once,
            launch=lambda impl, i: gpu.decode_attention(q, caches[i], base, out=out, impl=impl),
            ref=ref,
            nbytes=nbytes,
            tol={r: plan(caches[0], nb, impl=r, gpu=False).tol for r in impls},
            n_rot=nr,
            max_inner=8,
            floor_us=floor,
            impls=impls,
            kshape={"kind": kind, "nb": nb, "n_rep": c.n_rep},
        )
        caches.clear()  # the caches' memory goes before the next kind


def ladder_gemv(ctx, nb=1, n_out=5120, n_in=6144, proj="o_proj"):
    """One projection's GEMV (27B shapes) with q8 and f32 weights on each rung."""
    from .. import golden, gpu

    cp = ctx.cp
    w = cp.random.standard_normal((n_out, n_in), dtype=cp.float32) * np.float32(0.02)
    q, d = gpu.q8_weight(w)
    x = randn(cp, (nb, n_in), outliers=False)
    y = poisoned(cp, (nb, n_out))
    shape = {"nb": nb, "n_in": n_in, "n_out": n_out, "proj": proj}
    for kind in ("q8", "f32"):
        if kind == "q8":
            ws = bytes_gemv_q8(nb, n_in, n_out)
            nr = ctx.n_rot(ws)
            mats = [(q, d)] + [(q.copy(), d.copy()) for _ in range(nr - 1)]
            ref = golden.linear(host(x), golden.q8_dequantize(host(q), host(d)))
            call = lambda impl, i: gpu.gemv_q8(x, *mats[i], out=y, impl=impl)
        else:
            ws = bytes_linear(nb, n_in, n_out, 4)
            nr = ctx.n_rot(ws)
            mats = [w] + [w.copy() for _ in range(nr - 1)]
            ref = golden.linear(host(x), host(w))
            call = lambda impl, i: gpu.gemv_f32(x, mats[i], out=y, impl=impl)

        def once(impl, call=call):
            y.fill(cp.nan)
            call(impl, 0)
            return host(y)

        ladder_runs(
            ctx,
            stage="gemv",
            family="gemv",
            shape=dict(shape, weights=kind),
            once=once,
            launch=call,
            ref=ref,
            nbytes=ws,
            tol=TOL_F32,
            n_rot=nr,
            kshape={"kind": kind, "nb": nb, "n_out": n_out},
        )


def ladder_splits(ctx, T=32768, nb=1, splits=(1, 2, 4, 8, 16, 32, 64, 128, 256)):
    """Time against n_splits: the q8 decode at T tokens on the split-T rungs (v1, mma) with
    each split count, and with the plan's own (n_splits=None, recorded as its count). Too few
    splits leave SMs idle; too many make the combine and the partials' writes the cost."""
    from .. import gpu
    from ..gpu.attention import plan

    cp = ctx.cp
    c = dense_cfg()
    nbytes, floor, nr, caches, q, out, ref = _decode_inputs(ctx, c, T, nb, "q8")
    base = T - nb
    default = plan(caches[0], nb, gpu=False).rung  # the rung impl=None runs here
    tol = {"v1": TOL_ATTN, "mma": TOL_ATTN_MMA}
    for impl in ("v1", "mma"):
        auto = plan(caches[0], nb, base_pos=base, impl=impl).n_splits
        for S in sorted(set(splits) | {auto}):

            def once(_impl, S=S, impl=impl):
                out.fill(cp.nan)
                return host(
                    gpu.decode_attention(q, caches[0], base, out=out, impl=impl, n_splits=S)
                )

            shape = decode_shape(T, nb, c, "q8", n_splits=S, plan=S == auto)
            ladder_runs(
                ctx,
                stage="attention",
                family="attention",
                shape=shape,
                default=default,
                once=once,
                launch=lambda _impl, i, S=S, impl=impl: gpu.decode_attention(
                    q, caches[i], base, out=out, impl=impl, n_splits=S
                ),
                ref=ref,
                nbytes=nbytes,
                tol=tol,
                n_rot=nr,
                max_inner=8,
                floor_us=floor,
                impls=(impl,),
                kshape={"kind": "q8", "nb": nb, "n_rep": c.n_rep},
                extra={"sweep": "n_splits"},
            )
    caches.clear()


K = 1024
# (case, sizes): each family at a few sizes, small to large; --quick runs the first only
LADDER = (
    (ladder_norm, [{"rows": r} for r in (64, 1024, 8192)]),
    (ladder_rope, [{"nb": n} for n in (16, 256, 4096)]),
    (ladder_wht, [{"rows": r} for r in (1024, 16384, 65536)]),
    (ladder_append, [{"nb": n} for n in (64, 1024, 4096)]),
    (ladder_indexer, [{"T": t * K} for t in (4, 32, 128)]),
    (ladder_attention, [{"T": t * K} for t in (4, 32, 128)]),
    (
        ladder_gemv,
        [
            {"n_out": 1024, "n_in": 5120, "proj": "k_proj"},
            {"n_out": 5120, "n_in": 6144, "proj": "o_proj"},
            {"n_out": 17408, "n_in": 5120, "proj": "gate_proj"},
        ],
    ),
    (ladder_splits, [{"T": 32 * K}]),
)


def ladder_cases(family, sweep=None):
    """[(case, kwargs)] that record `family` (sweep="n_splits": the split-count sweep)."""
    if sweep == "n_splits":
        return [(ladder_splits, kw) for kw in dict(LADDER)[ladder_splits]]
    if sweep is not None:
        raise ValueError(f"sweep must be None or 'n_splits', got {sweep!r}")
    if family not in FAMILY_MODULE:
        raise ValueError(f"family must be one of {sorted(FAMILY_MODULE)}, got {family!r}")
    name = {
        "rms_norm": "ladder_norm",
        "add_rms_norm": "ladder_norm",
        "qk_norm_rope": "ladder_rope",
        "wht": "ladder_wht",
        "q8_append": "ladder_append",
        "turbo_append": "ladder_append",
        "tq_append": "ladder_append",
        "update_block_keys": "ladder_indexer",
        "block_scores": "ladder_indexer",
        "select": "ladder_indexer",
        "attention": "ladder_attention",
        "gemv": "ladder_gemv",
    }[family]
    return [(fn, kw) for fn, sizes in LADDER if fn.__name__ == name for kw in sizes]
