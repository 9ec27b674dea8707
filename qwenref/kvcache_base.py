"""kvcache_base — the KV cache's one class body, shared by the golden cache (numpy arrays) and
the GPU cache (cupy arrays).

KVCacheBase is the per-sequence decode state of one layer: K and V as stored (the arrays of
qwenref.layout, per side kind), the indexer's raw keys and block keys, and the length. It checks
the constructor's arguments, allocates every array through the subclass's array module `xp`,
and runs the parts of append, keys and values that do not depend on where the arrays live.

A subclass supplies:
  xp                                   the array module: numpy, or cupy (imported on first use)
  _check_append(k, v, index_k, **options) -> (k, v, index_k)
                                       append's arguments checked (nothing written yet)
  _store(k, v, t0, **options)          encode both sides of nb >= 1 tokens and write them at
                                       token slots t0 .. t0+nb-1, all or nothing
  _decode(side, arrays)                a side's stored arrays of tokens [0, t_len) ->
                                       float32 [nkv, t_len, hd]
qwenref.golden.KVCache encodes with the numpy quantizers and checks that values are finite;
qwenref.gpu.KVCache launches the append kernels and checks dtype, device and contiguity.

The two caches are siblings, not parent and child, so a golden function that checks
isinstance(cache, golden.KVCache) never receives cupy arrays.
"""

import numpy as np

from ._args import int_arg
from .config import AttnConfig
from .layout import (
    Q8_GROUP,
    TURBO_GROUP,
    bytes_per_token,
    indexer_arrays,
    rotation_signs,
    side_arrays,
    side_kinds,
    tq_bits,
)

__all__ = ["KVCacheBase"]


def _zeros(xp, arrays):
    """{name: (shape, dtype)} -> {name: zeroed array of the module xp}."""
    return {name: xp.zeros(shape, dtype) for name, (shape, dtype) in arrays.items()}


