"""GPU kvcache (kernels_cuda/kvcache.cu): q8 / turbo-n / bf16 formats bit-exact against the golden
model, and gpu.KVCache appends against golden.KVCache.

Turbo appends rotate by a float32 WHT (golden: float64), so a rotated value on a code boundary
may code one level apart from the golden cache. The tests therefore compare the stored codes
and scales BIT-EXACTLY with the golden quantizer applied to the kernel's own rotation, which is
reproduced exactly by gpu_checks.wht_f32 (float32 butterflies in the kernel's pass order; gpu.wht is
checked against the same emulation in test_gpu_wht.py). Against the real golden cache they are
compared through the dequantized values, within one code step (+ one float16 ulp of the scale).

The append tests run for every rung of the append families (RUNGS: v0 = kvcache_v0.cu, v1 =
kvcache.cu) with the same expectations: both rungs rotate by float32 butterflies in the same
pass order and quantize with the golden's float32 operations, so both must store the same bytes
bit for bit. The tests marked gpu skip without a GPU; the rung names and the impl check run
anywhere.
"""

import numpy as np
import pytest
from gpu_checks import wht_f32

import qwenref
from qwenref import golden
from qwenref.gpu import kvcache as gpu_kv
from qwenref.gpu._runtime import kernel_source
from qwenref.layout import LADDER_KINDS, side_arrays, turbo_bits

gpu = pytest.mark.gpu
IMPLS = gpu_kv.RUNGS["q8_append"]  # KVCache.append's impl: one value for both families
assert IMPLS == gpu_kv.RUNGS["turbo_append"]

KINDS = LADDER_KINDS  # the turbo and q8 appends (tq: tests/test_gpu_kvcache_tq.py)
EPS32 = np.finfo(np.float32).eps  # 2**-23


def bits_of(a):
    """Arrays compared by their bits (NaN payloads, -0.0 and float16 scales included)."""
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32}[a.itemsize]) if a.dtype.kind == "f" else a


def assert_bits_equal(got, want, what=""):
    assert got.shape == want.shape and got.dtype == want.dtype, what
    assert np.array_equal(bits_of(got), bits_of(want)), what


# ---- inputs that hit the formats' edges -----------------------------------------------------
def q8_group(rng, pattern):
    """One group of 32 values of a given kind."""
    if pattern == 0:  # exact ties of x * id: amax = 127 * 2^k so d32 = 2^k, id = 2^-k exact
        k = rng.choice([-3, 0, 5])
        t = np.array(
            [
                127,
                -126.5,
                0.5,
                -0.5,
                1.5,
                -1.5,
                2.5,
                -2.5,
                63.5,
                -100.5,
                np.nextafter(np.float32(0.5), np.float32(0)),  # 0.49999997 -> 0
                -np.nextafter(np.float32(0.5), np.float32(0)),
                np.nextafter(np.float32(1.5), np.float32(0)),  # -> 1
                np.nextafter(np.float32(2.5), np.float32(3)),
            ],  # -> 3
            np.float32,
        )
        rest = np.round(rng.uniform(-126, 126, 32 - t.size) * 2) / 2  # more halves
        g = np.concatenate([t, rest.astype(np.float32)])
        return (rng.permutation(g) * np.float32(2.0**k)).astype(np.float32)
    if pattern == 1:  # all zero: d = 0, id = 0, q = 0
        return np.zeros(32, np.float32)
    if pattern == 2:  # tiny: d32 ~ 1e-32 (normal float32) underflows to float16 0
        return (1e-30 * rng.standard_normal(32)).astype(np.float32)
    return (rng.standard_normal(32) * 10.0 ** rng.uniform(-3, 3)).astype(np.float32)


def q8_input(rng, rows, n):
    g = n // 32
    return np.stack(
        [np.concatenate([q8_group(rng, (r + j) % 4) for j in range(g)]) for r in range(rows)]
    )


def fma_trap_group(rng, bits):
    """A group of 16 holding a value whose code differs if x * id + 2^(n-1) is computed with one
    fused multiply-add instead of two float32 roundings (the golden's). Found by search: x * id
    rounds (float32) onto the boundary between codes 0 and 1, its exact value lies just below."""
    L, off = np.float32(((1 << bits) - 1) / 2), np.float32(1 << (bits - 1))
    if bits < 2:  # boundary 0|1 at x * id = 0: no rounding to trip over
        return rng.standard_normal(16).astype(np.float32)
    for _ in range(10000):
        amax = np.float32(rng.uniform(0.5, 2.0))
        inv = np.float32(1) / (amax / L)
        x0 = np.float32((1.0 - float(off)) / float(inv))
        cand = (x0 + np.arange(-300, 300, dtype=np.float32) * np.spacing(x0)).astype(np.float32)
        two_roundings = np.floor(cand * inv + off)
        fused = np.floor(
            (cand.astype(np.float64) * np.float64(inv) + float(off)).astype(np.float32)
        )
        sel = cand[(two_roundings != fused) & (np.abs(cand) < amax)]
        if sel.size:
            g = (rng.uniform(-1, 1, 16) * amax).astype(np.float32)
            g[0], g[1 : 1 + min(sel.size, 4)] = amax, sel[:4]
            return g
    raise AssertionError("no FMA-trap value found")


