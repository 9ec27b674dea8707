"""norm — zero-centred RMSNorm and fused residual-add + RMSNorm (golden, float32).

Precision: float32 throughout, as the kernels compute it and as transformers' Qwen3.5 norm does
after its ``x.float()`` upcast: x² and its mean (numpy's pairwise float32 sum over the last axis),
``rsqrt = 1 / sqrt(ms + eps)``, then ``(x · rsqrt) · (1 + w)``. A float64 reference differs by a
few float32 ulps; the tests bound that. The reduction order of a GPU block sum differs from
numpy's pairwise order, so kernels match to ulps, not bits.

Shapes: x [..., n] (any leading rows), weight [n].
"""

import numpy as np

from .._args import bool_arg, f32_array, finite_float_arg

__all__ = ["rms_norm", "add_rms_norm", "rms_norm_core"]


def _as_f32(name, a):
    """a as a finite float32 array (floating dtypes only; TypeError naming the argument)."""
    return f32_array(name, a, ints=False)


def _check_weight(x, weight, xname="x", wname="weight"):
    if x.ndim < 1 or x.shape[-1] == 0:
        raise ValueError(f"{xname} must have a non-empty last axis, got shape {x.shape}")
    if weight.shape != (x.shape[-1],):
        raise ValueError(
            f"{wname} must have shape ({x.shape[-1]},) to match {xname}'s last "
            f"axis, got {weight.shape}"
        )


def rms_norm_core(x, weight, eps, zero_centered, name="x"):
    """rms_norm's formula on checked float32 inputs (rms_norm and add_rms_norm check their
    arguments, then call this; so do rope's and the indexer's per-head norms). Rows float32
    cannot normalize are refused, naming `name`: a mean square that overflows (the row would
    come out as 0) and a zero mean square with eps = 0 (0/0)."""
    with np.errstate(over="ignore"):  # reported just below
        ms = np.mean(np.square(x), axis=-1, keepdims=True, dtype=np.float32)  # [..., 1]
    if not np.isfinite(ms).all():
        raise ValueError(
            f"{name}: a row's mean square overflows float32 (|values| around "
            f"1.8e19 and above); its RMS norm would come out as 0"
        )
    den = ms + np.float32(eps)
    if not (den > 0).all():
        raise ValueError(
            f"{name}: a row's mean square is 0 in float32 and eps is 0: its RMS norm is 0/0"
        )
    rstd = np.float32(1) / np.sqrt(den)  # [..., 1]
    scale = np.float32(1) + weight if zero_centered else weight  # [n]
    return (x * rstd * scale).astype(np.float32, copy=False)  # [..., n]


def rms_norm(x, weight, eps=1e-6, zero_centered=True):
    """y = x / sqrt(mean(x**2, -1) + eps) * (1 + weight)   (weight alone if not zero_centered).

    x: float32 [..., n]; weight: [n]; eps finite, >= 0. Returns float32 [..., n]. Accumulates
    in float32. Non-finite x or weight, and rows whose mean square overflows float32 (or is
    0 with eps = 0), are a ValueError.
    """
    x = _as_f32("x", x)
    weight = _as_f32("weight", weight)
    _check_weight(x, weight)
    eps = finite_float_arg("eps", eps, 0.0)
    zero_centered = bool_arg("zero_centered", zero_centered)
    return rms_norm_core(x, weight, eps, zero_centered)


def add_rms_norm(x, residual, weight, eps=1e-6, zero_centered=True):
    """s = x + residual;  returns (rms_norm(s, weight, eps, zero_centered), s), both float32.

    A sum that overflows float32 is a ValueError, like a non-finite input."""
    x = _as_f32("x", x)
    residual = _as_f32("residual", residual)
    if residual.shape != x.shape:
        raise ValueError(f"residual must have x's shape {x.shape}, got {residual.shape}")
    weight = _as_f32("weight", weight)
    _check_weight(x, weight)
    eps = finite_float_arg("eps", eps, 0.0)
    zero_centered = bool_arg("zero_centered", zero_centered)
    with np.errstate(over="ignore"):
        s = x + residual  # [..., n] f32
    if not np.isfinite(s).all():
        raise ValueError("x + residual overflows float32")
    return rms_norm_core(s, weight, eps, zero_centered, "x + residual"), s
