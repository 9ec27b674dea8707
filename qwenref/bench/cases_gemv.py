"""Bench cases of the projections: the Q8_0 GEMV (and its SwiGLU epilogue) on each of the 27B
layer's projection shapes, against cuBLAS bf16 through torch, and the f32 path (cuBLAS sgemm)."""

from __future__ import annotations

import numpy as np

from .counting import bytes_gemv_q8, bytes_linear
from .inputs import host, randn
from .records import make_run, rel_err
from .rungs import family_fields
from .tolerances import TOL_F32

__all__ = ["PROJS", "case_gemv"]

# (name, n_out, n_in) of the 27B layer's projections as the GPU layer fuses them
PROJS = (
    ("qkv+indexer (fused)", 2 * 24 * 256 + 2 * 4 * 256 + 9 * 128, 5120),
    ("o_proj", 5120, 24 * 256),
    ("gate|up (fused)", 2 * 17408, 5120),
    ("down_proj", 5120, 17408),
)


def case_gemv(ctx, name, n_out, n_in, nbs):
    """Q8_0 GEMV for one of the 27B layer's projections vs cuBLAS f32 and bf16."""
    from .. import golden, gpu
    from ..gpu.gemv import gemv_q8_swiglu

    cp = ctx.cp
    w = cp.random.standard_normal((n_out, n_in), dtype=cp.float32) * np.float32(0.02)
    q, d = gpu.q8_weight(w)
    rows = slice(0, 64)  # golden quantizer on a sample
    rq, rd = golden.q8_quantize(host(w[rows]))
    qmatch = min(float((host(q[rows]) == rq).mean()), float((host(d[rows]) == rd).mean()))
    ws = bytes_gemv_q8(1, n_in, n_out)
    nr = ctx.n_rot(ws)
    qs = [(q, d)] + [(q.copy(), d.copy()) for _ in range(nr - 1)]
    wdq = golden.q8_dequantize(host(q), host(d))  # [n_out, n_in] f32 on the host
    t = ctx.torch
    tw = None
    if t is not None:
        wb = t.from_dlpack(w).to(t.bfloat16)
        nrb = ctx.n_rot(wb.numel() * 2)
        tw = [wb] + [wb.clone() for _ in range(nrb - 1)]
    for nb in nbs:
        x = randn(cp, (nb, n_in), outliers=False)
        y = cp.full((nb, n_out), cp.nan, cp.float32)
        gpu.gemv_q8(x, q, d, out=y)
        ref = golden.linear(host(x), wdq)
        err = rel_err(host(y), ref)
        med, iqr = ctx.time(lambda i: gpu.gemv_q8(x, qs[i][0], qs[i][1], out=y), nr)
        pk = {}
        if tw is not None:
            xb = t.from_dlpack(x).to(t.bfloat16)
            p = ctx.peer("cuBLAS bf16 (torch.matmul)", lambda i: t.matmul(xb, tw[i].T), len(tw))
            if p:
                pk = {"peer": p[0], "peer_us": p[1]}
        shape = {"nb": nb, "n_in": n_in, "n_out": n_out, "proj": name}
        run = make_run(
            "gemv",
            "gemv_q8",
            shape,
            med,
            bytes_gemv_q8(nb, n_in, n_out),
            ctx.copy_gbps,
            err,
            TOL_F32,
            iqr_us=iqr,
            q8_weight_match=qmatch,
            **pk,
            **family_fields("gemv"),
        )
        run["ok"] = run["ok"] and qmatch == 1.0  # q8_weight must be bit-exact
        ctx.add(run, ref, host(y))
        if name.startswith("gate|up"):  # rows read as (gate_i, up_i) pairs
            act = cp.full((nb, n_out // 2), cp.nan, cp.float32)
            gemv_q8_swiglu(x, q, d, out=act)
            ref_a = golden.silu(ref[:, 0::2]) * ref[:, 1::2]
            med, iqr = ctx.time(lambda i: gemv_q8_swiglu(x, qs[i][0], qs[i][1], out=act), nr)
            nbytes = bytes_gemv_q8(nb, n_in, n_out) - 4 * nb * n_out // 2  # half the outputs
            got = host(act)
            kname, err = "gemv_q8 + SwiGLU epilogue", rel_err(got, ref_a)
            fam = family_fields("gemv")
            ctx.record(
                "gemv", kname, shape, med, nbytes, err, TOL_F32, ref_a, got, iqr_us=iqr, **fam
            )
        # the f32 path (cuBLAS sgemm) as its own row: 4-byte weights
        wsf = bytes_linear(nb, n_in, n_out, 4)
        nrf = ctx.n_rot(wsf)
        wfs = [w] + [w.copy() for _ in range(nrf - 1)]
        gpu.linear(x, w, out=y)
        ref_f = golden.linear(host(x), host(w))
        med, iqr = ctx.time(lambda i: gpu.linear(x, wfs[i], out=y), nrf)
        kname, err = "linear f32 (cuBLAS sgemm)", rel_err(host(y), ref_f)
        fam = family_fields("cublas_sgemm")
        ctx.record("gemv", kname, shape, med, wsf, err, TOL_F32, iqr_us=iqr, **fam)
