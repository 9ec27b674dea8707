"""The shared GPU-test checks (tests/gpu_checks.py) run on the CPU here: each must fail on the
errors it exists to catch, and wht_f32 must be the orthonormal Hadamard transform."""

import types

import numpy as np
import pytest
import scipy.linalg
from gpu_checks import assert_partials_close, wht_f32

NP = types.SimpleNamespace(asnumpy=np.asarray)  # stands in for CuPy: arrays are numpy here


def ref_partials():
    r = np.array([[-np.inf, 1.0, -3.0], [2.0, 0.5, 100.0]], np.float32)
    return r


def test_close_values_pass_and_report_their_error():
    r = ref_partials()
    g = r.copy()
    g[1, 2] += 100.0 * 1e-6
    assert 0 < assert_partials_close(NP, g, r, "x", rel=2e-5) <= 1e-6 * 1.01


@pytest.mark.parametrize("what", ["too far", "nan poison", "lost -inf", "new -inf", "shape"])
def test_each_error_fails(what):
    r = ref_partials()
    g = r.copy()
    if what == "too far":
        g[1, 1] += 1e-2  # > 2e-5 * (100 + 0.5)
    elif what == "nan poison":
        g[0, 1] = np.nan
    elif what == "lost -inf":
        g[0, 0] = -1e30
    elif what == "new -inf":
        g[1, 0] = -np.inf
    else:
        g = g[:, :2]
    with pytest.raises(AssertionError):
        assert_partials_close(NP, g, r, what, rel=2e-5)


def test_extra_term_widens_the_tolerance_elementwise():
    r = ref_partials()
    g = r.copy()
    g[1, 1] += 1e-2  # tolerance without extra: 2.01e-3
    extra = np.zeros_like(r)
    with pytest.raises(AssertionError):
        assert_partials_close(NP, g, r, "x", rel=2e-5, extra=extra)
    extra[1, 1] = 1e-2
    assert_partials_close(NP, g, r, "x", rel=2e-5, extra=extra)


@pytest.mark.parametrize("n", [16, 128, 256])
def test_wht_f32_is_the_orthonormal_hadamard(n):
    x = np.random.default_rng(n).standard_normal((5, n)).astype(np.float32)
    want = x.astype(np.float64) @ scipy.linalg.hadamard(n).T / np.sqrt(n)
    got = wht_f32(x)
    assert got.dtype == np.float32 and got.shape == x.shape
    # log2(n) float32 passes over partial sums <= |x|_1 / sqrt(n), plus the scale's roundings
    tol = (np.log2(n) + 3) * 2.0**-24 * np.abs(x).sum(axis=1, keepdims=True) / np.sqrt(n)
    assert (np.abs(got - want) <= tol).all()
