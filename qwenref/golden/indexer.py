"""indexer — the QSA sparse block indexer: projection, block keys, queries, scoring, selection.

R = cfg.indexer_compress_ratio, kblk = cfg.kblk, rd = cfg.indexer_rotary_dim.

Shape letters: nb rows, inh indexer heads, ihd indexer head width, T tokens, nc complete blocks
of a row ((t+1) // R), nj blocks asked for.

The rule, for the row at position t:
  bkey_j  = rope(rms_norm(mean(raw_keys[jR : jR+R]), k_norm), position jR)     (block j complete)
  q_h     = rope(rms_norm(q_raw_h, q_norm), t)
  score_j = sum_h relu(q_h . bkey_j) * ihd**-0.5                               (j < nc)
  dense while nc <= kblk; otherwise keep block nc-1 plus the kblk-1 best others (ties: lower
  index), and the tail tokens [nc·R, t]: n_vis = kblk·R + (t + 1 - nc·R), ascending.

Precision: the block mean and the scores are accumulated in float64 and rounded to float32;
norm and RoPE are golden.norm / golden.rope (float32 norm, float64 angles). Selection works on
the float32 scores, so "exact ties" means equal float32 scores (0.0 and -0.0 tie).
"""

import numpy as np

from .._args import check_rotary_fits, f32_array, finite_float_arg, rotary_dim_arg, weight_array
from .._args import int_arg as _int_arg
from ..config import AttnConfig
from ..layout import blocks_completing
from .norm import rms_norm_core
from .rope import apply_rope_core

__all__ = [
    "indexer_project",
    "indexer_queries",
    "block_keys",
    "update_block_keys",
    "block_scores",
    "select_blocks",
    "visible_tokens",
    "row_selection",
]


# ---- argument checks (ValueError / TypeError naming the argument) ------------------------------


def _float_array(name, x, ndim=None):
    """x as a float32 array (of ndim dims when given), every value finite."""
    return f32_array(name, x, ints=True, ndim=ndim)


def _int_array(name, x, ndim=1):
    a = np.asarray(x)
    if a.dtype == np.bool_ or not (np.issubdtype(a.dtype, np.integer) or a.size == 0):
        raise TypeError(f"{name} must be an integer array, got dtype {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dims, got shape {a.shape}")
    return a.astype(np.int64)


def _weight(name, w, n):
    w = _float_array(name, w, 1)
    if w.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {w.shape}")
    return w


def _theta_eps(theta, eps):
    return (finite_float_arg("theta", theta, 0.0, strict=True), finite_float_arg("eps", eps, 0.0))


# ---- projection, queries, block keys -----------------------------------------------------------
def indexer_project(h, w_qk, inh, ihd):
    """h [nb, hidden] @ w_qk.T -> (q_raw [nb, inh, ihd], k_raw [nb, ihd]); k is the last ihd.

    float32 matmul, like the layer's other projections.
    """
    inh = _int_arg("inh", inh, 1)
    ihd = _int_arg("ihd", ihd, 1)
    h = _float_array("h", h, 2)  # [nb, hidden]
    w_qk = weight_array("w_qk", w_qk)  # [(inh+1)·ihd, hidden]
    if w_qk.shape != ((inh + 1) * ihd, h.shape[1]):
        raise ValueError(
            f"w_qk must have shape ({(inh + 1) * ihd}, {h.shape[1]}) "
            f"= ((inh+1)·ihd, hidden), got {w_qk.shape}"
        )
    y = np.matmul(h, w_qk.T)  # [nb, (inh+1)·ihd]
    nb = h.shape[0]
    q_raw = np.ascontiguousarray(y[:, : inh * ihd]).reshape(nb, inh, ihd)
    k_raw = np.ascontiguousarray(y[:, inh * ihd :])  # [nb, ihd]
    return q_raw, k_raw


def _positions(positions, nb):
    p = _int_array("positions", positions)
    if p.shape != (nb,):
        raise ValueError(f"positions must have shape ({nb},), got {p.shape}")
    if (p < 0).any():
        raise ValueError("positions must be >= 0")
    return p