def turbo_group(rng, bits, pattern):
    L, off = ((1 << bits) - 1) / 2, 1 << (bits - 1)
    if pattern == 0:  # values exactly on code boundaries: d32 = 2^k, x * id + off = integer m
        k = rng.choice([-4, 0, 3])
        m = rng.integers(1, 1 << bits, 16).astype(np.float64)  # |m - off| <= off - 1 < L
        g = m - off
        g[0] = L  # amax = L * 2^k -> d32 = 2^k exactly
        g[1] = np.nextafter(np.float32(1.0), np.float32(0))  # x*id + off rounds up to off + 1
        g[2] = -np.nextafter(np.float32(L), np.float32(0))
        return (g * 2.0**k).astype(np.float32)
    if pattern == 1:
        return np.zeros(16, np.float32)
    if pattern == 2:
        return fma_trap_group(rng, bits)
    if pattern == 3:
        return (1e-30 * rng.standard_normal(16)).astype(np.float32)
    return (rng.standard_normal(16) * 10.0 ** rng.uniform(-3, 3)).astype(np.float32)


def turbo_input(rng, rows, n, bits):
    g = n // 16
    return np.stack(
        [
            np.concatenate([turbo_group(rng, bits, (r + j) % 5) for j in range(g)])
            for r in range(rows)
        ]
    )


def unaligned(cp, x, fill=0):
    """A C-contiguous device copy of x whose data starts one element into its buffer."""
    buf = cp.full(x.size + 1, fill, dtype=x.dtype)
    v = buf[1:].reshape(x.shape)
    v[...] = cp.asarray(x)
    return v


