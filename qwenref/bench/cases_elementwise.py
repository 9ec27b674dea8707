"""Bench cases of the elementwise stages: rms_norm / add_rms_norm (against torch's rms_norm),
qk_norm_rope and the WHT. Each case validates against golden on the same inputs, then times
the kernel queued over rotated inputs, and adds one run per kernel to the context."""

from __future__ import annotations

import numpy as np

from .counting import bytes_norm, bytes_rope, bytes_wht
from .inputs import host, qwen_cfg, randn
from .records import rel_err
from .rungs import family_fields
from .tolerances import TOL_F32, TOL_ROPE

__all__ = ["case_norm", "case_rope", "case_wht"]


def case_norm(ctx, rows, n, add):
    from .. import golden, gpu

    cp = ctx.cp
    x = randn(cp, (rows, n))
    w = randn(cp, (n,), 0.1, outliers=False)
    r = randn(cp, (rows, n)) if add else None
    ws = bytes_norm(rows, n, add)
    nr = ctx.n_rot(ws)
    xs = [x] + [x.copy() for _ in range(nr - 1)]
    y = cp.full((rows, n), cp.nan, cp.float32)
    if add:
        sm = cp.full((rows, n), cp.nan, cp.float32)
        gpu.add_rms_norm(x, r, w, 1e-6, out=y, sum_out=sm)
        ref_y, ref_s = golden.add_rms_norm(host(x), host(r), host(w), 1e-6)
        err = max(rel_err(host(y), ref_y), rel_err(host(sm), ref_s))
        fn = lambda i: gpu.add_rms_norm(xs[i], r, w, 1e-6, out=y, sum_out=sm)
        kname, peer = "add_rms_norm", None
    else:
        gpu.rms_norm(x, w, 1e-6, out=y)
        ref_y = golden.rms_norm(host(x), host(w), 1e-6)
        err = rel_err(host(y), ref_y)
        fn = lambda i: gpu.rms_norm(xs[i], w, 1e-6, out=y)
        kname, peer = "rms_norm", None
        if ctx.torch is not None:
            t = ctx.torch
            txs = [t.from_dlpack(a) for a in xs]
            tw = t.from_dlpack(w) + 1.0  # zero-centred: x · (1 + w)
            peer = ctx.peer(
                "torch rms_norm f32", lambda i: t.nn.functional.rms_norm(txs[i], (n,), tw, 1e-6), nr
            )
    med, iqr = ctx.time(fn, nr)
    shape = {"rows": rows, "n": n}
    pk = {} if peer is None else {"peer": peer[0], "peer_us": peer[1]}
    fam = family_fields(kname)
    ctx.record("norm", kname, shape, med, ws, err, TOL_F32, ref_y, host(y), iqr_us=iqr, **pk, **fam)


def case_rope(ctx, nb):
    from .. import golden, gpu

    cp = ctx.cp
    c = qwen_cfg()
    hd = c.head_dim
    qg = randn(cp, (nb, c.nh, 2 * hd))
    k = randn(cp, (nb, c.nkv, hd))
    qw, kw = randn(cp, (hd,), 0.1, False), randn(cp, (hd,), 0.1, False)
    pos_h = np.random.default_rng(1).integers(0, 131072, nb).astype(np.int32)  # long contexts
    pos = cp.asarray(pos_h)
    ws = bytes_rope(nb, c.nh, c.nkv, hd)
    nr = ctx.n_rot(ws)
    qgs = [qg] + [qg.copy() for _ in range(nr - 1)]
    qo = cp.full((nb, c.nh, hd), cp.nan, cp.float32)
    ko = cp.full((nb, c.nkv, hd), cp.nan, cp.float32)
    gpu.qk_norm_rope(qg, k, qw, kw, pos, c.rotary_dim, c.rope_theta, 1e-6, q_out=qo, k_out=ko)
    rq, rk = golden.qk_norm_rope(
        host(qg), host(k), host(qw), host(kw), pos_h, c.rotary_dim, c.rope_theta, 1e-6
    )
    err = max(rel_err(host(qo), rq), rel_err(host(ko), rk))
    med, iqr = ctx.time(
        lambda i: gpu.qk_norm_rope(
            qgs[i], k, qw, kw, pos, c.rotary_dim, c.rope_theta, 1e-6, q_out=qo, k_out=ko
        ),
        nr,
    )
    shape = {"nb": nb, "nh": c.nh, "nkv": c.nkv, "head_dim": hd, "rotary_dim": c.rotary_dim}
    fam = family_fields("qk_norm_rope")
    ctx.record(
        "rope", "qk_norm_rope", shape, med, ws, err, TOL_ROPE, rq, host(qo), iqr_us=iqr, **fam
    )


def case_wht(ctx, rows, n):
    from .. import golden
    from ..gpu.wht import wht as gpu_wht  # from its module: `wht` also names the submodule

    cp = ctx.cp
    x = randn(cp, (rows, n))
    ws = bytes_wht(rows, n)
    nr = ctx.n_rot(ws)
    xs = [x] + [x.copy() for _ in range(nr - 1)]
    y = cp.full((rows, n), cp.nan, cp.float32)
    gpu_wht(x, out=y)
    ref = golden.wht(host(x))
    err = rel_err(host(y), ref)
    med, iqr = ctx.time(lambda i: gpu_wht(xs[i], out=y), nr)
    shape = {"rows": rows, "n": n}
    ctx.record(
        "wht", "wht", shape, med, ws, err, TOL_F32, ref, host(y), iqr_us=iqr, **family_fields("wht")
    )
