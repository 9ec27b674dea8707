"""indexer on the GPU — QSA queries, block keys, block scores and top-k block selection
(kernels_cuda/indexer.cu; the selection: kernels_cuda/indexer_select.cu).

Same meaning as qwenref.golden.indexer, batched: every function handles all nb rows in one
launch per stage. Shape letters: nb rows, inh indexer heads, ihd indexer head width, R compress
ratio, kblk kept blocks, nblk = max_t // R block slots, W = kblk*R + R selection width.

    q = indexer_queries(q_raw, q_norm_w, positions, cfg.indexer_rotary_dim, cfg.rope_theta)
    update_block_keys(cache, k_norm_w, cfg, t0, t1)            # after cache.append
    sel_idx, sel_n, mask = select_rows(q, cache, base_pos, cfg)
    y = gpu.decode_attention(q_attn, cache, base_pos, sel_idx=sel_idx, sel_n=sel_n)

Precision: block means and scores are summed in float64 and rounded once, RoPE runs in float64,
as golden does, so GPU scores equal golden's float32 scores except in rare last-bit cases.

Rungs (impl=): update_block_keys, block_scores and select_rows take impl=None (the default
rung, DEFAULT_RUNG), "v0" (kernels_cuda/indexer_v0.cu: a thread per block key, per (row,
block) score, per row's selection; slow, to read next to golden) or "v1" (indexer.cu and
indexer_select.cu, the fast kernels). Every rung gets the same argument checks and out=
handling and returns the same values; rung_kernel(family, impl, **shape) names the kernel a
rung launches.
"""

from __future__ import annotations

import numpy as np

from .._args import check_rotary_fits, int_arg, rope_scalars
from ..config import AttnConfig
from ..layout import blocks_completing
from ._runtime import check_array, kernel, out_array, resolve_rung, type_name
from .kvcache import KVCache
from .rungs import defaults_of, kernel_module, rungs_of

__all__ = [
    "indexer_queries",
    "update_block_keys",
    "block_scores",
    "select_rows",
    "select_kernel_name",
    "check_select_limits",
    "rung_kernel",
    "RUNGS",
    "DEFAULT_RUNG",
    "MAX_BLOCKS",
    "MAX_IHD",
]

# each family's rungs in teaching order, views of the rung table (qwenref/gpu/rungs.py);
# select_rows runs block_scores and select of one rung
RUNGS = rungs_of("indexer")
DEFAULT_RUNG = defaults_of("indexer")

MAX_IHD = 512  # MAX_IHD in indexer.cu (the norm/RoPE vector lives in smem)
_SEL_THREADS = 256  # SEL_THREADS in indexer_select.cu
MAX_BLOCKS = 8192  # SEL_MAX_BLOCKS in indexer_select.cu
_SCORE_WARPS = 16  # block keys per scoring CTA (512 threads): SCORE_WARPS in indexer.cu
_SMEM_LIMIT = 48 * 1024  # the scoring kernels' q rows: inh * ihd float64
_V0_THREADS = 128  # threads per CTA of update_block_keys_v0 and block_scores_v0


def _rung(family, impl):
    return resolve_rung(RUNGS, DEFAULT_RUNG, family, impl)


def rung_kernel(family, impl=None, **shape):
    """The kernel that `impl`'s rung of `family` launches ("update_block_keys", "block_scores",
    "select"). select's v1 kernel depends on the shape: pass nblk= and kblk=
    (select_kernel_name); other shape keywords are ignored."""
    if family not in RUNGS:
        raise ValueError(f"family must be one of {tuple(RUNGS)}, got {family!r}")
    rung = _rung(family, impl)
    if rung == "v0":
        return f"{family}_v0"
    if family == "update_block_keys":
        return "indexer_block_keys"
    if family == "block_scores":
        return "indexer_block_scores"
    if "nblk" not in shape or "kblk" not in shape:
        raise TypeError(
            "rung_kernel('select', 'v1') needs nblk= and kblk= (its kernel depends on them)"
        )
    return select_kernel_name(shape["nblk"], shape["kblk"])


def _ihd_arg(name, ihd):
    if not 1 <= ihd <= MAX_IHD:
        raise ValueError(f"{name}: indexer head width must be in 1..{MAX_IHD}, got {ihd}")
    return ihd


