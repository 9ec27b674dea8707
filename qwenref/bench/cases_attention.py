"""Bench cases of decode attention: the dense split-T decode per cache kind at several lengths,
against torch SDPA (bf16; its fastest backend and GQA layout), queued and as CUDA-graph
replays, beside the read floor of one launch at the same bytes; and the golden reference the
attention cases share (the golden layer's per-row attention on a cache as stored)."""

from __future__ import annotations

import numpy as np

from .. import timing
from .counting import bytes_attention, kv_bytes_per_token
from .inputs import decode_shape, dense_cfg, fill_caches, host, randn
from .records import floor_fields, rel_err
from .rungs import family_fields
from .tolerances import attention_tol

__all__ = [
    "golden_attention_rows",
    "SDPA_BACKENDS",
    "SDPA_LAYOUTS",
    "sdpa_name",
    "sdpa_peer",
    "case_attention",
    "attention_graph_run",
    "floor_rows",
]


def golden_attention_rows(gc, q, base_pos, gate=None, sel=None, sparse_v=0.0):
    """The golden layer's per-row attention on a golden cache as stored: q [nb, nh, hd]; sel[b]
    the row's token indices (None: dense). Returns [nb, nh, hd] float32."""
    from .. import golden

    nb = q.shape[0]
    T = base_pos + nb
    K, V = gc.keys(T), gc.values(T)
    qa = golden.wht_signed(q, gc.k_signs) if gc.k_rotated else q
    out = np.empty(q.shape, np.float32)
    for b in range(nb):
        t = base_pos + b + 1
        idx = None if sel is None else sel[b]
        kk, vv = (K[:, :t], V[:, :t]) if idx is None else (K[:, idx], V[:, idx])
        o = golden.decode_attention(qa[b], kk, vv, None, sparse_v)
        if gc.v_rotated:
            o = golden.wht_signed(o, gc.v_signs, inverse=True)
        out[b] = o if gate is None else golden.output_gate(o, gate[b])
    return out


# The SDPA peer's configurations: every backend (None: torch's own choice) and both ways to hand
# it the GQA group: enable_gqa=True, or the group and the rows folded into the query length
# (every row then reads all T tokens, as without a mask)
SDPA_BACKENDS = ("default", "flash", "cudnn", "efficient")
SDPA_LAYOUTS = ("enable_gqa", "folded")


def sdpa_name(version, backend, layout):
    """The SDPA peer's key in a run's `peers` (and its `peer`)."""
    return f"torch {version} SDPA bf16 ({backend}, {layout})"


def sdpa_peer(ctx, nb, nh, nkv, hd, T, cache_key, graph_calls=0):
    """torch SDPA bf16 decode of nb rows of nh heads over T tokens of nkv kv heads, no mask:
    (name, us) of the fastest of SDPA_BACKENDS x SDPA_LAYOUTS (sdpa_name), or None. Queued like
    our kernels (ctx.time), or, with graph_calls > 0, as replays of a torch.cuda.CUDAGraph of
    that many decodes (the peer of our graph-replay runs). Rotates over K/V copies when they fit
    the L2. Memoised per shape."""
    memo = ctx.memo.setdefault("sdpa", {})
    if (cache_key, graph_calls) not in memo:
        memo[(cache_key, graph_calls)] = _fastest_sdpa(ctx, nb, nh, nkv, hd, T, graph_calls)
    return memo[(cache_key, graph_calls)]


