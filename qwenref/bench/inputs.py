"""Inputs the bench, the tuning tools and the notebooks build on the GPU: random values (never
zeros, a few outliers so normalisation and amax paths see them), poisoned outputs, the 27B
configurations, filled caches and random layer weights."""

from __future__ import annotations

import numpy as np

from ..config import AttnConfig
from ..gpu._runtime import cupy
from ..weights import weight_shapes

__all__ = [
    "randn",
    "poisoned",
    "host",
    "qwen_cfg",
    "dense_cfg",
    "decode_shape",
    "fill_caches",
    "random_q8_caches",
    "random_weights",
]


def randn(cp, shape, scale=1.0, outliers=True):
    """Normal float32 values on the GPU, with a few 8x outliers unless outliers=False."""
    x = cp.random.standard_normal(shape, dtype=cp.float32) * np.float32(scale)
    if outliers and x.size >= 64:
        flat = x.reshape(-1)
        flat[:: max(1, flat.size // 37)] *= np.float32(8)
    return x


def poisoned(cp, shape):
    """A float32 output buffer full of NaN: a value a kernel failed to write shows."""
    return cp.full(shape, cp.nan, cp.float32)


def host(a):
    """A cupy array's values on the host (numpy input passes through)."""
    return a.get() if hasattr(a, "get") else np.asarray(a)


def qwen_cfg():
    """The Qwen3.5-27B full-attention layer with its indexer (R 64, budget 2048, 8 x 128)."""
    return AttnConfig.qwen35_27b()


def dense_cfg():
    """qwen_cfg without the indexer: every row attends densely."""
    return qwen_cfg().replace(
        indexer_n_heads=0, indexer_head_dim=0, indexer_compress_ratio=0, indexer_budget=0
    )


def decode_shape(T, nb, cfg, kind, **extra):
    """A decode record's shape: T cached tokens, nb rows, cfg's head counts and width, the cache
    kind, then extra's fields in order."""
    shape = {"T": T, "nb": nb, "nh": cfg.nh, "nkv": cfg.nkv, "head_dim": cfg.head_dim}
    return {**shape, "kind": kind, **extra}


def fill_caches(caches, T, k_norm_w=None, chunk=8192):
    """Append T random tokens (the same values) to each gpu.KVCache; block keys too when the
    config has an indexer (k_norm_w: the indexer's k norm weight)."""
    from .. import gpu

    cp = cupy()
    c = caches[0].cfg
    for t0 in range(0, T, chunk):
        n = min(chunk, T - t0)
        k = randn(cp, (n, c.nkv, c.head_dim), outliers=False)
        v = randn(cp, (n, c.nkv, c.head_dim), outliers=False)
        ik = randn(cp, (n, c.indexer_head_dim), outliers=False) if c.has_indexer else None
        for cache in caches:
            cache.append(k, v, index_k=ik)
    if c.has_indexer:
        for cache in caches:
            gpu.update_block_keys(cache, k_norm_w, c, 0, T)


def random_q8_caches(cfg, T, n):
    """n q8 gpu.KVCaches holding T tokens of random codes and scales (written directly, no
    quantizer: fast for timing, not for checking values)."""
    from .. import gpu

    cp = cupy()
    caches = []
    for _ in range(n):
        c = gpu.KVCache(cfg, max_t=T, kind="q8")
        for st in (c.k_store, c.v_store):
            st["q"][...] = cp.random.randint(-127, 128, size=st["q"].shape, dtype=cp.int32).astype(
                cp.int8
            )
            st["d"][...] = cp.random.uniform(0.004, 0.04, size=st["d"].shape).astype(cp.float16)
        c.length = T
        caches.append(c)
    return caches


def random_weights(cfg, seed=0):
    """LayerWeights-like dict of float32 numpy arrays at cfg's shapes (projections ~ N(0, 0.02),
    norm weights ~ N(0, 0.1) around the zero-centred 1)."""
    rng = np.random.default_rng(seed)
    shapes = weight_shapes(cfg)
    w = {}
    for name, shp in shapes.items():
        scale = 0.1 if len(shp) == 1 else 0.02
        w[name] = rng.standard_normal(shp, dtype=np.float32) * np.float32(scale)
    return w
