"""Bench cases of the indexer and QSA: block keys, block scores, the selection, selective
attention on the GPU's own selection, and the whole selective path against dense SDPA over all
tokens, queued and as CUDA-graph replays (27B indexer: R 64, budget 2048, 8 heads x 128)."""

from __future__ import annotations

import numpy as np

from .. import timing
from .cases_attention import attention_fields, golden_attention_rows, sdpa_peer
from .counting import bytes_attention, bytes_block_scores, bytes_select
from .inputs import decode_shape, fill_caches, host, qwen_cfg, randn
from .records import rel_err
from .rungs import family_fields
from .tolerances import TOL_F32, TOL_ROPE, TOL_SELECT, attention_tol

__all__ = ["case_qsa", "qsa_graph_run"]


def case_qsa(ctx, T, nb, kind="q8"):
    """QSA selective decode at T tokens (27B indexer: R 64, budget 2048, 8 heads x 128):
    block scores, select_rows (scores + selection), selective attention, and the three
    together against dense SDPA."""
    from .. import golden, gpu

    cp = ctx.cp
    c = qwen_cfg()
    R, kblk, inh, ihd = c.indexer_compress_ratio, c.kblk, c.indexer_n_heads, c.indexer_head_dim
    cache = gpu.KVCache(c, max_t=T, kind=kind)
    knw = randn(cp, (ihd,), 0.1, False)
    fill_caches([cache], T, knw)
    base = T - nb
    iq = randn(cp, (nb, inh, ihd), outliers=False)  # indexer queries (normed)
    q = randn(cp, (nb, c.nh, c.head_dim), 2.0)
    gc = cache.to_golden()
    n_blocks = T // R
    shape = decode_shape(T, nb, c, kind, R=R, budget=c.indexer_budget, inh=inh, ihd=ihd)

    # block keys from the raw keys (prefill-time; idempotent, so it can be re-run and timed);
    # the stages below score the GPU's block keys on both sides, so they compare like for like
    gpu_bk = gc.blk_keys[:n_blocks].copy()
    golden.update_block_keys(gc, host(knw), c, 0, T)
    err = rel_err(gpu_bk, gc.blk_keys[:n_blocks])
    med, iqr = ctx.time(lambda i: gpu.update_block_keys(cache, knw, c, 0, T), max_inner=4)
    bk_bytes = 4 * (T * ihd + n_blocks * ihd)
    ref_bk = gc.blk_keys[:n_blocks]
    kname = "update_block_keys (all blocks)"
    fam = family_fields("update_block_keys")
    ctx.record(
        "indexer", kname, shape, med, bk_bytes, err, TOL_ROPE, ref_bk, gpu_bk, iqr_us=iqr, **fam
    )

    # scoring (row b scores its (base+b+1)//R complete blocks; the rest of the row is -inf)
    max_blocks = cache.blk_keys.shape[0]
    sc = gpu.block_scores(iq, cache, base)
    iq_h, sc_h = host(iq), host(sc)
    ncs = [(base + b + 1) // R for b in range(nb)]
    ref_sc = np.concatenate([golden.block_scores(iq_h[b], gpu_bk[: ncs[b]]) for b in range(nb)])
    got_sc = np.concatenate([sc_h[b, : ncs[b]] for b in range(nb)])
    med, iqr = ctx.time(lambda i: gpu.block_scores(iq, cache, base, out=sc))
    nbytes, err = bytes_block_scores(nb, inh, ihd, n_blocks, max_blocks), rel_err(got_sc, ref_sc)
    fam = family_fields("block_scores")
    args = (shape, med, nbytes, err, TOL_F32, ref_sc, got_sc)
    ctx.record("indexer", "block_scores", *args, iqr_us=iqr, **fam)

    # selection (scores + top-k + token list)
    sel_idx, sel_n, _ = gpu.select_rows(iq, cache, base, c)
    si, sn = host(sel_idx), host(sel_n)
    sel, diff = [], []
    for b in range(nb):
        t = base + b
        ridx, _ = golden.row_selection(t, iq_h[b], gpu_bk, R, kblk)
        mine = si[b, : sn[b]] if sn[b] > 0 else np.arange(t + 1)
        sel.append(mine if sn[b] > 0 else None)
        diff.append(len(np.setxor1d(mine, ridx)) / (2 * len(ridx)))
    med_sel, iqr = ctx.time(lambda i: gpu.select_rows(iq, cache, base, c))
    sel_dims = (nb, inh, ihd, n_blocks, max_blocks, R, kblk)
    kname, nbytes = "select_rows (err: tokens differing)", bytes_select(*sel_dims)
    err, fam = float(np.mean(diff)), family_fields("select")
    ctx.record("indexer", kname, shape, med_sel, nbytes, err, TOL_SELECT, iqr_us=iqr, **fam)

    # selective attention on the GPU's own selection
    out = cp.full((nb, c.nh, c.head_dim), cp.nan, cp.float32)
    gpu.decode_attention(q, cache, base, sel_idx=sel_idx, sel_n=sel_n, out=out)
    ref = golden_attention_rows(gc, host(q), base, sel=sel)
    err = rel_err(host(out), ref)
    med_att, iqr = ctx.time(
        lambda i: gpu.decode_attention(q, cache, base, sel_idx=sel_idx, sel_n=sel_n, out=out)
    )
    att_bytes = bytes_attention(nb, c.nh, c.nkv, c.head_dim, kind, base, R, kblk, selective=True)
    tol = attention_tol(cache, nb, sel_n)
    kname, got = f"decode_attention selective {kind}", host(out)
    fam = attention_fields(cache, nb, base, selective=True, width=int(sel_idx.shape[1]))
    ctx.record("indexer", kname, shape, med_att, att_bytes, err, tol, ref, got, iqr_us=iqr, **fam)

    # the whole selective path vs dense SDPA over all T tokens
    def qsa(i):
        s_idx, s_n, _ = gpu.select_rows(iq, cache, base, c)
        gpu.decode_attention(q, cache, base, sel_idx=s_idx, sel_n=s_n, out=out)

    med, iqr = ctx.time(qsa)
    p = sdpa_peer(ctx, nb, c.nh, c.nkv, c.head_dim, T, ("dense", T, nb))
    pk = {"peer": p[0], "peer_us": p[1]} if p else {}
    qsa_bytes = bytes_select(*sel_dims) + att_bytes
    kname, fam = f"QSA selective select+attention {kind}", family_fields("qsa")
    ctx.record("indexer", kname, shape, med, qsa_bytes, err, tol, iqr_us=iqr, **pk, **fam)
    qsa_graph_run(ctx, iq, q, cache, base, c, ref, shape, qsa_bytes, tol)


def qsa_graph_run(ctx, iq, q, cache, base, c, ref, shape, nbytes, tol, calls_per_graph=8):
    """The selective path as CUDA-graph replays (how a captured decode step runs its four
    launches: block scores, selection, partials, combine), against dense SDPA also replayed
    from a graph (torch.cuda.CUDAGraph, its fastest configuration): both sides timed the same
    way."""
    from .. import gpu

    cp = ctx.cp
    s_idx, s_n, mask = gpu.select_rows(iq, cache, base, c)
    scores = cp.empty(mask.shape, cp.float32)
    m, l, o = gpu.attn_partials(q, cache, base, sel_idx=s_idx, sel_n=s_n)
    out = cp.full(q.shape, cp.nan, cp.float32)

    def qsa():
        gpu.select_rows(
            iq, cache, base, c, sel_idx_out=s_idx, sel_n_out=s_n, mask_out=mask, scores_out=scores
        )
        gpu.decode_attention(q, cache, base, sel_idx=s_idx, sel_n=s_n, out=out, partials=(m, l, o))

    g = timing.graph_us([qsa] * calls_per_graph, ctx.batches)
    if g.mode != "graph":
        print(f"  (QSA graph capture failed: {g.mode}; no graph run recorded)")
        return
    nb = q.shape[0]
    pg = sdpa_peer(
        ctx,
        nb,
        c.nh,
        c.nkv,
        c.head_dim,
        shape["T"],
        ("dense", shape["T"], nb),
        graph_calls=calls_per_graph,
    )
    pk = {"peer": pg[0], "peer_us": pg[1]} if pg else {}
    graph = f"graph replay, {calls_per_graph} per graph"
    kname = f"QSA selective select+attention {shape['kind']} ({graph})"
    err = rel_err(host(out), ref)
    ctx.record("indexer", kname, shape, g.us, nbytes, err, tol, **pk, **family_fields("qsa"))
