"""gemv.cu against the golden model: Q8_0 weight quantization (bit-exact), the Q8 GEMV
(x @ dequant(W).T in float32) and the f32 GEMV (x @ W.T), the cuBLAS f32 path, and the layer's
fused epilogues (segments, SwiGLU, residual) for both weight kinds. The kernels split each row's
16-byte chunks over a CTA (split-K): shapes below have fewer chunks than threads, chunk counts
that are not multiples of threads x unroll, tall K, and output counts not a multiple of the rows
per CTA; nb covers every per-nb kernel (1..8) and the chunks of 8 beyond. The correctness tests
run for every rung of RUNGS["gemv"] (v0: gemv_v0.cu, one warp per output) with one tolerance,
_dot_bound; the tests at the end check the rung plumbing on the CPU."""

import numpy as np
import pytest

from qwenref import golden
from qwenref.gpu.gemv import RUNGS

needs_gpu = pytest.mark.gpu
rungs = pytest.mark.parametrize("impl", RUNGS["gemv"])

EPS32 = np.finfo(np.float32).eps


def _gpu():
    from qwenref import gpu

    return gpu


def _weights(rng, n_out, n_in, scale=0.05):
    """Weights whose Q8_0 groups differ a lot in scale (outlier columns and rows), one all-zero
    group (d32 = 0 path), and exact .5 ties for the rounding rule."""
    w = (rng.standard_normal((n_out, n_in)) * scale).astype(np.float32)
    w[:, 7] *= 40  # an outlier column: group 0 scale
    w[3] *= 1e-3  # a tiny row
    w[1, 32:64] = 0  # an all-zero group
    # group 0 of row 2: amax 127 -> d32 = 1, id = 1: x·id = k + 0.5 exactly -> away from zero
    w[2, :32] = np.array([127, -127, 2.5, -2.5, 0.5, -0.5, 1.5, -3.5] * 4, np.float32)
    return w


def _dot_bound(x, w):
    """Float32 dot-product error bound, elementwise: a few·sqrt(n)·eps · Σ|x_i w_i| (v1 splits
    the sums over 32 lanes and 16-wide chains; 8·sqrt(n) covers both orders with margin).
    v0 (a chain of ceil(n/32) fmas per lane, then 5 butterfly levels) is within
    (n/32 + 6)·2^-24 · Σ|x_i w_i| of the exact sum even in the worst case, which is at most
    a third of this bound for n <= 17408 (the tallest K here): the same bound serves both rungs,
    with numpy's own rounding (a blocked float32 sum, also ~sqrt(n)·eps in practice) inside."""
    n = x.shape[1]
    return 8 * np.sqrt(n) * EPS32 * (np.abs(x).astype(np.float64) @ np.abs(w).T.astype(np.float64))


@needs_gpu
@pytest.mark.parametrize("n_out,n_in", [(77, 320), (5, 32), (130, 1024)])
def test_q8_weight_is_bit_exact_with_golden(cp, rng, n_out, n_in):
    w = _weights(rng, n_out, n_in)
    q, d = _gpu().q8_weight(cp.asarray(w))
    rq, rd = golden.q8_quantize(w)
    assert q.dtype == cp.int8 and d.dtype == cp.float16
    np.testing.assert_array_equal(q.get(), rq)
    np.testing.assert_array_equal(d.get().view(np.uint16), rd.view(np.uint16))
    assert (rq[2, 2:4] == [3, -3]).all() and (rq[2, 7] == -4)  # the inputs hit the ties


@needs_gpu
def test_q8_weight_poisoned_outputs_are_overwritten(cp, rng):
    w = _weights(rng, 77, 320)
    qo = cp.full((77, 320), 99, cp.int8)
    do = cp.full((77, 10), cp.nan, cp.float16)
    q, d = _gpu().q8_weight(cp.asarray(w), q_out=qo, d_out=do)
    assert q is qo and d is do
    rq, rd = golden.q8_quantize(w)
    np.testing.assert_array_equal(qo.get(), rq)
    np.testing.assert_array_equal(do.get(), rd)


