"""norm: float32 RMSNorm / add+RMSNorm against a float64 reference, and bad inputs."""

import numpy as np
import pytest

from qwenref.golden import add_rms_norm, rms_norm

EPS32 = np.finfo(np.float32).eps  # 2**-23


def ref_rms_norm(x, w, eps, zero_centered=True):
    """float64 reference: x / sqrt(mean(x^2) + eps) * (1 + w)."""
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    r = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
    return r * ((1.0 + w64) if zero_centered else w64)


def rel_tol(n):
    # Each output is x_i times one per-row scalar times (1 + w_i), so its relative error is the
    # same for every element: the float32 pairwise sum of n positive squares (<= log2(n) + 1
    # roundings, relative), halved by the sqrt, plus ~4 roundings (square, eps add, reciprocal,
    # two products). (log2(n) + 8) ulps covers that with margin.
    return (np.log2(n) + 8) * EPS32


def make_rows(rng, n):
    """Rows at very different scales, some with outlier channels, one with rms far below sqrt(eps)
    (so eps matters), one all-zero."""
    x = rng.standard_normal((6, n)).astype(np.float32)
    x[1] *= 1e3
    x[2, [0, n // 3, n - 1]] *= 200.0  # outlier channels
    x[3] *= 1e-4  # mean(x^2) ~ 1e-8 << eps = 1e-6
    x[4] = 0.0
    return x


@pytest.mark.parametrize("n", [64, 77, 256])
def test_rms_norm_matches_float64(rng, n):
    x = make_rows(rng, n)
    w = (0.5 * rng.standard_normal(n)).astype(np.float32)  # 1 + w ranges well away from 1
    y = rms_norm(x, w, eps=1e-6)
    assert y.dtype == np.float32 and y.shape == x.shape
    ref = ref_rms_norm(x, w, 1e-6)
    assert np.all(np.abs(y - ref) <= rel_tol(n) * np.abs(ref))
    assert np.all(y[4] == 0)  # zero row: no NaN
    # the eps row is meaningful: without eps its output would be ~10x larger
    assert np.abs(ref_rms_norm(x[3:4], w, 0.0)).max() > 5 * np.abs(y[3]).max()


def test_rms_norm_not_zero_centered_is_x_times_w(rng):
    n = 96
    x = make_rows(rng, n)
    w = rng.standard_normal(n).astype(np.float32)
    y = rms_norm(x, w, eps=1e-6, zero_centered=False)
    ref = ref_rms_norm(x, w, 1e-6, zero_centered=False)
    assert np.all(np.abs(y - ref) <= rel_tol(n) * np.abs(ref))
    # and it really differs from the zero-centred form
    assert np.abs(y - rms_norm(x, w, eps=1e-6)).max() > 0.1


def test_rms_norm_leading_axes_and_eps(rng):
    x = rng.standard_normal((2, 3, 5, 32)).astype(np.float32)
    w = rng.standard_normal(32).astype(np.float32)
    y = rms_norm(x, w, eps=1e-2)
    ref = ref_rms_norm(x, w, 1e-2)
    assert y.shape == x.shape
    assert np.all(np.abs(y - ref) <= rel_tol(32) * np.abs(ref))
    # per-row: the same rows flattened give the same bits (rows are independent)
    assert np.array_equal(rms_norm(x.reshape(-1, 32), w, eps=1e-2), y.reshape(-1, 32))


def test_add_rms_norm(rng):
    n = 80
    x = make_rows(rng, n)
    r = rng.standard_normal(x.shape).astype(np.float32) * 3
    w = rng.standard_normal(n).astype(np.float32)
    y, s = add_rms_norm(x, r, w, eps=1e-6)
    assert s.dtype == np.float32 and y.dtype == np.float32
    assert np.array_equal(s, x + r)  # one float32 add, bit-exact
    assert np.array_equal(y, rms_norm(x + r, w, eps=1e-6))
    ref = ref_rms_norm((x + r), w, 1e-6)
    assert np.all(np.abs(y - ref) <= rel_tol(n) * np.abs(ref))
    y2, _ = add_rms_norm(x, r, w, eps=1e-6, zero_centered=False)
    assert np.array_equal(y2, rms_norm(x + r, w, eps=1e-6, zero_centered=False))


def test_norm_bad_inputs():
    x = np.ones((2, 8), np.float32)
    w = np.zeros(8, np.float32)
    with pytest.raises(ValueError, match="weight"):
        rms_norm(x, np.zeros(7, np.float32))
    with pytest.raises(TypeError, match="x"):
        rms_norm(np.ones((2, 8), np.int32), w)
    with pytest.raises(TypeError, match="weight"):
        rms_norm(x, np.zeros(8, np.int64))
    with pytest.raises(ValueError, match="x"):
        rms_norm(np.ones((2, 0), np.float32), np.zeros(0, np.float32))
    with pytest.raises(ValueError, match="eps"):
        rms_norm(x, w, eps=-1.0)
    with pytest.raises(ValueError, match="residual"):
        add_rms_norm(x, np.ones((2, 9), np.float32), w)
    with pytest.raises(TypeError, match="residual"):
        add_rms_norm(x, np.ones((2, 8), np.int16), w)
