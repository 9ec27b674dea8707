"""wht on the GPU — orthonormal Walsh–Hadamard transform over the last axis (kernels_cuda/wht.cu).

Same meaning as qwenref.golden.wht for n a power of two in 16..1024. The kernel runs the
butterflies in float32 (golden: float64, rounded once); its result is bit-identical to the
float32 butterflies in pass order h = 1, 2, 4, ... followed by one multiply by
float32(1 / float32(sqrt(n))), and to the rotation inside gpu.KVCache's turbo appends.
"""
from __future__ import annotations

import numpy as np

from ._runtime import check_array, kernel, out_array

__all__ = ["wht", "WHT_SIZES"]

WHT_SIZES = (16, 32, 64, 128, 256, 512, 1024)
_MAX_GRID = 1 << 20
_WARPS = 4              # 128 threads per block


def _rows_per_warp(n):
    per_lane = max(4, n // 32)
    return 32 // (n // per_lane)


def wht(x, inverse=False, out=None):
    """x @ H_n.T / sqrt(n) over the last axis; self-inverse (``inverse`` gives the same result).

    x: cupy float32 [..., n], n in 16, 32, ..., 1024 (else ValueError); out: optional float32
    like x (may be x itself). Returns out. One launch for all rows.
    """
    check_array("x", x, np.float32)
    if x.ndim < 1 or x.shape[-1] not in WHT_SIZES:
        raise ValueError(f"x's last axis must be a power of two in 16..1024, got shape {x.shape}")
    n = x.shape[-1]
    out = out_array("out", out, x.shape, np.float32)
    rows = x.size // n
    if rows:
        per_block = _WARPS * _rows_per_warp(n)
        kernel("wht", f"wht_f32_n{n}")(
            (min(-(-rows // per_block), _MAX_GRID),), (32 * _WARPS,), (x, out, np.int64(rows)))
    return out