@needs_gpu
@rungs
@pytest.mark.parametrize("nb", [1, 2, 3, 4, 5, 6, 7, 8, 11])
def test_gemv_q8_matches_golden_on_dequantized_weights(cp, rng, nb, impl):
    # in=320: 20 chunks of 16 for 32 lanes (lanes idle); out=77: the last warp's rows clamp
    n_out, n_in = 77, 320
    w = _weights(rng, n_out, n_in)
    x = rng.standard_normal((nb, n_in)).astype(np.float32)
    x[:, 5] *= 30  # an outlier activation
    q, d = _gpu().q8_weight(cp.asarray(w))
    wdq = golden.q8_dequantize(q.get(), d.get())
    ref = golden.linear(x, wdq)
    out = cp.full((nb, n_out), cp.nan, cp.float32)  # poison: every element written
    y = _gpu().gemv_q8(cp.asarray(x), q, d, out=out, impl=impl)
    assert y is out
    got = y.get()
    assert np.isfinite(got).all()
    np.testing.assert_array_less(np.abs(got - ref), _dot_bound(x, wdq) + 1e-30)
    # the quantized weights really were used: the f32 weights give a clearly different answer
    assert np.abs(golden.linear(x, w) - got).max() > 100 * np.abs(ref - got).max()


@needs_gpu
@rungs
def test_gemv_q8_large_rows(cp, rng, impl):
    # the 27B hidden size, an output count that is not a multiple of 16 rows per block
    n_out, n_in, nb = 1030, 5120, 8
    w = _weights(rng, n_out, n_in, 0.02)
    x = rng.standard_normal((nb, n_in)).astype(np.float32)
    q, d = _gpu().q8_weight(cp.asarray(w))
    wdq = golden.q8_dequantize(q.get(), d.get())
    y = _gpu().gemv_q8(cp.asarray(x), q, d, impl=impl).get()
    np.testing.assert_array_less(np.abs(y - golden.linear(x, wdq)), _dot_bound(x, wdq) + 1e-30)


@needs_gpu
@rungs
@pytest.mark.parametrize("nb", [1, 3])
def test_gemv_q8_tall_k(cp, rng, nb, impl):
    # down_proj-like: K = 17408 (1088 chunks: 8.5 per thread of a 128-thread CTA), few rows
    n_out, n_in = 70, 17408
    w = _weights(rng, n_out, n_in, 0.02)
    x = rng.standard_normal((nb, n_in)).astype(np.float32)
    q, d = _gpu().q8_weight(cp.asarray(w))
    wdq = golden.q8_dequantize(q.get(), d.get())
    out = cp.full((nb, n_out), cp.nan, cp.float32)
    y = _gpu().gemv_q8(cp.asarray(x), q, d, out=out, impl=impl).get()
    np.testing.assert_array_less(np.abs(y - golden.linear(x, wdq)), _dot_bound(x, wdq) + 1e-30)


