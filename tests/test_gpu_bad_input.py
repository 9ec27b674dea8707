"""Bad input never changes state, on the GPU (docs/bad-input.md, "GPU"): every public entry
point of qwenref.gpu's stages refuses a bad argument with a TypeError / ValueError whose message
starts with the argument's name as the caller spelled it, before it launches anything. After
the refusal the KVCache (length and every buffer), the layer, every array argument and every
out= buffer (poisoned beforehand) are bit for bit what they were. Attention's entry points
are checked in tests/test_gpu_attention.py.

ENTRIES holds one row per entry point: a builder of small valid arguments (and the objects
whose state the call could change) and its faults (argument, fault class, the bad value or how
to make it from the valid one, the error). test_gpu_refuses_bad_input runs each fault on a GPU;
the checks made before CuPy is touched (plain Python arguments, impl) run anywhere, in
test_refused_before_the_gpu_is_touched."""

import hashlib
import re

import numpy as np
import pytest

import qwenref
from qwenref import gpu
from qwenref.weights import weight_shapes

F32 = np.float32
CFG = qwenref.AttnConfig.tiny()  # H 64, nh 4, nkv 2, hd 64; indexer inh 2, ihd 32, R 8, kblk 4
RNG_SEED = 11


# ---- fault classes: each makes the bad value from the valid one (cp, a) -> bad -------------
def host(cp, a):
    return cp.asnumpy(a)  # numpy where a cupy array is needed


def dtype(t):
    return lambda cp, a: a.astype(t)


def shape(*s):
    return lambda cp, a: cp.zeros(s, a.dtype)


def strided(cp, a):
    """a's shape and dtype, every other element of a wider array: not C-contiguous."""
    return cp.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)[..., ::2]


def misaligned(cp, a):
    """a's shape and dtype, C-contiguous, one element past a 16-byte boundary."""
    return cp.zeros(a.size + 1, a.dtype)[1:].reshape(a.shape)


def val(v):
    return lambda cp, a: v


def as_built(cp, a):
    """The builder's own value: the builder made the state that is wrong (a full cache, ...)."""
    return a


def golden_cache(cp, a):
    return qwenref.golden.KVCache(CFG, 48, "q8")  # numpy arrays where cupy ones are needed


def other_config_cache(cp, a):
    return gpu.KVCache(CFG.replace(intermediate_size=64), max_t=48, kind="q8")