# ---- q8 -------------------------------------------------------------------------------------
@gpu
@pytest.mark.parametrize("n", [32, 96, 128, 256])
@pytest.mark.parametrize("rows", [1, 3, 37])
def test_q8_quantize_bit_exact(cp, rng, rows, n):
    x = q8_input(rng, rows, n)
    q_out = cp.full(x.shape, -128, cp.int8)  # -128 is never a Q8_0 code
    d_out = cp.full((rows, n // 32), np.nan, cp.float16)
    q, d = gpu_kv.q8_quantize(cp.asarray(x), q_out=q_out, d_out=d_out)
    assert q is q_out and d is d_out
    gq, gd = golden.q8_quantize(x)
    assert_bits_equal(cp.asnumpy(q), gq, "q")
    assert_bits_equal(cp.asnumpy(d), gd, "d")
    # the input is meaningful: exact .5 ties of x * id occur (rounding mode matters)
    xg = x.reshape(rows, -1, 32)
    d32 = np.abs(xg).max(-1) / np.float32(127)
    with np.errstate(divide="ignore"):
        t = np.abs(xg * np.where(d32 > 0, np.float32(1) / d32, np.float32(0))[..., None])
    assert np.any(t - np.floor(t) == 0.5)


@gpu
def test_q8_leading_axes_unaligned_and_dequantize(cp, rng):
    x = q8_input(rng, 6, 64).reshape(2, 3, 64)
    gq, gd = golden.q8_quantize(x)
    q, d = gpu_kv.q8_quantize(unaligned(cp, x))  # scalar loads and stores
    assert_bits_equal(cp.asnumpy(q), gq)
    assert_bits_equal(cp.asnumpy(d), gd)
    q2, _ = gpu_kv.q8_quantize(cp.asarray(x), q_out=unaligned(cp, np.zeros(x.shape, np.int8)))
    assert_bits_equal(cp.asnumpy(q2), gq)
    out = cp.full(x.shape, np.nan, cp.float32)
    y = gpu_kv.q8_dequantize(cp.asarray(gq), cp.asarray(gd), out=out)
    assert y is out
    assert_bits_equal(cp.asnumpy(y), golden.q8_dequantize(gq, gd))  # exact in float32
    y2 = gpu_kv.q8_dequantize(unaligned(cp, gq), cp.asarray(gd))
    assert_bits_equal(cp.asnumpy(y2), golden.q8_dequantize(gq, gd))


# ---- turbo ----------------------------------------------------------------------------------
@gpu
@pytest.mark.parametrize("bits", [8, 4, 3, 2, 5, 1])  # 5: codes straddle the 64-bit words
@pytest.mark.parametrize("rows,n", [(1, 16), (3, 128), (37, 256), (5, 80)])
def test_turbo_quantize_bit_exact(cp, rng, bits, rows, n):
    x = turbo_input(rng, rows, n, bits)
    codes_out = cp.full((rows, n // 16, 2 * bits), 0xAB, cp.uint8)
    d_out = cp.full((rows, n // 16), np.nan, cp.float16)
    codes, d = gpu_kv.turbo_quantize(cp.asarray(x), bits, codes_out=codes_out, d_out=d_out)
    assert codes is codes_out and d is d_out
    gc, gd = golden.turbo_quantize(x, bits)
    assert_bits_equal(cp.asnumpy(codes), gc, "codes")
    assert_bits_equal(cp.asnumpy(d), gd, "d")
    out = cp.full(x.shape, np.nan, cp.float32)
    y = gpu_kv.turbo_dequantize(codes, d, bits, out=out)
    assert y is out
    assert_bits_equal(cp.asnumpy(y), golden.turbo_dequantize(gc, gd, bits))


@gpu
@pytest.mark.parametrize("bits", [8, 4, 3, 2])
def test_turbo_inputs_are_meaningful(rng, bits):
    # the FMA-trap group really separates two float32 roundings from a fused multiply-add, and
    # the boundary group sits on code boundaries (numpy only; it guards the inputs above)
    g = fma_trap_group(rng, bits)
    L, off = np.float32(((1 << bits) - 1) / 2), np.float32(1 << (bits - 1))
    inv = np.float32(1) / (np.abs(g).max() / L)
    two = np.floor(g * inv + off)
    fused = np.floor((g.astype(np.float64) * np.float64(inv) + float(off)).astype(np.float32))
    assert np.any(two != fused)
    b = turbo_group(rng, bits, 0)
    inv = np.float32(1) / (np.abs(b).max() / L)
    v = b * inv + off
    assert np.sum(v == np.floor(v)) >= 8


@gpu
def test_turbo_unaligned_and_leading_axes(cp, rng):
    x = turbo_input(rng, 6, 48, 3).reshape(3, 2, 48)
    gc, gd = golden.turbo_quantize(x, 3)
    c, d = gpu_kv.turbo_quantize(
        unaligned(cp, x), 3, codes_out=unaligned(cp, np.zeros(gc.shape, np.uint8))
    )
    assert_bits_equal(cp.asnumpy(c), gc)  # byte-wise stores
    assert_bits_equal(cp.asnumpy(d), gd)
    y = gpu_kv.turbo_dequantize(
        unaligned(cp, gc), cp.asarray(gd), 3, out=unaligned(cp, np.zeros(x.shape, np.float32))
    )
    assert_bits_equal(cp.asnumpy(y), golden.turbo_dequantize(gc, gd, 3))


# ---- bf16 -----------------------------------------------------------------------------------
@gpu
def test_bf16_bits_bit_exact(cp, rng):
    u = rng.integers(0, 2**32, 8192, dtype=np.uint64).astype(np.uint32)
    special = np.array(
        [
            0x3F808000,
            0x3F818000,  # exact ties: to even (down / up)
            0x3F808001,
            0x3F817FFF,  # just past / just below a tie
            0x7F7F7FFF,
            0xFF7F7FFF,  # the largest that stay finite
            0x00000000,
            0x80000000,
            0x00008000,
            0x00018000,
            0x00000001,
        ],  # subnormals
        np.uint32,
    )
    # golden refuses non-finite values and values that round to inf (docs/bad-input.md); the
    # kernel does not check values: those are compared bit-level in the next test
    r = u.view(np.float32)
    r = r[np.isfinite(r) & (np.abs(r) < np.float32(3.3961776e38))][: 4096 - special.size]
    x = np.concatenate([special.view(np.float32), r]).reshape(4, -1)  # 4096 values
    out = cp.full(x.shape, 0x1234, cp.uint16)
    b = gpu_kv.bf16_bits(cp.asarray(x), out=out)
    assert b is out
    want = golden.bf16_bits(x)
    assert_bits_equal(cp.asnumpy(b), want)
    y = gpu_kv.bf16_from_bits(b)
    assert_bits_equal(cp.asnumpy(y), golden.bf16_from_bits(want))


@gpu
def test_bf16_bits_of_non_finite_values(cp):
    """Outside golden's domain the kernel still rounds by IEEE rules: infinities and values
    past the largest bf16 become infinities; a NaN keeps its sign and becomes the quiet 0x7fc0
    (kvcache.cu's bf16_rne)."""
    x = np.array(
        [
            0x7F7FFFFF,
            0xFF7FFFFF,
            0x7F800000,
            0xFF800000,
            0x7FC00000,
            0xFFC00000,
            0x7F800001,
            0xFFA12345,
        ],
        np.uint32,
    ).view(np.float32)
    b = cp.asnumpy(gpu_kv.bf16_bits(cp.asarray(x)))
    assert [int(v) for v in b[:4]] == [0x7F80, 0xFF80, 0x7F80, 0xFF80]
    assert [int(v) for v in b[4:]] == [0x7FC0, 0xFFC0, 0x7FC0, 0xFFC0]


# ---- KVCache --------------------------------------------------------------------------------
def make_cfg(hd, nkv=2, indexer=True):
    cfg = qwenref.AttnConfig.tiny().replace(
        head_dim=hd, num_key_value_heads=nkv, num_attention_heads=2 * nkv
    )
    if not indexer:
        cfg = cfg.replace(
            indexer_n_heads=0, indexer_head_dim=0, indexer_compress_ratio=0, indexer_budget=0
        )
    return cfg


def make_kv(rng, nb, nkv, hd, bits_hint=4):
    """k, v [nb, nkv, hd]: random rows with an outlier dim, a zero row, q8 tie groups, and a row
    whose ROTATION lands on turbo code boundaries (x = golden.wht of boundary values, so the
    float32 rotation gives them back to within an ulp or so)."""
    k = rng.standard_normal((nb, nkv, hd)).astype(np.float32)
    v = rng.standard_normal((nb, nkv, hd)).astype(np.float32)
    k[..., hd // 7] *= 20.0
    v[:, 0] *= 1e-3
    k[0, 0] = 0.0
    k[-1, -1] = q8_input(rng, 1, hd)[0]
    v[-1, 0] = golden.wht(turbo_input(rng, 1, hd, bits_hint)[0])
    v[0, -1] = golden.wht(q8_input(rng, 1, hd)[0])
    return k, v


def expected_side(side, x):
    """What a side stores for x [nb, nkv, hd]: golden encoding, turbo on the float32 rotation."""
    xh = np.ascontiguousarray(x.transpose(1, 0, 2))  # [nkv, nb, hd]
    if side.startswith("turbo"):
        codes, d = golden.turbo_quantize(wht_f32(xh), turbo_bits(side))
        return {"codes": codes, "d": d}
    if side == "q8":
        q, d = golden.q8_quantize(xh)
        return {"q": q, "d": d}
    return {"data": golden.bf16_bits(xh) if side == "bf16" else xh}


def side_bits(side):
    return turbo_bits(side)


@gpu
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("hd", [64, 128, 256])
@pytest.mark.parametrize("impl", IMPLS)
def test_kvcache_appends_match_golden(cp, rng, kind, hd, impl):
    cfg = make_cfg(hd)
    max_t, chunks = 16, [1, 3, 5, 2]
    cache = gpu_kv.KVCache(cfg, max_t=max_t, kind=kind)
    ref = golden.KVCache(cfg, max_t=max_t, kind=kind)
    assert (cache.k_kind, cache.v_kind, cache.k_rotated, cache.v_rotated) == (
        ref.k_kind,
        ref.v_kind,
        ref.k_rotated,
        ref.v_rotated,
    )
    want = {
        name: {
            n: np.zeros(shape, dt)
            for n, (shape, dt) in side_arrays(side, cfg.nkv, max_t, hd).items()
        }
        for name, side in (("k", ref.k_kind), ("v", ref.v_kind))
    }
    idx, ks, vs = [], [], []
    t0 = 0
    for nb in chunks:
        k, v = make_kv(rng, nb, cfg.nkv, hd, bits_hint=max(side_bits(ref.v_kind), 2))
        ik = rng.standard_normal((nb, cfg.indexer_head_dim)).astype(np.float32)
        cache.append(cp.asarray(k), cp.asarray(v), index_k=cp.asarray(ik), impl=impl)
        ref.append(k, v, index_k=ik)
        for name, side, x in (("k", ref.k_kind, k), ("v", ref.v_kind, v)):
            for arr, val in expected_side(side, x).items():
                want[name][arr][:, t0 : t0 + nb] = val
        idx.append(ik)
        ks.append(k)
        vs.append(v)
        t0 += nb
        assert len(cache) == t0 == len(ref)
    # stored arrays, every element (untouched rows stay zero as in the golden allocation)
    for name, store in (("k", cache.k_store), ("v", cache.v_store)):
        assert store.keys() == want[name].keys()
        for arr in store:
            assert_bits_equal(cp.asnumpy(store[arr]), want[name][arr], f"{kind} {name} {arr}")
    # non-rotated sides equal the real golden cache bit for bit
    for side, store, gstore in (
        (ref.k_kind, cache.k_store, ref.k_store),
        (ref.v_kind, cache.v_store, ref.v_store),
    ):
        if not side.startswith("turbo"):
            for arr in store:
                assert_bits_equal(cp.asnumpy(store[arr]), gstore[arr])
    # rotated sides vs the real golden cache (float64 rotation). Each dequantized value is within
    # d32/2 + L * |d - d32| <= (d + L * ulp16(d)) / 2 of the value it quantized (floor coding,
    # float16 scale; ulp16 is 2^-10 relative, 2^-24 absolute when subnormal), and the two rotated
    # values differ by at most the float32 WHT error (test_gpu_wht.golden_tol: log2(hd) 2^-24
    # |x|_1 / sqrt(hd) + 2 ulps). Groups that are pure rounding noise of a larger row (a zero
    # group after the rotation) need that second term.
    for side, got, gref, store, gstore, xs in (
        (ref.k_kind, cache.keys(), ref.keys(), cache.k_store, ref.k_store, ks),
        (ref.v_kind, cache.values(), ref.values(), cache.v_store, ref.v_store, vs),
    ):
        got = cp.asnumpy(got)
        if side.startswith("turbo"):
            L = ((1 << side_bits(side)) - 1) / 2
            dmax = np.maximum(
                cp.asnumpy(store["d"][:, :t0]).astype(np.float64),
                gstore["d"][:, :t0].astype(np.float64),
            )
            ulp16 = np.maximum(dmax * 2.0**-10, 2.0**-24)
            xh = np.concatenate(xs).transpose(1, 0, 2)  # [nkv, t0, hd]
            l1 = np.abs(xh.astype(np.float64)).sum(-1, keepdims=True)
            rot_err = 1.01 * np.log2(hd) * 2.0**-24 * l1 / np.sqrt(hd) + 2 * EPS32 * np.abs(
                golden.wht(xh)
            )
            tol = np.repeat(1.01 * (dmax + L * ulp16), 16, axis=-1) + rot_err
            assert np.all(np.abs(got - gref) <= tol)
        else:
            assert_bits_equal(got, gref)
    assert_bits_equal(cp.asnumpy(cache.idx_keys[:t0]), np.concatenate(idx))
    assert not cp.asnumpy(cache.idx_keys[t0:]).any() and not cp.asnumpy(cache.blk_keys).any()
    # to_golden: identical arrays, length, keys; its dequantization equals the GPU's
    g = cache.to_golden()
    assert isinstance(g, golden.KVCache) and len(g) == t0 and g.kind == kind
    for store, gstore in ((cache.k_store, g.k_store), (cache.v_store, g.v_store)):
        assert store.keys() == gstore.keys()
        for arr in store:
            assert_bits_equal(cp.asnumpy(store[arr]), gstore[arr])
    assert_bits_equal(cp.asnumpy(cache.idx_keys), g.idx_keys)
    assert_bits_equal(cp.asnumpy(cache.blk_keys), g.blk_keys)
    assert_bits_equal(cp.asnumpy(cache.keys()), g.keys())
    assert_bits_equal(cp.asnumpy(cache.values(5)), g.values(5))
    assert cache.nbytes_per_token() == ref.nbytes_per_token()


POISON = {
    np.dtype(np.float32): np.nan,
    np.dtype(np.float16): np.nan,
    np.dtype(np.uint16): 0xFFFF,
    np.dtype(np.int8): -128,
    np.dtype(np.uint8): 0xAB,
}


def poison_stores(cp, cache):
    """Fill every stored array with a value no append writes there; -> host copies of them."""
    for store in (cache.k_store, cache.v_store):
        for a in store.values():
            a.fill(POISON[a.dtype])
    return {
        (s, n): cp.asnumpy(a)
        for s, st in (("k", cache.k_store), ("v", cache.v_store))
        for n, a in st.items()
    }


def assert_only_rows_written(cp, cache, before, t0, k, v):
    """Rows t0 .. t0+nb-1 of every stored array hold exactly the expected encoding of k / v,
    every other row still what `before` holds."""
    nb = k.shape[0]
    for s, side, store, x in (
        ("k", cache.k_kind, cache.k_store, k),
        ("v", cache.v_kind, cache.v_store, v),
    ):
        for arr, val in expected_side(side, x).items():
            want = before[(s, arr)].copy()
            want[:, t0 : t0 + nb] = val
            assert_bits_equal(cp.asnumpy(store[arr]), want, f"{cache.kind} {s} {arr}")


@gpu
@pytest.mark.parametrize("kind", ["f32", "bf16", "q8", "turbo8", "turbo3", "bf16k-turbo2v"])
@pytest.mark.parametrize("impl", IMPLS)
def test_kvcache_append_writes_only_its_rows(cp, rng, kind, impl):
    # every stored array poisoned; 3 tokens "already stored"; append 5 (nb * nkv = 15 warps:
    # the last block is partial). Rows 3..7 must be exactly the expected encoding, every other
    # row still the poison.
    hd, nkv, max_t, t0, nb = 128, 3, 12, 3, 5
    cfg = make_cfg(hd, nkv=nkv, indexer=False)
    cache = gpu_kv.KVCache(cfg, max_t=max_t, kind=kind)
    before = poison_stores(cp, cache)
    cache.length = t0
    k, v = make_kv(rng, nb, nkv, hd)
    cache.append(cp.asarray(k), cp.asarray(v), impl=impl)
    assert len(cache) == t0 + nb
    assert_only_rows_written(cp, cache, before, t0, k, v)


def make_q8_kv(rng, nb, nkv, hd):
    """k, v [nb, nkv, hd] for q8 at any hd % 32 == 0 (make_kv's turbo rows need a power of two):
    normal values, an outlier dim, a group of tiny values, an all-zero row, and q8_input's tie
    groups in the last row."""
    k = rng.standard_normal((nb, nkv, hd)).astype(np.float32)
    v = rng.standard_normal((nb, nkv, hd)).astype(np.float32)
    k[..., hd // 7] *= 20.0
    v[..., :32] *= 1e-4
    k[0, 0] = 0.0
    k[-1, -1] = q8_input(rng, 1, hd)[0]
    return k, v


@gpu
@pytest.mark.parametrize(
    "hd, nb, offset, max_grid", [(256, 1500, 0, 3), (96, 777, 0, None), (256, 300, 1, 5)]
)
@pytest.mark.parametrize("impl", IMPLS)
def test_kvcache_q8_append_steps(cp, rng, monkeypatch, hd, nb, offset, max_grid, impl):
    """The q8 append (kv_append_q8, q8_append_v0) where the grid is capped so every warp takes
    many grid-stride steps, with rows of 12 units of 8 / 3 groups (hd 96: not a power of two),
    and from sources 4 bytes off 16-byte alignment (v1's scalar path): codes and scales bit for
    bit the golden's, the rows before and after the append still poison."""
    if max_grid is not None:
        monkeypatch.setattr(gpu_kv, "_MAX_GRID", max_grid)
    nkv, t0 = 3, 2
    cfg = make_cfg(hd, nkv=nkv, indexer=False)
    cache = gpu_kv.KVCache(cfg, max_t=t0 + nb + 3, kind="q8")
    for store in (cache.k_store, cache.v_store):
        store["q"].fill(-128)
        store["d"].fill(np.nan)
    cache.length = t0
    k, v = make_q8_kv(rng, nb, nkv, hd)

    def on_gpu(x):
        flat = cp.empty(x.size + offset, cp.float32)
        g = flat[offset:].reshape(x.shape)
        g[...] = cp.asarray(x)
        return g

    cache.append(on_gpu(k), on_gpu(v), impl=impl)
    for name, store, x in (("k", cache.k_store, k), ("v", cache.v_store, v)):
        for arr, val in expected_side("q8", x).items():
            got = cp.asnumpy(store[arr])
            assert_bits_equal(got[:, t0 : t0 + nb], val, f"{name} {arr}")
            rest = np.concatenate([got[:, :t0], got[:, t0 + nb :]], axis=1)
            assert (rest == -128).all() if arr == "q" else np.isnan(rest).all(), f"{name} {arr}"


@gpu
@pytest.mark.parametrize(
    "kind, hd, nb, offset, max_grid",
    [
        ("turbo4", 256, 1001, 0, 2),
        ("turbo3", 128, 333, 1, 3),
        ("turbo8", 64, 77, 0, None),
        ("turbo2", 256, 5, 1, None),
        ("bf16k-turbo3v", 128, 129, 1, 2),
    ],
)
@pytest.mark.parametrize("impl", IMPLS)
def test_kvcache_turbo_append_steps(cp, rng, monkeypatch, kind, hd, nb, offset, max_grid, impl):
    """The turbo append where the grid is capped so every thread (v0) or warp (v1) takes many
    grid-stride steps, with odd nb, and from sources 4 bytes off 16-byte alignment (v1's scalar
    loads): every stored byte bit for bit the golden quantizer's on the float32 rotation, the
    rows before and after the append still poison."""
    if max_grid is not None:
        monkeypatch.setattr(gpu_kv, "_MAX_GRID", max_grid)
    nkv, t0 = 3, 2
    cfg = make_cfg(hd, nkv=nkv, indexer=False)
    cache = gpu_kv.KVCache(cfg, max_t=t0 + nb + 3, kind=kind)
    before = poison_stores(cp, cache)
    cache.length = t0
    k, v = make_kv(rng, nb, nkv, hd, bits_hint=max(side_bits(cache.v_kind), 2))
    on_gpu = (lambda x: unaligned(cp, x)) if offset else cp.asarray
    cache.append(on_gpu(k), on_gpu(v), impl=impl)
    assert len(cache) == t0 + nb
    assert_only_rows_written(cp, cache, before, t0, k, v)


@gpu
@pytest.mark.parametrize("kind", ["turbo4", "bf16k-turbo2v", "q8"])
def test_kvcache_v0_head_dim_cap(cp, rng, kind):
    """turbo_append_v0 holds a row in a 256-float local array: impl "v0" refuses a turbo side
    with head_dim 512 before any launch (nothing stored, length unchanged); "v1" takes it. q8
    has no cap: its v0 thread holds one group of 32."""
    hd, nkv, nb = 512, 2, 3
    cfg = make_cfg(hd, nkv=nkv, indexer=False)
    cache = gpu_kv.KVCache(cfg, max_t=8, kind=kind)
    before = poison_stores(cp, cache)
    k, v = make_kv(rng, nb, nkv, hd)
    if kind != "q8":
        with pytest.raises(ValueError, match=r"^impl\b"):
            cache.append(cp.asarray(k), cp.asarray(v), impl="v0")
        assert len(cache) == 0
        for (s, name), a in before.items():  # all still poison
            assert_bits_equal(cp.asnumpy((cache.k_store if s == "k" else cache.v_store)[name]), a)
        cache.append(cp.asarray(k), cp.asarray(v), impl="v1")
    else:
        cache.append(cp.asarray(k), cp.asarray(v), impl="v0")
    assert len(cache) == nb
    assert_only_rows_written(cp, cache, before, 0, k, v)


@gpu
@pytest.mark.parametrize("impl", IMPLS)
def test_kvcache_bad_appends(cp, rng, impl):
    cfg = make_cfg(64)
    cache = gpu_kv.KVCache(cfg, max_t=8, kind="q8")
    nkv, hd, ihd = cfg.nkv, cfg.head_dim, cfg.indexer_head_dim
    k = cp.zeros((2, nkv, hd), cp.float32)
    ik = cp.zeros((2, ihd), cp.float32)
    with pytest.raises(TypeError, match=r"^k\b"):
        cache.append(cp.asnumpy(k), k, ik, impl=impl)
    with pytest.raises(TypeError, match=r"^k\b"):
        cache.append(k.astype(cp.float64), k, ik, impl=impl)
    with pytest.raises(ValueError, match=r"^k\b"):
        cache.append(cp.zeros((2, nkv + 1, hd), cp.float32), k, ik, impl=impl)
    with pytest.raises(ValueError, match=r"^k\b"):
        cache.append(cp.zeros((2, hd, nkv), cp.float32).transpose(0, 2, 1), k, ik, impl=impl)
    with pytest.raises(ValueError, match=r"^v\b"):
        cache.append(k, cp.zeros((3, nkv, hd), cp.float32), ik, impl=impl)
    with pytest.raises(TypeError, match=r"^v\b"):
        cache.append(k, k.astype(cp.float16), ik, impl=impl)
    with pytest.raises(ValueError, match=r"^index_k\b"):
        cache.append(k, k, impl=impl)  # the config has an indexer
    with pytest.raises(ValueError, match=r"^index_k\b"):
        cache.append(k, k, cp.zeros((3, ihd), cp.float32), impl=impl)
    with pytest.raises(ValueError, match=r"^index_k\b"):
        gpu_kv.KVCache(make_cfg(64, indexer=False), max_t=8).append(k, k, ik, impl=impl)
    assert len(cache) == 0  # nothing was stored
    cache.append(k, k, ik, impl=impl)
    cache.append(
        cp.zeros((6, nkv, hd), cp.float32),
        cp.zeros((6, nkv, hd), cp.float32),
        cp.zeros((6, ihd), cp.float32),
        impl=impl,
    )
    assert len(cache) == 8
    with pytest.raises(ValueError, match="max_t"):
        cache.append(k[:1], k[:1], ik[:1], impl=impl)  # past max_t
    assert len(cache) == 8
    with pytest.raises(ValueError, match=r"^t_len\b"):
        cache.keys(9)


def test_append_rungs_and_kernel_names():
    # CPU only: the rung table, the kernel each rung launches, and that those kernels exist
    assert gpu_kv.RUNGS == {f: ("v0", "v1") for f in ("q8_append", "turbo_append", "tq_append")}
    assert gpu_kv.DEFAULT_RUNG == {"q8_append": "v1", "turbo_append": "v1", "tq_append": "v1"}
    rk = gpu_kv.rung_kernel
    assert rk("q8_append") == rk("q8_append", "v1") == "kv_append_q8"
    assert rk("q8_append", "v0", nb=1, nkv=4, head_dim=256) == "q8_append_v0"
    assert rk("turbo_append", "v0", head_dim=256, bits=4) == "turbo_append_v0"
    assert rk("turbo_append", head_dim=256) == "kv_append_turbo_n256"
    assert (
        rk("turbo_append", "v1", nb=4096, nkv=4, head_dim=128, kind="turbo4")
        == "kv_append_turbo_n128"
    )
    v0_src, v1_src = kernel_source("kvcache_v0"), kernel_source("kvcache")
    for name in ("q8_append_v0", "turbo_append_v0"):
        assert f"void {name}(" in v0_src, name
    assert "void kv_append_q8(" in v1_src and "KV_APPEND_TURBO(256)" in v1_src
    for bad in ("bogus", "V0", "", 1):
        with pytest.raises(ValueError, match=r"^impl\b"):
            rk("q8_append", bad)
    with pytest.raises(ValueError, match=r"^family\b"):
        rk("q8", "v0")
    for hd in (None, 96, 2048, True):
        with pytest.raises(ValueError, match=r"^head_dim\b"):
            rk("turbo_append", "v1", head_dim=hd)


def test_append_rejects_a_bogus_impl_before_anything_runs():
    # impl is append's first check: a bare object (no arrays, no CuPy needed) gets to it, and
    # None for k would fail any later check with a different error
    cache = object.__new__(gpu_kv.KVCache)
    for bad in ("bogus", "v2", 0):
        with pytest.raises(ValueError, match=r"^impl\b"):
            cache.append(None, None, impl=bad)


@gpu
def test_kvcache_construction_errors_and_helpers(cp, rng):
    with pytest.raises(ValueError, match=r"^kind\b"):
        gpu_kv.KVCache(make_cfg(64), kind="q4")
    with pytest.raises(ValueError, match=r"^max_t\b"):
        gpu_kv.KVCache(make_cfg(64), max_t=0)
    with pytest.raises(TypeError, match=r"^cfg\b"):
        gpu_kv.KVCache({"head_dim": 64})
    with pytest.raises(ValueError, match=r"^head_dim\b"):
        gpu_kv.KVCache(make_cfg(48), kind="q8")  # 48 % 32 != 0
    with pytest.raises(ValueError, match=r"^head_dim\b"):
        gpu_kv.KVCache(make_cfg(96), kind="turbo4")  # not a power of two
    # from_golden / copy round trip
    cfg = make_cfg(128)
    g = golden.KVCache(cfg, max_t=8, kind="bf16k-turbo3v")
    k, v = make_kv(rng, 3, cfg.nkv, 128)
    g.append(k, v, index_k=rng.standard_normal((3, cfg.indexer_head_dim)).astype(np.float32))
    c = gpu_kv.KVCache.from_golden(g)
    assert len(c) == 3 and c.kind == g.kind
    c2 = c.copy()
    c2.append(cp.asarray(k[:1]), cp.asarray(v[:1]), cp.zeros((1, cfg.indexer_head_dim), cp.float32))
    assert len(c) == 3 and len(c2) == 4
    back = c.to_golden()
    for store, gstore in ((back.k_store, g.k_store), (back.v_store, g.v_store)):
        for arr in store:
            assert_bits_equal(store[arr], gstore[arr])
    assert_bits_equal(back.idx_keys, g.idx_keys)


@gpu
def test_format_bad_inputs(cp):
    x = cp.zeros((2, 64), cp.float32)
    with pytest.raises(ValueError, match=r"^x\b"):
        gpu_kv.q8_quantize(cp.zeros((2, 48), cp.float32))
    with pytest.raises(TypeError, match=r"^x\b"):
        gpu_kv.q8_quantize(x.astype(cp.float16))
    with pytest.raises(ValueError, match=r"^d_out\b"):
        gpu_kv.q8_quantize(x, d_out=cp.zeros((2, 3), cp.float16))
    with pytest.raises(TypeError, match=r"^d\b"):
        gpu_kv.q8_dequantize(cp.zeros((2, 64), cp.int8), cp.zeros((2, 2), cp.float32))
    with pytest.raises(ValueError, match=r"^d\b"):
        gpu_kv.q8_dequantize(cp.zeros((2, 64), cp.int8), cp.zeros((2, 3), cp.float16))
    for bits in (0, 9, True, 4.0):
        with pytest.raises(ValueError, match=r"^bits\b"):
            gpu_kv.turbo_quantize(x, bits)
    with pytest.raises(ValueError, match=r"^x\b"):
        gpu_kv.turbo_quantize(cp.zeros((2, 40), cp.float32), 4)
    with pytest.raises(ValueError, match=r"^codes_out\b"):
        gpu_kv.turbo_quantize(x, 4, codes_out=cp.zeros((2, 4, 6), cp.uint8))
    with pytest.raises(ValueError, match=r"^codes\b"):
        gpu_kv.turbo_dequantize(cp.zeros((2, 4, 6), cp.uint8), cp.zeros((2, 4), cp.float16), 4)
    with pytest.raises(ValueError, match=r"^d\b"):
        gpu_kv.turbo_dequantize(cp.zeros((2, 4, 8), cp.uint8), cp.zeros((2, 5), cp.float16), 4)
    with pytest.raises(TypeError, match=r"^x\b"):
        gpu_kv.bf16_bits(np.zeros(4, np.float32))