def indexer_queries(q_raw, q_norm_w, positions, rotary_dim, theta, eps=1e-6):
    """rope(rms_norm(q_raw, q_norm_w), positions) per head. [nb, inh, ihd] float32.

    rms_norm is the zero-centred form (x / rms · (1 + w)); RoPE rotates the first rotary_dim
    dims of each head (rotate-half) at the row's position.
    """
    q_raw = _float_array("q_raw", q_raw, 3)  # [nb, inh, ihd]
    nb, _, ihd = q_raw.shape
    q_norm_w = _weight("q_norm_w", q_norm_w, ihd)
    positions = _positions(positions, nb)
    rotary_dim = rotary_dim_arg(rotary_dim)
    check_rotary_fits(rotary_dim, ihd)
    theta, eps = _theta_eps(theta, eps)
    if ihd == 0:
        raise ValueError(f"q_raw must have a non-empty last axis, got shape {q_raw.shape}")
    return apply_rope_core(
        rms_norm_core(q_raw, q_norm_w, eps, True, "q_raw"), positions, rotary_dim, theta
    )


def block_keys(raw_keys, blocks, R, k_norm_w, rotary_dim, theta, eps=1e-6):
    """bkey_j = rope(rms_norm(mean(raw_keys[jR:(j+1)R]), k_norm_w), position jR) for j in blocks.

    raw_keys: [T, ihd]; blocks: int [nj]. Returns float32 [nj, ihd].
    The mean is taken in float64 and rounded to float32 before the (float32) norm.
    """
    raw_keys = _float_array("raw_keys", raw_keys, 2)  # [T, ihd]
    T, ihd = raw_keys.shape
    blocks = _int_array("blocks", blocks)  # [nj]
    R = _int_arg("R", R, 1)
    k_norm_w = _weight("k_norm_w", k_norm_w, ihd)
    rotary_dim = rotary_dim_arg(rotary_dim)
    check_rotary_fits(rotary_dim, ihd)
    theta, eps = _theta_eps(theta, eps)
    if ((blocks < 0) | ((blocks + 1) * R > T)).any():
        raise ValueError(
            f"blocks must be complete blocks of raw_keys: 0 <= j < {T // R} "
            f"(T = {T}, R = {R}), got {blocks.tolist()}"
        )
    if ihd == 0:
        raise ValueError(f"raw_keys must have a non-empty last axis, got shape {raw_keys.shape}")
    return _block_keys(raw_keys, blocks, R, k_norm_w, rotary_dim, theta, eps, "raw_keys")


def _block_keys(raw_keys, blocks, R, k_norm_w, rotary_dim, theta, eps, name):
    """block_keys on checked arguments."""
    if blocks.size == 0:
        return np.zeros((0, raw_keys.shape[1]), np.float32)
    tok = blocks[:, None] * R + np.arange(R)  # [nj, R]
    mean = raw_keys[tok].astype(np.float64).mean(axis=1).astype(np.float32)  # [nj, ihd]
    return apply_rope_core(
        rms_norm_core(mean, k_norm_w, eps, True, name), blocks * R, rotary_dim, theta
    )


def update_block_keys(cache, k_norm_w, cfg, t0, t1):
    """Write cache.blk_keys[j] for every block that completes at a position in [t0, t1).

    Block j completes at token (j+1)R - 1, so j runs over [t0 // R, t1 // R). Reads
    cache.idx_keys[:t1] (needs t1 <= len(cache)); norm eps, theta and rotary width from cfg.
    Returns the updated block indices, int64 [nj] (often empty). Everything is checked, and
    the new keys computed, before cache.blk_keys is written.
    """
    if not isinstance(cfg, AttnConfig):
        raise TypeError(f"cfg must be an AttnConfig, got {type(cfg).__name__}")
    if not cfg.has_indexer:
        raise ValueError("cfg has no indexer (indexer_* fields unset)")
    idx_keys, blk_keys = getattr(cache, "idx_keys", None), getattr(cache, "blk_keys", None)
    if not (isinstance(idx_keys, np.ndarray) and isinstance(blk_keys, np.ndarray)):
        raise ValueError(
            "cache holds no indexer state on the host (idx_keys / blk_keys must be numpy arrays)"
        )
    ihd, R = cfg.indexer_head_dim, cfg.indexer_compress_ratio
    if idx_keys.ndim != 2 or idx_keys.shape[1] != ihd or blk_keys.shape[1:] != (ihd,):
        raise ValueError(
            f"cache's indexer state has width {idx_keys.shape[1:]}, cfg says indexer_head_dim {ihd}"
        )
    k_norm_w = _weight("k_norm_w", k_norm_w, ihd)
    t0 = _int_arg("t0", t0, 0)
    t1 = _int_arg("t1", t1, 0)
    blocks = blocks_completing(t0, t1, R, len(cache), blk_keys.shape[0])  # [nj]
    if blocks.size:
        raw = idx_keys[:t1]
        if not np.isfinite(raw[blocks[0] * R : (blocks[-1] + 1) * R]).all():
            raise ValueError("cache.idx_keys holds NaN or +-inf in the blocks to update")
        blk_keys[blocks] = _block_keys(
            raw,
            blocks,
            R,
            k_norm_w,
            cfg.indexer_rotary_dim,
            cfg.rope_theta,
            cfg.rms_norm_eps,
            "cache.idx_keys",
        )
    return blocks