class KVCacheBase:
    """KVCache(cfg, max_t=4096, kind="f32"): K/V as stored, raw indexer keys, block keys, length.

    Attributes: cfg, max_t, kind (a layout.CACHE_KINDS entry), k_kind, v_kind (its side kinds:
    "f32" | "bf16" | "q8" | "turbo8" | "tq4" | ...), k_rotated, v_rotated (the side is stored
    rotated), k_signs, v_signs (the rotation's sign pattern, layout.rotation_signs: float32
    [hd], all +1 for turbo, tq_signs for tq; None for an unrotated side: a rotated side stores
    wht(s ⊙ x)), k_store, v_store (dicts of arrays, layout.side_arrays), idx_keys, blk_keys
    (float32, or None when the config has no indexer) and len(cache). ``length`` (= len(cache))
    is a plain attribute so a GPU cache's to_golden() can set it.
    """

    xp = None  # the array module (numpy or cupy), supplied by the subclass
    max_turbo_head_dim = None  # the largest head_dim a turbo or tq side may have (None: no limit)

    def __init__(self, cfg, max_t=4096, kind="f32"):
        if not isinstance(cfg, AttnConfig):
            raise TypeError(f"cfg must be an AttnConfig, got {type(cfg).__name__}")
        max_t = int_arg("max_t", max_t, 1)
        k_kind, v_kind = side_kinds(kind)
        hd, cap = cfg.head_dim, self.max_turbo_head_dim
        for side in (k_kind, v_kind):
            if side == "q8" and hd % Q8_GROUP:
                raise ValueError(
                    f"head_dim ({hd}) must be a multiple of {Q8_GROUP} for kind {kind!r}"
                )
            if side.startswith("turbo") and (
                hd % TURBO_GROUP or hd & (hd - 1) or (cap is not None and hd > cap)
            ):
                limit = (
                    f", a multiple of {TURBO_GROUP} and <= {cap}"
                    if cap
                    else f" and a multiple of {TURBO_GROUP}"
                )
                raise ValueError(
                    f"head_dim ({hd}) must be a power of two{limit} for kind "
                    f"{kind!r} (WHT over head_dim)"
                )
            if side.startswith("tq") and (
                hd & (hd - 1) or hd * tq_bits(side) % 8 or (cap is not None and not 16 <= hd <= cap)
            ):
                limit = f" in [16, {cap}]" if cap else ""
                raise ValueError(
                    f"head_dim ({hd}) must be a power of two{limit} with head_dim·"
                    f"{tq_bits(side)}/8 whole bytes for kind {kind!r} (WHT over head_dim, codes "
                    f"packed per vector)"
                )
        self.cfg, self.max_t, self.kind = cfg, max_t, kind
        self.k_kind, self.v_kind = k_kind, v_kind
        self.k_signs, self.v_signs = rotation_signs(k_kind, hd), rotation_signs(v_kind, hd)
        self.k_rotated, self.v_rotated = self.k_signs is not None, self.v_signs is not None
        self.length = 0
        xp = self.xp  # the GPU cache imports cupy here, after the checks
        self.k_store = _zeros(xp, side_arrays(k_kind, cfg.nkv, max_t, hd))
        self.v_store = _zeros(xp, side_arrays(v_kind, cfg.nkv, max_t, hd))
        self.idx_keys = self.blk_keys = None
        if cfg.has_indexer:
            idx = _zeros(
                xp, indexer_arrays(max_t, cfg.indexer_head_dim, cfg.indexer_compress_ratio)
            )
            self.idx_keys, self.blk_keys = idx["idx_keys"], idx["blk_keys"]

    def __len__(self):
        return self.length

    def __repr__(self):
        return (
            f"KVCache(kind={self.kind!r}, len={self.length}, max_t={self.max_t}, "
            f"nkv={self.cfg.nkv}, head_dim={self.cfg.head_dim})"
        )

    # ---- append ---------------------------------------------------------------------------
    def append(self, k, v, index_k=None, **options):
        """Store nb tokens at positions len(self) .. len(self)+nb-1 and advance the length.

        k, v: float32 [nb, nkv, hd], after q/k norm and RoPE, unrotated: each side's format
        rotates (turbo, tq) and quantizes them as it stores them (the subclass's _store). index_k:
        raw indexer keys float32 [nb, ihd], required iff the config has an indexer. Block keys
        are not computed here (they need weights): the layer calls update_block_keys after
        append. options: the subclass's (gpu.KVCache: impl=).

        All or nothing: every argument is checked, and both sides are encoded, before anything
        is written, so a refused append (a bad argument, past max_t, a value the format cannot
        store) leaves the cache as it was.
        """
        k, v, index_k = self._check_append(k, v, index_k, **options)
        t0, t1 = self._room(k.shape[0])
        if t1 > t0:
            self._store(k, v, t0, **options)
            if index_k is not None:
                self.idx_keys[t0:t1] = index_k
        self.length = t1

    def _index_k_given(self, index_k):
        """index_k is required iff the config has an indexer; -> whether it is."""
        if self.cfg.has_indexer:
            if index_k is None:
                raise ValueError("index_k is required: the config has an indexer")
            return True
        if index_k is not None:
            raise ValueError("index_k must be None: the config has no indexer")
        return False

    def _room(self, nb):
        """(t0, t1) of an append of nb tokens; past max_t -> ValueError."""
        t0, t1 = self.length, self.length + nb
        if t1 > self.max_t:
            raise ValueError(f"k: appending {nb} tokens to {t0} stored exceeds max_t={self.max_t}")
        return t0, t1

    # ---- reading back -----------------------------------------------------------------------
    def keys(self, t_len=None):
        """Dequantized stored keys, float32 [nkv, t_len, hd] (rotated iff k_rotated), as
        arrays of the cache's module; t_len defaults to len(self)."""
        t_len = self._t_len(t_len)
        return self._decode(self.k_kind, {n: a[:, :t_len] for n, a in self.k_store.items()})

    def values(self, t_len=None):
        """Dequantized stored values, float32 [nkv, t_len, hd] (rotated iff v_rotated), as
        arrays of the cache's module; t_len defaults to len(self)."""
        t_len = self._t_len(t_len)
        return self._decode(self.v_kind, {n: a[:, :t_len] for n, a in self.v_store.items()})

    def _t_len(self, t_len):
        if t_len is None:
            return self.length
        if isinstance(t_len, bool) or not isinstance(t_len, (int, np.integer)):
            raise TypeError(f"t_len must be an int, got {type(t_len).__name__}")
        if not 0 <= t_len <= self.length:
            raise ValueError(f"t_len must be in [0, {self.length}] (tokens stored), got {t_len}")
        return int(t_len)

    def nbytes_per_token(self):
        """Bytes of K+V storage per token (all kv heads), scales included."""
        return bytes_per_token(self.kind, self.cfg.nkv, self.cfg.head_dim)

    def copy(self):
        """An independent deep copy (stored arrays, indexer keys, length)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.k_store = {name: a.copy() for name, a in self.k_store.items()}
        new.v_store = {name: a.copy() for name, a in self.v_store.items()}
        if self.idx_keys is not None:
            new.idx_keys, new.blk_keys = self.idx_keys.copy(), self.blk_keys.copy()
        return new
