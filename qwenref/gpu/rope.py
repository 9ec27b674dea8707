"""rope on the GPU — fused per-head q/k RMSNorm + partial rotate-half RoPE (kernels_cuda/rope.cu).

Same meaning as qwenref.golden.rope.qk_norm_rope, with float32 angles: inv_freq is the golden's
float64 value rounded to float32 and the angle p · inv_freq is one float32 product, so it is off
by at most p · inv_freq · 2**-23 rad (golden: float64 angles). ``head_norm_rope`` is the generic
form over any [nb, nheads, hd] view with a contiguous last axis (the indexer's queries and block
keys use it).

Positions are int32 on the device; they are not range-checked there (that would cost a sync).

Rungs (``impl=``) of qk_norm_rope: "v0" (kernels_cuda/rope_v0.cu, one thread per head, plain
loops; its sequential sum of squares is within ~hd/4 ulps of exact instead of ~log2(hd)), "v1"
(rope.cu qk_norm_rope, one warp per head) and "v2" (rope.cu qk_norm_rope_pipe_*, persistent
pipelined warps, the default; where it does not apply, hd % 4 != 0, hd > 512 or unaligned
arrays, v2 launches v1's kernel, as the default always has). v1 and v2 give identical bits.
head_norm_rope: "v0" (head_norm_rope_v0) and "v1" (head_norm_rope, the default).
"""

from __future__ import annotations

import numpy as np

from .._args import check_rotary_fits, rope_scalars
from ._runtime import check_array, kernel, out_array, resident_blocks, resolve_rung
from .rungs import defaults_of, kernel_module, rungs_of

__all__ = ["qk_norm_rope", "head_norm_rope", "RUNGS", "DEFAULT_RUNG", "rung_kernel"]

_MAX_GRID = 1 << 20
_MAX_HD = 12288  # the head is staged in <= 48 KiB of shared memory
_V0_THREADS = 128  # v0: one thread per head

RUNGS = rungs_of("rope")  # views of the rung table (qwenref/gpu/rungs.py)
DEFAULT_RUNG = defaults_of("rope")


# persistent pipelined kernels (rope.cu qk_norm_rope_pipe_v*): ceil(hd / 128) -> (NV, heads
# per item); 8 warps per block; smem (rd / 2 + 8 * 2 * rd) floats <= 33.8 KiB at rd = 512
_PIPE_SHAPES = {1: (1, 2), 2: (2, 2), 3: (4, 1), 4: (4, 1)}
_PIPE_WARPS = 8


def _pipe_path_ok(hd, *arrays):
    """The pipelined kernel needs hd % 4 == 0, hd <= 512 and 16-byte aligned arrays."""
    return hd % 4 == 0 and hd <= 512 and all(a.data.ptr % 16 == 0 for a in arrays)


def _rung(family, impl):
    return resolve_rung(RUNGS, DEFAULT_RUNG, family, impl)


def _qk_kernel_name(rung, hd, heads, pipe_ok):
    """The kernel qk_norm_rope's `rung` launches; v2 needs the pipe path (pipe_ok) and items
    indexed in 32 bits, else it launches v1's kernel."""
    if rung == "v0":
        return "qk_norm_rope_v0"
    if rung == "v2" and heads < 2**31 and pipe_ok:
        return f"qk_norm_rope_pipe_v{_PIPE_SHAPES[-(-hd // 128)][0]}"
    return "qk_norm_rope"


def rung_kernel(family, impl=None, head_dim=None, aligned=True, **shape):
    """Name of the kernel that `impl`'s rung of `family` launches. qk_norm_rope's v2 depends on
    head_dim (``hd`` also accepted) and on whether every array is 16-byte aligned (``aligned``;
    fresh CuPy arrays are), and on the head count (nb, nh, nkv) when given."""
    rung = _rung(family, impl)
    if family == "head_norm_rope":
        return "head_norm_rope_v0" if rung == "v0" else "head_norm_rope"
    hd = shape.get("hd", head_dim)
    if rung == "v2" and hd is None:
        raise ValueError("head_dim must be given: qk_norm_rope's v2 kernel depends on it")
    heads = shape.get("nb", 1) * (shape.get("nh", 1) + shape.get("nkv", 0))
    pipe_ok = hd is not None and hd % 4 == 0 and hd <= 512 and bool(aligned)
    return _qk_kernel_name(rung, hd, heads, pipe_ok)


def _check_head_dim(name, hd):
    if not 1 <= hd <= _MAX_HD:
        raise ValueError(f"{name}: head dim must be in [1, {_MAX_HD}], got {hd}")