# ---- scoring and selection ---------------------------------------------------------------------
def block_scores(q, bkeys):
    """score_j = sum_h relu(q_h . bkey_j) * ihd**-0.5. q [inh, ihd], bkeys [nc, ihd] -> [nc] f32.

    float64 dot products and sum, rounded to float32 once.
    """
    q = _float_array("q", q, 2)  # [inh, ihd]
    bkeys = _float_array("bkeys", bkeys, 2)  # [nc, ihd]
    ihd = q.shape[1]
    if bkeys.shape[1] != ihd:
        raise ValueError(f"bkeys must have shape [nc, {ihd}], got {bkeys.shape}")
    d = np.einsum("hd,cd->hc", q.astype(np.float64), bkeys.astype(np.float64))  # [inh, nc]
    return (np.maximum(d, 0.0).sum(axis=0) * ihd**-0.5).astype(np.float32)


def select_blocks(scores, kblk):
    """Keep the latest block (len(scores) - 1) plus the kblk - 1 best others (exact ties: the
    lower index). Returns sorted int64 [kblk].

    Needs len(scores) >= kblk. The others are ranked by a stable sort on -score, i.e. on
    (-score, index).
    """
    kblk = _int_arg("kblk", kblk, 1)
    scores = _float_array("scores", scores, 1)  # [nc]
    nc = scores.shape[0]
    if nc < kblk:
        raise ValueError(f"scores must cover at least kblk = {kblk} blocks, got {nc}")
    return _select(scores, kblk)


def _select(scores, kblk):
    nc = scores.shape[0]
    others = np.argsort(-scores[:-1], kind="stable")[: kblk - 1]  # best first, ties: lower index
    return np.sort(np.append(others, nc - 1)).astype(np.int64)


def visible_tokens(t, blocks, R):
    """Tokens of the kept blocks plus the tail [((t+1)//R)*R, t], ascending.

    Returns (idx int64 [kblk*R + tail], block_mask bool [(t+1)//R]).
    blocks must be distinct complete blocks of the row (0 <= j < (t+1)//R), kblk = len(blocks).
    """
    t = _int_arg("t", t, 0)
    R = _int_arg("R", R, 1)
    blocks = _int_array("blocks", blocks)
    nc = (t + 1) // R
    if ((blocks < 0) | (blocks >= nc)).any():
        raise ValueError(
            f"blocks must be complete blocks of row t={t}: 0 <= j < {nc}, got {blocks.tolist()}"
        )
    blocks = np.sort(blocks)
    if (np.diff(blocks) == 0).any():
        raise ValueError(f"blocks must be distinct, got {blocks.tolist()}")
    kept = (blocks[:, None] * R + np.arange(R)).reshape(-1)  # [kblk·R], ascending
    tail = np.arange(nc * R, t + 1, dtype=np.int64)  # [(t+1) - nc·R]
    mask = np.zeros(nc, bool)
    mask[blocks] = True
    return np.concatenate([kept, tail]), mask


def row_selection(t, q, bkeys, R, kblk):
    """For the row at position t with indexer query q [inh, ihd] and block keys bkeys
    [>= (t+1)//R, ihd]: dense (idx = arange(t+1), mask all True) while (t+1)//R <= kblk, else
    visible_tokens(t, select_blocks(block_scores(q, bkeys[:nc]), kblk), R)."""
    t = _int_arg("t", t, 0)
    R = _int_arg("R", R, 1)
    kblk = _int_arg("kblk", kblk, 1)
    q = _float_array("q", q, 2)  # [inh, ihd]
    bkeys = _float_array("bkeys", bkeys, 2)
    if bkeys.shape[1] != q.shape[1]:
        raise ValueError(f"bkeys must have shape [nc, {q.shape[1]}], got {bkeys.shape}")
    nc = (t + 1) // R
    if nc <= kblk:
        return np.arange(t + 1, dtype=np.int64), np.ones(nc, bool)
    if bkeys.shape[0] < nc:
        raise ValueError(f"bkeys must hold the row's {nc} complete blocks, got {bkeys.shape[0]}")
    scores = block_scores(q, bkeys[:nc])
    if not np.isfinite(scores).all():
        raise ValueError("q, bkeys: block scores overflow float32 (|q|·|bkey| is too large)")
    return visible_tokens(t, _select(scores, kblk), R)