@needs_gpu
def test_gemv_q8_wide_outputs_nb1(cp, rng):
    # nb = 1 with n_out >= gemv._WIDE_N runs the 8-rows-per-CTA, register-capped kernel; 8210
    # rows: the last CTA's rows clamp (and hold one lone gate/up pair); all three epilogues
    from qwenref.gpu.gemv import _WIDE_N, gemv_q8_segments, gemv_q8_swiglu, pick_kernel

    n_out, n_in = 8210, 96
    assert n_out >= _WIDE_N and pick_kernel("q8", 1, n_out) != pick_kernel("q8", 1, 5120)
    w = _weights(rng, n_out, n_in, 0.3)
    x = rng.standard_normal((1, n_in)).astype(np.float32)
    q, d = _gpu().q8_weight(cp.asarray(w))
    wdq = golden.q8_dequantize(q.get(), d.get())
    ref, bound = golden.linear(x, wdq), _dot_bound(x, wdq)
    out = cp.full((1, n_out), cp.nan, cp.float32)
    got = _gpu().gemv_q8(cp.asarray(x), q, d, out=out).get()
    np.testing.assert_array_less(np.abs(got - ref), bound + 1e-30)
    sizes = [8000, 100, 110]
    flat = cp.full((n_out,), cp.nan, cp.float32)
    parts = gemv_q8_segments(cp.asarray(x), q, d, np.cumsum(sizes)[:-1], out=flat)
    s = 0
    for p, n in zip(parts, sizes):
        np.testing.assert_array_less(
            np.abs(p.get() - ref[:, s : s + n]), bound[:, s : s + n] + 1e-30
        )
        s += n
    act = cp.full((1, n_out // 2), cp.nan, cp.float32)
    got = gemv_q8_swiglu(cp.asarray(x), q, d, out=act).get()
    g, u = ref[:, 0::2], ref[:, 1::2]
    bnd = (
        1.1 * bound[:, 0::2] * np.abs(u)
        + np.abs(golden.silu(g)) * bound[:, 1::2]
        + 8 * EPS32 * np.abs(golden.silu(g) * u)
    )
    np.testing.assert_array_less(np.abs(got - golden.silu(g) * u), bnd + 1e-30)


@needs_gpu
@rungs
def test_gemv_q8_residual_epilogue(cp, rng, impl):
    n_out, n_in, nb = 77, 320, 3
    w = _weights(rng, n_out, n_in)
    x = rng.standard_normal((nb, n_in)).astype(np.float32)
    r = rng.standard_normal((nb, n_out)).astype(np.float32)
    q, d = _gpu().q8_weight(cp.asarray(w))
    wdq = golden.q8_dequantize(q.get(), d.get())
    out = cp.full((nb, n_out), cp.nan, cp.float32)
    y = _gpu().gemv_q8(cp.asarray(x), q, d, out=out, residual=cp.asarray(r), impl=impl).get()
    np.testing.assert_array_less(
        np.abs(y - (golden.linear(x, wdq) + r)), _dot_bound(x, wdq) + 2 * EPS32 * np.abs(r) + 1e-30
    )


def _check_parts(flat, parts, sizes, nb, ref, bound):
    """Every element of the flat buffer written; part i is a contiguous [nb, sizes[i]] array
    matching columns sum(sizes[:i]) .. + sizes[i] of ref within bound."""
    assert np.isfinite(flat.get()).all()
    s = 0
    for p, n in zip(parts, sizes):
        assert p.shape == (nb, n) and p.flags.c_contiguous
        np.testing.assert_array_less(
            np.abs(p.get() - ref[:, s : s + n]), bound[:, s : s + n] + 1e-30
        )
        s += n


@needs_gpu
@rungs
@pytest.mark.parametrize("nb", [1, 3, 10])
def test_gemv_q8_segments_write_each_part_contiguously(cp, rng, nb, impl):
    from qwenref.gpu.gemv import gemv_q8_segments

    sizes = [40, 8, 8, 21, 3]  # like q|k|v|indexer q|indexer k
    n_in = 96
    w = _weights(rng, sum(sizes), n_in)
    x = rng.standard_normal((nb, n_in)).astype(np.float32)
    q, d = _gpu().q8_weight(cp.asarray(w))
    wdq = golden.q8_dequantize(q.get(), d.get())
    ref = golden.linear(x, wdq)
    bound = _dot_bound(x, wdq)
    flat = cp.full((nb * sum(sizes),), cp.nan, cp.float32)
    parts = gemv_q8_segments(cp.asarray(x), q, d, np.cumsum(sizes)[:-1], out=flat, impl=impl)
    _check_parts(flat, parts, sizes, nb, ref, bound)


@needs_gpu
@rungs
@pytest.mark.parametrize("nb", [1, 4, 9])
def test_gemv_q8_swiglu_epilogue(cp, rng, nb, impl):
    from qwenref.gpu.gemv import gemv_q8_swiglu, interleave_rows

    n_act, n_in = 37, 160  # odd: a warp with a lone pair
    wg = _weights(rng, n_act, n_in, 0.3)
    wu = _weights(rng, n_act, n_in, 0.3)
    x = rng.standard_normal((nb, n_in)).astype(np.float32)
    q, d = _gpu().q8_weight(cp.asarray(interleave_rows(wg, wu)))
    # interleaving rows commutes with row-wise quantization: same codes as each matrix alone
    np.testing.assert_array_equal(q.get()[0::2], golden.q8_quantize(wg)[0])
    wdq = golden.q8_dequantize(q.get(), d.get())
    g, u = golden.linear(x, wdq[0::2]), golden.linear(x, wdq[1::2])
    ref = golden.silu(g) * u
    out = cp.full((nb, n_act), cp.nan, cp.float32)
    got = gemv_q8_swiglu(cp.asarray(x), q, d, out=out, impl=impl).get()
    # silu is 1-Lipschitz-ish (|silu'| <= 1.1): the bound carries through both products
    bg, bu = _dot_bound(x, wdq[0::2]), _dot_bound(x, wdq[1::2])
    bound = 1.1 * bg * np.abs(u) + np.abs(golden.silu(g)) * bu + 8 * EPS32 * np.abs(ref)
    np.testing.assert_array_less(np.abs(got - ref), bound + 1e-30)


def _gemv_f32(x, w, **kw):
    from qwenref.gpu.gemv import gemv_f32

    return gemv_f32(x, w, **kw)


@needs_gpu
@rungs
@pytest.mark.parametrize("nb", [1, 2, 3, 4, 5, 6, 7, 8, 11])
@pytest.mark.parametrize("n_out,n_in", [(77, 324), (6, 4), (35, 5120)])
def test_gemv_f32_matches_golden(cp, rng, nb, n_out, n_in, impl):
    # in=324: 81 chunks of 4 floats (fewer than the CTA's threads); in=5120: 1280 chunks, not a
    # multiple of threads x unroll; out=77 and 35: the last CTA's rows clamp
    w = _weights(rng, n_out, max(n_in, 32))[:, :n_in].copy()
    x = rng.standard_normal((nb, n_in)).astype(np.float32)
    x[:, n_in // 2] *= 30  # an outlier activation
    out = cp.full((nb, n_out), cp.nan, cp.float32)  # poison: every element written
    y = _gemv_f32(cp.asarray(x), cp.asarray(w), out=out, impl=impl)
    assert y is out
    got = y.get()
    assert np.isfinite(got).all()
    np.testing.assert_array_less(np.abs(got - golden.linear(x, w)), _dot_bound(x, w) + 1e-30)


@needs_gpu
@rungs
def test_gemv_f32_residual_and_tall_k(cp, rng, impl):
    n_out, n_in, nb = 21, 17408, 2
    w = (rng.standard_normal((n_out, n_in)) * 0.01).astype(np.float32)
    x = rng.standard_normal((nb, n_in)).astype(np.float32)
    r = rng.standard_normal((nb, n_out)).astype(np.float32)
    out = cp.full((nb, n_out), cp.nan, cp.float32)
    y = _gemv_f32(cp.asarray(x), cp.asarray(w), out=out, residual=cp.asarray(r), impl=impl)
    y = y.get()
    np.testing.assert_array_less(
        np.abs(y - (golden.linear(x, w) + r)), _dot_bound(x, w) + 2 * EPS32 * np.abs(r) + 1e-30
    )


@needs_gpu
@rungs
@pytest.mark.parametrize("nb", [1, 3, 10])
def test_gemv_f32_segments_and_swiglu(cp, rng, nb, impl):
    from qwenref.gpu.gemv import gemv_segments, gemv_swiglu, interleave_rows

    sizes, n_in = [40, 8, 8, 21, 3], 96
    w = _weights(rng, sum(sizes), n_in)
    x = rng.standard_normal((nb, n_in)).astype(np.float32)
    ref, bound = golden.linear(x, w), _dot_bound(x, w)
    flat = cp.full((nb * sum(sizes),), cp.nan, cp.float32)
    parts = gemv_segments(
        cp.asarray(x), cp.asarray(w), None, np.cumsum(sizes)[:-1], out=flat, impl=impl
    )
    _check_parts(flat, parts, sizes, nb, ref, bound)
    n_act = 37  # odd: a CTA with a lone pair
    wg, wu = _weights(rng, n_act, n_in, 0.3), _weights(rng, n_act, n_in, 0.3)
    out = cp.full((nb, n_act), cp.nan, cp.float32)
    got = gemv_swiglu(
        cp.asarray(x), cp.asarray(interleave_rows(wg, wu)), None, out=out, impl=impl
    ).get()
    g, u = golden.linear(x, wg), golden.linear(x, wu)
    ref = golden.silu(g) * u
    bound = (
        1.1 * _dot_bound(x, wg) * np.abs(u)
        + np.abs(golden.silu(g)) * _dot_bound(x, wu)
        + 8 * EPS32 * np.abs(ref)
    )
    np.testing.assert_array_less(np.abs(got - ref), bound + 1e-30)


@needs_gpu
@pytest.mark.parametrize("nb", [1, 3, 8])
def test_linear_f32_cublas(cp, rng, nb):
    w = rng.standard_normal((77, 320)).astype(np.float32)
    x = rng.standard_normal((nb, 320)).astype(np.float32)
    out = cp.full((nb, 77), cp.nan, cp.float32)
    y = _gpu().linear(cp.asarray(x), cp.asarray(w), out=out)
    assert y is out
    np.testing.assert_array_less(np.abs(y.get() - golden.linear(x, w)), _dot_bound(x, w) + 1e-30)


@needs_gpu
def test_swiglu_interleaved_f32(cp, rng):
    from qwenref.gpu.gemv import swiglu_interleaved

    gu = (rng.standard_normal((3, 2 * 45)) * 5).astype(np.float32)
    gu[0, 0] = -200.0  # the exp clamp (e^80) path
    out = cp.full((3, 45), cp.nan, cp.float32)
    got = swiglu_interleaved(cp.asarray(gu), out=out).get()
    ref = golden.silu(gu[:, 0::2]) * gu[:, 1::2]
    np.testing.assert_allclose(got, ref, rtol=8 * EPS32, atol=1e-30)  # expf (<= 2 ulp), /, *


@needs_gpu
@rungs
def test_argument_checks_name_the_argument(cp, rng, impl):
    # every rung runs the same checks before any launch
    from functools import partial

    from qwenref.gpu import gemv as g

    gpu = _gpu()
    gemv_q8, gemv_f32 = partial(gpu.gemv_q8, impl=impl), partial(g.gemv_f32, impl=impl)
    w = cp.asarray(_weights(rng, 8, 64))
    q, d = gpu.q8_weight(w)
    x = cp.ones((2, 64), cp.float32)
    with pytest.raises(TypeError, match="x"):
        gemv_q8(x.astype(cp.float64), q, d)
    with pytest.raises(TypeError, match="x"):
        gemv_q8(np.ones((2, 64), np.float32), q, d)
    with pytest.raises(ValueError, match="q"):
        gemv_q8(cp.ones((2, 96), cp.float32), q, d)  # in mismatch
    with pytest.raises(ValueError, match="d"):
        gemv_q8(x, q, d[:, :1].copy())
    with pytest.raises(TypeError, match="d"):
        gemv_q8(x, q, d.astype(cp.float32))
    with pytest.raises(ValueError, match="out"):
        gemv_q8(x, q, d, out=cp.empty((2, 9), cp.float32))
    with pytest.raises(ValueError, match="residual"):
        gemv_q8(x, q, d, residual=cp.empty((2, 9), cp.float32))
    with pytest.raises(ValueError, match="32"):
        gpu.q8_weight(cp.ones((4, 48), cp.float32))
    with pytest.raises(ValueError, match="x"):
        gemv_q8(x[:, ::2], q[:, :32].copy(), d[:, :1].copy())  # non-contiguous x
    with pytest.raises(ValueError, match="w"):
        gpu.linear(x, cp.ones((5, 63), cp.float32))
    with pytest.raises(ValueError, match="w"):
        gemv_f32(cp.ones((2, 63), cp.float32), cp.ones((5, 63), cp.float32))  # in % 4 != 0
    with pytest.raises(ValueError, match="w"):
        gemv_f32(x, cp.ones((5, 60), cp.float32))  # in mismatch
    with pytest.raises(TypeError, match="w"):
        gemv_f32(x, cp.ones((5, 64), cp.float64))
    with pytest.raises(ValueError, match="seg_ends"):
        g.gemv_q8_segments(x, q, d, [5, 3], impl=impl)
    with pytest.raises(ValueError, match="gate/up"):
        g.gemv_swiglu(x, cp.ones((5, 64), cp.float32), None, impl=impl)


# ---- the rungs, on the CPU ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn",
    ["gemv_q8", "gemv_f32", "gemv_segments", "gemv_q8_segments", "gemv_swiglu", "gemv_q8_swiglu"],
)
@pytest.mark.parametrize("bad", ["bogus", "V0", 0, ("v0",)])
def test_unknown_impl_is_rejected_before_anything_runs(fn, bad):
    # no CuPy needed: impl is the wrappers' first check (the arrays here are not even arrays)
    from qwenref.gpu import gemv

    args = {"gemv_q8": 3, "gemv_f32": 2, "gemv_swiglu": 3, "gemv_q8_swiglu": 3}.get(fn, 4)
    with pytest.raises(ValueError, match="impl"):
        getattr(gemv, fn)(*[None] * args, impl=bad)


def test_rungs_and_their_kernels():
    from qwenref.gpu.gemv import DEFAULT_RUNG, pick_kernel, rung_kernel

    assert RUNGS == {"gemv": ("v0", "v1")} and DEFAULT_RUNG == {"gemv": "v1"}
    assert rung_kernel("gemv", "v0", kind="q8") == "gemv_q8_v0"
    assert rung_kernel("gemv", "v0", kind="f32", nb=11, n_out=7) == "gemv_f32_v0"
    for kind in ("q8", "f32"):
        for nb in range(1, 9):
            for n_out in (77, 5120, 34816):
                want = pick_kernel(kind, nb, n_out)[2]
                assert rung_kernel("gemv", None, kind=kind, nb=nb, n_out=n_out) == want
                assert rung_kernel("gemv", "v1", kind=kind, nb=nb, n_out=n_out) == want
    # nb > 8: chunks of 8, then the rest
    assert (
        rung_kernel("gemv", kind="q8", nb=11, n_out=77)
        == pick_kernel("q8", 8, 77)[2] + "+" + pick_kernel("q8", 3, 77)[2]
    )
    assert rung_kernel("gemv", kind="q8", nb=16, n_out=77) == pick_kernel("q8", 8, 77)[2]
    with pytest.raises(ValueError, match="impl"):
        rung_kernel("gemv", "bogus", kind="q8", nb=1, n_out=77)
    with pytest.raises(ValueError, match="family"):
        rung_kernel("rms_norm", "v0")
    with pytest.raises(ValueError, match="kind"):
        rung_kernel("gemv", "v0", kind="bf16")
    with pytest.raises(ValueError, match="n_out"):
        rung_kernel("gemv", "v1", kind="q8", nb=1)
    with pytest.raises(ValueError, match="nb"):
        rung_kernel("gemv", "v1", kind="q8", nb=0, n_out=77)


def test_v0_kernels_are_in_gemv_v0_cu():
    import re

    from qwenref.gpu._runtime import kernel_source

    src = kernel_source("gemv_v0")
    for kind in ("q8", "f32"):
        assert re.search(rf'extern "C" __global__ void gemv_{kind}_v0\(', src)
