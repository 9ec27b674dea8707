"""wht — orthonormal Walsh–Hadamard transform in Sylvester order (golden).

H_1 = [1], H_2n = [[H_n, H_n], [H_n, -H_n]], so H_n[i, j] = (-1)^popcount(i & j): symmetric,
H_n @ H_n = n·I, and wht(x) = x @ H_n.T / sqrt(n) is orthonormal and its own inverse. This is
the order of scipy.linalg.hadamard and of the in-place fast transform below.

Fast transform: log2(n) butterfly passes. Pass h (h = 1, 2, 4, ..., n/2) views the last axis as
[n / 2h, 2, h] and maps each pair (a, b) at distance h to (a + b, a - b).

Precision: the butterflies and the 1/sqrt(n) scale run in float64 and the result is rounded to
float32 once, so the golden output is the float32 value nearest the exact transform to within
~1 ulp. The kernel runs its log2(n) passes in float32 (error ~ log2(n)/2 ulps of the row's rms
per element, far below any KV quantization step).

wht_signed is the rotation of a rotated cache side: wht(s ⊙ x) with a ±1 pattern s (all +1 for
turbo, layout.tq_signs for tq), and its inverse s ⊙ wht(y). Multiplying by ±1 is exact, so with
s all +1 it is bit for bit wht.
"""

import numpy as np

from .._args import bool_arg, check_finite, real_array

__all__ = ["wht", "wht_core", "wht_signed"]


def wht_core(x):
    """The transform on a checked real array with a power-of-two last axis (wht checks its
    arguments, then calls this; the KV cache calls it on values it has checked)."""
    n = x.shape[-1]
    lead = x.shape[:-1]
    y = x.astype(np.float64).reshape(-1, n)  # [rows, n]
    h = 1
    while h < n:
        y = y.reshape(-1, n // (2 * h), 2, h)  # [rows, n/2h, 2, h]
        a, b = y[:, :, 0, :], y[:, :, 1, :]
        y = np.stack((a + b, a - b), axis=2)  # [rows, n/2h, 2, h]
        h *= 2
    y = y.reshape(lead + (n,)) * (1.0 / np.sqrt(n))
    with np.errstate(over="ignore"):  # a float64 value past float32's range rounds to inf
        return y.astype(np.float32)


def wht(x, inverse=False):
    """x @ H_n.T / sqrt(n) over the last axis (n a power of two, else ValueError).

    Self-inverse, so ``inverse`` (a bool) gives the same result; it is kept for symmetry with
    the kernel. x: real, every value finite. Returns float32.
    """
    x = _x_arg(x)
    bool_arg("inverse", inverse)
    return wht_core(check_finite("x", x))


def _x_arg(x):
    """x as a real array with a power-of-two last axis (its values are checked last)."""
    x = real_array("x", x)
    if x.ndim < 1:
        raise ValueError("x must have at least one axis (the transformed last axis)")
    n = x.shape[-1]
    if n < 1 or n & (n - 1):
        raise ValueError(f"x's last axis must be a power of two, got {n}")
    return x


def wht_signed(x, signs, inverse=False):
    """The rotation of a rotated cache side over the last axis: wht(signs ⊙ x), or with
    inverse=True its inverse signs ⊙ wht(x). signs: float32 [n] of +-1 (a cache's k_signs or
    v_signs, layout.rotation_signs); x as for wht. Returns float32.

    With both sides of a dot product rotated, wht(s ⊙ q) · wht(s ⊙ k) = q · k (H orthonormal,
    s ⊙ s = 1), and a sum of rotated values Σ p·wht(s ⊙ v) comes back as
    s ⊙ wht(Σ p·wht(s ⊙ v)) = Σ p·v."""
    x = _x_arg(x)
    n = x.shape[-1]
    signs = real_array("signs", signs, ndim=1)
    if signs.shape != (n,) or not (np.abs(signs) == 1).all():
        raise ValueError(f"signs must be {n} values of +-1 (x's last axis), got {signs.shape}")
    inverse = bool_arg("inverse", inverse)
    x = check_finite("x", x)
    s = signs.astype(np.float32)
    if inverse:
        return wht_core(x) * s
    return wht_core(x.astype(np.float64) * s)  # x·(±1) is exact; wht_core works in float64
