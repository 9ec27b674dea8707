"""wht on the GPU — orthonormal Walsh–Hadamard transform over the last axis (kernels_cuda/wht.cu).

Same meaning as qwenref.golden.wht for n a power of two in 16..1024. The kernel runs the
butterflies in float32 (golden: float64, rounded once); its result is bit-identical to the
float32 butterflies in pass order h = 1, 2, 4, ... followed by one multiply by
float32(1 / float32(sqrt(n))), and to the rotation inside gpu.KVCache's turbo appends.

Rungs (``impl=``): "v0" (kernels_cuda/wht_v0.cu: one thread per output, the O(n^2) sum
y_i = sum_j (-1)^popcount(i & j) x_j in float32, j in order; within (n - 1) 2^-24 sum|x| /
sqrt(n) of exact per element, and in-place safe: the block stages its row in shared memory)
and "v1" (wht.cu: butterflies in registers; the default).
"""

from __future__ import annotations

import numpy as np

from .._args import bool_arg
from ._runtime import check_array, kernel, out_array, resolve_rung
from .rungs import defaults_of, kernel_module, rungs_of

__all__ = ["wht", "WHT_SIZES", "RUNGS", "DEFAULT_RUNG", "rung_kernel"]

WHT_SIZES = (16, 32, 64, 128, 256, 512, 1024)
_MAX_GRID = 1 << 20
_WARPS = 4  # 128 threads per block

RUNGS = rungs_of("wht")  # views of the rung table (qwenref/gpu/rungs.py)
DEFAULT_RUNG = defaults_of("wht")


def _rung(family, impl):
    return resolve_rung(RUNGS, DEFAULT_RUNG, family, impl)


def rung_kernel(family, impl=None, n=None, **shape):
    """Name of the kernel that `impl`'s rung of `family` launches for rows of length n (v1 has
    one kernel per n, so it needs n; v0 is one kernel for every n)."""
    if _rung(family, impl) == "v0":
        return "wht_v0"
    if n not in WHT_SIZES:
        raise ValueError(f"n must be one of {WHT_SIZES} for the v1 kernel's name, got {n!r}")
    return f"wht_f32_n{n}"


def _rows_per_warp(n):
    per_lane = max(4, n // 32)
    return 32 // (n // per_lane)


def wht(x, inverse=False, out=None, impl=None):
    """x @ H_n.T / sqrt(n) over the last axis; self-inverse (``inverse`` gives the same result).

    x: cupy float32 [..., n], n in 16, 32, ..., 1024 (else ValueError); inverse: a bool; out:
    optional float32 like x (may be x itself); impl: a rung of RUNGS["wht"] (None: the
    default). Returns out. One launch for all rows.
    """
    rung = _rung("wht", impl)
    bool_arg("inverse", inverse)
    check_array("x", x, np.float32)
    if x.ndim < 1 or x.shape[-1] not in WHT_SIZES:
        raise ValueError(f"x's last axis must be a power of two in 16..1024, got shape {x.shape}")
    n = x.shape[-1]
    out = out_array("out", out, x.shape, np.float32)
    rows = x.size // n
    if rows and rung == "v0":
        # one block of n threads per row (n <= 1024, the kernel's shared-memory row)
        kernel(kernel_module("wht", rung), "wht_v0")(
            (min(rows, _MAX_GRID),), (n,), (x, out, np.int64(rows), np.int32(n))
        )
    elif rows:
        per_block = _WARPS * _rows_per_warp(n)
        kernel(kernel_module("wht", rung), f"wht_f32_n{n}")(
            (min(-(-rows // per_block), _MAX_GRID),), (32 * _WARPS,), (x, out, np.int64(rows))
        )
    return out
