"""wht: orthonormal Sylvester-order Walsh–Hadamard transform over the last axis."""

import numpy as np
import pytest
import scipy.linalg

from qwenref.golden import wht

EPS32 = np.finfo(np.float32).eps  # 2**-23


@pytest.mark.parametrize("n", [1, 2, 4, 16, 32, 64, 128, 256, 1024])
def test_wht_equals_scipy_hadamard(rng, n):
    x = rng.standard_normal((3, n)).astype(np.float32)
    x[:, n // 2] *= 100.0  # outlier channel
    y = wht(x)
    assert y.dtype == np.float32 and y.shape == x.shape
    ref = x.astype(np.float64) @ scipy.linalg.hadamard(n).T / np.sqrt(n)
    # golden = float64 butterflies rounded once to float32: half an ulp of the value, plus the
    # float64 evaluation-order difference (~n * 1e-16 of the row's max, far below 1e-12)
    tol = 0.5 * EPS32 * np.abs(ref) + 1e-12 * np.abs(x).max()
    assert np.all(np.abs(y - ref) <= tol)


def test_wht_sylvester_order_by_definition():
    # H[i, j] = (-1)^popcount(i & j) / sqrt(n), independent of scipy
    n = 32
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    pop = np.vectorize(lambda v: bin(v).count("1"))(i & j)
    H = np.where(pop % 2, -1.0, 1.0) / np.sqrt(n)
    # row j of wht(I) is H e_j = column j of H; H is symmetric, and 1/sqrt(32) rounds once
    np.testing.assert_allclose(wht(np.eye(n, dtype=np.float32)), H, rtol=EPS32, atol=0)


@pytest.mark.parametrize("n", [16, 128, 256])
def test_wht_orthonormal_and_self_inverse(rng, n):
    x = rng.standard_normal((5, n)).astype(np.float32)
    x[:, 3] *= 50.0
    y = wht(x)
    nx = np.linalg.norm(x.astype(np.float64), axis=-1)
    # norm preserved up to the float32 rounding of y (relative 2**-24 per element)
    np.testing.assert_allclose(np.linalg.norm(y.astype(np.float64), axis=-1), nx, rtol=EPS32)
    # H (H x) = x: the rounding delta of y (||delta|| <= 2**-24 ||x||) passes through the
    # orthonormal H unchanged in norm, plus the final rounding -> per element 2**-23 * ||x||
    z = wht(y, inverse=True)
    assert np.all(np.abs(z - x) <= EPS32 * nx[:, None])
    assert np.array_equal(wht(x, inverse=True), y)
    M = wht(np.eye(n, dtype=np.float32))
    # M M^T = I: each entry a float64 sum of n products of float32-rounded +-1/sqrt(n)
    np.testing.assert_allclose(
        M.astype(np.float64) @ M.T.astype(np.float64), np.eye(n), rtol=0, atol=2 * EPS32
    )


def test_wht_leading_axes_and_dtypes(rng):
    x = rng.standard_normal((2, 3, 4, 64))
    y = wht(x)  # float64 in, float32 out
    assert y.dtype == np.float32 and y.shape == x.shape
    assert np.array_equal(y.reshape(-1, 64), wht(x.reshape(-1, 64)))
    ref = (x @ scipy.linalg.hadamard(64).T / 8.0).astype(np.float32)
    assert np.array_equal(y, ref)  # 1/sqrt(64) exact: rounds identically


def test_wht_bad_inputs():
    with pytest.raises(ValueError, match="x"):
        wht(np.ones((2, 24), np.float32))
    with pytest.raises(ValueError, match="x"):
        wht(np.ones((2, 0), np.float32))
    with pytest.raises(ValueError, match="x"):
        wht(np.float32(1.0))
    with pytest.raises(TypeError, match="x"):
        wht(np.ones(16, np.complex64))
