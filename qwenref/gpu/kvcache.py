"""kvcache on the GPU — q8 / turbo-n / bf16 formats and the KVCache (kernels_cuda/kvcache.cu).

Same meaning as qwenref.golden.kvcache and the same stored layout (qwenref/layout.py); the
stored arrays are cupy arrays. Codes and scales are bit-exact with the golden quantizers, and both
dequantizers are exact. The one difference: a turbo side's WHT rotation runs in float32 on the
GPU (golden: float64, rounded once), so a rotated value that sits on a code boundary can code
one level apart from the golden cache; quantizing the GPU's own rotation (gpu.wht, bit-identical
to the append's) with the golden quantizer reproduces the stored codes bit for bit.

Rungs of the appends (KVCache.append's impl=): "v0" (kernels_cuda/kvcache_v0.cu: a thread per
q8 group or per turbo row, the golden formulas written out, one launch per side) and "v1"
(kernels_cuda/kvcache.cu: the fast kernels, K and V in one launch; the default). Both store
the same bytes. f32 and bf16 sides use kvcache.cu's copies for every rung.
"""

from __future__ import annotations

import functools

import numpy as np

from .._args import bits_arg
from ..golden.kvcache import KVCache as GoldenKVCache
from ..golden.tq import tq_codebook as golden_tq_codebook
from ..kvcache_base import KVCacheBase
from ..layout import CACHE_KINDS, Q8_GROUP, TURBO_GROUP, tq_bits, turbo_bits
from ._runtime import check_array, cupy, kernel, out_array, resident_blocks, resolve_rung
from .rungs import defaults_of, kernel_module, rungs_of

__all__ = [
    "CACHE_KINDS",
    "q8_quantize",
    "q8_dequantize",
    "turbo_quantize",
    "turbo_dequantize",
    "tq_codebook",
    "tq_quantize",
    "tq_dequantize",
    "bf16_bits",
    "bf16_from_bits",
    "KVCache",
    "RUNGS",
    "DEFAULT_RUNG",
    "rung_kernel",
]

_THREADS = 128
_MAX_GRID = 1 << 20


