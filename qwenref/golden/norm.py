"""norm — zero-centred RMSNorm and fused residual-add + RMSNorm (golden, float32).

Precision: float32 throughout, as the kernels compute it and as transformers' Qwen3.5 norm does
after its ``x.float()`` upcast: x² and its mean (numpy's pairwise float32 sum over the last axis),
``rsqrt = 1 / sqrt(ms + eps)``, then ``(x · rsqrt) · (1 + w)``. A float64 reference differs by a
few float32 ulps; the tests bound that. The reduction order of a GPU block sum differs from
numpy's pairwise order, so kernels match to ulps, not bits.

Shapes: x [..., n] (any leading rows), weight [n].
"""
import numpy as np

__all__ = ["rms_norm", "add_rms_norm"]


def _as_f32(name, a):
    """a as a float32 array (floating dtypes only; TypeError naming the argument otherwise)."""
    a = np.asarray(a)
    if not np.issubdtype(a.dtype, np.floating):
        raise TypeError(f"{name} must be a floating-point array, got dtype {a.dtype}")
    return a.astype(np.float32, copy=False)


def _check_weight(x, weight):
    if x.ndim < 1 or x.shape[-1] == 0:
        raise ValueError(f"x must have a non-empty last axis, got shape {x.shape}")
    if weight.shape != (x.shape[-1],):
        raise ValueError(f"weight must have shape ({x.shape[-1]},) to match x's last axis, "
                         f"got {weight.shape}")


def rms_norm(x, weight, eps=1e-6, zero_centered=True):
    """y = x / sqrt(mean(x**2, -1) + eps) * (1 + weight)   (weight alone if not zero_centered).

    x: float32 [..., n]; weight: [n]. Returns float32 [..., n]. Accumulates in float32.
    """
    x = _as_f32("x", x)
    weight = _as_f32("weight", weight)
    _check_weight(x, weight)
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}")
    ms = np.mean(np.square(x), axis=-1, keepdims=True, dtype=np.float32)     # [..., 1]
    rstd = np.float32(1) / np.sqrt(ms + np.float32(eps))                     # [..., 1]
    scale = np.float32(1) + weight if zero_centered else weight              # [n]
    return (x * rstd * scale).astype(np.float32, copy=False)                 # [..., n]


def add_rms_norm(x, residual, weight, eps=1e-6, zero_centered=True):
    """s = x + residual;  returns (rms_norm(s, weight, eps, zero_centered), s), both float32."""
    x = _as_f32("x", x)
    residual = _as_f32("residual", residual)
    if residual.shape != x.shape:
        raise ValueError(f"residual must have x's shape {x.shape}, got {residual.shape}")
    s = x + residual                                                         # [..., n] f32
    return rms_norm(s, weight, eps, zero_centered), s
