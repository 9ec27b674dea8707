"""tq — the tq-b KV format (b = 4, 3, 2: cache kinds tq4, tq3, tq2), after TurboQuant (Zandieh
et al., arXiv:2504.19874): a random rotation, then the optimal scalar quantizer of the values
the rotation leaves, which are close to normal.

The cache rotates each vector first, y = wht(s ⊙ x) with s = layout.tq_signs(head_dim); the
functions here do not rotate. Over the whole vector y of n values:

    u = y · sqrt(n) / ‖y‖                    (unit rms)
    c_i = the index of the codebook value nearest u_i, ties to the lower index
    γ = ⟨y, C[c]⟩ / ⟨C[c], C[c]⟩             (the least-squares scale), stored as float16
    ŷ = C[c] · float32(γ)                    (dequantized)

C = tq_codebook(b), 2**b values: the Lloyd–Max quantizer of the standard normal. ‖y‖ = 0
gives γ = 0 and every code 2**(b-1). Code i occupies bits [b·i, b·i + b) of the vector's
n·b/8 little-endian bytes (qwenref.golden.bitpack). Storage: n·b/8 bytes + 2 per vector, b +
16/n bits a value (tq4 at n = 256: 130 B).

Why γ by least squares: once the codes are chosen, the γ that minimises ‖y − γ C[c]‖ is the
projection of y on C[c], so no other stored scale does better for those codes. For exactly
normal values it is ‖y‖ / sqrt(n) on average (each Lloyd–Max level is the mean of its cell, so
E[u·C] = E[C²]), but one vector of finite n differs from that average, and values that are not
normal (what a few outlier channels leave after the rotation) differ more; the projection
absorbs both, for the same 16 bits.

Precision: ‖y‖² and both inner products are accumulated in float64 from the float32 values
(each product exact in float64) and u is rounded to float32 once from its float64 value, so
|u_i| <= sqrt(n) and nothing overflows for any finite y. A code is the number of codebook
midpoints (C_j + C_{j+1}) / 2 strictly below u_i, compared exactly (each midpoint of two
float32 values is exact in float64): that is the nearest value with ties to the lower index
(a kernel reproduces the comparison with each midpoint rounded down to float32, against
u > t). γ is rounded from float64 to float16 once (round to nearest even); γ at or past
layout.TQ_GAMMA_LIMIT would be inf, so tq_quantize refuses that vector. The dequantized value
is one float32 product.

Bad input: as everywhere (docs/bad-input.md), before anything is computed: bits outside 1..4
(any bad value a ValueError, as turbo's bits), y not a floating array (TypeError), NaN or
+-inf in y, a last axis that does not pack into whole bytes, a γ beyond float16 (ValueError
naming y); for tq_dequantize codes not uint8 or gamma not float16 (TypeError), shapes that
disagree, a gamma that is not finite (ValueError).
"""

import functools
import math

import numpy as np

from .._args import bits_arg, check_finite, f32_array, typed_array
from ..layout import TQ_GAMMA_LIMIT
from .bitpack import pack_codes, unpack_codes

__all__ = ["tq_codebook", "tq_quantize", "tq_quantize_core", "tq_dequantize", "check_tq_gamma"]

_TOP_BITS = 4  # codebooks exist for 1..4 bits
_USED = "4, 3, 2"  # the bits of the cache kinds tq4, tq3, tq2


def _bits(bits):
    return bits_arg(bits, _TOP_BITS, _USED)


# ---- the codebook ---------------------------------------------------------------------------
def _phi(x):
    """The standard normal density (0 at +inf)."""
    return 0.0 if x == math.inf else math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _tail(x):
    """P(Z > x) for a standard normal Z, by erfc: no cancellation for large x."""
    return 0.5 * math.erfc(x / math.sqrt(2.0))


@functools.cache
def _lloyd_max(bits):
    """The positive half of the 2**bits-level Lloyd–Max quantizer of N(0, 1), float64, as a
    tuple (ascending). Lloyd's iteration on the positive half (the quantizer is symmetric, 0
    a cell boundary): boundaries at the midpoints of neighbouring levels, each level the mean
    of the normal over its cell, E[Z | a < Z < b] = (φ(a) − φ(b)) / (P(Z > a) − P(Z > b)).
    Starts from levels spread evenly over (0, 3) and stops once no level moves by more than
    1e-15; the fixed point is unique (the normal's density is log-concave)."""
    half = 1 << (bits - 1)
    c = [3.0 * (i + 0.5) / half for i in range(half)]
    for _ in range(100_000):
        t = [0.0] + [(a + b) / 2 for a, b in zip(c, c[1:])] + [math.inf]
        new = [(_phi(a) - _phi(b)) / (_tail(a) - _tail(b)) for a, b in zip(t, t[1:])]
        moved = max(abs(x - y) for x, y in zip(new, c))
        c = new
        if moved <= 1e-15:
            return tuple(c)
    raise RuntimeError(f"Lloyd's iteration for {bits} bits did not converge")  # never seen