def _check_cache_type(cache):
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a qwenref.gpu.KVCache, got {type_name(cache)}")


def _indexer_state(cache, cfg=None):
    """cache.idx_keys [max_t, ihd], cache.blk_keys [nblk, ihd] (cupy float32); with cfg, ihd
    must be cfg.indexer_head_dim."""
    _check_cache_type(cache)
    if cache.idx_keys is None or cache.blk_keys is None:
        raise ValueError("cache holds no indexer state (idx_keys / blk_keys are None)")
    check_array("cache.idx_keys", cache.idx_keys, np.float32, ndim=2)
    ihd = cache.idx_keys.shape[1]
    check_array("cache.blk_keys", cache.blk_keys, np.float32, (None, ihd))
    if cfg is not None and ihd != cfg.indexer_head_dim:
        raise ValueError(
            f"cfg.indexer_head_dim is {cfg.indexer_head_dim}, but the cache's indexer state "
            f"has width {ihd}"
        )
    return cache.idx_keys, cache.blk_keys


def _check_cfg(cfg):
    if not isinstance(cfg, AttnConfig):
        raise TypeError(f"cfg must be an AttnConfig, got {type(cfg).__name__}")
    if not cfg.has_indexer:
        raise ValueError("cfg has no indexer (indexer_* fields unset)")
    return cfg


def check_select_limits(cfg, nblk):
    """The selection's own limits, from the config and the cache's block slots alone:
    ValueError unless the scoring kernel's shared memory holds a row's queries (inh * ihd
    float64 values) and the selection kernel takes nblk block slots. select_rows checks these;
    a layer checks them before its step changes the cache."""
    inh, ihd = cfg.indexer_n_heads, cfg.indexer_head_dim
    if inh * ihd * 8 > _SMEM_LIMIT:
        raise ValueError(
            f"cfg: indexer heads * width = {inh} * {ihd} does not fit the scoring kernel's "
            f"shared memory ({_SMEM_LIMIT // 8} float64 values)"
        )
    if nblk > MAX_BLOCKS:
        raise ValueError(
            f"cache.blk_keys has {nblk} blocks; the selection kernel takes at most "
            f"{MAX_BLOCKS} (max_t // R)"
        )


# ---- queries -----------------------------------------------------------------------------
def indexer_queries(q_raw, q_norm_w, positions, rotary_dim, theta, eps=1e-6, out=None):
    """rope(rms_norm(q_raw, q_norm_w), positions) per head (zero-centred norm, rotate-half RoPE
    on the first rotary_dim dims, float64 angles and rotation).

    q_raw: cupy float32 [nb, inh, ihd]; q_norm_w: float32 [ihd]; positions: int32 [nb].
    Returns out float32 [nb, inh, ihd] (may be q_raw itself).
    """
    rotary_dim, theta, eps = rope_scalars(rotary_dim, theta, eps)
    check_array("q_raw", q_raw, np.float32, ndim=3)
    nb, inh, ihd = q_raw.shape
    _ihd_arg("q_raw", ihd)
    check_array("q_norm_w", q_norm_w, np.float32, (ihd,))
    check_array("positions", positions, np.int32, (nb,))
    check_rotary_fits(rotary_dim, ihd)
    out = out_array("out", out, (nb, inh, ihd), np.float32)
    if nb * inh:
        kernel("indexer", "indexer_norm_rope")(
            (nb * inh,),
            (128,),
            (
                q_raw,
                np.int32(ihd),
                np.int32(inh),
                positions,
                q_norm_w,
                np.float32(eps),
                np.int32(rotary_dim),
                np.float64(theta),
                out,
            ),
        )
    return out


