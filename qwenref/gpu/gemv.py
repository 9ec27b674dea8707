"""gemv — the layer's projections on the GPU: f32 (cuBLAS or gemv.cu) and Q8_0 weight-only GEMV.

Same meaning as golden.layer.linear / golden.layer.quantize_weight_q8:
  linear(x, w)          y = x @ w.T, float32 (cuBLAS sgemm, no TF32) — the public f32 API
  gemv_f32(x, w)        y = x @ w.T, float32, kernels_cuda/gemv.cu: weights read once for up to
                        8 rows, no cuBLAS (so a CUDA graph can capture it; CuPy refuses cuBLAS
                        calls during stream capture)
  q8_weight(w)          (q int8 [out, in], d f16 [out, in // 32]), bit-exact with golden.q8_quantize
  gemv_q8(x, q, d)      y = x @ (q · float32(d)).T, float32 accumulate (kernels_cuda/gemv.cu)

Rungs (RUNGS, teaching order; impl= picks one, None the default DEFAULT_RUNG): "v0"
(kernels_cuda/gemv_v0.cu: one warp per output; the segment and SwiGLU variants run it into a
temporary [nb, n_out] and then copy the segments / run swiglu_interleaved) and "v1" (gemv.cu:
split-K CTAs with fused epilogues). rung_kernel names the kernel a rung launches.

Shape letters: nb rows (decode tokens), n_in input features, n_out output features.
"""

from __future__ import annotations

import numpy as np

from .._args import int_arg
from ._runtime import check_array, cupy, kernel, out_array, resolve_rung, type_name
from .rungs import defaults_of, kernel_module, rungs_of

__all__ = [
    "linear",
    "gemv_f32",
    "q8_weight",
    "gemv_q8",
    "RUNGS",
    "DEFAULT_RUNG",
    "rung_kernel",
    "pick_kernel",
]

RUNGS = rungs_of("gemv")  # views of the rung table (qwenref/gpu/rungs.py)
DEFAULT_RUNG = defaults_of("gemv")

_MAX_NB = 8  # gemv_{q8,f32}_nb1 .. _nb8

# gemv.cu configuration per (weight kind, nb): (ROWS output rows per CTA, THREADS per CTA,
# UNROLL chunks per thread in flight); the kernel gemv_<kind>_nb<nb>_r<ROWS>t<THREADS>u<UNROLL>
# must be instantiated in gemv.cu. ROWS must be even (the SwiGLU epilogue pairs rows).
# Picked by qwenref.dev.tune_gemv on an H200 (27B projection shapes, nb = 1, 4, 8): nb = 1 is
# bandwidth-bound (q8 r4t128u2: 64-83% of copy; f32 r4t128u4: ~100%); for nb >= 2 the q8 kernel
# is bound by x re-reads from L1 (x bytes per weight byte grow with nb / ROWS), so more rows per
# CTA win at nb = 4 (r8t128u1) and smaller CTAs at nb = 8 (r4t64u1).
_CFG = {("q8", 1): (4, 128, 2), ("f32", 1): (4, 128, 4)}
_CFG.update({("q8", n): (8, 128, 1) for n in (2, 3, 4)})
_CFG.update({("q8", n): (4, 64, 1) for n in (5, 6, 7, 8)})
_CFG.update({("f32", n): (4, 128, 2) for n in range(2, _MAX_NB + 1)})
# q8, nb = 1, wide outputs (n_out >= _WIDE_N: >= 1024 CTAs of 8 rows): 8 rows per CTA, one
# chunk per thread, registers capped at 64 (__launch_bounds__(128, 8): 8 CTAs per SM) — H200:
# 78.5% / 85.0% of copy on qkv (15488 x 5120) / gate|up (34816 x 5120) vs 73.6% / 80.0% with
# r4t128u2; on o_proj / down_proj (n_out 5120, 640 such CTAs) it loses (61% / 74% vs 64% / 83%).
_WIDE_N = 8192
_WIDE = (8, 128, 1, "m8")


