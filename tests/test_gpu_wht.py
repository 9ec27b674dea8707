"""GPU wht (kernels_cuda/wht.cu) against the golden model and an exact float32 emulation."""
import numpy as np
import pytest
import scipy.linalg

from qwenref import golden
from qwenref.gpu.wht import WHT_SIZES
from qwenref.gpu.wht import wht as gpu_wht

from gpu_checks import wht_f32

pytestmark = pytest.mark.gpu

EPS32 = np.finfo(np.float32).eps  # 2**-23


def make_x(rng, rows, n):
    x = rng.standard_normal((rows, n)).astype(np.float32)
    x[:, n // 3] *= 100.0                                   # an outlier channel
    if rows > 2:
        x[1] *= 1e-3                                        # a quiet row
        x[2] = 0.0                                          # a zero row
    return x


def golden_tol(x, ref):
    """GPU vs golden, per element. The kernel's log2(n) float32 passes each round a partial sum
    whose magnitude is at most the row's L1 norm, so |error| <= log2(n) 2^-24 |x|_1 / sqrt(n)
    (1% margin); the scale (1/sqrt(n) rounded twice, then the product rounded) and the golden's
    own final rounding add <= 2 ulps of the value."""
    n = x.shape[-1]
    l1 = np.abs(x.astype(np.float64)).sum(axis=-1, keepdims=True)
    return 1.01 * np.log2(n) * 2.0 ** -24 * l1 / np.sqrt(n) + 2 * EPS32 * np.abs(ref)


@pytest.mark.parametrize("n", WHT_SIZES)
@pytest.mark.parametrize("rows", [1, 3, 37])
def test_wht_matches_golden_and_float32_emulation(cp, rng, n, rows):
    x = make_x(rng, rows, n)
    out = cp.full(x.shape, np.nan, np.float32)             # poisoned: every element must be written
    y = gpu_wht(cp.asarray(x), out=out)
    assert y is out
    y = cp.asnumpy(y)
    assert np.array_equal(y, wht_f32(x))                    # same float32 operations, same order
    ref = golden.wht(x)
    assert np.all(np.abs(y - ref) <= golden_tol(x, ref))
    if rows > 2:
        assert np.all(y[2] == 0)                            # zero row stays exactly zero


def test_wht_leading_axes_inverse_and_in_place(cp, rng):
    x = rng.standard_normal((2, 3, 256)).astype(np.float32)
    xd = cp.asarray(x)
    y = cp.asnumpy(gpu_wht(xd))
    assert y.shape == x.shape and np.array_equal(y, wht_f32(x))
    assert np.array_equal(cp.asnumpy(gpu_wht(xd, inverse=True)), y)   # self-inverse: same map
    # applying it twice gives x back. With e1 = y - H x / sqrt(n) (measured against float64),
    # H (y) / sqrt(n) = x + H e1 / sqrt(n), whose extra term is <= ||e1||_2 per element
    # (Cauchy-Schwarz, unit rows); the second float32 transform adds its own golden_tol.
    z = cp.asnumpy(gpu_wht(gpu_wht(xd)))
    exact = x.astype(np.float64) @ scipy.linalg.hadamard(256) / 16.0
    e1 = np.linalg.norm(y - exact, axis=-1, keepdims=True)
    assert np.all(np.abs(z - x) <= e1 + golden_tol(y, x) + 1e-12)
    # out=x: a warp reads its rows completely before it writes them
    gpu_wht(xd, out=xd)
    assert np.array_equal(cp.asnumpy(xd), y)


@pytest.mark.parametrize("n", [16, 128, 1024])
def test_wht_unaligned_scalar_path(cp, rng, n):
    # a contiguous view starting one float into its buffer: not 16-byte aligned, so the kernel
    # takes its scalar path; the result must be the same bits as the aligned float4 path
    x = make_x(rng, 5, n)
    buf = cp.zeros(x.size + 1, cp.float32)
    xv = buf[1:].reshape(x.shape)
    xv[...] = cp.asarray(x)
    obuf = cp.full(x.size + 1, np.nan, cp.float32)
    out = obuf[1:].reshape(x.shape)
    gpu_wht(xv, out=out)
    assert np.array_equal(cp.asnumpy(out), wht_f32(x))
    assert np.isnan(cp.asnumpy(obuf[0]))                    # nothing written before the view


def test_wht_bad_inputs(cp):
    x = cp.zeros((3, 128), cp.float32)
    with pytest.raises(TypeError, match=r"^x\b"):
        gpu_wht(np.zeros((3, 128), np.float32))             # host array
    with pytest.raises(TypeError, match=r"^x\b"):
        gpu_wht(x.astype(cp.float64))
    for n in (8, 96, 2048):                                 # too small, not a power of two, too big
        with pytest.raises(ValueError, match=r"^x\b"):
            gpu_wht(cp.zeros((2, n), cp.float32))
    with pytest.raises(ValueError, match=r"^x\b"):
        gpu_wht(cp.zeros((128, 4), cp.float32).T)           # shape (4, 128), not contiguous
    with pytest.raises(ValueError, match=r"^out\b"):
        gpu_wht(x, out=cp.zeros((3, 64), cp.float32))
    with pytest.raises(TypeError, match=r"^out\b"):
        gpu_wht(x, out=cp.zeros((3, 128), cp.float16))