# ---- block keys --------------------------------------------------------------------------
def update_block_keys(cache, k_norm_w, cfg, t0, t1, *, impl=None):
    """Write cache.blk_keys[j] for every block that completes at a position in [t0, t1):
    j in [t0 // R, t1 // R), bkey_j = rope(rms_norm(mean(idx_keys[jR : jR+R]), k_norm_w), jR).

    k_norm_w: cupy float32 [ihd]. Norm eps, theta and rotary width from cfg. One launch.
    impl: the rung (RUNGS["update_block_keys"]; None = DEFAULT_RUNG).
    Returns the updated block indices, numpy int64 [nj] (often empty).
    """
    rung = _rung("update_block_keys", impl)
    _check_cfg(cfg)
    t0 = int_arg("t0", t0, 0)
    t1 = int_arg("t1", t1, 0)
    if t1 < t0:  # scalars first: named even when the cache is wrong too
        raise ValueError(f"t1 ({t1}) must be >= t0 ({t0})")
    idx_keys, blk_keys = _indexer_state(cache, cfg)
    ihd = idx_keys.shape[1]
    _ihd_arg("cache.idx_keys", ihd)
    check_array("k_norm_w", k_norm_w, np.float32, (ihd,))
    R = cfg.indexer_compress_ratio
    blocks = blocks_completing(t0, t1, R, len(cache), blk_keys.shape[0])  # [nj]
    if blocks.size:
        _launch_block_keys(
            rung, idx_keys, ihd, R, int(blocks[0]), int(blocks.size), k_norm_w, cfg, blk_keys
        )
    return blocks