def pick_kernel(kind, nb, n_out):
    """(rows, threads, kernel name) of the gemv.cu kernel for `kind`, nb (<= 8) and n_out."""
    _kind_arg(kind)
    nb = int_arg("nb", nb, 1)
    if nb > _MAX_NB:
        raise ValueError(f"nb must be <= {_MAX_NB} (one launch's rows), got {nb}")
    n_out = int_arg("n_out", n_out, 0)
    if kind == "q8" and nb == 1 and n_out >= _WIDE_N:
        rows, threads, unroll, suffix = _WIDE
    else:
        (rows, threads, unroll), suffix = _CFG[(kind, nb)], ""
    return rows, threads, f"gemv_{kind}_nb{nb}_r{rows}t{threads}u{unroll}{suffix}"


def _k(fn):
    return kernel("gemv", fn)


def _kind_arg(kind):
    if kind not in ("q8", "f32"):
        raise ValueError(f"kind must be 'q8' or 'f32', got {kind!r}")
    return kind


def _rung(impl):
    return resolve_rung(RUNGS, DEFAULT_RUNG, "gemv", impl)


def rung_kernel(family, impl=None, *, kind="q8", nb=1, n_out=None):
    """The kernel name rung `impl` of `family` ("gemv") launches for weight kind "q8" or "f32",
    nb rows and n_out outputs (v1 only: its choice depends on them). v1 runs nb > 8 in chunks
    of 8: then the chunks' distinct kernel names, in launch order, joined by "+"."""
    if family not in RUNGS:
        raise ValueError(f"family must be one of {tuple(RUNGS)}, got {family!r}")
    rung = _rung(impl)
    _kind_arg(kind)
    if rung == "v0":
        return f"gemv_{kind}_v0"
    nb = int_arg("nb", nb, 1)
    if n_out is None:
        raise ValueError("n_out is needed for the v1 rung (its kernel depends on it)")
    names = [pick_kernel(kind, min(_MAX_NB, nb - b0), n_out)[2] for b0 in range(0, nb, _MAX_NB)]
    return "+".join(dict.fromkeys(names))


def _check_x(x, n_in=None):
    check_array("x", x, dtype="float32", ndim=2)
    if n_in is not None and x.shape[1] != n_in:
        raise ValueError(f"x must have shape [nb, {n_in}], got {x.shape}")
    if x.shape[0] < 1:
        raise ValueError(f"x must have at least one row, got shape {x.shape}")
    return x


def _check_x16(x):
    """The GEMV kernels load x 16 bytes at a time."""
    if x.data.ptr % 16 or x.shape[1] % 4:
        raise ValueError(
            f"x must start on a 16-byte boundary with a row length that is a "
            f"multiple of 4 (the kernel loads 16 bytes at once), got shape {x.shape}"
        )


def linear(x, w, out=None):
    """y = x @ w.T in float32 through cuBLAS. x [nb, in], w [out, in] -> [nb, out]."""
    cp = cupy()
    from cupy import cublas

    check_array("w", w, dtype="float32", ndim=2)
    _check_x(x)
    if x.shape[1] != w.shape[1]:
        raise ValueError(
            f"x [nb, {x.shape[1]}] and w [out, {w.shape[1]}] disagree on the input dim"
        )
    y = out_array("out", out, (x.shape[0], w.shape[0]), cp.float32)
    cublas.gemm("N", "T", x, w, out=y)  # C-contiguous all round: one sgemm, no copy
    return y


