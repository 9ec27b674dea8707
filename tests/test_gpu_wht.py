"""GPU wht (kernels_cuda/wht.cu, wht_v0.cu) against the golden model and an exact float32
emulation of each rung (v1: the butterflies, gpu_checks.wht_f32; v0: the O(n^2) sums in order,
wht_v0_f32 below). The correctness tests run for every rung of RUNGS["wht"] with that rung's
tolerance (golden_tol); the last tests check the rung plumbing on the CPU."""

import numpy as np
import pytest
import scipy.linalg
from gpu_checks import wht_f32

from qwenref import golden
from qwenref.gpu.wht import DEFAULT_RUNG, RUNGS, WHT_SIZES, rung_kernel
from qwenref.gpu.wht import wht as gpu_wht

gpu = pytest.mark.gpu
rungs = pytest.mark.parametrize("impl", RUNGS["wht"])

EPS32 = np.finfo(np.float32).eps  # 2**-23


def make_x(rng, rows, n):
    x = rng.standard_normal((rows, n)).astype(np.float32)
    x[:, n // 3] *= 100.0  # an outlier channel
    if rows > 2:
        x[1] *= 1e-3  # a quiet row
        x[2] = 0.0  # a zero row
    return x


def golden_tol(x, ref, impl="v1"):
    """GPU vs golden, per element. v1's log2(n) float32 passes each round a partial sum whose
    magnitude is at most the row's L1 norm, so |error| <= log2(n) 2^-24 |x|_1 / sqrt(n) (1%
    margin). v0 adds the n signed terms of each output in one float32 chain: n - 1 roundings of
    a partial sum no larger than |x|_1, so the same bound with n - 1 roundings in place of
    log2(n) (worst case; a random-walk error is ~sqrt(n) of them). For both, the scale (1/sqrt(n)
    rounded twice, then the product rounded) and the golden's own final rounding add <= 2 ulps
    of the value."""
    n = x.shape[-1]
    roundings = n - 1 if impl == "v0" else np.log2(n)
    l1 = np.abs(x.astype(np.float64)).sum(axis=-1, keepdims=True)
    return 1.01 * roundings * 2.0**-24 * l1 / np.sqrt(n) + 2 * EPS32 * np.abs(ref)


def wht_v0_f32(x):
    """What wht_v0 computes, in numpy float32: acc = 0; acc += H[i, j] * x_j for j = 0, 1, ...
    (the sign flip is exact, each add one float32 rounding), then acc * float32(1 /
    float32(sqrt(n))). Same operations in the same order as the kernel: equal bits."""
    x = np.asarray(x, np.float32)
    n = x.shape[-1]
    xr = x.reshape(-1, n)
    h = scipy.linalg.hadamard(n).astype(np.float32)  # symmetric, Sylvester order
    acc = np.zeros_like(xr)
    for j in range(n):
        acc += h[j][None, :] * xr[:, j : j + 1]  # [rows, n]: term j of every output
    scale = np.float32(1) / np.sqrt(np.float32(n))
    return (acc * scale).reshape(x.shape)


EMULATION = {"v0": wht_v0_f32, "v1": wht_f32}


@gpu
@rungs
@pytest.mark.parametrize("n", WHT_SIZES)
@pytest.mark.parametrize("rows", [1, 3, 37])
def test_wht_matches_golden_and_float32_emulation(cp, rng, n, rows, impl):
    x = make_x(rng, rows, n)
    out = cp.full(x.shape, np.nan, np.float32)  # poisoned: every element must be written
    y = gpu_wht(cp.asarray(x), out=out, impl=impl)
    assert y is out
    y = cp.asnumpy(y)
    assert np.array_equal(y, EMULATION[impl](x))  # same float32 operations, same order
    ref = golden.wht(x)
    assert np.all(np.abs(y - ref) <= golden_tol(x, ref, impl))
    if rows > 2:
        assert np.all(y[2] == 0)  # zero row stays exactly zero


@gpu
@rungs
def test_wht_leading_axes_inverse_and_in_place(cp, rng, impl):
    x = rng.standard_normal((2, 3, 256)).astype(np.float32)
    xd = cp.asarray(x)
    y = cp.asnumpy(gpu_wht(xd, impl=impl))
    assert y.shape == x.shape and np.array_equal(y, EMULATION[impl](x))
    assert np.array_equal(cp.asnumpy(gpu_wht(xd, inverse=True, impl=impl)), y)  # self-inverse
    # applying it twice gives x back. With e1 = y - H x / sqrt(n) (measured against float64),
    # H (y) / sqrt(n) = x + H e1 / sqrt(n), whose extra term is <= ||e1||_2 per element
    # (Cauchy-Schwarz, unit rows); the second float32 transform adds its own golden_tol.
    z = cp.asnumpy(gpu_wht(gpu_wht(xd, impl=impl), impl=impl))
    exact = x.astype(np.float64) @ scipy.linalg.hadamard(256) / 16.0
    e1 = np.linalg.norm(y - exact, axis=-1, keepdims=True)
    assert np.all(np.abs(z - x) <= e1 + golden_tol(y, x, impl) + 1e-12)
    # out=x: v1's warp reads its rows completely before it writes them; v0's block stages its
    # row in shared memory before any thread writes
    gpu_wht(xd, out=xd, impl=impl)
    assert np.array_equal(cp.asnumpy(xd), y)


@gpu
@rungs
@pytest.mark.parametrize("n", [16, 128, 1024])
def test_wht_unaligned_scalar_path(cp, rng, n, impl):
    # a contiguous view starting one float into its buffer: not 16-byte aligned, so v1 takes its
    # scalar path; the result must be the same bits as the aligned float4 path (v0 has one path)
    x = make_x(rng, 5, n)
    buf = cp.zeros(x.size + 1, cp.float32)
    xv = buf[1:].reshape(x.shape)
    xv[...] = cp.asarray(x)
    obuf = cp.full(x.size + 1, np.nan, cp.float32)
    out = obuf[1:].reshape(x.shape)
    gpu_wht(xv, out=out, impl=impl)
    assert np.array_equal(cp.asnumpy(out), EMULATION[impl](x))
    assert np.isnan(cp.asnumpy(obuf[0]))  # nothing written before the view


@gpu
@rungs
def test_wht_many_rows_in_place(cp, rng, impl):
    # many short rows (v0: 3000 blocks of 16 threads, one per row), written over x itself
    x = make_x(rng, 3000, 16)
    xd = cp.asarray(x)
    gpu_wht(xd, out=xd, impl=impl)
    assert np.array_equal(cp.asnumpy(xd), EMULATION[impl](x))


@gpu
def test_wht_bad_inputs(cp):
    x = cp.zeros((3, 128), cp.float32)
    with pytest.raises(TypeError, match=r"^x\b"):
        gpu_wht(np.zeros((3, 128), np.float32))  # host array
    with pytest.raises(TypeError, match=r"^x\b"):
        gpu_wht(x.astype(cp.float64))
    for n in (8, 96, 2048):  # too small, not a power of two, too big
        with pytest.raises(ValueError, match=r"^x\b"):
            gpu_wht(cp.zeros((2, n), cp.float32))
    with pytest.raises(ValueError, match=r"^x\b"):
        gpu_wht(cp.zeros((128, 4), cp.float32).T)  # shape (4, 128), not contiguous
    with pytest.raises(ValueError, match=r"^out\b"):
        gpu_wht(x, out=cp.zeros((3, 64), cp.float32))
    with pytest.raises(TypeError, match=r"^out\b"):
        gpu_wht(x, out=cp.zeros((3, 128), cp.float16))
    for impl in ("v0", None):  # every rung checks the same way
        with pytest.raises(ValueError, match=r"^x\b"):
            gpu_wht(cp.zeros((2, 96), cp.float32), impl=impl)
        with pytest.raises(ValueError, match=r"^out\b"):
            gpu_wht(x, out=cp.zeros((3, 64), cp.float32), impl=impl)


# ---- rung plumbing (CPU: impl is checked before anything touches CuPy) ----------------------


@pytest.mark.parametrize("bad", ["bogus", "V1", "", 1, ["v0"]])
def test_bad_impl_is_rejected_before_any_gpu_work(bad):
    with pytest.raises(ValueError, match=r"^impl\b"):
        gpu_wht(np.zeros((3, 128), np.float32), impl=bad)  # a host array: never reached
    with pytest.raises(ValueError, match=r"^impl\b"):
        rung_kernel("wht", bad, n=128)


def test_rungs_and_kernel_names():
    assert RUNGS == {"wht": ("v0", "v1")} and DEFAULT_RUNG == {"wht": "v1"}
    assert rung_kernel("wht", "v0", n=256) == rung_kernel("wht", "v0") == "wht_v0"
    assert rung_kernel("wht", n=256) == rung_kernel("wht", "v1", n=256) == "wht_f32_n256"
    assert rung_kernel("wht", "v1", n=16, rows=5) == "wht_f32_n16"
    with pytest.raises(ValueError, match=r"^n\b"):
        rung_kernel("wht", "v1")  # v1's name depends on n
    with pytest.raises(ValueError, match=r"^n\b"):
        rung_kernel("wht", "v1", n=96)


def test_v0_emulation_is_the_definition():
    # the numpy model of v0 (CPU) is the literal definition: against float64 it stays within
    # v0's stated bound, and it is an orthonormal transform (applied twice it returns x)
    rng = np.random.default_rng(0)
    x = make_x(rng, 4, 64)
    y = wht_v0_f32(x)
    exact = x.astype(np.float64) @ scipy.linalg.hadamard(64) / 8.0
    assert np.all(np.abs(y - exact) <= golden_tol(x, exact, "v0"))
    assert np.allclose(wht_v0_f32(y), x, rtol=1e-5, atol=1e-4 * np.abs(x).max())