def _launch_block_keys(rung, idx_keys, ihd, R, j0, nj, k_norm_w, cfg, blk_keys):
    norm_rope = (
        k_norm_w,
        np.float32(cfg.rms_norm_eps),
        np.int32(cfg.indexer_rotary_dim),
        np.float64(cfg.rope_theta),
        blk_keys,
    )
    if rung == "v0":
        kernel(kernel_module("update_block_keys", rung), "update_block_keys_v0")(
            (-(-nj // _V0_THREADS),),
            (_V0_THREADS,),
            (idx_keys, np.int32(ihd), np.int32(R), np.int32(j0), np.int32(nj), *norm_rope),
        )
    else:
        kernel(kernel_module("update_block_keys", rung), "indexer_block_keys")(
            (nj,), (128,), (idx_keys, np.int32(ihd), np.int32(R), np.int32(j0), *norm_rope)
        )


# ---- scoring and selection -----------------------------------------------------------------
def _check_scoring(q, cache, base_pos, cfg=None):
    """block_scores' and select_rows' arguments (base_pos already an int >= 0)."""
    _, blk_keys = _indexer_state(cache, cfg)
    nblk, ihd = blk_keys.shape
    check_array("q", q, np.float32, (None, None, ihd))
    nb, inh, _ = q.shape
    if nb < 1 or inh < 1:
        raise ValueError(f"q must hold at least one row and one head, got shape {q.shape}")
    if inh * ihd * 8 > _SMEM_LIMIT:
        raise ValueError(
            f"q's heads * width = {inh} * {ihd} does not fit the scoring kernel's "
            f"shared memory ({_SMEM_LIMIT // 8} float64 values)"
        )
    if base_pos + nb > len(cache):
        raise ValueError(
            f"base_pos + nb = {base_pos} + {nb} exceeds len(cache) = {len(cache)}: "
            f"row b scores the blocks complete at position base_pos + b"
        )
    return nb, inh, ihd, nblk


def _launch_scores(rung, q, blk_keys, nb, inh, ihd, nblk, base_pos, R, out):
    args = (q, blk_keys, np.int32(inh), np.int32(ihd), np.int32(nblk), np.int32(base_pos))
    args += (np.int32(R), np.float64(ihd**-0.5), out)
    module = kernel_module("block_scores", rung)
    if rung == "v0":
        kernel(module, "block_scores_v0")((-(-nblk // _V0_THREADS), nb), (_V0_THREADS,), args)
    else:
        kernel(module, "indexer_block_scores")(
            (-(-nblk // _SCORE_WARPS), nb), (32 * _SCORE_WARPS,), args, shared_mem=inh * ihd * 8
        )


def block_scores(q, cache, base_pos, out=None, *, impl=None):
    """score[b, j] = sum_h relu(q[b, h] . blk_keys[j]) * ihd**-0.5 for j < (base_pos+b+1)//R;
    -inf for the rest of the row. q: cupy float32 [nb, inh, ihd] (normed + roped queries).
    Returns out float32 [nb, nblk], nblk = cache.blk_keys.shape[0]. One launch. impl: the rung
    (RUNGS["block_scores"]; None = DEFAULT_RUNG)."""
    rung = _rung("block_scores", impl)
    base_pos = int_arg("base_pos", base_pos, 0)
    nb, inh, ihd, nblk = _check_scoring(q, cache, base_pos)
    out = out_array("out", out, (nb, nblk), np.float32)
    if nblk:
        _launch_scores(
            rung,
            q,
            cache.blk_keys,
            nb,
            inh,
            ihd,
            nblk,
            base_pos,
            cache.cfg.indexer_compress_ratio,
            out,
        )
    return out


def select_rows(
    q,
    cache,
    base_pos,
    cfg,
    *,
    sel_idx_out=None,
    sel_n_out=None,
    mask_out=None,
    scores_out=None,
    impl=None,
):
    """Per row b at position t = base_pos + b with nc = (t+1)//R complete blocks: dense
    (sel_n[b] = 0, block_mask[b, :nc] = 1) while nc <= kblk; else keep block nc-1 plus the
    kblk-1 best others by block_scores (exact ties: lower index) and the tail [nc*R, t]:
    sel_idx[b, :sel_n[b]] ascending, sel_n[b] = kblk*R + (t+1 - nc*R).

    Returns (sel_idx int32 [nb, kblk*R + R] (-1 past sel_n[b]), sel_n int32 [nb],
    block_mask uint8 [nb, nblk]). Two launches (scores, selection) for all rows; the *_out
    buffers are used when given (graph capture). impl: the rung of both launches
    (RUNGS["select"]; None = DEFAULT_RUNG): "v0" runs block_scores_v0 and select_v0.
    """
    rung = _rung("select", impl)
    _check_cfg(cfg)
    base_pos = int_arg("base_pos", base_pos, 0)
    nb, inh, ihd, nblk = _check_scoring(q, cache, base_pos, cfg)
    R, kblk = cfg.indexer_compress_ratio, cfg.kblk
    check_select_limits(cfg, nblk)
    if (base_pos + nb) // R > nblk:
        raise ValueError(
            f"base_pos + nb = {base_pos} + {nb} has {(base_pos + nb) // R} complete "
            f"blocks of R = {R}, more than cache.blk_keys' {nblk} rows"
        )
    width = kblk * R + R
    scores = out_array("scores_out", scores_out, (nb, nblk), np.float32)
    sel_idx = out_array("sel_idx_out", sel_idx_out, (nb, width), np.int32)
    sel_n = out_array("sel_n_out", sel_n_out, (nb,), np.int32)
    mask = out_array("mask_out", mask_out, (nb, nblk), np.uint8)
    if nblk:
        _launch_scores(rung, q, cache.blk_keys, nb, inh, ihd, nblk, base_pos, R, scores)
    _launch_select(rung, scores, nb, nblk, base_pos, R, kblk, sel_idx, sel_n, mask)
    return sel_idx, sel_n, mask


def _launch_select(rung, scores, nb, nblk, base_pos, R, kblk, sel_idx, sel_n, mask):
    """The selection launch of select_rows on scores [nb, nblk] (-inf past each row's blocks):
    sel_idx [nb, kblk*R + R], sel_n [nb], mask [nb, nblk]. Both rungs take the same arguments."""
    args = (
        scores,
        np.int32(nblk),
        np.int32(base_pos),
        np.int32(R),
        np.int32(kblk),
        np.int32(kblk * R + R),
        sel_idx,
        sel_n,
        mask,
    )
    if rung == "v0":
        kernel(kernel_module("select", rung), "select_v0")((nb,), (1,), args)  # a thread per row
    else:
        kern = kernel(kernel_module("select", rung), select_kernel_name(nblk, kblk))
        kern((nb,), (_SEL_THREADS,), args)


def select_kernel_name(nblk, kblk):
    """indexer_select.cu's selection kernel for rows of nblk block slots keeping kblk blocks:
    indexer_select_i<ITEMS>_q<Q>, ITEMS = the row's 32-block words per warp (8 warps) rounded up
    to a power of two, Q = the group count / 32 of its filter (G = 32 Q >= 2 (kblk-1); past
    kblk-1 = 128 the radix fallback runs, in any Q)."""
    words = max(-(-nblk // 32), 1)
    items = 1
    while 8 * items < words:
        items *= 2
    if items > 32:
        raise ValueError(f"nblk = {nblk} is more than the selection kernel takes ({MAX_BLOCKS})")
    k = kblk - 1
    q = 2 if k <= 32 else (4 if k <= 64 else 8)
    return f"indexer_select_i{items}_q{q}"