def poison(cp, shape, dtype):
    """An out= buffer filled with a pattern no kernel writes: NaN, or 0xA5 bytes."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return cp.full(shape, np.nan, dt)
    return cp.full(shape, np.frombuffer(b"\xa5" * dt.itemsize, dt)[0], dt)


def host_rand(rng, shape, dtype=F32):
    return rng.standard_normal(shape).astype(dtype)


def filled_cache(cp, rng, cfg=CFG, kind="q8", max_t=48, n=20):
    """A gpu.KVCache holding n tokens: every buffer filled with random bytes (so a stray write
    shows in the checksum), length n. No kernel runs."""
    cache = gpu.KVCache(cfg, max_t=max_t, kind=kind)
    arrays = [*cache.k_store.values(), *cache.v_store.values()]
    arrays += [a for a in (cache.idx_keys, cache.blk_keys) if a is not None]
    for a in arrays:
        raw = rng.integers(0, 256, a.nbytes, dtype=np.uint8)
        a[...] = cp.asarray(raw.view(a.dtype).reshape(a.shape))
    cache.length = n
    return cache


def layer_weights(cfg, rng):
    return {
        name: (rng.standard_normal(s) * (0.1 if len(s) == 1 else s[1] ** -0.5)).astype(F32)
        for name, s in weight_shapes(cfg).items()
    }


# ---- the entry points: builder(cp, rng) -> (call, valid kwargs, objects with state) ---------
def b_rms_norm(cp, rng):
    x, w = cp.asarray(host_rand(rng, (3, 64))), cp.asarray(host_rand(rng, 64))
    return gpu.rms_norm, dict(x=x, weight=w, out=poison(cp, (3, 64), F32)), []


def b_add_rms_norm(cp, rng):
    x, r = cp.asarray(host_rand(rng, (3, 64))), cp.asarray(host_rand(rng, (3, 64)))
    w = cp.asarray(host_rand(rng, 64))
    kw = dict(x=x, residual=r, weight=w, out=poison(cp, (3, 64), F32))
    return gpu.add_rms_norm, dict(kw, sum_out=poison(cp, (3, 64), F32)), []


def b_wht(cp, rng):
    return gpu.wht, dict(x=cp.asarray(host_rand(rng, (3, 64))), out=poison(cp, (3, 64), F32)), []


def b_qk_norm_rope(cp, rng):
    kw = dict(
        qg=cp.asarray(host_rand(rng, (2, 4, 128))),
        k=cp.asarray(host_rand(rng, (2, 2, 64))),
        q_weight=cp.asarray(host_rand(rng, 64)),
        k_weight=cp.asarray(host_rand(rng, 64)),
        positions=cp.asarray(np.array([3, 4], np.int32)),
        rotary_dim=16,
        theta=1e4,
        q_out=poison(cp, (2, 4, 64), F32),
        k_out=poison(cp, (2, 2, 64), F32),
    )
    return gpu.qk_norm_rope, kw, []


def b_head_norm_rope(cp, rng):
    from qwenref.gpu.rope import head_norm_rope

    kw = dict(
        x=cp.asarray(host_rand(rng, (2, 3, 64))),
        weight=cp.asarray(host_rand(rng, 64)),
        positions=cp.asarray(np.array([3, 4], np.int32)),
        rotary_dim=16,
        theta=1e4,
        out=poison(cp, (2, 3, 64), F32),
    )
    return head_norm_rope, kw, []


def b_q8_quantize(cp, rng):
    x = cp.asarray(host_rand(rng, (2, 64)))
    return (
        gpu.q8_quantize,
        dict(x=x, q_out=poison(cp, (2, 64), np.int8), d_out=poison(cp, (2, 2), np.float16)),
        [],
    )


def b_q8_dequantize(cp, rng):
    q = cp.asarray(rng.integers(-127, 128, (2, 64)).astype(np.int8))
    d = cp.asarray(rng.random((2, 2)).astype(np.float16))
    return gpu.q8_dequantize, dict(q=q, d=d, out=poison(cp, (2, 64), F32)), []


def b_turbo_quantize(cp, rng):
    kw = dict(
        x=cp.asarray(host_rand(rng, (2, 64))),
        bits=4,
        codes_out=poison(cp, (2, 4, 8), np.uint8),
        d_out=poison(cp, (2, 4), np.float16),
    )
    return gpu.turbo_quantize, kw, []


def b_turbo_dequantize(cp, rng):
    codes = cp.asarray(rng.integers(0, 256, (2, 4, 8)).astype(np.uint8))
    d = cp.asarray(rng.random((2, 4)).astype(np.float16))
    return gpu.turbo_dequantize, dict(codes=codes, d=d, bits=4, out=poison(cp, (2, 64), F32)), []


def b_bf16_bits(cp, rng):
    return gpu.bf16_bits, dict(x=cp.asarray(host_rand(rng, 5)), out=poison(cp, 5, np.uint16)), []


def b_bf16_from_bits(cp, rng):
    from qwenref.gpu.kvcache import bf16_from_bits

    b = cp.asarray(rng.integers(0, 2**15, 5).astype(np.uint16))
    return bf16_from_bits, dict(b=b, out=poison(cp, 5, F32)), []


def b_append(cp, rng, kind="q8"):
    cache = filled_cache(cp, rng, kind=kind, max_t=24, n=20)
    kw = dict(
        k=cp.asarray(host_rand(rng, (3, 2, 64))),
        v=cp.asarray(host_rand(rng, (3, 2, 64))),
        index_k=cp.asarray(host_rand(rng, (3, 32))),
    )
    return cache.append, kw, [cache]


def b_append_turbo4(cp, rng):
    return b_append(cp, rng, "turbo4")


def b_append_full(cp, rng):
    """3 valid tokens after the 23 stored of max_t 24."""
    call, kw, (cache,) = b_append(cp, rng)
    cache.length = 23
    return call, kw, [cache]


def b_keys(cp, rng):
    cache = filled_cache(cp, rng)
    return cache.keys, dict(t_len=20), [cache]


def b_indexer_queries(cp, rng):
    kw = dict(
        q_raw=cp.asarray(host_rand(rng, (2, 2, 32))),
        q_norm_w=cp.asarray(host_rand(rng, 32)),
        positions=cp.asarray(np.array([7, 8], np.int32)),
        rotary_dim=16,
        theta=1e4,
        out=poison(cp, (2, 2, 32), F32),
    )
    return gpu.indexer_queries, kw, []


def b_update_block_keys(cp, rng):
    cache = filled_cache(cp, rng)
    kw = dict(cache=cache, k_norm_w=cp.asarray(host_rand(rng, 32)), cfg=CFG, t0=8, t1=20)
    return gpu.update_block_keys, kw, [cache]


def b_block_scores(cp, rng):
    cache = filled_cache(cp, rng)  # 48 // 8 = 6 block slots
    kw = dict(
        q=cp.asarray(host_rand(rng, (2, 2, 32))),
        cache=cache,
        base_pos=18,
        out=poison(cp, (2, 6), F32),
    )
    return gpu.block_scores, kw, [cache]


def b_select_rows(cp, rng):
    cache = filled_cache(cp, rng)
    kw = dict(
        q=cp.asarray(host_rand(rng, (2, 2, 32))),
        cache=cache,
        base_pos=18,
        cfg=CFG,
        sel_idx_out=poison(cp, (2, 40), np.int32),  # kblk·R + R = 40
        sel_n_out=poison(cp, 2, np.int32),
        mask_out=poison(cp, (2, 6), np.uint8),
        scores_out=poison(cp, (2, 6), F32),
    )
    return gpu.select_rows, kw, [cache]


def b_linear(cp, rng):
    kw = dict(x=cp.asarray(host_rand(rng, (2, 64))), w=cp.asarray(host_rand(rng, (5, 64))))
    return gpu.linear, dict(kw, out=poison(cp, (2, 5), F32)), []


def b_q8_weight(cp, rng):
    kw = dict(
        w=cp.asarray(host_rand(rng, (8, 64))),
        q_out=poison(cp, (8, 64), np.int8),
        d_out=poison(cp, (8, 2), np.float16),
    )
    return gpu.q8_weight, kw, []


def _q8(cp, rng, n_out, n_in):
    q = cp.asarray(rng.integers(-127, 128, (n_out, n_in)).astype(np.int8))
    return q, cp.asarray(rng.random((n_out, n_in // 32)).astype(np.float16))


def b_gemv_q8(cp, rng):
    q, d = _q8(cp, rng, 6, 64)
    kw = dict(x=cp.asarray(host_rand(rng, (2, 64))), q=q, d=d, out=poison(cp, (2, 6), F32))
    return gpu.gemv_q8, dict(kw, residual=cp.asarray(host_rand(rng, (2, 6)))), []


def b_gemv_f32(cp, rng):
    kw = dict(x=cp.asarray(host_rand(rng, (2, 64))), w=cp.asarray(host_rand(rng, (6, 64))))
    kw.update(out=poison(cp, (2, 6), F32), residual=cp.asarray(host_rand(rng, (2, 6))))
    return gpu.gemv_f32, kw, []


def b_gemv_segments(cp, rng):
    from qwenref.gpu.gemv import gemv_segments

    q, d = _q8(cp, rng, 6, 64)
    kw = dict(x=cp.asarray(host_rand(rng, (2, 64))), w=q, d=d, seg_ends=[2, 5])
    return gemv_segments, dict(kw, out=poison(cp, 12, F32)), []


def b_gemv_swiglu(cp, rng):
    from qwenref.gpu.gemv import gemv_swiglu

    w = cp.asarray(host_rand(rng, (6, 64)))  # float32 weights (d None): gate/up row pairs
    kw = dict(x=cp.asarray(host_rand(rng, (2, 64))), w=w, d=None, out=poison(cp, (2, 3), F32))
    return gemv_swiglu, kw, []


def b_swiglu_interleaved(cp, rng):
    from qwenref.gpu.gemv import swiglu_interleaved

    kw = dict(gu=cp.asarray(host_rand(rng, (2, 6))), out=poison(cp, (2, 3), F32))
    return swiglu_interleaved, kw, []


def b_interleave_rows(cp, rng):
    from qwenref.gpu.gemv import interleave_rows

    return interleave_rows, dict(a=cp.asarray(host_rand(rng, (3, 4))), b=cp.zeros((3, 4), F32)), []


def b_stream_read(cp, rng):
    from qwenref.gpu.stream import grid_size, stream_read

    buf = cp.asarray(rng.integers(0, 2**31, 64).astype(np.int32))
    return stream_read, dict(buf=buf, out=poison(cp, grid_size(), np.uint32)), []


def _layer(cp, rng, max_t=48, n=20):
    layer = gpu.FullAttentionLayer(CFG, layer_weights(CFG, rng))
    return layer, filled_cache(cp, rng, max_t=max_t, n=n)


def b_forward(cp, rng):
    layer, cache = _layer(cp, rng)
    kw = dict(x=cp.asarray(host_rand(rng, (2, 64))), base_pos=20, cache=cache)
    return layer.forward, dict(kw, out=poison(cp, (2, 64), F32)), [cache, layer]


def b_forward_selective(cp, rng):
    """A selective step (position 40) on a cache of more block slots than the selection kernel
    takes (max_t // R = 8193 > MAX_BLOCKS): refused before the step appends anything."""
    layer, cache = _layer(cp, rng, max_t=8 * 8193, n=40)
    kw = dict(x=cp.asarray(host_rand(rng, (1, 64))), base_pos=40, cache=cache)
    return layer.forward, kw, [cache, layer]


def b_capture(cp, rng):
    layer, cache = _layer(cp, rng)
    kw = dict(x=cp.asarray(host_rand(rng, (2, 64))), base_pos=20, cache=cache)
    return layer.capture, kw, [cache, layer]


TE, VE = TypeError, ValueError
NO_INDEXER = CFG.replace(
    indexer_n_heads=0, indexer_head_dim=0, indexer_compress_ratio=0, indexer_budget=0
)
# (entry, builder, [(argument, fault class, make the bad value, error), ...]); the argument
# is also the name the message must start with
# fmt: off
ENTRIES = [
    ("rms_norm", b_rms_norm, [
        ("x", "host", host, TE), ("x", "dtype", dtype(np.float64), TE),
        ("x", "strided", strided, VE), ("x", "empty last axis", shape(3, 0), VE),
        ("weight", "shape", shape(65), VE), ("weight", "dtype", dtype(np.float16), TE),
        ("weight", "host", host, TE),
        ("eps", "negative", val(-1.0), VE), ("eps", "nan", val(np.nan), VE),
        ("eps", "str", val("1e-6"), TE), ("eps", "bool", val(True), TE),
        ("zero_centered", "int", val(1), TE),
        ("out", "shape", shape(3, 63), VE), ("out", "dtype", dtype(np.float64), TE),
        ("out", "host", host, TE), ("out", "strided", strided, VE),
        ("impl", "unknown", val("v9"), VE),
    ]),
    ("add_rms_norm", b_add_rms_norm, [
        ("residual", "shape", shape(2, 64), VE), ("residual", "host", host, TE),
        ("residual", "dtype", dtype(np.float16), TE), ("x", "strided", strided, VE),
        ("sum_out", "shape", shape(3, 32), VE), ("sum_out", "dtype", dtype(np.float64), TE),
        ("out", "shape", shape(3, 65), VE), ("eps", "inf", val(np.inf), VE),
        ("impl", "unknown", val("v2"), VE),
    ]),
    ("wht", b_wht, [
        ("x", "last axis not a power of two", shape(3, 48), VE),
        ("x", "last axis past 1024", shape(1, 2048), VE), ("x", "0-d", shape(), VE),
        ("x", "host", host, TE), ("x", "dtype", dtype(np.float16), TE),
        ("x", "strided", strided, VE), ("inverse", "int", val(1), TE),
        ("out", "shape", shape(3, 32), VE), ("out", "dtype", dtype(np.float64), TE),
        ("impl", "unknown", val("v1 "), VE),
    ]),
    ("qk_norm_rope", b_qk_norm_rope, [
        ("qg", "ndim", shape(2, 512), VE), ("qg", "last axis", shape(2, 4, 130), VE),
        ("qg", "host", host, TE), ("qg", "strided", strided, VE),
        ("k", "rows", shape(3, 2, 64), VE), ("k", "dtype", dtype(np.float16), TE),
        ("q_weight", "shape", shape(65), VE), ("k_weight", "dtype", dtype(np.float64), TE),
        ("positions", "dtype", dtype(np.int64), TE), ("positions", "shape", shape(3), VE),
        ("positions", "host", host, TE),
        ("rotary_dim", "odd", val(15), VE), ("rotary_dim", "past head_dim", val(66), VE),
        ("rotary_dim", "negative", val(-2), VE), ("rotary_dim", "float", val(16.0), TE),
        ("rotary_dim", "bool", val(True), TE),
        ("theta", "zero", val(0.0), VE), ("theta", "inf", val(np.inf), VE),
        ("theta", "str", val("1e4"), TE), ("eps", "negative", val(-1e-6), VE),
        ("q_out", "shape", shape(2, 4, 128), VE), ("k_out", "dtype", dtype(np.float64), TE),
        ("k_out", "strided", strided, VE), ("impl", "unknown", val("V2"), VE),
    ]),
    ("head_norm_rope", b_head_norm_rope, [
        ("x", "last axis strided", strided, VE), ("x", "ndim", shape(2, 192), VE),
        ("x", "host", host, TE), ("x", "dtype", dtype(np.float64), TE),
        ("weight", "shape", shape(63), VE), ("positions", "dtype", dtype(np.uint32), TE),
        ("rotary_dim", "past head_dim", val(66), VE), ("out", "shape", shape(2, 3, 63), VE),
        ("impl", "unknown", val("v2"), VE),
    ]),
    ("q8_quantize", b_q8_quantize, [
        ("x", "last axis not a multiple of 32", shape(2, 48), VE), ("x", "host", host, TE),
        ("x", "dtype", dtype(np.float16), TE), ("x", "strided", strided, VE),
        ("q_out", "dtype", dtype(np.uint8), TE), ("d_out", "shape", shape(2, 3), VE),
    ]),
    ("q8_dequantize", b_q8_dequantize, [
        ("q", "dtype", dtype(np.uint8), TE), ("q", "last axis", shape(2, 40), VE),
        ("d", "shape", shape(2, 3), VE), ("d", "dtype", dtype(np.float32), TE),
        ("d", "host", host, TE), ("out", "shape", shape(2, 32), VE),
    ]),
    ("turbo_quantize", b_turbo_quantize, [
        ("x", "last axis not a multiple of 16", shape(2, 40), VE), ("x", "host", host, TE),
        ("bits", "zero", val(0), VE), ("bits", "past 8", val(9), VE),
        ("bits", "bool", val(True), VE), ("bits", "float", val(4.0), VE),
        ("codes_out", "shape", shape(2, 4, 6), VE), ("d_out", "dtype", dtype(np.float32), TE),
    ]),
    ("turbo_dequantize", b_turbo_dequantize, [
        ("codes", "last axis != 2 bits", shape(2, 4, 6), VE),
        ("codes", "dtype", dtype(np.int8), TE), ("d", "shape", shape(2, 5), VE),
        ("bits", "past 8", val(9), VE), ("out", "dtype", dtype(np.float64), TE),
    ]),
    ("bf16_bits", b_bf16_bits, [
        ("x", "host", host, TE), ("x", "dtype", dtype(np.float64), TE),
        ("out", "dtype", dtype(np.int16), TE), ("out", "shape", shape(4), VE),
    ]),
    ("bf16_from_bits", b_bf16_from_bits, [
        ("b", "dtype", dtype(np.int16), TE), ("out", "shape", shape(6), VE),
    ]),
    ("KVCache.append", b_append, [
        ("k", "host", host, TE), ("k", "dtype", dtype(np.float64), TE),
        ("k", "kv heads", shape(3, 3, 64), VE), ("k", "strided", strided, VE),
        ("v", "rows", shape(2, 2, 64), VE), ("v", "dtype", dtype(np.float16), TE),
        ("v", "host", host, TE), ("index_k", "missing", val(None), VE),
        ("index_k", "shape", shape(3, 33), VE), ("index_k", "dtype", dtype(np.float64), TE),
        ("impl", "unknown", val("v9"), VE),
    ]),
    ("KVCache.append turbo4", b_append_turbo4, [
        ("k", "strided", strided, VE), ("v", "rows", shape(4, 2, 64), VE),
        ("index_k", "host", host, TE), ("impl", "unknown", val(0), VE),
    ]),
    ("KVCache.append full", b_append_full, [
        ("k", "full cache (23 + 3 > max_t 24)", as_built, VE),
    ]),
    ("KVCache.keys", b_keys, [
        ("t_len", "past len", val(21), VE), ("t_len", "negative", val(-1), VE),
        ("t_len", "bool", val(True), TE), ("t_len", "float", val(3.0), TE),
    ]),
    ("indexer_queries", b_indexer_queries, [
        ("q_raw", "ndim", shape(2, 64), VE),
        ("q_raw", "width past MAX_IHD", shape(1, 1, 520), VE),
        ("q_raw", "host", host, TE), ("q_norm_w", "shape", shape(31), VE),
        ("positions", "dtype", dtype(np.int64), TE),
        ("rotary_dim", "odd", val(15), VE), ("rotary_dim", "past width", val(34), VE),
        ("rotary_dim", "bool", val(False), TE), ("theta", "nan", val(np.nan), VE),
        ("eps", "str", val("0"), TE), ("out", "shape", shape(2, 2, 31), VE),
    ]),
    ("update_block_keys", b_update_block_keys, [
        ("cfg", "not a config", val({"indexer_compress_ratio": 8}), TE),
        ("cfg", "no indexer", val(NO_INDEXER), VE),
        ("cfg", "other indexer width", val(CFG.replace(indexer_head_dim=16)), VE),
        ("cache", "golden cache", golden_cache, TE),
        ("k_norm_w", "shape", shape(33), VE), ("k_norm_w", "host", host, TE),
        ("t0", "negative", val(-1), VE), ("t0", "bool", val(True), TE),
        ("t1", "before t0", val(7), VE), ("t1", "past len(cache)", val(21), VE),
        ("impl", "unknown", val("v9"), VE),
    ]),
    ("block_scores", b_block_scores, [
        ("q", "width", shape(2, 2, 16), VE), ("q", "host", host, TE),
        ("q", "no heads", shape(2, 0, 32), VE), ("base_pos", "past len(cache)", val(19), VE),
        ("base_pos", "negative", val(-1), VE), ("base_pos", "bool", val(True), TE),
        ("cache", "golden cache", golden_cache, TE),
        ("out", "shape", shape(2, 5), VE), ("impl", "unknown", val("v9"), VE),
    ]),
    ("select_rows", b_select_rows, [
        ("q", "dtype", dtype(np.float64), TE), ("base_pos", "past len(cache)", val(19), VE),
        ("cfg", "not a config", val(None), TE),
        ("sel_idx_out", "shape", shape(2, 39), VE), ("sel_n_out", "dtype", dtype(np.int64), TE),
        ("mask_out", "dtype", dtype(np.bool_), TE), ("scores_out", "shape", shape(2, 7), VE),
        ("scores_out", "host", host, TE), ("impl", "unknown", val("v9"), VE),
    ]),
    ("linear", b_linear, [
        ("x", "no rows", shape(0, 64), VE), ("x", "host", host, TE),
        ("x", "strided", strided, VE), ("w", "dtype", dtype(np.float64), TE),
        ("w", "ndim", shape(64), VE), ("out", "shape", shape(2, 6), VE),
    ]),
    ("q8_weight", b_q8_weight, [
        ("w", "input dim not a multiple of 32", shape(8, 48), VE), ("w", "host", host, TE),
        ("q_out", "dtype", dtype(np.uint8), TE), ("d_out", "shape", shape(8, 3), VE),
    ]),
    ("gemv_q8", b_gemv_q8, [
        ("q", "input dim", shape(6, 96), VE), ("x", "misaligned", misaligned, VE),
        ("x", "host", host, TE), ("q", "dtype", dtype(np.uint8), TE),
        ("d", "missing", val(None), TE), ("d", "shape", shape(6, 1), VE),
        ("d", "dtype", dtype(np.float32), TE), ("out", "dtype", dtype(np.float64), TE),
        ("residual", "shape", shape(2, 5), VE), ("residual", "host", host, TE),
        ("impl", "unknown", val("v9"), VE),
    ]),
    ("gemv_f32", b_gemv_f32, [
        ("w", "input dim", shape(6, 60), VE), ("w", "misaligned", misaligned, VE),
        ("w", "dtype", dtype(np.float16), TE), ("x", "strided", strided, VE),
        ("residual", "dtype", dtype(np.float64), TE), ("out", "shape", shape(2, 7), VE),
    ]),
    ("gemv_segments", b_gemv_segments, [
        ("seg_ends", "descending", val([5, 2]), VE), ("seg_ends", "past n_out", val([2, 7]), VE),
        ("seg_ends", "five ends", val([1, 2, 3, 4, 5]), VE),
        ("seg_ends", "negative", val([-1, 2]), VE), ("seg_ends", "bool", val([True]), TE),
        ("seg_ends", "str", val("25"), TE), ("out", "shape", shape(2, 6), VE),
        ("d", "dtype", dtype(np.float32), TE),
    ]),
    ("gemv_swiglu", b_gemv_swiglu, [
        ("w", "odd rows", shape(5, 64), VE), ("out", "shape", shape(2, 6), VE),
        ("x", "host", host, TE),
    ]),
    ("swiglu_interleaved", b_swiglu_interleaved, [
        ("gu", "odd columns", shape(2, 5), VE), ("gu", "dtype", dtype(np.float64), TE),
        ("out", "shape", shape(2, 6), VE),
    ]),
    ("interleave_rows", b_interleave_rows, [
        ("a", "list", val([[1.0]]), TE), ("b", "host", host, TE),
        ("b", "shape", shape(3, 5), VE), ("b", "dtype", dtype(np.float64), TE),
    ]),
    ("stream_read", b_stream_read, [
        ("buf", "nbytes not a multiple of 16", shape(5), VE),
        ("buf", "misaligned", misaligned, VE), ("buf", "host", host, TE),
        ("buf", "strided", strided, VE), ("out", "shape", shape(3), VE),
        ("out", "dtype", dtype(np.int32), TE),
    ]),
    ("FullAttentionLayer.forward", b_forward, [
        ("x", "host", host, TE), ("x", "dtype", dtype(np.float64), TE),
        ("x", "hidden", shape(2, 63), VE), ("x", "no rows", shape(0, 64), VE),
        ("x", "strided", strided, VE),
        ("x", "full cache (20 + 29 > max_t 48)", shape(29, 64), VE),
        ("base_pos", "not len(cache)", val(19), VE), ("base_pos", "negative", val(-1), VE),
        ("base_pos", "bool", val(True), TE), ("base_pos", "float", val(20.0), TE),
        ("cache", "golden cache", golden_cache, TE),
        ("cache", "other config", other_config_cache, VE),
        ("out", "shape", shape(2, 65), VE), ("out", "dtype", dtype(np.float16), TE),
        ("out", "host", host, TE), ("trace", "list", val([]), TE),
        ("on_stage", "not callable", val("print"), TE),
    ]),
    ("FullAttentionLayer.forward selective", b_forward_selective, [
        ("cache", "more block slots than the selection takes", as_built, VE),
    ]),
    ("FullAttentionLayer.capture", b_capture, [
        ("x", "host", host, TE), ("base_pos", "not len(cache)", val(21), VE),
        ("cache", "golden cache", golden_cache, TE),
    ]),
]
# fmt: on
BAD_AS_BUILT = {e for e, _, faults in ENTRIES if any(f[2] is as_built for f in faults)}

# one parameter per case, so a run that covers each parameter value once (the sanitizer's quick
# selection, tests/conftest.py) still runs every case
CASES = [
    pytest.param((entry, build, arg, make, exc), id=f"{entry}-{arg}-{fault}")
    for entry, build, faults in ENTRIES
    for arg, fault, make, exc in faults
]


def checksum(cp, obj):
    """What a call could change, as plain values: arrays by a hash of their bytes (shape and
    dtype included), containers and qwenref objects by their parts. A layer's per-step scratch
    buffers are listed by row count only (a step rewrites them whole)."""
    if isinstance(obj, (cp.ndarray, np.ndarray)):
        h = np.ascontiguousarray(cp.asnumpy(obj))
        return (h.dtype.str, h.shape, hashlib.sha256(h.tobytes()).hexdigest())
    if isinstance(obj, dict):
        return {k: checksum(cp, v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [checksum(cp, v) for v in obj]
    if type(obj).__module__.startswith("qwenref") and hasattr(obj, "__dict__"):
        parts = dict(vars(obj))
        if "_scratch" in parts:
            parts["_scratch"] = sorted(parts["_scratch"])
        return (type(obj).__name__, checksum(cp, parts))
    return obj


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES)
def test_gpu_refuses_bad_input(cp, case):
    entry, build, arg, make, exc = case
    call, kw, stateful = build(cp, np.random.default_rng(RNG_SEED))
    kw[arg] = make(cp, kw.get(arg))
    before = checksum(cp, (kw, stateful))
    with pytest.raises(exc) as err:
        call(**kw)
    assert re.match(rf"{re.escape(arg)}\b", str(err.value)), str(err.value)
    cp.cuda.Device().synchronize()  # nothing was queued; a stray launch would have landed here
    assert checksum(cp, (kw, stateful)) == before


@pytest.mark.gpu
@pytest.mark.parametrize("entry,build", [(e, b) for e, b, _ in ENTRIES if e not in BAD_AS_BUILT])
def test_the_valid_arguments_run(cp, entry, build):
    """Each builder's own arguments are valid (so each fault above is the one thing wrong) and
    its out= buffers hold their poison until the call."""
    call, kw, _ = build(cp, np.random.default_rng(RNG_SEED))
    for name, a in kw.items():
        if name.endswith("out") and a is not None:
            h, want = cp.asnumpy(a), cp.asnumpy(poison(cp, a.shape, a.dtype))
            assert np.array_equal(h.view(np.uint8), want.view(np.uint8)), name
    if entry != "FullAttentionLayer.capture":  # capture wants a forward first (its docstring)
        call(**kw)
    cp.cuda.Device().synchronize()


@pytest.mark.gpu
def test_the_layer_wants_its_weights_on_the_host(cp):
    w = {name: cp.asarray(a) for name, a in layer_weights(CFG, np.random.default_rng(0)).items()}
    with pytest.raises(TypeError, match=r"^w\['"):
        gpu.FullAttentionLayer(CFG, w)


@pytest.mark.gpu
def test_an_array_on_another_device_is_refused(cp):
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("one GPU: no other device to put an array on")
    with cp.cuda.Device(1):
        x = cp.zeros((3, 64), F32)
    out = poison(cp, (3, 64), F32)
    with pytest.raises(ValueError, match=r"^x is on device 1"):
        gpu.rms_norm(x, cp.zeros(64, F32), out=out)
    assert cp.isnan(out).all()


# ---- checked before CuPy is touched: these run on any machine ---------------------------------
# Plain Python arguments and impl come first in every wrapper, so host arrays (never reached)
# stand in for the GPU ones.
HX, HW = np.zeros((3, 64), F32), np.zeros(64, F32)
HQG, HK, HPOS = np.zeros((2, 4, 128), F32), np.zeros((2, 2, 64), F32), np.zeros(2, np.int32)


def _layer_args(cfg):
    return cfg, layer_weights(cfg, np.random.default_rng(0))


def _rope(**kw):
    args = dict(qg=HQG, k=HK, q_weight=HW, k_weight=HW, positions=HPOS, rotary_dim=16, theta=1e4)
    return gpu.qk_norm_rope(**{**args, **kw})


def _iq(**kw):
    args = dict(q_raw=HK, q_norm_w=HW, positions=HPOS, rotary_dim=16, theta=1e4)
    return gpu.indexer_queries(**{**args, **kw})


def _head(**kw):
    from qwenref.gpu.rope import head_norm_rope

    return head_norm_rope(
        **{**dict(x=HK, weight=HW, positions=HPOS, rotary_dim=16, theta=1e4), **kw}
    )


def _gemv(name, *args, **kw):
    from qwenref.gpu import gemv

    return getattr(gemv, name)(*args, **kw)


def _stream(name, *args):
    from qwenref.gpu import stream

    return getattr(stream, name)(*args)


# (id, call, error, the argument the message starts with)
# fmt: off
CPU_CASES = [
    ("rms_norm eps < 0", lambda: gpu.rms_norm(HX, HW, eps=-1.0), VE, "eps"),
    ("rms_norm eps str", lambda: gpu.rms_norm(HX, HW, eps="1e-6"), TE, "eps"),
    ("rms_norm eps nan", lambda: gpu.rms_norm(HX, HW, eps=np.nan), VE, "eps"),
    ("rms_norm zero_centered int", lambda: gpu.rms_norm(HX, HW, zero_centered=1), TE,
     "zero_centered"),
    ("add_rms_norm eps inf", lambda: gpu.add_rms_norm(HX, HX, HW, eps=np.inf), VE, "eps"),
    ("wht inverse None", lambda: gpu.wht(HX, inverse=None), TE, "inverse"),
    ("wht impl", lambda: gpu.wht(HX, impl="v2"), VE, "impl"),
    ("qk_norm_rope rotary_dim odd", lambda: _rope(rotary_dim=15), VE, "rotary_dim"),
    ("qk_norm_rope rotary_dim bool", lambda: _rope(rotary_dim=True), TE, "rotary_dim"),
    ("qk_norm_rope rotary_dim < 0", lambda: _rope(rotary_dim=-2), VE, "rotary_dim"),
    ("qk_norm_rope theta 0", lambda: _rope(theta=0), VE, "theta"),
    ("qk_norm_rope theta inf", lambda: _rope(theta=np.inf), VE, "theta"),
    ("qk_norm_rope eps str", lambda: _rope(eps="0"), TE, "eps"),
    ("head_norm_rope theta str", lambda: _head(theta="1e4"), TE, "theta"),
    ("indexer_queries rotary_dim float", lambda: _iq(rotary_dim=16.0), TE, "rotary_dim"),
    ("indexer_queries theta nan", lambda: _iq(theta=np.nan), VE, "theta"),
    ("indexer_queries eps < 0", lambda: _iq(eps=-1.0), VE, "eps"),
    ("turbo_quantize bits 9", lambda: gpu.turbo_quantize(HX, 9), VE, "bits"),
    ("turbo_dequantize bits bool", lambda: gpu.turbo_dequantize(HX, HX, True), VE, "bits"),
    ("update_block_keys cfg dict",
     lambda: gpu.update_block_keys(None, HW, {}, 0, 8), TE, "cfg"),
    ("update_block_keys cfg without indexer",
     lambda: gpu.update_block_keys(None, HW, NO_INDEXER, 0, 8), VE, "cfg"),
    ("update_block_keys t0 bool", lambda: gpu.update_block_keys(None, HW, CFG, True, 8), TE,
     "t0"),
    ("update_block_keys t1 < t0", lambda: gpu.update_block_keys(None, HW, CFG, 9, 8), VE, "t1"),
    ("update_block_keys impl",
     lambda: gpu.update_block_keys(None, HW, CFG, 0, 8, impl="v2"), VE, "impl"),
    ("block_scores base_pos < 0", lambda: gpu.block_scores(HK, None, -1), VE, "base_pos"),
    ("block_scores base_pos float", lambda: gpu.block_scores(HK, None, 1.0), TE, "base_pos"),
    ("select_rows cfg None", lambda: gpu.select_rows(HK, None, 0, None), TE, "cfg"),
    ("select_rows base_pos bool", lambda: gpu.select_rows(HK, None, False, CFG), TE, "base_pos"),
    ("gemv_segments seg_ends str",
     lambda: _gemv("gemv_segments", HX, HX, None, "12"), TE, "seg_ends"),
    ("gemv_segments seg_ends descending",
     lambda: _gemv("gemv_segments", HX, HX, None, [3, 1]), VE, "seg_ends"),
    ("gemv_segments seg_ends bool",
     lambda: _gemv("gemv_segments", HX, HX, None, np.array([True])), TE, "seg_ends"),
    ("gemv_q8 impl", lambda: gpu.gemv_q8(HX, HX, HX, impl="v9"), VE, "impl"),
    ("interleave_rows a list", lambda: _gemv("interleave_rows", [[1.0]], HX), TE, "a"),
    ("interleave_rows b list", lambda: _gemv("interleave_rows", HX, HX.tolist()), TE, "b"),
    ("interleave_rows b dtype",
     lambda: _gemv("interleave_rows", HX, HX.astype(np.float64)), TE, "b"),
    ("interleave_rows b shape", lambda: _gemv("interleave_rows", HX, HX[:2]), VE, "b"),
    ("pick_kernel nb 9", lambda: _gemv("pick_kernel", "q8", 9, 64), VE, "nb"),
    ("pick_kernel nb bool", lambda: _gemv("pick_kernel", "q8", True, 64), TE, "nb"),
    ("pick_kernel kind", lambda: _gemv("pick_kernel", "bf16", 1, 64), VE, "kind"),
    ("pick_kernel n_out < 0", lambda: _gemv("pick_kernel", "f32", 1, -1), VE, "n_out"),
    ("rung_kernel nb bool",
     lambda: _gemv("rung_kernel", "gemv", "v1", kind="q8", nb=True, n_out=8), TE, "nb"),
    ("checked_buffers nbytes < 16", lambda: _stream("checked_buffers", 8, 2), VE, "nbytes"),
    ("checked_buffers n 0", lambda: _stream("checked_buffers", 64, 0), VE, "n"),
    ("checked_buffers n bool", lambda: _stream("checked_buffers", 64, True), TE, "n"),
    ("KVCache cfg dict", lambda: gpu.KVCache({"head_dim": 64}), TE, "cfg"),
    ("KVCache max_t 0", lambda: gpu.KVCache(CFG, max_t=0), VE, "max_t"),
    ("KVCache max_t bool", lambda: gpu.KVCache(CFG, max_t=True), TE, "max_t"),
    ("KVCache kind unknown", lambda: gpu.KVCache(CFG, kind="q4"), VE, "kind"),
    ("KVCache kind int", lambda: gpu.KVCache(CFG, kind=8), TE, "kind"),
    ("KVCache q8 head_dim 48",
     lambda: gpu.KVCache(CFG.replace(head_dim=48), kind="q8"), VE, "head_dim"),
    ("KVCache turbo head_dim 2048",
     lambda: gpu.KVCache(CFG.replace(head_dim=2048), kind="turbo4"), VE, "head_dim"),
    ("KVCache.append impl", lambda: object.__new__(gpu.KVCache).append(HK, HK, impl="v9"), VE,
     "impl"),
    ("KVCache.from_golden numpy", lambda: gpu.KVCache.from_golden(HX), TE, "g"),
    ("layer weight_format",
     lambda: gpu.FullAttentionLayer(*_layer_args(CFG), weight_format="int4"), VE,
     "weight_format"),
    ("layer sparse_v 1", lambda: gpu.FullAttentionLayer(*_layer_args(CFG), sparse_v=1.0), VE,
     "sparse_v"),
    ("layer n_splits 0", lambda: gpu.FullAttentionLayer(*_layer_args(CFG), n_splits=0), VE,
     "n_splits"),
    ("layer n_splits bool",
     lambda: gpu.FullAttentionLayer(*_layer_args(CFG), n_splits=True), TE, "n_splits"),
    ("layer n_splits past MAX_SPLITS",
     lambda: gpu.FullAttentionLayer(*_layer_args(CFG), n_splits=1025), VE, "n_splits"),
    ("layer cfg dict", lambda: gpu.FullAttentionLayer({}, {}), TE, "cfg"),
    ("layer w list", lambda: gpu.FullAttentionLayer(CFG, []), TE, "w"),
    ("layer w missing k_proj",
     lambda: gpu.FullAttentionLayer(CFG, {k: v for k, v in _layer_args(CFG)[1].items()
                                          if "k_proj" not in k}), VE, "w"),
    ("layer head_dim 96",
     lambda: gpu.FullAttentionLayer(*_layer_args(CFG.replace(head_dim=96))), VE, "cfg.head_dim"),
    ("layer indexer_head_dim 520",
     lambda: gpu.FullAttentionLayer(*_layer_args(CFG.replace(indexer_head_dim=520))), VE,
     "cfg.indexer_head_dim"),
    ("layer n_rep * head_dim past the partials' merge",
     lambda: gpu.FullAttentionLayer(*_layer_args(CFG.replace(
         head_dim=256, num_attention_heads=24, num_key_value_heads=2))), VE, "cfg"),
    ("layer indexer queries past shared memory",
     lambda: gpu.FullAttentionLayer(*_layer_args(CFG.replace(indexer_n_heads=16,
                                                             indexer_head_dim=512))), VE, "cfg"),
]
# fmt: on


@pytest.mark.parametrize("call,exc,name", [c[1:] for c in CPU_CASES], ids=[c[0] for c in CPU_CASES])
def test_refused_before_the_gpu_is_touched(call, exc, name):
    with pytest.raises(exc) as err:
        call()
    assert re.match(rf"{re.escape(name)}\b", str(err.value)), str(err.value)
