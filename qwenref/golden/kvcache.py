"""kvcache — q8 (Q8_0), turbo-n (WHT + uniform n-bit, groups of 16) and bf16 formats, and the
KVCache that stores K/V in those formats and in tq-b (qwenref.golden.tq: a sign flip and the
WHT, then a Lloyd–Max codebook with one scale per vector) plus the indexer state.

Stored layout: qwenref/layout.py (its docstring has the table: which arrays each side kind
stores, their shapes and dtypes, bytes per token). The GPU cache stores the same arrays, as cupy
arrays; both caches are subclasses of qwenref.kvcache_base.KVCacheBase, which allocates them
and reads them back. What this module adds is the numpy encoding of each format.

Bad input: every function here refuses NaN and +-inf in its float inputs (ValueError naming the
argument) before computing, so no NaN is ever cast to an integer code; a quantizer also refuses
a group whose float16 scale would overflow, and bf16_bits a value that would round to +-inf, so
every stored scale and bf16 value is finite. bf16_from_bits refuses the bit patterns of NaN and
+-inf. KVCache.append checks everything before it writes: a refused append stores nothing.

Precision: every quantizer works in float32 exactly as written (products, reciprocals and
rounding of the scale are float32 operations, the scale is stored as float16 with round to
nearest even). Both dequantizers are exact in float32: an int8 (or a half-integer code level,
at most 8 significant bits) times a float16 scale (11 bits) fits in float32's 24 bits.
"""

import ml_dtypes
import numpy as np

from .._args import bits_arg, check_finite, check_scales, f32_array, typed_array
from ..kvcache_base import KVCacheBase
from ..layout import (
    CACHE_KINDS,
    Q8_GROUP,
    Q8_LIMIT,
    TURBO_GROUP,
    rotation_signs,
    tq_bits,
    turbo_bits,
    turbo_limit,
)
from .bitpack import pack_codes, unpack_codes
from .tq import check_tq_gamma, tq_codebook, tq_dequantize, tq_quantize, tq_quantize_core
from .wht import wht_core

__all__ = [
    "CACHE_KINDS",
    "q8_quantize",
    "q8_quantize_core",
    "q8_dequantize",
    "turbo_quantize",
    "turbo_quantize_core",
    "turbo_dequantize",
    "turbo_pack",
    "turbo_unpack",
    "bf16_round",
    "bf16_bits",
    "bf16_from_bits",
    "tq_codebook",
    "tq_quantize",
    "tq_dequantize",
    "KVCache",
]


# ---- argument checks ------------------------------------------------------------------------
def _float32_array(name, a):
    """a as a finite float32 array (floating dtypes only)."""
    return f32_array(name, a, ints=False)


