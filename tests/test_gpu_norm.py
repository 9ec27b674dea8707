"""GPU norm (kernels_cuda/norm.cu, norm_v0.cu): RMSNorm and fused add + RMSNorm against the
golden model. The correctness tests run for every rung of RUNGS (v0: one thread per row; v1: one
block per row), each with its own stated tolerance (rel_tol); the last tests check the rung
plumbing on the CPU."""

import numpy as np
import pytest

from qwenref import golden
from qwenref.gpu.norm import DEFAULT_RUNG, RUNGS, add_rms_norm, rms_norm, rung_kernel

gpu = pytest.mark.gpu

EPS32 = np.finfo(np.float32).eps  # 2**-23


def ref64(x, w, eps, zero_centered=True):
    """float64 reference: x / sqrt(mean(x^2) + eps) * (1 + w)."""
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    r = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
    return r * ((1.0 + w64) if zero_centered else w64)


def rel_tol(n, impl="v1"):
    # Every output is x_i times one per-row scalar times fl(1 + w_i), so its relative error is
    # the same kind for every element. The kernel's sum of squares is a chain of at most
    # 4·ceil(n / (4·threads)) sequential adds per thread, then 5 warp and <= 5 block levels:
    # for n <= 1024 that is <= 14 roundings of 2^-24 relative (all terms positive), halved by
    # the sqrt; plus ~5 roundings (mean, eps add, sqrt, reciprocal, two products) and fl(1 + w).
    # (log2(n) + 8) ulps covers it with margin; the golden is within the same bound, so GPU vs
    # golden gets that plus the rung's own.
    # v0 sums the squares in one chain of n fmas (n roundings of a growing positive sum): its
    # relative error is <= n 2^-24 = (n / 2) ulps, halved by the sqrt; the same ~5 roundings
    # follow, so (n / 4 + 8) ulps. Looser than v1's worst case, but a bound, not a typical value.
    if impl == "v0":
        return (n / 4 + 8) * EPS32
    return (np.log2(n) + 8) * EPS32