def _fastest_sdpa(ctx, nb, nh, nkv, hd, T, graph_calls):
    t = ctx.torch
    if t is None:
        return None
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
    }
    F = t.nn.functional
    nr = ctx.n_rot(2 * nkv * T * hd * 2)
    bf = dict(device="cuda", dtype=t.bfloat16)
    kv = [(t.randn(1, nkv, T, hd, **bf), t.randn(1, nkv, T, hd, **bf)) for _ in range(nr)]
    queries = {
        "enable_gqa": (t.randn(1, nh, nb, hd, **bf), {"enable_gqa": True}),
        "folded": (t.randn(1, nkv, nh // nkv * nb, hd, **bf), {}),
    }
    best = None
    for layout in SDPA_LAYOUTS:
        q, kw = queries[layout]

        def fn(i, q=q, kw=kw):
            return F.scaled_dot_product_attention(q, kv[i % nr][0], kv[i % nr][1], **kw)

        for backend in SDPA_BACKENDS:
            try:
                us = _time_sdpa(ctx, t, fn, nr, graph_calls, backends.get(backend), sdpa_kernel)
            except Exception as e:
                msg = f"{type(e).__name__}: {str(e)[:100]}"
                print(f"  (SDPA {backend}, {layout} unavailable: {msg})")
                continue
            if best is None or us < best[1]:
                best = (sdpa_name(t.__version__, backend, layout), us)
    return best


def _time_sdpa(ctx, t, fn, nr, graph_calls, backend, sdpa_kernel):
    """One SDPA configuration's time per call (backend None: torch's own choice)."""
    import contextlib

    with sdpa_kernel([backend]) if backend is not None else contextlib.nullcontext():
        fn(0)
        t.cuda.synchronize()
        if graph_calls:
            return timing.torch_graph_us(fn, graph_calls, ctx.batches)
        return ctx.time(fn, nr)[0]


def attention_fields(cache, nb, base, **kw):
    """family_fields of a decode that runs the plan's rung (impl=None) on this device: kw as
    plan's (selective=, width=)."""
    from ..gpu.attention import plan

    return family_fields("attention", plan(cache, nb, base_pos=base, **kw).rung)


def case_attention(ctx, T, nb, kind, peer=True, calls_per_graph=8):
    """Dense split-T decode on a cache of T tokens: rows at T-nb .. T-1 (the last row sees T).
    Queued and as graph replays, each beside the read floor of its bytes measured here (fields
    floor_us, pct_of_floor) and the SDPA peer timed the same way; the floor's own rows for q8
    with one row (what notebook 00 shows)."""
    from .. import gpu

    cp = ctx.cp
    c = dense_cfg()
    per_cache = T * kv_bytes_per_token(kind, c.nkv, c.head_dim)
    nr = ctx.n_rot(per_cache)
    caches = [gpu.KVCache(c, max_t=T, kind=kind) for _ in range(nr)]
    fill_caches(caches, T)
    base = T - nb
    q = randn(cp, (nb, c.nh, c.head_dim), 2.0)  # x2: peaked softmax
    out = cp.full((nb, c.nh, c.head_dim), cp.nan, cp.float32)
    gpu.decode_attention(q, caches[0], base, out=out)
    ref = golden_attention_rows(caches[0].to_golden(), host(q), base)
    err = rel_err(host(out), ref)
    med, iqr = ctx.time(lambda i: gpu.decode_attention(q, caches[i], base, out=out), nr)
    nbytes = bytes_attention(nb, c.nh, c.nkv, c.head_dim, kind, base)
    fl = timing.floor_us(nbytes, ctx.n_rot(nbytes), ctx.batches, graph_calls=calls_per_graph)
    extra = {"iqr_us": iqr, **floor_fields(fl.us, med)}
    if peer:
        p = sdpa_peer(ctx, nb, c.nh, c.nkv, c.head_dim, T, ("dense", T, nb))
        if p:
            extra.update(peer=p[0], peer_us=p[1])
    shape = decode_shape(T, nb, c, kind)
    tol = attention_tol(caches[0], nb)
    kname, got = f"decode_attention {kind}", host(out)
    extra.update(attention_fields(caches[0], nb, base))
    ctx.record("attention", kname, shape, med, nbytes, err, tol, ref, got, **extra)
    graph = (ref, shape, nbytes, tol, fl.graph_us, peer, calls_per_graph)
    attention_graph_run(ctx, caches, q, base, *graph)
    if kind == "q8" and nb == 1:
        floor_rows(ctx, T, nb, nbytes, fl, calls_per_graph)


def attention_graph_run(
    ctx, caches, q, base, ref, shape, nbytes, tol, floor_us=None, peer=True, calls_per_graph=8
):
    """The same decode as CUDA-graph replays (what a captured decode step runs): a graph of
    calls_per_graph decodes rotating over the caches, replayed; time per decode = median replay
    / calls. The gap between the partials and the combine is then a graph's, not the host's
    queue's. The output after the replays is checked against golden (every cache holds the
    same tokens). Beside it: the floor's graph-replay time (floor_us) and SDPA replayed from a
    torch graph (peer)."""
    from .. import gpu

    cp = ctx.cp
    m, l, o = gpu.attn_partials(q, caches[0], base)  # buffers at the auto split count
    out = cp.full(q.shape, cp.nan, cp.float32)
    n = max(calls_per_graph, len(caches))
    calls = [
        lambda c=caches[i % len(caches)]: gpu.decode_attention(
            q, c, base, out=out, partials=(m, l, o)
        )
        for i in range(n)
    ]
    g = timing.graph_us(calls, ctx.batches)
    if g.mode != "graph":
        print(f"  (decode graph capture failed: {g.mode}; no graph run recorded)")
        return
    extra = floor_fields(floor_us, g.us)
    if peer:
        dims = (q.shape[0], shape["nh"], shape["nkv"], shape["head_dim"], shape["T"])
        p = sdpa_peer(ctx, *dims, ("dense", shape["T"], q.shape[0]), graph_calls=calls_per_graph)
        if p:
            extra.update(peer=p[0], peer_us=p[1])
    kind, err = shape["kind"], rel_err(host(out), ref)
    extra.update(attention_fields(caches[0], q.shape[0], base))
    kname = f"decode_attention {kind} (graph replay, {n} per graph)"
    ctx.record("attention", kname, shape, g.us, nbytes, err, tol, **extra)


def floor_rows(ctx, T, nb, nbytes, fl, calls_per_graph=8):
    """The floor's own rows at the decode's size (fl: timing.floor_us's Floor, which read
    nbytes from rotated buffers and nothing else, queued and as graph replays); err is 0."""
    shape = {"T": T, "nb": nb, "bytes": nbytes}
    name = "stream_read floor (one launch reading the decode's bytes)"
    fam = family_fields("stream_read")
    ctx.record("attention", name, shape, fl.us, nbytes, 0.0, 0.0, iqr_us=fl.iqr_us, **fam)
    if fl.graph_us is not None:
        n = max(calls_per_graph, max(2, ctx.n_rot(nbytes)))
        kname = f"{name} (graph replay, {n} per graph)"
        ctx.record("attention", kname, shape, fl.graph_us, nbytes, 0.0, 0.0, **fam)