@functools.cache
def _tables(bits):
    """(codebook float32 [2**bits], its midpoints float64 [2**bits - 1]), read-only."""
    pos = np.array(_lloyd_max(bits), np.float64)
    cb = np.concatenate([-pos[::-1], pos]).astype(np.float32)
    mid = (cb[:-1].astype(np.float64) + cb[1:]) / 2  # exact: one more bit than float32
    cb.flags.writeable = mid.flags.writeable = False
    return cb, mid


def tq_codebook(bits):
    """The tq-b codebook: float32 [2**bits], ascending, the Lloyd–Max quantizer of the standard
    normal computed in float64 to convergence and rounded to float32 (bits=2: ±0.4528,
    ±1.5104). bits: an int in 1..4, else ValueError. A new array each call."""
    return _tables(_bits(bits))[0].copy()


# ---- quantize / dequantize ------------------------------------------------------------------
def _check_width(name, shape, bits, nbytes=False):
    """The last axis of y (n values) or of codes (n·bits/8 bytes) must pack into whole bytes."""
    if len(shape) < 1 or shape[-1] < 1:
        raise ValueError(f"{name} must have a last axis of at least one value, got {shape}")
    step = 8 // math.gcd(8, bits)  # n must be a multiple of this
    if nbytes and (8 * shape[-1]) % bits:
        raise ValueError(
            f"{name}'s last axis must be a whole number of packed vectors: a multiple of "
            f"{bits * step // 8} bytes for bits={bits}, got shape {shape}"
        )
    if not nbytes and shape[-1] % step:
        raise ValueError(
            f"{name}'s last axis must be a multiple of {step} (n·{bits}/8 whole bytes of "
            f"codes), got shape {shape}"
        )


def check_tq_gamma(name, gamma):
    """gamma: the float16 scales a tq quantizer computed from the argument `name`. An inf (or
    NaN, from a value that overflowed before the quantizer) would dequantize to inf or NaN,
    so the vector is refused, naming the argument."""
    if not np.isfinite(gamma).all():
        raise ValueError(
            f"{name}: a vector's scale γ = ⟨y, C[c]⟩ / ⟨C[c], C[c]⟩ (about the rms of its "
            f"rotated values) is beyond float16's range (this format stores γ below "
            f"{TQ_GAMMA_LIMIT:.6g})"
        )


def tq_quantize(y, bits):
    """tq-b over the last axis (n values, n·bits/8 whole bytes), no rotation here.

    u = y · sqrt(n) / ‖y‖; c_i = the index of the codebook value nearest u_i (ties: the lower
    index); γ = ⟨y, C[c]⟩ / ⟨C[c], C[c]⟩ as float16; ‖y‖ = 0 gives γ = 0 and codes 2**(bits-1).
    Returns (codes uint8 [..., n·bits/8], gamma float16 [...]); the module docstring has the
    arithmetic. A vector whose γ would round past float16's range is refused (ValueError).
    """
    bits = _bits(bits)
    y = f32_array("y", y, ints=False)
    _check_width("y", y.shape, bits)
    codes, gamma = tq_quantize_core(y, bits)
    check_tq_gamma("y", gamma)
    return codes, gamma


def tq_quantize_core(y, bits):
    """tq_quantize's formula on a float32 y of a packable width and checked bits; gamma may
    hold inf or NaN (γ past float16, or y holding an inf the caller's rotation overflowed to):
    the caller checks it with check_tq_gamma, naming its own argument."""
    cb, mid = _tables(bits)
    n = y.shape[-1]
    y64 = y.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        norm = np.sqrt(np.einsum("...i,...i->...", y64, y64))  # [...]
        zero = norm == 0
        scale = math.sqrt(n) / np.where(zero, 1.0, norm)  # [...]
        u = (y64 * scale[..., None]).astype(np.float32)  # [..., n], |u| <= sqrt(n)
        c = np.searchsorted(mid, u.astype(np.float64), side="left")  # midpoints below u
        c = c.astype(np.uint8)
        c[zero] = 1 << (bits - 1)
        cc = cb[c].astype(np.float64)  # [..., n]
        num = np.einsum("...i,...i->...", y64, cc)
        gamma = np.where(zero, 0.0, num / np.einsum("...i,...i->...", cc, cc))
        gamma = gamma.astype(np.float16)
    return pack_codes(c, bits), gamma


def tq_dequantize(codes, gamma, bits):
    """C[c] · float32(gamma), c unpacked from codes uint8 [..., n·bits/8]; gamma float16 [...].
    Returns float32 [..., n]."""
    bits = _bits(bits)
    codes = typed_array("codes", codes, np.uint8)
    gamma = typed_array("gamma", gamma, np.float16)
    _check_width("codes", codes.shape, bits, nbytes=True)
    if gamma.shape != codes.shape[:-1]:
        raise ValueError(
            f"gamma must have shape {codes.shape[:-1]} (one scale per vector of codes), "
            f"got {gamma.shape}"
        )
    check_finite("gamma", gamma)
    c = unpack_codes(codes, bits)  # [..., n]
    return _tables(bits)[0][c] * gamma.astype(np.float32)[..., None]