def make_rows(rng, rows, n):
    """Rows at very different scales: outlier channels, rms far below sqrt(eps), an all-zero row."""
    x = rng.standard_normal((rows, n)).astype(np.float32)
    x[0] *= 1e3
    if rows > 1:
        x[1, [0, n // 3, n - 1]] *= 200.0  # outlier channels
    if rows > 2:
        x[2] *= 1e-4  # mean(x^2) ~ 1e-8 << eps = 1e-6
    if rows > 3:
        x[3] = 0.0
    return x


def check(y, x, w, eps, zero_centered=True, impl="v1"):
    n = x.shape[-1]
    assert not np.isnan(y).any()  # every poisoned element was written
    ref = ref64(x, w, eps, zero_centered)
    assert np.all(np.abs(y - ref) <= rel_tol(n, impl) * np.abs(ref))
    g = golden.rms_norm(x, w, eps, zero_centered)
    assert np.all(np.abs(y - g) <= (rel_tol(n, impl) + rel_tol(n)) * np.abs(g))


@gpu
@pytest.mark.parametrize("impl", RUNGS["rms_norm"])
@pytest.mark.parametrize("n", [64, 128, 256, 320, 77])  # 77: scalar path (n % 4 != 0)
@pytest.mark.parametrize("rows", [1, 3, 37, 300])  # 300: v0's blocks of 128 rows
def test_rms_norm(cp, rng, rows, n, impl):
    x = make_rows(rng, rows, n)
    w = (0.5 * rng.standard_normal(n)).astype(np.float32)  # 1 + w well away from 1
    out = cp.full(x.shape, np.nan, cp.float32)
    y = rms_norm(cp.asarray(x), cp.asarray(w), eps=1e-6, out=out, impl=impl)
    assert y is out
    check(cp.asnumpy(y), x, w, 1e-6, impl=impl)
    if rows > 3:
        assert np.all(cp.asnumpy(y)[3] == 0)  # zero row: zeros, no NaN


@gpu
@pytest.mark.parametrize("impl", RUNGS["rms_norm"])
def test_rms_norm_not_zero_centered_leading_axes_and_eps(cp, rng, impl):
    x = rng.standard_normal((2, 3, 5, 96)).astype(np.float32)
    w = rng.standard_normal(96).astype(np.float32)
    y = cp.asnumpy(rms_norm(cp.asarray(x), cp.asarray(w), eps=1e-2, zero_centered=False, impl=impl))
    assert y.shape == x.shape
    check(y.reshape(-1, 96), x.reshape(-1, 96), w, 1e-2, zero_centered=False, impl=impl)
    # and the flag matters
    yz = cp.asnumpy(rms_norm(cp.asarray(x), cp.asarray(w), eps=1e-2, impl=impl))
    assert np.abs(yz - y).max() > 0.1


@gpu
@pytest.mark.parametrize("impl", RUNGS["rms_norm"])
def test_rms_norm_unaligned_scalar_path_and_in_place(cp, rng, impl):
    # n % 4 == 0 but the rows start one float into the buffer: the float4 path must not be taken
    x = make_rows(rng, 5, 128)
    w = (0.5 * rng.standard_normal(128)).astype(np.float32)
    buf = cp.zeros(x.size + 1, cp.float32)
    xv = buf[1:].reshape(x.shape)
    xv[...] = cp.asarray(x)
    y_aligned = cp.asnumpy(rms_norm(cp.asarray(x), cp.asarray(w), impl=impl))
    y = cp.asnumpy(rms_norm(xv, cp.asarray(w), impl=impl))
    check(y, x, w, 1e-6, impl=impl)
    # v1's scalar path sums the squares in a different order than its float4 path: compare
    # the two with the tolerance, not bits (v0 has one order: there they are equal)
    assert np.all(np.abs(y - y_aligned) <= 2 * rel_tol(128, impl) * np.abs(y_aligned))
    xd = cp.asarray(x)
    rms_norm(xd, cp.asarray(w), out=xd, impl=impl)  # out=x: in place
    assert np.array_equal(cp.asnumpy(xd), y_aligned)


@gpu
@pytest.mark.parametrize("impl", RUNGS["add_rms_norm"])
@pytest.mark.parametrize("n", [64, 320, 77])
@pytest.mark.parametrize("rows", [1, 37, 300])
def test_add_rms_norm(cp, rng, rows, n, impl):
    x = make_rows(rng, rows, n)
    r = (3 * rng.standard_normal(x.shape)).astype(np.float32)
    r[0] *= 1e3
    w = rng.standard_normal(n).astype(np.float32)
    out = cp.full(x.shape, np.nan, cp.float32)
    sum_out = cp.full(x.shape, np.nan, cp.float32)
    y, s = add_rms_norm(
        cp.asarray(x), cp.asarray(r), cp.asarray(w), eps=1e-6, out=out, sum_out=sum_out, impl=impl
    )
    assert y is out and s is sum_out
    s = cp.asnumpy(s)
    assert np.array_equal(s, x + r)  # one float32 add: bit-exact
    gy, gs = golden.add_rms_norm(x, r, w, eps=1e-6)
    assert np.array_equal(s, gs)
    check(cp.asnumpy(y), s, w, 1e-6, impl=impl)


@gpu
@pytest.mark.parametrize("impl", RUNGS["add_rms_norm"])
def test_add_rms_norm_in_place_residual(cp, rng, impl):
    # sum_out = residual: the layer's in-place residual update
    x = rng.standard_normal((3, 256)).astype(np.float32)
    r = rng.standard_normal((3, 256)).astype(np.float32)
    w = rng.standard_normal(256).astype(np.float32)
    rd = cp.asarray(r)
    y, s = add_rms_norm(cp.asarray(x), rd, cp.asarray(w), sum_out=rd, impl=impl)
    assert s is rd
    assert np.array_equal(cp.asnumpy(rd), x + r)
    check(cp.asnumpy(y), x + r, w, 1e-6, impl=impl)
    # and out = x as well: both outputs in place, the same bits as above
    xd, rd = cp.asarray(x), cp.asarray(r)
    y2, s2 = add_rms_norm(xd, rd, cp.asarray(w), out=xd, sum_out=rd, impl=impl)
    assert y2 is xd and s2 is rd
    assert np.array_equal(cp.asnumpy(xd), cp.asnumpy(y))
    assert np.array_equal(cp.asnumpy(rd), x + r)


@gpu
def test_norm_bad_inputs(cp):
    x = cp.zeros((3, 64), cp.float32)
    w = cp.zeros(64, cp.float32)
    with pytest.raises(TypeError, match=r"^x\b"):
        rms_norm(np.zeros((3, 64), np.float32), w)
    with pytest.raises(TypeError, match=r"^x\b"):
        rms_norm(x.astype(cp.float64), w)
    with pytest.raises(ValueError, match=r"^x\b"):
        rms_norm(cp.zeros((64, 6), cp.float32).T, cp.zeros(64, cp.float32))  # not contiguous
    with pytest.raises(ValueError, match=r"^x\b"):
        rms_norm(cp.zeros((3, 0), cp.float32), cp.zeros(0, cp.float32))
    with pytest.raises(ValueError, match=r"^weight\b"):
        rms_norm(x, cp.zeros(65, cp.float32))
    with pytest.raises(TypeError, match=r"^weight\b"):
        rms_norm(x, cp.zeros(64, cp.float16))
    with pytest.raises(ValueError, match=r"^eps\b"):
        rms_norm(x, w, eps=-1.0)
    with pytest.raises(ValueError, match=r"^out\b"):
        rms_norm(x, w, out=cp.zeros((3, 63), cp.float32))
    with pytest.raises(TypeError, match=r"^out\b"):
        rms_norm(x, w, out=cp.zeros((3, 64), cp.float64))
    with pytest.raises(ValueError, match=r"^residual\b"):
        add_rms_norm(x, cp.zeros((2, 64), cp.float32), w)
    with pytest.raises(TypeError, match=r"^residual\b"):
        add_rms_norm(x, np.zeros((3, 64), np.float32), w)
    with pytest.raises(ValueError, match=r"^sum_out\b"):
        add_rms_norm(x, x, w, sum_out=cp.zeros((3, 32), cp.float32))
    for impl in ("v0", None):  # every rung checks the same way
        with pytest.raises(ValueError, match=r"^out\b"):
            rms_norm(x, w, out=cp.zeros((3, 63), cp.float32), impl=impl)
        with pytest.raises(ValueError, match=r"^residual\b"):
            add_rms_norm(x, cp.zeros((2, 64), cp.float32), w, impl=impl)


# ---- rung plumbing (CPU: impl is checked before anything touches CuPy) ----------------------


@pytest.mark.parametrize("bad", ["bogus", "V0", "", 0, ("v0",)])
def test_bad_impl_is_rejected_before_any_gpu_work(bad):
    x = np.zeros((3, 64), np.float32)  # host arrays: never reached
    w = np.zeros(64, np.float32)
    with pytest.raises(ValueError, match=r"^impl\b"):
        rms_norm(x, w, impl=bad)
    with pytest.raises(ValueError, match=r"^impl\b"):
        add_rms_norm(x, x, w, impl=bad)
    with pytest.raises(ValueError, match=r"^impl\b"):
        rung_kernel("rms_norm", bad)


def test_rungs_and_kernel_names():
    assert RUNGS == {"rms_norm": ("v0", "v1"), "add_rms_norm": ("v0", "v1")}
    assert DEFAULT_RUNG == {"rms_norm": "v1", "add_rms_norm": "v1"}
    assert rung_kernel("rms_norm", "v0", rows=8, n=5120) == "rms_norm_v0"
    assert rung_kernel("rms_norm") == rung_kernel("rms_norm", "v1") == "rms_norm_f32"
    assert rung_kernel("add_rms_norm", "v0") == "add_rms_norm_v0"
    assert rung_kernel("add_rms_norm") == "add_rms_norm_f32"
    with pytest.raises(ValueError, match=r"^family\b"):
        rung_kernel("wht")