def _grid(work, per_block):
    return (max(1, min(-(-work // per_block), _MAX_GRID)),)


def _k(fn):
    """A kernel of kvcache.cu: the formats' kernels and the f32 / bf16 copies of every rung."""
    return kernel("kvcache", fn)


# ---- rungs ----------------------------------------------------------------------------------
RUNGS = rungs_of("kvcache")  # views of the rung table (qwenref/gpu/rungs.py)
DEFAULT_RUNG = defaults_of("kvcache")
_V0_TURBO_MAX_HD = 256  # turbo_append_v0 and tq_append_v0 hold a row in a 256-float local array


def _rung(family, impl):
    return resolve_rung(RUNGS, DEFAULT_RUNG, family, impl)


def rung_kernel(family, impl=None, **shape):
    """The kernel a rung of an append family launches: "q8_append_v0", "kv_append_q8",
    "turbo_append_v0", "kv_append_turbo_n<head_dim>", "tq_append_v0" or
    "kv_append_tq_n<head_dim>" (turbo and tq v1 need head_dim=; other shape keys, e.g. nb,
    nkv, kind, bits, are accepted and do not change the name)."""
    impl = _rung(family, impl)
    if impl == "v0":
        return f"{family}_v0"
    if family == "q8_append":
        return "kv_append_q8"
    hd, cap = shape.get("head_dim"), KVCache.max_turbo_head_dim
    if (
        isinstance(hd, bool)
        or not isinstance(hd, (int, np.integer))
        or hd < 16
        or hd & (hd - 1)
        or hd > cap
    ):
        raise ValueError(
            f"head_dim must be a power of two in [16, {cap}] for {family!r} {impl!r}, got {hd!r}"
        )
    return f"kv_append_{family[: -len('_append')]}_n{int(hd)}"


def _groups_of(name, a, size):
    if a.ndim < 1 or a.shape[-1] % size:
        raise ValueError(f"{name}'s last axis must be a multiple of {size}, got shape {a.shape}")
    return a.shape[-1] // size


# ---- q8 (llama.cpp Q8_0) --------------------------------------------------------------------
def q8_quantize(x, q_out=None, d_out=None):
    """Q8_0 over groups of 32 on the last axis: (q int8 [..., n], d float16 [..., n // 32]).

    x: cupy float32 [..., n], n % 32 == 0. Bit-exact with golden.q8_quantize.
    """
    check_array("x", x, np.float32)
    g = _groups_of("x", x, Q8_GROUP)
    q_out = out_array("q_out", q_out, x.shape, np.int8)
    d_out = out_array("d_out", d_out, x.shape[:-1] + (g,), np.float16)
    groups = x.size // Q8_GROUP
    if groups:
        # 8 lanes per group: 4 groups per warp, 16 per 128-thread block
        _k("q8_quantize_f32")(
            _grid(groups, _THREADS // 8), (_THREADS,), (x, q_out, d_out, np.int64(groups))
        )
    return q_out, d_out


def q8_dequantize(q, d, out=None):
    """q * float32(d) per group of 32: float32 [..., n] (exact)."""
    check_array("q", q, np.int8)
    g = _groups_of("q", q, Q8_GROUP)
    check_array("d", d, np.float16, q.shape[:-1] + (g,))
    out = out_array("out", out, q.shape, np.float32)
    n4 = q.size // 4
    if n4:
        _k("q8_dequantize_f32")(_grid(n4, _THREADS), (_THREADS,), (q, d, out, np.int64(n4)))
    return out


# ---- turbo-n --------------------------------------------------------------------------------
def turbo_quantize(x, bits, codes_out=None, d_out=None):
    """Uniform mid-rise n-bit quantizer over groups of 16 on the last axis (no rotation here).

    x: cupy float32 [..., n], n % 16 == 0. Returns (codes uint8 [..., n // 16, 2 * bits],
    d float16 [..., n // 16]), bit-exact with golden.turbo_quantize.
    """
    bits = bits_arg(bits)
    check_array("x", x, np.float32)
    g = _groups_of("x", x, TURBO_GROUP)
    codes_out = out_array("codes_out", codes_out, x.shape[:-1] + (g, 2 * bits), np.uint8)
    d_out = out_array("d_out", d_out, x.shape[:-1] + (g,), np.float16)
    groups = x.size // TURBO_GROUP
    if groups:
        # two lanes per group of 16
        _k("turbo_quantize_f32")(
            _grid(2 * groups, _THREADS),
            (_THREADS,),
            (x, codes_out, d_out, np.int64(groups), np.int32(bits)),
        )
    return codes_out, d_out


def turbo_dequantize(codes, d, bits, out=None):
    """(c - (2**bits - 1) / 2) * float32(d): float32 [..., n] (exact)."""
    bits = bits_arg(bits)
    check_array("codes", codes, np.uint8)
    if codes.ndim < 2 or codes.shape[-1] != 2 * bits:
        raise ValueError(
            f"codes must be [..., groups, {2 * bits}] for bits={bits}, got shape {codes.shape}"
        )
    check_array("d", d, np.float16, codes.shape[:-1])
    out = out_array("out", out, codes.shape[:-2] + (codes.shape[-2] * TURBO_GROUP,), np.float32)
    groups = d.size
    if groups:
        _k("turbo_dequantize_f32")(
            _grid(groups, _THREADS), (_THREADS,), (codes, d, out, np.int64(groups), np.int32(bits))
        )
    return out


# ---- tq-b ------------------------------------------------------------------------------------
_TQ_MAX_N = 1024  # the row of kv_append_tq_n<n> is held in one warp's registers
_TQ_TABLES = {}  # (device id, bits[, "decode"]) -> the codebook (the decode's table) there


def tq_codebook_device(bits):
    """golden.tq_codebook(bits) on the current device, made once per (device, bits): the array
    the tq kernels (append, dequantize, the mma decode) take; callers must not write to it."""
    cp = cupy()
    key = (cp.cuda.Device().id, bits)
    if key not in _TQ_TABLES:
        _TQ_TABLES[key] = cp.asarray(golden_tq_codebook(bits))
    return _TQ_TABLES[key]


def tq_codebook(bits):
    """golden.tq_codebook(bits) (float32 [2^bits], ascending) as a cupy array of one's own."""
    return tq_codebook_device(bits).copy()


@functools.lru_cache(maxsize=None)
def tq_fp16_scale(bits):
    """f: the float32 in [1, 2) (a multiple of 2^-20) whose codebook f * C rounds to float16
    with the least relative error (the tensor-core decode's table holds fp16(f C) and takes 1/f
    back in q and P: tq2 to 3e-7, tq3 2e-5, tq4 9e-5, against 2e-4 to 3e-4 at f = 1). Host
    numpy, no GPU."""
    c = golden_tq_codebook(bits).astype(np.float64)
    f = 1.0 + np.arange(1 << 20, dtype=np.float64) / (1 << 20)
    err = np.zeros(f.size)
    for v in c:  # one codebook value at a time: memory stays at the grid's size
        fv = f * v
        err = np.maximum(err, np.abs(fv.astype(np.float16).astype(np.float64) / fv - 1.0))
    return np.float32(f[int(np.argmin(err))])


def tq_decode_table(bits):
    """The tensor-core decode's codebook on the current device, made once per (device, bits):
    float32 [2^bits + 1], f * C (f = tq_fp16_scale(bits)) then 1/f; callers must not write to
    it."""
    cp = cupy()
    key = (cp.cuda.Device().id, bits, "decode")
    if key not in _TQ_TABLES:
        f = tq_fp16_scale(bits)
        c = golden_tq_codebook(bits).astype(np.float32) * f
        _TQ_TABLES[key] = cp.asarray(np.append(c, np.float32(1.0) / f).astype(np.float32))
    return _TQ_TABLES[key]


def _tq_width(name, n):
    if n < 16 or n & (n - 1) or n > _TQ_MAX_N:
        raise ValueError(
            f"{name}'s last axis must be a power of two in [16, {_TQ_MAX_N}] on the GPU (one "
            f"warp holds a row), got {n}"
        )


def _tq_append_kernel(n):
    return kernel(kernel_module("tq_append", "v1"), f"kv_append_tq_n{n}")


def _tq_rows_per_warp(n):
    per_lane = 16 if n == 256 else max(4, n // 32)  # kvcache_tq.cu's TqShape: E values a lane
    return 32 // (n // per_lane)


def _tq_grid(n, rows):
    """The tq append's grid for `rows` rows of width n: enough warps for every row, at most one
    wave of resident blocks. Its warps stride over the rows, so a larger grid only adds blocks
    that each pay the set-up (sign pattern, codebook) for one trip."""
    (needed,) = _grid(-(-rows // _tq_rows_per_warp(n)), _THREADS // 32)
    return (min(needed, _tq_wave(n, cupy().cuda.Device().id)),)


@functools.lru_cache(maxsize=None)
def _tq_wave(n, device_id):
    """One wave of kv_append_tq_n<n> blocks on a device (asked of the driver once, not at every
    append)."""
    return resident_blocks(_tq_append_kernel(n), _THREADS)


def _launch_tq(
    x, codes, gamma, rows_nb, nkv, max_t, t0, bits, x1=None, c1=None, g1=None, rotate=False
):
    """kv_append_tq_n<n>: rows of x (and x1, the V side, in the same launch) -> codes, gamma."""
    n = x.shape[-1]
    sides = 1 if x1 is None else 2
    if x1 is None:
        x1, c1, g1 = x, codes, gamma
    _tq_append_kernel(n)(
        _tq_grid(n, sides * rows_nb * nkv),
        (_THREADS,),
        (
            x,
            codes,
            gamma,
            x1,
            c1,
            g1,
            tq_codebook_device(bits),
            np.int32(rows_nb),
            np.int32(nkv),
            np.int32(max_t),
            np.int32(t0),
            np.int32(bits),
            np.int32(sides),
            np.int32(1 if rotate else 0),
        ),
    )


def tq_quantize(y, bits, codes_out=None, gamma_out=None):
    """tq-b over the last axis (no rotation here): (codes uint8 [..., n * bits // 8], gamma
    float16 [...]), as golden.tq_quantize: codes bit-exact, gamma too but for a float64 sum
    order (kernels_cuda/kvcache.cu says when that can show).

    y: cupy float32 [..., n], n a power of two in [16, 1024]; bits: 1..4. Values are not read
    before the launch (a gamma past float16 is stored as inf, where golden refuses the vector).
    """
    bits = bits_arg(bits, 4, "4, 3, 2")
    check_array("y", y, np.float32)
    _tq_width("y", y.shape[-1] if y.ndim else 0)
    n = y.shape[-1]
    codes_out = out_array("codes_out", codes_out, y.shape[:-1] + (n * bits // 8,), np.uint8)
    gamma_out = out_array("gamma_out", gamma_out, y.shape[:-1], np.float16)
    rows = y.size // n
    if rows:
        _launch_tq(y, codes_out, gamma_out, rows, 1, rows, 0, bits)
    return codes_out, gamma_out


def tq_dequantize(codes, gamma, bits, out=None):
    """C[c] * float32(gamma): float32 [..., n] (exact: one float32 product), C = the codebook."""
    bits = bits_arg(bits, 4, "4, 3, 2")
    check_array("codes", codes, np.uint8)
    if codes.ndim < 1 or (8 * codes.shape[-1]) % bits:
        raise ValueError(
            f"codes' last axis must hold whole vectors of {bits}-bit codes, got shape {codes.shape}"
        )
    check_array("gamma", gamma, np.float16, codes.shape[:-1])
    n = 8 * codes.shape[-1] // bits
    out = out_array("out", out, codes.shape[:-1] + (n,), np.float32)
    rows = gamma.size
    if rows:
        kernel("kvcache_tq", "tq_dequantize_f32")(
            _grid(rows, _THREADS),
            (_THREADS,),
            (
                codes,
                gamma,
                tq_codebook_device(bits),
                out,
                np.int64(rows),
                np.int32(n),
                np.int32(bits),
            ),
        )
    return out


# ---- bf16 -----------------------------------------------------------------------------------
def bf16_bits(x, out=None):
    """float32 -> uint16 bf16 bit patterns, round to nearest even (NaN -> sign | 0x7fc0)."""
    check_array("x", x, np.float32)
    out = out_array("out", out, x.shape, np.uint16)
    if x.size:
        _k("bf16_bits_f32")(_grid(x.size, _THREADS), (_THREADS,), (x, out, np.int64(x.size)))
    return out


def bf16_from_bits(b, out=None):
    """uint16 bf16 bit patterns -> float32 (exact)."""
    check_array("b", b, np.uint16)
    out = out_array("out", out, b.shape, np.float32)
    if b.size:
        _k("bf16_to_f32")(_grid(b.size, _THREADS), (_THREADS,), (b, out, np.int64(b.size)))
    return out


# ---- the cache ------------------------------------------------------------------------------
def _side_append(side, store, x, t0, max_t, store1=None, x1=None):
    """One launch: x [nb, nkv, hd] -> rows t0 .. t0+nb-1 of every kv head's stored side.

    q8 and turbo sides may take a second side of the same kind (store1, x1: the V side) in the
    same launch."""
    nb, nkv, hd = x.shape
    rows = nb * nkv
    dims = (np.int32(nb), np.int32(nkv), np.int32(hd), np.int32(max_t), np.int32(t0))
    block = (_THREADS,)
    if side in ("f32", "bf16"):
        grid = _grid(rows, _THREADS // 32)  # one warp per (token, head)
        _k(f"kv_append_{side}")(grid, block, (x, store["data"], *dims))
        return
    sides = 1 if store1 is None else 2
    if store1 is None:
        store1, x1 = store, x
    if side.startswith("tq"):
        _launch_tq(
            x,
            store["codes"],
            store["gamma"],
            nb,
            nkv,
            max_t,
            t0,
            tq_bits(side),
            x1=None if sides == 1 else x1,
            c1=store1["codes"],
            g1=store1["gamma"],
            rotate=True,
        )
    elif side == "q8":
        units = sides * rows * (hd // 8)  # 8 values per thread
        kernel(kernel_module("q8_append", "v1"), "kv_append_q8")(
            _grid(units, _THREADS),
            block,
            (x, store["q"], store["d"], x1, store1["q"], store1["d"], *dims, np.int32(sides)),
        )
    else:
        e = max(4, hd // 32)  # values per lane (wht.cu layout)
        per_warp = (32 // (hd // e)) * (1 if e >= 16 else 16 // e)  # rows per warp step
        warps = -(-sides * rows // per_warp)
        kernel(kernel_module("turbo_append", "v1"), f"kv_append_turbo_n{hd}")(
            _grid(warps, _THREADS // 32),
            block,
            (
                x,
                store["codes"],
                store["d"],
                x1,
                store1["codes"],
                store1["d"],
                np.int32(nb),
                np.int32(nkv),
                np.int32(max_t),
                np.int32(t0),
                np.int32(turbo_bits(side)),
                np.int32(sides),
            ),
        )


def _side_append_v0(side, store, x, t0, max_t):
    """As _side_append for one side, through kvcache_v0.cu's kernels (f32 / bf16: the same
    copies as every rung). One thread per q8 group of 32 or per turbo / tq (token, kv head)
    row."""
    if side in ("f32", "bf16"):
        _side_append(side, store, x, t0, max_t)
        return
    nb, nkv, hd = x.shape
    dims = (np.int32(nb), np.int32(nkv), np.int32(hd), np.int32(max_t), np.int32(t0))
    if side == "q8":
        grid = _grid(nb * nkv * (hd // Q8_GROUP), _THREADS)
        kern = kernel(kernel_module("q8_append", "v0"), "q8_append_v0")
        kern(grid, (_THREADS,), (x, store["q"], store["d"], *dims))
    elif side.startswith("tq"):
        grid = _grid(nb * nkv, _THREADS)
        kernel(kernel_module("tq_append", "v0"), "tq_append_v0")(
            grid,
            (_THREADS,),
            (
                x,
                store["codes"],
                store["gamma"],
                tq_codebook_device(tq_bits(side)),
                *dims,
                np.int32(tq_bits(side)),
            ),
        )
    else:
        grid = _grid(nb * nkv, _THREADS)
        kernel(kernel_module("turbo_append", "v0"), "turbo_append_v0")(
            grid, (_THREADS,), (x, store["codes"], store["d"], *dims, np.int32(turbo_bits(side)))
        )


class KVCache(KVCacheBase):
    """Per-sequence decode state on the GPU: K/V as stored, raw indexer keys, block keys, length.

    KVCache(cfg, max_t=4096, kind="f32"). Attributes as golden.KVCache: cfg, max_t, kind,
    k_kind, v_kind, k_rotated, v_rotated, k_store, v_store (dicts of cupy arrays, the layout of
    qwenref/layout.py), idx_keys, blk_keys (cupy float32, or None), length (= len(cache)).

    The class body is qwenref.kvcache_base.KVCacheBase, as for golden.KVCache; this class
    stores cupy arrays, and its append launches the kernels above.
    """

    max_turbo_head_dim = 1024  # the fused rotate + quantize append holds a row in registers

    def __init__(self, cfg, max_t=4096, kind="f32"):
        super().__init__(cfg, max_t, kind)

    @property
    def xp(self):
        """The array module: cupy, imported (and a device looked for) on first use."""
        return cupy()

    def __repr__(self):
        return "gpu." + super().__repr__()

    def append(self, k, v, index_k=None, *, impl=None):
        """Store nb tokens at positions len(self) .. len(self)+nb-1 and advance the length.

        k, v: cupy float32 [nb, nkv, hd] (C-contiguous; after q/k norm and RoPE, unrotated).
        One launch rotates (turbo sides) + quantizes + stores both sides when K and V share a
        quantized kind (q8, turboN); otherwise one launch per side. index_k: cupy float32
        [nb, ihd] raw indexer keys (required iff the config has an indexer), copied to idx_keys.
        Block keys are not computed here (gpu.update_block_keys does). Past max_t -> ValueError.
        impl: the rung of the q8 / turbo appends (RUNGS; None = "v1"); "v0" launches
        kvcache_v0.cu's kernels, one per side, and refuses turbo sides with head_dim > 256.
        Arguments are checked (dtype, shape, device, contiguity; values are not read) before
        anything is launched; the steps are KVCacheBase.append's.
        """
        # both append families have the same rungs
        super().append(k, v, index_k, impl=_rung("q8_append", impl))

    def _check_append(self, k, v, index_k, impl):
        cfg = self.cfg
        check_array("k", k, np.float32, (None, cfg.nkv, cfg.head_dim))
        nb = k.shape[0]
        check_array("v", v, np.float32, k.shape)
        if self._index_k_given(index_k):
            check_array("index_k", index_k, np.float32, (nb, cfg.indexer_head_dim))
        if impl == "v0" and (self.k_rotated or self.v_rotated) and cfg.head_dim > _V0_TURBO_MAX_HD:
            raise ValueError(
                f"impl 'v0' holds a turbo row in a {_V0_TURBO_MAX_HD}-float local "
                f"array: head_dim {cfg.head_dim} needs impl 'v1'"
            )
        return k, v, index_k

    def _store(self, k, v, t0, impl):
        """Rotate (turbo, tq), quantize and store K and V at token slots t0 .. t0+nb-1."""
        if impl == "v0":
            _side_append_v0(self.k_kind, self.k_store, k, t0, self.max_t)
            _side_append_v0(self.v_kind, self.v_store, v, t0, self.max_t)
        elif self.k_kind == self.v_kind and self.k_kind not in ("f32", "bf16"):
            _side_append(self.k_kind, self.k_store, k, t0, self.max_t, self.v_store, v)  # K+V
        else:
            _side_append(self.k_kind, self.k_store, k, t0, self.max_t)
            _side_append(self.v_kind, self.v_store, v, t0, self.max_t)

    @staticmethod
    def _decode(side, stored):
        """A side's stored arrays of tokens [0, t_len) -> cupy float32 [nkv, t_len, hd]
        (rotated domain for turbo), by the dequantize kernels (they read contiguous arrays)."""
        cp = cupy()
        s = {name: cp.ascontiguousarray(a) for name, a in stored.items()}
        if side == "f32":
            return s["data"]
        if side == "bf16":
            return bf16_from_bits(s["data"])
        if side == "q8":
            return q8_dequantize(s["q"], s["d"])
        if side.startswith("tq"):
            return tq_dequantize(s["codes"], s["gamma"], tq_bits(side))
        return turbo_dequantize(s["codes"], s["d"], turbo_bits(side))

    def to_golden(self):
        """A golden KVCache holding copies of these stored arrays, indexer keys and length."""
        cp = cupy()
        g = GoldenKVCache(self.cfg, self.max_t, self.kind)
        g.k_store = {name: cp.asnumpy(a) for name, a in self.k_store.items()}
        g.v_store = {name: cp.asnumpy(a) for name, a in self.v_store.items()}
        if self.idx_keys is not None:
            g.idx_keys, g.blk_keys = cp.asnumpy(self.idx_keys), cp.asnumpy(self.blk_keys)
        g.length = self.length
        return g

    @classmethod
    def from_golden(cls, g):
        """A GPU KVCache holding copies of a golden KVCache's arrays and length (for tests that
        start the GPU from a golden state)."""
        if not isinstance(g, GoldenKVCache):
            raise TypeError(f"g must be a golden KVCache, got {type(g).__name__}")
        cp = cupy()
        new = cls(g.cfg, g.max_t, g.kind)
        new.k_store = {name: cp.asarray(a) for name, a in g.k_store.items()}
        new.v_store = {name: cp.asarray(a) for name, a in g.v_store.items()}
        if g.idx_keys is not None:
            new.idx_keys, new.blk_keys = cp.asarray(g.idx_keys), cp.asarray(g.blk_keys)
        new.length = g.length
        return new
