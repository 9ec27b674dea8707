"""Bench cases of the KV cache: the q8 and turbo quantizers over rows, and KVCache.append of a
batch of tokens at successive positions (stored bytes compared with golden's)."""

from __future__ import annotations

import numpy as np

from ..layout import side_kinds
from .counting import bytes_append, bytes_q8_quantize, bytes_turbo_quantize
from .inputs import dense_cfg, host, randn
from .records import code_match, rel_err
from .rungs import family_fields
from .tolerances import TOL_CODES

__all__ = ["case_quantize", "case_append"]


def case_quantize(ctx, rows, n, bits):
    """q8_quantize (bits 8 = Q8_0) or turbo_quantize(bits) over rows of n."""
    from .. import golden, gpu

    cp = ctx.cp
    x = randn(cp, (rows, n))
    if bits == "q8":
        ws = bytes_q8_quantize(rows, n)
        q, d = gpu.q8_quantize(x)
        rq, rd = golden.q8_quantize(host(x))
        got, ref = golden.q8_dequantize(host(q), host(d)), golden.q8_dequantize(rq, rd)
        match = float((host(q) == rq).mean())
        fn_ = lambda xi: gpu.q8_quantize(xi, q_out=q, d_out=d)
        kname = "q8_quantize"
    else:
        ws = bytes_turbo_quantize(rows, n, bits)
        q, d = gpu.turbo_quantize(x, bits)
        rq, rd = golden.turbo_quantize(host(x), bits)
        got = golden.turbo_dequantize(host(q), host(d), bits)
        ref = golden.turbo_dequantize(rq, rd, bits)
        match = float((host(q) == rq).mean())
        fn_ = lambda xi: gpu.turbo_quantize(xi, bits, codes_out=q, d_out=d)
        kname = f"turbo_quantize bits={bits}"
    nr = ctx.n_rot(ws)
    xs = [x] + [x.copy() for _ in range(nr - 1)]
    med, iqr = ctx.time(lambda i: fn_(xs[i]), nr)
    shape, err = {"rows": rows, "n": n}, rel_err(got, ref)
    fam = family_fields(kname.split()[0])  # q8_quantize, turbo_quantize: no rungs of their own
    args = (shape, med, ws, err, TOL_CODES, ref, got)
    ctx.record("kvcache", kname, *args, iqr_us=iqr, code_match=match, **fam)


def case_append(ctx, nb, kind):
    """KVCache.append of nb tokens (27B kv shape), repeated at successive positions."""
    from .. import golden, gpu

    cp = ctx.cp
    c = dense_cfg()
    max_inner = 2 if nb >= 1024 else 64
    calls = 3 + 1 + ctx.batches * max_inner + 1
    cache = gpu.KVCache(c, max_t=calls * nb, kind=kind)
    ws = bytes_append(nb, c.nkv, c.head_dim, kind)
    nr = ctx.n_rot(2 * nb * c.nkv * c.head_dim * 4)
    ks = [randn(cp, (nb, c.nkv, c.head_dim)) for _ in range(nr)]
    vs = [randn(cp, (nb, c.nkv, c.head_dim)) for _ in range(nr)]
    cache.append(ks[0], vs[0])  # validated below
    gc = golden.KVCache(c, max_t=nb, kind=kind)
    gc.append(host(ks[0]), host(vs[0]))
    mine = cache.to_golden()
    got = np.concatenate([mine.keys(nb).ravel(), mine.values(nb).ravel()])
    ref = np.concatenate([gc.keys(nb).ravel(), gc.values(nb).ravel()])
    match = code_match(mine, gc, 0, nb)
    med, iqr = ctx.time(lambda i: cache.append(ks[i], vs[i]), nr, max_inner=max_inner)
    shape = {"nb": nb, "nkv": c.nkv, "head_dim": c.head_dim, "kind": kind}
    kname, err = f"KVCache.append {kind}", rel_err(got, ref)
    fam = family_fields(_append_family(kind))
    args = (shape, med, ws, err, TOL_CODES, ref, got)
    ctx.record("kvcache", kname, *args, iqr_us=iqr, code_match=match, **fam)


def _append_family(kind):
    """The append family a cache kind goes through: q8_append, turbo_append (bf16 K with turbo
    V too), tq_append, or kv_copy (f32, bf16: stored as given; no rungs)."""
    for prefix in ("q8", "turbo", "tq"):
        if any(side.startswith(prefix) for side in side_kinds(kind)):
            return f"{prefix}_append"
    return "kv_copy"
