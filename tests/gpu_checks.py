"""Checks shared by several GPU test files (pytest puts tests/ on sys.path, so they import this as
`gpu_checks`). Plain numpy: nothing here needs a GPU until a CuPy array is passed in."""

import numpy as np


def wht_f32(x):
    """What the WHT kernels compute, in numpy float32: butterfly passes h = 1, 2, 4, ... each
    (a, b) -> (a + b, a - b), then one multiply by float32(1 / float32(sqrt(n))). Every step is
    one IEEE float32 operation in the kernels' order, so they must match this bit for bit."""
    x = np.asarray(x, np.float32)
    n = x.shape[-1]
    y = x.reshape(-1, n).copy()
    h = 1
    while h < n:
        y = y.reshape(-1, n // (2 * h), 2, h)
        a, b = y[:, :, 0, :], y[:, :, 1, :]
        y = np.stack((a + b, a - b), axis=2).reshape(-1, n)
        h *= 2
    scale = np.float32(1) / np.sqrt(np.float32(n))
    return (y * scale).reshape(x.shape)


def assert_partials_close(cp, got, ref, what, rel, extra=None):
    """Decode partials / outputs: |got - ref| <= rel * (max(1, max|ref|) + |ref|) (+ extra, an
    elementwise array of the same shape as ref, where the kernel has a further known error term)
    elementwise. -inf (an empty split) must match exactly, and every other element must be finite
    (the NaN poison the tests put in the outputs is gone). Returns max err / scale."""
    got = cp.asnumpy(got)
    ref = np.asarray(ref)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    ninf = np.isneginf(ref)
    assert (np.isneginf(got) == ninf).all(), f"{what}: -inf (empty split) pattern differs"
    g, r = got[~ninf], ref[~ninf]
    assert np.isfinite(g).all(), f"{what}: non-finite values (NaN poison not overwritten?)"
    if r.size == 0:
        return 0.0
    scale = max(1.0, float(np.abs(r).max()))
    tol = rel * (scale + np.abs(r))
    if extra is not None:
        tol = tol + np.asarray(extra)[~ninf]
    err = np.abs(g - r)
    assert (err <= tol).all(), (
        f"{what}: max err {err.max():.3g} (tol {tol[err.argmax()]:.3g}) "
        f"at flat index {err.argmax()}, scale {scale:.3g}"
    )
    return float(err.max() / scale)
