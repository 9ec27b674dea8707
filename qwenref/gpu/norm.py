"""norm on the GPU — RMSNorm and fused residual-add + RMSNorm (kernels_cuda/norm.cu).

Same meaning as qwenref.golden.norm; y matches the golden to a few float32 ulps (the block's
sum of squares is added in a different order than numpy's pairwise sum), s bit-exactly.
Shapes: x [..., n] (any leading rows, all launched at once), weight [n].

Rungs (``impl=``): "v0" (kernels_cuda/norm_v0.cu, one thread per row, plain loops; its
sequential sum of squares is within ~n/4 ulps of exact instead of ~log2(n)) and "v1" (norm.cu,
one block per row; the default).
"""

from __future__ import annotations

import numpy as np

from .._args import bool_arg, finite_float_arg
from ._runtime import check_array, kernel, out_array, resolve_rung
from .rungs import defaults_of, kernel_module, rungs_of

__all__ = ["rms_norm", "add_rms_norm", "RUNGS", "DEFAULT_RUNG", "rung_kernel"]

_MAX_GRID = 1 << 20  # the kernels grid-stride over rows past this
_V0_THREADS = 128  # v0: one thread per row

RUNGS = rungs_of("norm")  # views of the rung table (qwenref/gpu/rungs.py)
DEFAULT_RUNG = defaults_of("norm")
_KERNELS = {  # (family, rung) -> its kernel in the rung's module (kernel_module)
    ("rms_norm", "v0"): "rms_norm_v0",
    ("rms_norm", "v1"): "rms_norm_f32",
    ("add_rms_norm", "v0"): "add_rms_norm_v0",
    ("add_rms_norm", "v1"): "add_rms_norm_f32",
}


def _rung(family, impl):
    return resolve_rung(RUNGS, DEFAULT_RUNG, family, impl)


def rung_kernel(family, impl=None, **shape):
    """Name of the kernel that `impl`'s rung of `family` launches (the same for every shape)."""
    return _KERNELS[family, _rung(family, impl)]


def _launch(family, rung, rows, n, args):
    """One launch over all rows: v0 one thread per row, v1 one block per row."""
    module_name, fn = kernel_module(family, rung), _KERNELS[family, rung]
    if rung == "v0":
        grid, block = min(-(-rows // _V0_THREADS), _MAX_GRID), _V0_THREADS
    else:
        grid, block = min(rows, _MAX_GRID), _block(n)
    kernel(module_name, fn)((grid,), (block,), args)


def _block(n):
    """Threads per row: one float4 each up to 256 threads, a multiple of 32."""
    return min(256, max(32, -(-((n + 3) // 4) // 32) * 32))


def _scalars(eps, zero_centered):
    """eps (a finite float >= 0) and zero_centered (a bool), checked before any array."""
    return finite_float_arg("eps", eps, 0.0), bool_arg("zero_centered", zero_centered)


def _check(x, weight):
    check_array("x", x, np.float32)
    if x.ndim < 1 or x.shape[-1] == 0:
        raise ValueError(f"x must have a non-empty last axis, got shape {x.shape}")
    check_array("weight", weight, np.float32, (x.shape[-1],))


def rms_norm(x, weight, eps=1e-6, zero_centered=True, out=None, impl=None):
    """y = x / sqrt(mean(x**2, -1) + eps) * (1 + weight)  (weight alone if not zero_centered).

    x: cupy float32 [..., n] (C-contiguous); weight: float32 [n]; eps: a finite float >= 0;
    zero_centered: a bool; out: optional float32 like x (may be x itself); impl: a rung of
    RUNGS["rms_norm"] (None: the default, one block per row). Returns out. One launch.
    """
    rung = _rung("rms_norm", impl)
    eps, zero_centered = _scalars(eps, zero_centered)
    _check(x, weight)
    n = x.shape[-1]
    out = out_array("out", out, x.shape, np.float32)
    rows = x.size // n
    if rows:
        _launch(
            "rms_norm",
            rung,
            rows,
            n,
            (
                x,
                weight,
                out,
                np.int64(rows),
                np.int32(n),
                np.float32(eps),
                np.int32(zero_centered),
            ),
        )
    return out


def add_rms_norm(
    x, residual, weight, eps=1e-6, zero_centered=True, out=None, sum_out=None, impl=None
):
    """s = x + residual;  returns (rms_norm(s, weight, eps, zero_centered), s).

    x, residual: cupy float32 [..., n]; out / sum_out: optional float32 like x (sum_out may be
    residual itself, for an in-place residual update); impl: a rung of RUNGS["add_rms_norm"]
    (None: the default). One launch writes both.
    """
    rung = _rung("add_rms_norm", impl)
    eps, zero_centered = _scalars(eps, zero_centered)
    _check(x, weight)
    check_array("residual", residual, np.float32, x.shape)
    n = x.shape[-1]
    out = out_array("out", out, x.shape, np.float32)
    sum_out = out_array("sum_out", sum_out, x.shape, np.float32)
    rows = x.size // n
    if rows:
        _launch(
            "add_rms_norm",
            rung,
            rows,
            n,
            (
                x,
                residual,
                weight,
                out,
                sum_out,
                np.int64(rows),
                np.int32(n),
                np.float32(eps),
                np.int32(zero_centered),
            ),
        )
    return out, sum_out