def qk_norm_rope(
    qg,
    k,
    q_weight,
    k_weight,
    positions,
    rotary_dim,
    theta,
    eps=1e-6,
    q_out=None,
    k_out=None,
    impl=None,
):
    """Per-head zero-centred RMSNorm of q (qg's q half) and k, then partial RoPE, one launch.

    qg: cupy float32 [nb, nh, 2*hd] (per head [q | gate]); k: float32 [nb, nkv, hd];
    q_weight, k_weight: float32 [hd]; positions: int32 [nb]; impl: a rung of
    RUNGS["qk_norm_rope"] (None: the default). Returns (q_out [nb, nh, hd],
    k_out [nb, nkv, hd]) float32.
    """
    rung = _rung("qk_norm_rope", impl)
    rotary_dim, theta, eps = rope_scalars(rotary_dim, theta, eps)
    check_array("qg", qg, np.float32, ndim=3)
    check_array("k", k, np.float32, ndim=3)
    nb, nh, two_hd = qg.shape
    nkv, hd = k.shape[1], k.shape[2]
    if two_hd != 2 * hd:
        raise ValueError(
            f"qg's last axis must be 2 * head_dim = {2 * hd} (k is {k.shape}), got shape {qg.shape}"
        )
    if k.shape[0] != nb:
        raise ValueError(f"k must have qg's {nb} rows, got shape {k.shape}")
    _check_head_dim("k", hd)
    check_array("q_weight", q_weight, np.float32, (hd,))
    check_array("k_weight", k_weight, np.float32, (hd,))
    check_array("positions", positions, np.int32, (nb,))
    check_rotary_fits(rotary_dim, hd)
    q_out = out_array("q_out", q_out, (nb, nh, hd), np.float32)
    k_out = out_array("k_out", k_out, (nb, nkv, hd), np.float32)
    heads = nb * (nh + nkv)
    args = (
        qg,
        k,
        q_weight,
        k_weight,
        positions,
        q_out,
        k_out,
        np.int32(nb),
        np.int32(nh),
        np.int32(nkv),
        np.int32(hd),
        np.int32(rotary_dim),
        np.float64(theta),
        np.float32(eps),
    )
    # the pipelined kernel indexes items (token, head pair) with 32-bit ints
    name = _qk_kernel_name(rung, hd, heads, rung == "v2" and _pipe_path_ok(hd, qg, k, q_out, k_out))
    module = kernel_module("qk_norm_rope", rung)  # v2 falls back to v1's kernel in its module
    if heads and name == "qk_norm_rope_v0":
        kernel(module, name)((min(-(-heads // _V0_THREADS), _MAX_GRID),), (_V0_THREADS,), args)
    elif heads and name != "qk_norm_rope":
        nv, hpw = _PIPE_SHAPES[-(-hd // 128)]
        kern = kernel(module, name)
        items = nb * -(-(nh + nkv) // hpw)
        smem = 4 * (rotary_dim // 2 + _PIPE_WARPS * 2 * rotary_dim)
        grid = min(-(-items // _PIPE_WARPS), resident_blocks(kern, 32 * _PIPE_WARPS, smem))
        kern((grid,), (32 * _PIPE_WARPS,), args, shared_mem=smem)
    elif heads:
        kernel(module, name)((min(heads, _MAX_GRID),), (32,), args, shared_mem=4 * hd)
    return q_out, k_out


def head_norm_rope(x, weight, positions, rotary_dim, theta, eps=1e-6, out=None, impl=None):
    """rope(rms_norm(x_h, weight), positions[b]) for every head h of every row b, one launch.

    x: cupy float32 [nb, nheads, hd] whose last axis is contiguous; its row and head strides may
    be anything (e.g. the q part of the indexer's qk_proj output [nb, (inh+1)*ihd] viewed as
    [nb, inh+1, ihd][:, :inh]). weight: float32 [hd]; positions: int32 [nb]. rotary_dim = 0
    gives a plain per-head RMSNorm; impl: a rung of RUNGS["head_norm_rope"] (None: the
    default). Returns out: float32 [nb, nheads, hd], C-contiguous.
    """
    rung = _rung("head_norm_rope", impl)
    rotary_dim, theta, eps = rope_scalars(rotary_dim, theta, eps)
    check_array("x", x, np.float32, ndim=3, contiguous="last")
    nb, nheads, hd = x.shape
    _check_head_dim("x", hd)
    check_array("weight", weight, np.float32, (hd,))
    check_array("positions", positions, np.int32, (nb,))
    check_rotary_fits(rotary_dim, hd)
    out = out_array("out", out, (nb, nheads, hd), np.float32)
    heads = nb * nheads
    args = (
        x,
        np.int64(x.strides[0] // 4),
        np.int64(x.strides[1] // 4),
        weight,
        positions,
        out,
        np.int32(nb),
        np.int32(nheads),
        np.int32(hd),
        np.int32(rotary_dim),
        np.float64(theta),
        np.float32(eps),
    )
    if heads:
        kern = kernel(kernel_module("head_norm_rope", rung), rung_kernel("head_norm_rope", rung))
        if rung == "v0":
            kern((min(-(-heads // _V0_THREADS), _MAX_GRID),), (_V0_THREADS,), args)
        else:
            kern((min(heads, _MAX_GRID),), (32,), args, shared_mem=4 * hd)
    return out