def _groups(name, x, size):
    """x [..., n] -> view [..., n // size, size]; ValueError unless size divides n."""
    if x.ndim < 1 or x.shape[-1] % size:
        raise ValueError(f"{name}'s last axis must be a multiple of {size}, got shape {x.shape}")
    return x.reshape(x.shape[:-1] + (x.shape[-1] // size, size))


# ---- q8 (llama.cpp Q8_0) --------------------------------------------------------------------
def _round_half_away(v):
    """C roundf on float32: nearest integer, exact .5 ties away from zero. np.round rounds ties
    to even, and trunc(v + 0.5·sign) is wrong at 0.49999997 (the add rounds up to 1)."""
    a = np.abs(v)
    f = np.floor(a)
    r = f + (a - f >= np.float32(0.5))  # a - f is exact in float32 for |v| < 2**23
    return np.copysign(r, v)


def q8_quantize(x):
    """Q8_0 (llama.cpp quantize_row_q8_0_ref) over groups of 32 on the last axis.

    Per group, in float32: amax = max|x|, d32 = amax / 127, d = float16(d32),
    id = 1 / d32 (0 when d32 == 0), q = roundf(x · id) (ties away from zero), int8.
    Returns (q int8 [..., n], d float16 [..., n // 32]). n % 32 != 0 -> ValueError.
    """
    x = _float32_array("x", x)
    _groups("x", x, Q8_GROUP)
    q, d = q8_quantize_core(x)
    check_scales("x", d, Q8_LIMIT)
    return q, d


def q8_quantize_core(x):
    """q8_quantize's formula on a checked finite float32 x; d may hold inf (a group at or past
    layout.Q8_LIMIT): the caller checks it with check_scales, naming its own argument."""
    xg = _groups("x", x, Q8_GROUP)  # [..., g, 32]
    amax = np.max(np.abs(xg), axis=-1, initial=np.float32(0))  # [..., g]
    d32 = amax / np.float32(127)  # [..., g] f32
    with np.errstate(divide="ignore"):
        inv = np.where(d32 != 0, np.float32(1) / d32, np.float32(0))  # [..., g] f32
    q = _round_half_away(xg * inv[..., None])  # [..., g, 32] f32
    with np.errstate(over="ignore"):
        return q.astype(np.int8).reshape(x.shape), d32.astype(np.float16)


def q8_dequantize(q, d):
    """q * float32(d), broadcast over groups of 32. Returns float32 [..., n]."""
    q = typed_array("q", q, np.int8)
    d = typed_array("d", d, np.float16)
    qg = _groups("q", q, Q8_GROUP)  # [..., g, 32]
    if d.shape != qg.shape[:-1]:
        raise ValueError(
            f"d must have shape {qg.shape[:-1]} (one scale per 32 of q), got {d.shape}"
        )
    check_finite("d", d)
    return (qg.astype(np.float32) * d.astype(np.float32)[..., None]).reshape(q.shape)


# ---- turbo-n --------------------------------------------------------------------------------
def turbo_pack(c, bits):
    """codes uint8 [..., 16] (values < 2**bits) -> packed uint8 [..., 2 * bits]; code i at bits
    [bits*i, bits*i + bits) of the little-endian group."""
    bits = bits_arg(bits)
    c = np.asarray(c)
    if not np.issubdtype(c.dtype, np.integer):
        raise TypeError(f"c must be an integer array, got dtype {c.dtype}")
    if c.ndim < 1 or c.shape[-1] != TURBO_GROUP:
        raise ValueError(f"c's last axis must be {TURBO_GROUP} codes, got shape {c.shape}")
    if c.size and (c.min() < 0 or c.max() >= 1 << bits):
        raise ValueError(f"c must hold codes in [0, {(1 << bits) - 1}] for bits={bits}")
    return pack_codes(c, bits)  # [..., 2*bits]


def turbo_unpack(packed, bits):
    """Inverse of turbo_pack: uint8 [..., 2 * bits] -> uint8 [..., 16]."""
    bits = bits_arg(bits)
    packed = typed_array("packed", packed, np.uint8)
    if packed.ndim < 1 or packed.shape[-1] != 2 * bits:
        raise ValueError(
            f"packed's last axis must be {2 * bits} bytes for bits={bits}, got shape {packed.shape}"
        )
    return unpack_codes(packed, bits)  # [..., 16]


def turbo_quantize(x, bits):
    """Uniform mid-rise n-bit quantizer over groups of 16 on the last axis (no rotation here).

    Per group, in float32, with L = (2**n - 1) / 2: amax = max|x|, d32 = amax / L,
    d = float16(d32), c = clamp(floor(x · (1/d32) + 2**(n-1)), 0, 2**n - 1)
    (1/d32 taken as 0 when d32 == 0, so an all-zero group codes 2**(n-1)).
    Returns (codes uint8 [..., n // 16, 2 * bits], d float16 [..., n // 16]).
    """
    bits = bits_arg(bits)
    x = _float32_array("x", x)
    _groups("x", x, TURBO_GROUP)
    codes, d = turbo_quantize_core(x, bits)
    check_scales("x", d, turbo_limit(bits))
    return codes, d


def turbo_quantize_core(x, bits):
    """turbo_quantize's formula on a checked finite float32 x and bits; d may hold inf (a group
    at or past layout.turbo_limit(bits)): the caller checks it with check_scales."""
    xg = _groups("x", x, TURBO_GROUP)  # [..., g, 16]
    amax = np.max(np.abs(xg), axis=-1, initial=np.float32(0))  # [..., g]
    d32 = amax / np.float32(((1 << bits) - 1) / 2)  # [..., g] f32
    with np.errstate(divide="ignore"):
        inv = np.where(d32 != 0, np.float32(1) / d32, np.float32(0))  # [..., g] f32
    c = np.floor(xg * inv[..., None] + np.float32(1 << (bits - 1)))  # [..., g, 16] f32
    c = np.clip(c, 0, (1 << bits) - 1).astype(np.uint8)
    with np.errstate(over="ignore"):
        return turbo_pack(c, bits), d32.astype(np.float16)


def turbo_dequantize(codes, d, bits):
    """(c - (2**bits - 1) / 2) * float32(d). Returns float32 [..., n]."""
    bits = bits_arg(bits)
    d = typed_array("d", d, np.float16)
    c = turbo_unpack(codes, bits)  # [..., g, 16]
    if d.shape != c.shape[:-1]:
        raise ValueError(
            f"d must have shape {c.shape[:-1]} (one scale per group of codes), got {d.shape}"
        )
    check_finite("d", d)
    level = c.astype(np.float32) - np.float32(((1 << bits) - 1) / 2)  # [..., g, 16]
    y = level * d.astype(np.float32)[..., None]
    return y.reshape(c.shape[:-2] + (c.shape[-2] * TURBO_GROUP,))


# ---- bf16 -----------------------------------------------------------------------------------
_BF16_EXP = np.uint16(0x7F80)  # exponent all ones: +-inf or NaN
_BF16_RANGE = "holds values of magnitude >= 3.3961e38, which round to +-inf in bf16"


def _bf16_bits(x):
    return x.astype(ml_dtypes.bfloat16).view(np.uint16)


def _check_bf16_finite(name, b, what):
    if ((b & _BF16_EXP) == _BF16_EXP).any():
        raise ValueError(f"{name} {what}")


def bf16_bits(x):
    """float32 -> uint16 bf16 bit patterns, round to nearest even.

    x must be finite and below bf16's rounding limit (|x| < 3.3961e38, where rounding to nearest
    even reaches +-inf): ValueError otherwise."""
    x = _float32_array("x", x)
    b = _bf16_bits(x)
    _check_bf16_finite("x", b, _BF16_RANGE)
    return b


def bf16_from_bits(b):
    """uint16 bf16 bit patterns -> float32; the patterns of +-inf and NaN are refused."""
    b = typed_array("b", b, np.uint16)
    _check_bf16_finite("b", b, "holds bit patterns of +-inf or NaN (exponent all ones)")
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


def bf16_round(x):
    """float32 -> nearest-even bf16 value, as float32."""
    return bf16_from_bits(bf16_bits(x))


# ---- one stored side ------------------------------------------------------------------------
def _side_encode(side, x, name):
    """x finite float32 [nkv, nb, hd] (head-major) -> {array name: stored values [nkv, nb, ...]}.
    Turbo sides rotate by the WHT over hd first, tq sides by the WHT of x with the signs of
    layout.tq_signs flipped. Values the format cannot store (a float16 scale or a bf16 value
    that would be +-inf) are a ValueError naming `name`."""
    if side == "f32":
        return {"data": x}
    if side == "bf16":
        b = _bf16_bits(x)
        _check_bf16_finite(name, b, _BF16_RANGE)
        return {"data": b}
    if side == "q8":
        q, d = q8_quantize_core(x)
        check_scales(name, d, Q8_LIMIT)
        return {"q": q, "d": d}
    if side.startswith("tq"):
        y = wht_core(x * rotation_signs(side, x.shape[-1]))  # x·(±1) is exact
        codes, gamma = tq_quantize_core(y, tq_bits(side))
        check_tq_gamma(name, gamma)
        return {"codes": codes, "gamma": gamma}
    bits = turbo_bits(side)
    codes, d = turbo_quantize_core(wht_core(x), bits)
    check_scales(name, d, turbo_limit(bits))
    return {"codes": codes, "d": d}


class KVCache(KVCacheBase):
    """Per-sequence decode state: K/V as stored, raw indexer keys, block keys, length.

    KVCache(cfg, max_t=4096, kind="f32"). Attributes: cfg, max_t, kind, k_kind, v_kind
    ("f32" | "bf16" | "q8" | "turbo8" | "tq4" | ...), k_rotated, v_rotated, k_signs, v_signs,
    k_store, v_store (dicts of numpy arrays, layout in qwenref/layout.py), idx_keys, blk_keys
    (or None), and len(cache).
    ``length`` (= len(cache)) is a plain attribute so a GPU cache's to_golden() can set it.

    The class body is qwenref.kvcache_base.KVCacheBase (construction, append's order of steps,
    keys, values, copy); this class stores numpy arrays and encodes with the quantizers above.
    """

    xp = np

    def _check_append(self, k, v, index_k):
        """append's arguments: float32 numpy arrays of the config's shapes, every value finite
        (a NaN would otherwise be cast to an integer code)."""
        cfg = self.cfg
        k = typed_array("k", k, np.float32)
        v = typed_array("v", v, np.float32)
        if k.ndim != 3 or k.shape[1:] != (cfg.nkv, cfg.head_dim):
            raise ValueError(f"k must be [nb, {cfg.nkv}, {cfg.head_dim}], got shape {k.shape}")
        if v.shape != k.shape:
            raise ValueError(f"v must have k's shape {k.shape}, got {v.shape}")
        nb = k.shape[0]
        if self._index_k_given(index_k):
            index_k = typed_array("index_k", index_k, np.float32)
            if index_k.shape != (nb, cfg.indexer_head_dim):
                raise ValueError(
                    f"index_k must be [{nb}, {cfg.indexer_head_dim}], got shape {index_k.shape}"
                )
            check_finite("index_k", index_k)
        check_finite("k", k)
        check_finite("v", v)
        return k, v, index_k

    def _store(self, k, v, t0):
        """Encode K and V ([nb, nkv, hd], checked) and write them at token slots t0 .. t0+nb-1.
        Both sides are encoded before either is written: a value a format cannot store is
        refused (ValueError naming k or v) and nothing is written."""
        t1 = t0 + k.shape[0]
        encoded = [
            (store, _side_encode(side, x.transpose(1, 0, 2), name))  # [nkv, nb, ...]
            for side, store, x, name in (
                (self.k_kind, self.k_store, k, "k"),
                (self.v_kind, self.v_store, v, "v"),
            )
        ]
        for store, arrays in encoded:
            for name, a in arrays.items():
                store[name][:, t0:t1] = a

    @staticmethod
    def _decode(side, stored):
        """A side's stored arrays of tokens [0, t_len) -> float32 [nkv, t_len, hd] (rotated
        domain for turbo and tq), by the dequantizers above and tq_dequantize."""
        if side == "f32":
            return stored["data"].copy()
        if side == "bf16":
            return bf16_from_bits(stored["data"])
        if side == "q8":
            return q8_dequantize(stored["q"], stored["d"])
        if side.startswith("tq"):
            return tq_dequantize(stored["codes"], stored["gamma"], tq_bits(side))
        return turbo_dequantize(stored["codes"], stored["d"], turbo_bits(side))

    def savepoint(self, nb):
        """A function that restores what an append of nb tokens, and the block-key update after
        it, can change: the layer calls it when a step fails after its append, so a failed step
        leaves the cache exactly as it was. Copies nb token slots (and their blocks)."""
        t0 = self.length
        t1 = min(t0 + nb, self.max_t)
        where = [
            (a, np.s_[:, t0:t1]) for store in (self.k_store, self.v_store) for a in store.values()
        ]
        if self.idx_keys is not None:
            R = self.cfg.indexer_compress_ratio
            where += [(self.idx_keys, np.s_[t0:t1]), (self.blk_keys, np.s_[t0 // R : t1 // R + 1])]
        saved = [(a, i, a[i].copy()) for a, i in where]

        def restore():
            for a, i, old in saved:
                a[i] = old
            self.length = t0

        return restore
