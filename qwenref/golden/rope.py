"""rope — q/gate split, per-head q/k norm and partial rotate-half RoPE (golden).

Angles are computed in float64 (the truth); outputs are float32.
Layout: qg is the q_proj output viewed as [nb, nh, 2*head_dim] = per head [q_h | gate_h].

Rotate-half (NeoX / transformers' ``rotate_half``) pairs dim i with dim i + rd/2 (rd =
rotary_dim, i < rd/2), both turned by angle pos · inv_freq_i:
    y_i        = x_i · cos - x_{i+rd/2} · sin
    y_{i+rd/2} = x_{i+rd/2} · cos + x_i · sin
and dims rd .. d-1 pass through unchanged.

Precision: inv_freq, the angles, cos/sin and the rotation are float64; the one rounding is the
final cast to float32 (so a pass-through dim is bit-identical to its input). transformers
computes inv_freq and the angles in float32, which at positions ~1e5 costs ~1e-2 rad on the
fastest pairs; the float32 kernel shows the same effect (notebook 02).
"""

import numpy as np

from .._args import (
    check_finite,
    check_rotary_fits,
    f32_array,
    finite_float_arg,
    real_array,
    rotary_dim_arg,
)
from .norm import rms_norm_core

__all__ = [
    "rope_inv_freq",
    "rope_cos_sin",
    "apply_rope",
    "apply_rope_core",
    "split_q_gate",
    "qk_norm_rope",
]


def _check_rotary(rotary_dim, theta):
    """-> (rotary_dim, theta) as an even int >= 0 and a finite float > 0."""
    return rotary_dim_arg(rotary_dim), finite_float_arg("theta", theta, 0.0, strict=True)


def _check_positions(positions, nb=None):
    positions = np.asarray(positions)
    if not np.issubdtype(positions.dtype, np.integer):
        raise TypeError(f"positions must be an integer array, got dtype {positions.dtype}")
    if positions.ndim != 1:
        raise ValueError(f"positions must be 1-D [nb], got shape {positions.shape}")
    if nb is not None and positions.shape[0] != nb:
        raise ValueError(
            f"positions must have {nb} entries (one per row), got {positions.shape[0]}"
        )
    if positions.size and positions.min() < 0:
        raise ValueError("positions must be >= 0")
    return positions


def _inv_freq(rotary_dim, theta):
    i = np.arange(rotary_dim // 2, dtype=np.float64)  # [rd/2]
    return np.float64(theta) ** (-2.0 * i / rotary_dim)


def _cos_sin(positions, rotary_dim, theta):
    ang = positions.astype(np.float64)[:, None] * _inv_freq(rotary_dim, theta)[None, :]
    return np.cos(ang), np.sin(ang)  # [nb, rd/2] each


def apply_rope_core(x, positions, rotary_dim, theta):
    """apply_rope's rotation on checked arguments (apply_rope and qk_norm_rope check, then
    call this; so does the indexer)."""
    half = rotary_dim // 2
    cos, sin = _cos_sin(positions, rotary_dim, theta)  # [nb, half]
    bshape = (x.shape[0],) + (1,) * (x.ndim - 2) + (half,)
    cos, sin = cos.reshape(bshape), sin.reshape(bshape)  # [nb, 1.., half]
    x64 = x.astype(np.float64)  # [nb, ..., d]
    x1, x2 = x64[..., :half], x64[..., half:rotary_dim]  # [nb, ..., half]
    y = x64.copy()
    y[..., :half] = x1 * cos - x2 * sin
    y[..., half:rotary_dim] = x2 * cos + x1 * sin
    with np.errstate(over="ignore"):  # a float64 value past float32's range rounds to inf
        return y.astype(np.float32)


def rope_inv_freq(rotary_dim, theta):
    """inv_freq_i = theta ** (-2i / rotary_dim), i < rotary_dim // 2. float64 [rotary_dim // 2]."""
    return _inv_freq(*_check_rotary(rotary_dim, theta))


def rope_cos_sin(positions, rotary_dim, theta):
    """(cos, sin) of positions[:, None] * inv_freq, float64 [len(positions), rotary_dim // 2]."""
    positions = _check_positions(positions)
    return _cos_sin(positions, *_check_rotary(rotary_dim, theta))


def apply_rope(x, positions, rotary_dim, theta):
    """Rotate-half (NeoX) RoPE on the first rotary_dim dims of the last axis; the rest pass.

    x: [nb, ..., d] (any heads axes between), positions: int [nb]. Returns float32, same shape.
    """
    x = real_array("x", x, ints=False)
    if x.ndim < 2:
        raise ValueError(f"x must be [nb, ..., d] with at least 2 axes, got shape {x.shape}")
    positions = _check_positions(positions, nb=x.shape[0])
    rotary_dim, theta = _check_rotary(rotary_dim, theta)
    check_rotary_fits(rotary_dim, x.shape[-1])
    check_finite("x", x)
    return apply_rope_core(x, positions, rotary_dim, theta)


def split_q_gate(qg):
    """qg [nb, nh, 2*hd] -> (q [nb, nh, hd], gate [nb, nh, hd]) (copies, float32)."""
    qg = f32_array("qg", qg, ints=False)
    if qg.ndim < 1 or qg.shape[-1] % 2 or qg.shape[-1] == 0:
        raise ValueError(f"qg's last axis must be 2*head_dim (even, > 0), got shape {qg.shape}")
    hd = qg.shape[-1] // 2
    return qg[..., :hd].copy(), qg[..., hd:].copy()


def qk_norm_rope(qg, k, q_weight, k_weight, positions, rotary_dim, theta, eps=1e-6):
    """Per-head zero-centred RMSNorm of q (from qg's q half) and k, then partial RoPE.

    qg: [nb, nh, 2*hd]; k: [nb, nkv, hd]; q_weight, k_weight: [hd]; positions: int [nb].
    Returns (q [nb, nh, hd], k [nb, nkv, hd]) float32.
    """
    qg = real_array("qg", qg, ints=False, ndim=3)
    k = real_array("k", k, ints=False, ndim=3)
    if qg.shape[-1] != 2 * k.shape[-1] or qg.shape[0] != k.shape[0]:
        raise ValueError(
            f"qg {qg.shape} and k {k.shape} disagree: need qg [nb, nh, 2*hd] with k [nb, nkv, hd]"
        )
    hd = k.shape[-1]
    for name, w in (("q_weight", q_weight), ("k_weight", k_weight)):
        if np.shape(w) != (hd,):
            raise ValueError(f"{name} must have shape ({hd},), got {np.shape(w)}")
    q_weight = f32_array("q_weight", q_weight, ints=False)
    k_weight = f32_array("k_weight", k_weight, ints=False)
    positions = _check_positions(positions, nb=k.shape[0])
    rotary_dim, theta = _check_rotary(rotary_dim, theta)
    check_rotary_fits(rotary_dim, hd)
    eps = finite_float_arg("eps", eps, 0.0)
    qg = f32_array("qg", qg)
    k = f32_array("k", k)
    if hd == 0:
        raise ValueError(f"k must have a non-empty last axis, got shape {k.shape}")
    q = rms_norm_core(qg[..., :hd], q_weight, eps, True, "qg")  # [nb, nh, hd]
    k = rms_norm_core(k, k_weight, eps, True, "k")  # [nb, nkv, hd]
    return (
        apply_rope_core(q, positions, rotary_dim, theta),
        apply_rope_core(k, positions, rotary_dim, theta),
    )