def q8_weight(w, q_out=None, d_out=None):
    """Quantize weight rows with Q8_0 (groups of 32 along the input dim), on the GPU.

    w float32 [out, in], in % 32 == 0 -> (q int8 [out, in], d float16 [out, in // 32]),
    bit-exact with golden.q8_quantize(w).
    """
    cp = cupy()
    check_array("w", w, dtype="float32", ndim=2)
    n_out, n_in = w.shape
    if n_in % 32:
        raise ValueError(f"w's input dim ({n_in}) must be a multiple of 32 for Q8_0")
    q = out_array("q_out", q_out, (n_out, n_in), cp.int8)
    d = out_array("d_out", d_out, (n_out, n_in // 32), cp.float16)
    n_groups = n_out * (n_in // 32)
    if n_groups:
        blocks = min((n_groups + 7) // 8, 132 * 64)  # 8 warps (groups) per block, grid-stride
        _k("q8_quantize_rows")((blocks,), (256,), (w, q, d, cp.int64(n_groups)))
    return q, d


def _check_q8(q, d, n_in=None):
    check_array("q", q, dtype="int8", ndim=2)
    n_out, k = q.shape
    if n_in is not None and k != n_in:
        raise ValueError(f"q must have shape [n_out, {n_in}] to match x, got {q.shape}")
    if k % 32:
        raise ValueError(f"q's input dim ({k}) must be a multiple of 32 (Q8_0 groups)")
    check_array("d", d, dtype="float16", shape=(n_out, k // 32))
    if q.data.ptr % 16:
        raise ValueError("q must start on a 16-byte boundary (the kernel loads 16 bytes at once)")
    return n_out, k


def _launch(kind, x, w, d, y, ends=None, mode=0, resid=None):
    """One gemv.cu launch per chunk of <= 8 rows (one launch in total for nb <= 8).

    kind "q8" (w = q int8, d f16 scales) or "f32" (w float32, d None). ends: up to 4 segment
    ends (see gemv.cu); mode 0 plain (+ resid), 1 SwiGLU (interleaved gate/up rows ->
    y [nb, n_out // 2]). The kernel per chunk of rows comes from pick_kernel. Arguments are
    checked by the callers.
    """
    cp = cupy()
    nb, n_in = x.shape
    n_out = w.shape[0]
    e = list(ends or ()) + [n_out] * (4 - len(ends or ()))
    rs = cp.uint64(0) if resid is None else resid  # NULL: no residual
    dd = cp.uint64(0) if d is None else d
    for b0 in range(0, nb, _MAX_NB):
        n = min(_MAX_NB, nb - b0)
        rows, threads, name = pick_kernel(kind, n, n_out)
        xs = x[b0 : b0 + n]  # contiguous rows, 16-byte aligned
        kernel(kernel_module("gemv", "v1"), name)(
            ((n_out + rows - 1) // rows,),
            (threads,),
            (
                xs,
                w,
                dd,
                y,
                rs,
                cp.int32(n_in),
                cp.int32(n_out),
                cp.int32(e[0]),
                cp.int32(e[1]),
                cp.int32(e[2]),
                cp.int32(e[3]),
                cp.int32(b0),
                cp.int32(nb),
                cp.int32(mode),
            ),
        )
    return y


def _launch_v0(kind, x, w, d, y, resid=None):
    """gemv_v0.cu: y [nb, n_out] (+ resid) with one warp per output, 8 warps per block. Same
    arguments as _launch without the epilogues; checked by the callers."""
    cp = cupy()
    nb, n_in = x.shape
    n_out = w.shape[0]
    if nb * n_out == 0:
        return y
    rs = cp.uint64(0) if resid is None else resid  # NULL: no residual
    wd = (w,) if d is None else (w, d)
    kernel(kernel_module("gemv", "v0"), f"gemv_{kind}_v0")(
        ((nb * n_out + 7) // 8,),
        (256,),
        (x, *wd, y, rs, cp.int32(nb), cp.int32(n_in), cp.int32(n_out)),
    )
    return y


def _launch_rung(rung, kind, x, w, d, y, resid=None):
    """A plain y [nb, n_out] (+ resid) by the given rung."""
    if rung == "v0":
        return _launch_v0(kind, x, w, d, y, resid=resid)
    return _launch(kind, x, w, d, y, resid=resid)


def _check_f32w(w, n_in=None):
    check_array("w", w, dtype="float32", ndim=2)
    n_out, k = w.shape
    if n_in is not None and k != n_in:
        raise ValueError(f"w must have shape [n_out, {n_in}] to match x, got {w.shape}")
    if k % 4 or w.data.ptr % 16:
        raise ValueError(
            f"w's rows must be 16-byte aligned (input dim a multiple of 4, got "
            f"{k}) for gemv_f32: use linear() otherwise"
        )
    return n_out, k


def _check_inputs(x, w, d):
    """x and the weights (float32 w when d is None, else Q8_0 q = w with scales d) -> n_out."""
    _check_x(x)
    if d is None:
        n_out, _ = _check_f32w(w, x.shape[1])
    else:
        n_out, _ = _check_q8(w, d, x.shape[1])
    _check_x16(x)
    return n_out


def _gemv(kind, x, w, d, out, residual, rung):
    """gemv_q8 / gemv_f32 after their own checks: inputs, out [nb, n_out], residual, launch."""
    n_out = _check_inputs(x, w, d)
    nb = x.shape[0]
    y = out_array("out", out, (nb, n_out), cupy().float32)
    if residual is not None:
        check_array("residual", residual, dtype="float32", shape=(nb, n_out))
    return _launch_rung(rung, kind, x, w, d, y, resid=residual)


def gemv_q8(x, q, d, out=None, residual=None, impl=None):
    """y = x @ (q · float32(d)).T (+ residual), float32. x [nb, in], q int8 [out, in],
    d float16 [out, in // 32] -> [nb, out]. Weights are read once for up to 8 rows.
    impl: the rung (RUNGS["gemv"]; None: DEFAULT_RUNG)."""
    rung = _rung(impl)
    if d is None:
        raise TypeError("d (the float16 scales) must be a cupy array, got None")
    return _gemv("q8", x, q, d, out, residual, rung)


def gemv_f32(x, w, out=None, residual=None, impl=None):
    """y = x @ w.T (+ residual), float32, by gemv.cu (no cuBLAS: capturable in a CUDA graph).
    x [nb, in], w float32 [out, in] with in % 4 == 0 -> [nb, out]. Weights are read once for
    up to 8 rows (nb > 8 runs in chunks of 8: use linear() for prefill-sized nb).
    impl: the rung (RUNGS["gemv"]; None: DEFAULT_RUNG)."""
    rung = _rung(impl)
    return _gemv("f32", x, w, None, out, residual, rung)


def _seg_ends_arg(seg_ends):
    """seg_ends (a list, tuple or 1-D numpy array of ints) as a list of at most 4 ascending
    ints >= 0 (<= n_out: checked by the caller)."""
    if isinstance(seg_ends, np.ndarray) and seg_ends.ndim == 1:
        seg_ends = seg_ends.tolist() if seg_ends.dtype.kind in "iu" else list(seg_ends)
    if not isinstance(seg_ends, (list, tuple)):
        raise TypeError(f"seg_ends must be a list of ints, got {type(seg_ends).__name__}")
    ends = [int_arg(f"seg_ends[{i}]", e, 0) for i, e in enumerate(seg_ends)]
    if len(ends) > 4 or any(a > b for a, b in zip(ends, ends[1:])):
        raise ValueError(f"seg_ends must be at most 4 ascending ends, got {ends}")
    return ends


def gemv_segments(x, w, d, seg_ends, out=None, impl=None):
    """Fused projection: rows of w cut at seg_ends (ascending, < 5 segments) -> a list of
    contiguous [nb, len_s] float32 arrays (views of one flat buffer `out`, size nb·n_out).
    d is None for float32 weights w, else w = q int8 with d its f16 scales. impl "v0": the v0
    GEMV into a temporary [nb, n_out], then one copy per segment."""
    rung = _rung(impl)
    ends = _seg_ends_arg(seg_ends)
    cp = cupy()
    n_out = _check_inputs(x, w, d)
    nb = x.shape[0]
    if ends and ends[-1] > n_out:
        raise ValueError(f"seg_ends must be at most {n_out} (w's rows), got {ends}")
    flat = out_array("out", out, (nb * n_out,), cp.float32)
    kind = "q8" if d is not None else "f32"
    bounds = [0] + ends + [n_out]
    parts = [flat[nb * s : nb * e].reshape(nb, e - s) for s, e in zip(bounds, bounds[1:])]
    if rung == "v0":
        y = _launch_v0(kind, x, w, d, cp.empty((nb, n_out), cp.float32))
        for p, s, e in zip(parts, bounds, bounds[1:]):
            p[...] = y[:, s:e]
    else:
        _launch(kind, x, w, d, flat, ends=ends)
    return parts


def gemv_q8_segments(x, q, d, seg_ends, out=None, impl=None):
    """gemv_segments for Q8_0 weights (q int8, d f16)."""
    return gemv_segments(x, q, d, seg_ends, out=out, impl=impl)


def gemv_swiglu(x, w, d, out=None, impl=None):
    """act = silu(x @ Wg.T) * (x @ Wu.T) with w holding gate and up rows interleaved
    (row 2i gate_i, row 2i+1 up_i): q int8 with d f16 scales, or float32 w with d None.
    -> [nb, n_out // 2] float32. impl "v0": the v0 GEMV into a temporary [nb, n_out], then
    swiglu_interleaved (the same silu and product as v1's fused epilogue)."""
    rung = _rung(impl)
    cp = cupy()
    n_out = _check_inputs(x, w, d)
    if n_out % 2:
        raise ValueError(f"w must hold interleaved gate/up rows (an even count), got {n_out}")
    y = out_array("out", out, (x.shape[0], n_out // 2), cp.float32)
    kind = "q8" if d is not None else "f32"
    if rung == "v0":
        gu = _launch_v0(kind, x, w, d, cp.empty((x.shape[0], n_out), cp.float32))
        return swiglu_interleaved(gu, out=y)
    return _launch(kind, x, w, d, y, mode=1)


def gemv_q8_swiglu(x, q, d, out=None, impl=None):
    """gemv_swiglu for Q8_0 weights (q int8, d f16)."""
    return gemv_swiglu(x, q, d, out=out, impl=impl)


def swiglu_interleaved(gu, out=None):
    """act[b, i] = silu(gu[b, 2i]) * gu[b, 2i + 1] (the f32 path's gate/up epilogue)."""
    cp = cupy()
    check_array("gu", gu, dtype="float32", ndim=2)
    nb, n2 = gu.shape
    if n2 % 2:
        raise ValueError(f"gu must have an even number of columns (gate/up pairs), got {gu.shape}")
    act = out_array("out", out, (nb, n2 // 2), cp.float32)
    n = nb * (n2 // 2)
    if n:
        _k("swiglu_interleaved")(
            ((n + 255) // 256,), (256,), (gu, act, cp.int32(nb), cp.int32(n2 // 2))
        )
    return act


def interleave_rows(a, b):
    """Rows a_0, b_0, a_1, b_1, ... (numpy or cupy, same shape) — the gate/up layout above."""
    kind = _array_kind(a)
    if kind is None:
        raise TypeError(f"a must be a numpy or cupy array, got {type_name(a)}")
    if _array_kind(b) != kind:
        raise TypeError(f"b must be a {kind} array like a, got {type_name(b)}")
    if a.ndim < 1:
        raise ValueError(f"a must have at least one axis (its rows), got shape {a.shape}")
    if b.dtype != a.dtype:
        raise TypeError(f"b must have a's dtype {a.dtype}, got {b.dtype}")
    if b.shape != a.shape:
        raise ValueError(f"b must have a's shape {a.shape} (gate and up rows), got {b.shape}")
    xp = cupy() if kind == "cupy" else np
    out = xp.empty((2 * a.shape[0],) + a.shape[1:], dtype=a.dtype)
    out[0::2], out[1::2] = a, b
    return out


def _array_kind(a):
    """ "numpy" or "cupy" for an array of that module (subclasses too), else None."""
    if type(a).__module__.split(".")[0] == "cupy" and hasattr(a, "shape"):
        return "cupy"
    return "numpy" if isinstance(a, np.ndarray) else None
