"""kvcache: Q8_0, turbo-n and bf16 formats against independent scalar references, their error
bounds, and the KVCache layout / round trip for every kind."""

import math

import numpy as np
import pytest

from qwenref.golden import (
    CACHE_KINDS,
    KVCache,
    bf16_bits,
    bf16_from_bits,
    bf16_round,
    q8_dequantize,
    q8_quantize,
    tq_dequantize,
    tq_quantize,
    turbo_dequantize,
    turbo_pack,
    turbo_quantize,
    turbo_unpack,
    wht,
)
from qwenref.layout import tq_signs

F32 = np.float32


# ---- independent scalar references ----------------------------------------------------------
def roundf(v):
    """C roundf: the float32 value v is exact in a Python float, so floor(|v| + 0.5) is exact."""
    r = math.floor(abs(float(v)) + 0.5)
    return -r if v < 0 else r


def q8_ref_row(x):
    """llama.cpp ggml-quants.c quantize_row_q8_0_ref, element by element, float32 scalars."""
    n = x.shape[0]
    q = np.zeros(n, np.int8)
    d = np.zeros(n // 32, np.float16)
    for i in range(n // 32):
        amax = F32(0.0)
        for j in range(32):
            amax = max(amax, F32(abs(x[i * 32 + j])))
        dd = F32(amax / F32(127))
        idd = F32(1.0) / dd if dd else F32(0.0)
        d[i] = np.float16(dd)
        for j in range(32):
            q[i * 32 + j] = roundf(F32(x[i * 32 + j] * idd))
    return q, d


def turbo_ref_row(x, n):
    """The turbo-n rule (qwenref/layout.py's docstring) element by element, packed through a
    Python integer."""
    L = F32(((1 << n) - 1) / 2)
    out_c, out_d = [], []
    for g in range(x.shape[0] // 16):
        xs = x[g * 16 : (g + 1) * 16]
        amax = F32(0.0)
        for v in xs:
            amax = max(amax, F32(abs(v)))
        d32 = F32(amax / L)
        inv = F32(1.0) / d32 if d32 else F32(0.0)
        word = 0
        for i, v in enumerate(xs):
            c = math.floor(F32(F32(v * inv) + F32(1 << (n - 1))))
            c = min(max(c, 0), (1 << n) - 1)
            word |= c << (n * i)
        out_c.append(np.frombuffer(word.to_bytes(2 * n, "little"), np.uint8))
        out_d.append(np.float16(d32))
    return np.stack(out_c), np.array(out_d, np.float16)


def bf16_ref_bits(x):
    """Round to nearest even on the float32 bit pattern (finite inputs)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


# ---- error bounds (per element) -------------------------------------------------------------
def group_d32(x, size, levels):
    """float32 d32 = amax / levels per group, broadcast back to elements, and the float16 d."""
    xg = x.reshape(x.shape[:-1] + (-1, size))
    d32 = np.abs(xg).max(-1) / F32(levels)
    d = d32.astype(np.float16).astype(np.float64)
    rep = lambda a: np.repeat(a, size, axis=-1)
    return rep(d32.astype(np.float64)), rep(d)


def q8_bound(x):
    # |x - q d| <= |x - q d32| + |q| |d32 - d|. roundf makes |x/d32 - q| <= 1/2 up to the float32
    # product x * fl(1/d32) (relative ~2**-23 on |x/d32| <= 127, i.e. < 2**-15 absolute), and
    # |q| <= 127: bound d32 (1/2 + 2**-15) + 127 |d32 - d|.
    d32, d = group_d32(x, 32, 127)
    return d32 * (0.5 + 2.0**-15) + 127 * np.abs(d32 - d)


def turbo_bound(x, n):
    # Mid-rise uniform quantizer, L = (2^n - 1)/2, u = x/d32 in [-L, L]: c = floor(u + 2^(n-1))
    # puts u in [c - L - 1/2, c - L + 1/2), so |u - level| <= 1/2, and since
    # u + 2^(n-1) <= 2^n - 1/2
    # the clamp at the top code (and at 0) never binds in exact arithmetic; the float32
    # evaluation of u + 2^(n-1) (< 2^n <= 256, ulp <= 2^-16, plus the product's rounding) can
    # move a value sitting within ~2^-15 of a bin edge into the neighbour bin, adding < 2^-14.
    # Replacing d32 by float16 d moves a level by |c - L| |d32 - d| <= L |d32 - d|.
    L = ((1 << n) - 1) / 2
    d32, d = group_d32(x, 16, L)
    return d32 * (0.5 + 2.0**-14) + L * np.abs(d32 - d)


# ---- q8 -------------------------------------------------------------------------------------
def q8_test_rows(rng):
    """Groups of 32: random, outlier, all-zero, negative-only, exact .5 ties, float16-subnormal
    scales."""
    g = rng.standard_normal((9, 32)).astype(F32)
    g[1, 7] = 1e4  # outlier: everything else rounds to ~0
    g[2] = 0.0  # all-zero group: d = 0, q = 0
    g[3] = -np.abs(g[3]) * 3  # negative values only
    # ties: amax = 15.875 gives d32 = 1/8 exactly, id = 8, so x = (k + 1/2)/8 lands on k + 1/2
    k = np.arange(15, dtype=F32)
    g[4, :15] = (k + F32(0.5)) / F32(8)
    g[4, 15:30] = -(k + F32(0.5)) / F32(8)
    g[4, 30] = F32(15.875)
    g[4, 31] = np.nextafter(F32(0.5), F32(0)) / F32(8)  # 0.49999997 -> 0 (naive v+0.5 gives 1)
    g[5] *= F32(1e-5)  # d32 ~ 1e-7: float16 subnormal scale
    g[6] *= F32(3e-7)  # d32 ~ 7e-9: float16 scale rounds to 0
    g[7] = rng.uniform(-1, 1, 32).astype(F32) * 1e3
    g[8, ::2] *= -50  # mixed-sign outliers
    return g.reshape(3, 96)  # rows of 3 groups


def test_q8_bit_exact_vs_llama_reference(rng):
    x = q8_test_rows(rng)
    q, d = q8_quantize(x)
    assert q.dtype == np.int8 and d.dtype == np.float16
    assert q.shape == (3, 96) and d.shape == (3, 3)
    for r in range(3):
        qr, dr = q8_ref_row(x[r])
        assert np.array_equal(q[r], qr), r
        assert np.array_equal(d[r].view(np.uint16), dr.view(np.uint16)), r
    # the input is meaningful: group 4 has exact ties, where half-to-even rounding differs
    v = x.reshape(9, 32)[4] * F32(8)
    assert np.sum(v - np.floor(v) == 0.5) == 30
    assert np.any(np.round(v) != q.reshape(9, 32)[4])
    assert q.reshape(9, 32)[4, 31] == 0 and q.reshape(9, 32)[4, 0] == 1
    assert np.all(q.reshape(9, 32)[2] == 0) and d.reshape(9)[2] == 0
    assert d.reshape(9)[6] == 0 and d.reshape(9)[5] != 0  # the subnormal cases happen


def test_q8_random_leading_axes_vs_reference(rng):
    x = (rng.standard_normal((2, 3, 64)) * rng.lognormal(0, 3, (2, 3, 1))).astype(F32)
    q, d = q8_quantize(x)
    assert q.shape == x.shape and d.shape == (2, 3, 2)
    for idx in np.ndindex(2, 3):
        qr, dr = q8_ref_row(x[idx])
        assert np.array_equal(q[idx], qr) and np.array_equal(d[idx], dr)


def test_q8_error_bound_and_dequant(rng):
    x = np.concatenate(
        [q8_test_rows(rng).reshape(-1, 32), rng.standard_normal((39, 32)).astype(F32) * 7]
    ).reshape(-1, 64)
    q, d = q8_quantize(x)
    y = q8_dequantize(q, d)
    assert y.dtype == np.float32 and y.shape == x.shape
    # int8 x float16 fits float32 exactly: dequant is the exact product
    exact = q.astype(np.float64) * np.repeat(d.astype(np.float64), 32, axis=-1)
    assert np.array_equal(y.astype(np.float64), exact)
    assert np.all(np.abs(q.astype(np.int32)) <= 127)
    err = np.abs(y.astype(np.float64) - x)
    assert np.all(err <= q8_bound(x))
    # the bound is not slack: some element spends most of its half step
    d32, _ = group_d32(x, 32, 127)
    assert np.max(err / np.where(d32 > 0, d32, 1)) > 0.45


def test_q8_bad_inputs():
    with pytest.raises(ValueError, match="x"):
        q8_quantize(np.ones((2, 48), F32))
    with pytest.raises(TypeError, match="x"):
        q8_quantize(np.ones((2, 32), np.int32))
    q, d = q8_quantize(np.ones((2, 64), F32))
    with pytest.raises(TypeError, match="q"):
        q8_dequantize(q.astype(np.int16), d)
    with pytest.raises(TypeError, match="d"):
        q8_dequantize(q, d.astype(F32))
    with pytest.raises(ValueError, match="d"):
        q8_dequantize(q, d[:, :1])
    with pytest.raises(ValueError, match="q"):
        q8_dequantize(q[:, :40], d)


# ---- turbo-n --------------------------------------------------------------------------------
@pytest.mark.parametrize("bits", range(1, 9))
def test_turbo_pack_roundtrip_and_layout(rng, bits):
    c = rng.integers(0, 1 << bits, (7, 3, 16), dtype=np.uint8)
    c[0] = (1 << bits) - 1  # all-ones group
    c[1] = 0
    p = turbo_pack(c, bits)
    assert p.dtype == np.uint8 and p.shape == (7, 3, 2 * bits)
    for idx in np.ndindex(7, 3):  # code i at bits [n i, n i + n), LE
        word = sum(int(v) << (bits * i) for i, v in enumerate(c[idx]))
        assert p[idx].tobytes() == word.to_bytes(2 * bits, "little")
    u = turbo_unpack(p, bits)
    assert u.dtype == np.uint8 and np.array_equal(u, c)


def test_turbo_pack_bad_inputs():
    with pytest.raises(ValueError, match="c"):
        turbo_pack(np.full(16, 8, np.uint8), 3)  # 8 does not fit in 3 bits
    with pytest.raises(ValueError, match="c"):
        turbo_pack(np.zeros(15, np.uint8), 3)
    with pytest.raises(TypeError, match="c"):
        turbo_pack(np.zeros(16, F32), 3)
    with pytest.raises(ValueError, match="bits"):
        turbo_pack(np.zeros(16, np.uint8), 9)
    with pytest.raises(ValueError, match="packed"):
        turbo_unpack(np.zeros(7, np.uint8), 4)
    with pytest.raises(TypeError, match="packed"):
        turbo_unpack(np.zeros(8, np.int8), 4)


def turbo_test_rows(rng):
    g = rng.standard_normal((8, 16)).astype(F32)
    g[1, 3] = 500.0  # outlier
    g[2] = 0.0  # all-zero group -> code 2^(n-1), d = 0
    g[3] = -np.abs(g[3])
    g[4] *= F32(1e-6)  # float16-subnormal scale
    g[5, :8] = g[5, :8] * 0 + 2.0  # repeated values at +-amax
    g[5, 8:] = -2.0
    return g.reshape(2, 64)


@pytest.mark.parametrize("bits", [8, 4, 3, 2])
def test_turbo_quantize_bit_exact_vs_reference(rng, bits):
    x = np.concatenate([turbo_test_rows(rng), rng.standard_normal((3, 64)).astype(F32) * 4])
    codes, d = turbo_quantize(x, bits)
    assert codes.dtype == np.uint8 and codes.shape == (5, 4, 2 * bits)
    assert d.dtype == np.float16 and d.shape == (5, 4)
    for r in range(5):
        cr, dr = turbo_ref_row(x[r], bits)
        assert np.array_equal(codes[r], cr), r
        assert np.array_equal(d[r], dr), r
    c = turbo_unpack(codes, bits)  # [5, 4, 16]
    assert c.max() == (1 << bits) - 1 and c.min() == 0  # full code range used
    assert np.all(c[0, 2] == 1 << (bits - 1)) and d[0, 2] == 0
    assert np.all(c[1, 1, :8] == (1 << bits) - 1) and np.all(c[1, 1, 8:] == 0)  # +-amax


@pytest.mark.parametrize("bits", [8, 4, 3, 2])
def test_turbo_error_bound(rng, bits):
    x = np.concatenate(
        [turbo_test_rows(rng).reshape(-1, 64), (rng.standard_normal((30, 64)) * 3).astype(F32)]
    )
    codes, d = turbo_quantize(x, bits)
    y = turbo_dequantize(codes, d, bits)
    assert y.dtype == np.float32 and y.shape == x.shape
    L = ((1 << bits) - 1) / 2
    # dequant is exact: (c - L) has <= 9 significant bits, d 11
    exact = (turbo_unpack(codes, bits).astype(np.float64) - L) * d.astype(np.float64)[..., None]
    assert np.array_equal(y.astype(np.float64), exact.reshape(x.shape))
    err = np.abs(y.astype(np.float64) - x)
    assert np.all(err <= turbo_bound(x, bits))
    d32, _ = group_d32(x, 16, L)
    assert np.max(err / np.where(d32 > 0, d32, 1)) > 0.4  # the half step is reached


def test_turbo_bad_inputs():
    with pytest.raises(ValueError, match="x"):
        turbo_quantize(np.ones((2, 24), F32), 4)
    with pytest.raises(ValueError, match="bits"):
        turbo_quantize(np.ones((2, 32), F32), 0)
    codes, d = turbo_quantize(np.ones((2, 32), F32), 4)
    with pytest.raises(ValueError, match="d"):
        turbo_dequantize(codes, d[:, :1], 4)
    with pytest.raises(TypeError, match="d"):
        turbo_dequantize(codes, d.astype(F32), 4)
    with pytest.raises(ValueError, match="packed"):
        turbo_dequantize(codes, d, 3)  # 8 bytes per group is 4-bit


def outlier_keys(rng, t, hd):
    k = rng.standard_normal((t, hd)).astype(F32)
    k[:, [5, hd // 2 + 13]] *= 30.0  # two massive channels
    return k


def test_wht_rotation_tames_outlier_channels(rng):
    k = outlier_keys(rng, 64, 128)
    r = wht(k)
    crest = lambda a: np.abs(a).max(-1) / np.sqrt(np.mean(a.astype(np.float64) ** 2, -1))
    assert np.median(crest(k)) > 2.5 * np.median(crest(r))  # ~8 before, ~2.5-3 after
    assert np.abs(r).max() < 0.5 * np.abs(k).max()
    for bits in (4, 3, 2):
        plain = turbo_dequantize(*turbo_quantize(k, bits), bits)
        rot = wht(turbo_dequantize(*turbo_quantize(r, bits), bits), inverse=True)
        mse = lambda a: np.mean((a.astype(np.float64) - k) ** 2)
        assert mse(rot) < 0.5 * mse(plain), bits


# ---- bf16 -----------------------------------------------------------------------------------
def test_bf16_bits_round_to_nearest_even(rng):
    x = (rng.standard_normal(2000) * np.exp(rng.uniform(-80, 80, 2000))).astype(F32)
    # upper halves below 0x7F7F: every tie pattern built on them rounds to a finite bf16
    hi = rng.integers(0, 0x7F7F, 200, dtype=np.uint32) << 16
    ties = np.concatenate([hi | 0x8000, hi | 0x18000, hi | 0x7FFF, hi | 0x8001]).view(F32)
    # the largest finite values that still round to a finite bf16 (3.3961e38 and up round
    # to +-inf, which bf16_bits refuses, as it refuses NaN and +-inf)
    top = np.uint32(0x7F7F7FFF).view(F32)
    special = np.array([0.0, -0.0, 1.0, -1.0, 3.38e38, -3.38e38, 1e-40, -1e-45, top, -top], F32)
    x = np.concatenate([x, ties, special])
    b = bf16_bits(x)
    assert b.dtype == np.uint16 and b.shape == x.shape
    assert np.array_equal(b, bf16_ref_bits(x))
    assert np.array_equal(bf16_round(x), bf16_from_bits(b))
    # half-way patterns really went both ways (up from odd, down to even)
    assert np.any(bf16_bits((hi | 0x8000).view(F32)) == (hi >> 16).astype(np.uint16))
    assert np.any(bf16_bits((hi | 0x8000).view(F32)) == (hi >> 16).astype(np.uint16) + 1)
    assert np.isfinite(bf16_round(special)).all()
    to_inf = np.uint32(0x7F7F8000).view(F32)  # half-way to inf: ties up
    for bad in (np.nan, np.inf, -np.inf, np.finfo(F32).max, to_inf, -to_inf):
        with pytest.raises(ValueError, match="^x"):
            bf16_bits(np.array([1.0, bad], F32))


def test_bf16_from_bits_all_patterns():
    b = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    special = (b & 0x7F80) == 0x7F80  # +-inf and the NaNs
    assert special.sum() == 2 * 128
    f = bf16_from_bits(b[~special])
    assert f.dtype == np.float32 and np.isfinite(f).all()
    assert np.array_equal(f.view(np.uint32), b[~special].astype(np.uint32) << 16)
    assert np.array_equal(bf16_bits(f), b[~special])  # exact round trip
    for pattern in (0x7F80, 0xFF80, 0x7FC0, 0xFFA1):
        with pytest.raises(ValueError, match="^b"):
            bf16_from_bits(np.array([0x3F80, pattern], np.uint16))
    with pytest.raises(TypeError, match="b"):
        bf16_from_bits(np.zeros(4, np.int16))


# ---- KVCache --------------------------------------------------------------------------------
def bits_per_value(side, hd):
    """Storage cost per value, scales included: q8 8 + 16/32, turboN N + 16/16, tqB B + 16/hd."""
    if side.startswith("tq"):
        return int(side[2:]) + 16 / hd
    return {"f32": 32, "bf16": 16, "q8": 8.5}.get(side) or int(side[5:]) + 1


def expected_layout(side, nkv, max_t, hd):
    if side == "f32":
        return {"data": (np.float32, (nkv, max_t, hd))}
    if side == "bf16":
        return {"data": (np.uint16, (nkv, max_t, hd))}
    if side == "q8":
        return {"q": (np.int8, (nkv, max_t, hd)), "d": (np.float16, (nkv, max_t, hd // 32))}
    if side.startswith("tq"):
        b = int(side[2:])
        return {"codes": (np.uint8, (nkv, max_t, hd * b // 8)), "gamma": (np.float16, (nkv, max_t))}
    n = int(side[5:])
    return {
        "codes": (np.uint8, (nkv, max_t, hd // 16, 2 * n)),
        "d": (np.float16, (nkv, max_t, hd // 16)),
    }


def side_check(side, got, x):
    """got [nkv, T, hd] as returned by keys()/values(); x the appended float32 [T, nkv, hd]."""
    xh = x.transpose(1, 0, 2)  # [nkv, T, hd] head-major
    if side == "f32":
        assert np.array_equal(got, xh)
    elif side == "bf16":
        assert np.array_equal(got.view(np.uint32) >> 16, bf16_ref_bits(xh).astype(np.uint32))
    elif side == "q8":
        assert np.all(np.abs(got.astype(np.float64) - xh) <= q8_bound(xh))
    elif side.startswith("tq"):
        b, s = int(side[2:]), tq_signs(xh.shape[-1])
        r = wht(xh * s)  # stored in the rotated domain, signs flipped first
        assert np.array_equal(got, tq_dequantize(*tq_quantize(r, b), b))  # the format's functions
        # γ is the least-squares scale, so a row's error is never larger than the row (float16
        # rounding of γ keeps that: ‖r − γ(1+δ)C‖² = ‖r‖² − (1 − δ²)⟨r,C⟩²/‖C‖²), and back in
        # the original domain, s ⊙ wht(got), it keeps its norm (2**-22 of the row for rounding)
        err = np.linalg.norm(got.astype(np.float64) - r, axis=-1)
        slack = 2.0**-22 * np.linalg.norm(xh, axis=-1)
        assert np.all(err <= np.linalg.norm(r, axis=-1) + slack)
        back = (wht(got) * s).astype(np.float64)
        assert np.all(np.abs(np.linalg.norm(back - xh, axis=-1) - err) <= 2 * slack)
    else:
        n = int(side[5:])
        r = wht(xh)  # stored in the rotated domain
        b = turbo_bound(r, n)
        assert np.all(np.abs(got.astype(np.float64) - r) <= b)
        # back in the original domain the error vector keeps its norm (H orthonormal); allow
        # float32 rounding of the two transforms (2**-22 of the row norm)
        back = wht(got, inverse=True).astype(np.float64)
        row_err = np.linalg.norm(back - xh, axis=-1)
        slack = 2.0**-22 * np.linalg.norm(xh, axis=-1)
        assert np.all(row_err <= np.linalg.norm(b, axis=-1) + slack)


@pytest.mark.parametrize("kind", CACHE_KINDS)
def test_kvcache_round_trip(rng, tiny_cfg, kind):
    cfg = tiny_cfg
    nkv, hd, ihd, R = cfg.nkv, cfg.head_dim, cfg.indexer_head_dim, cfg.indexer_compress_ratio
    max_t = 21  # not a multiple of R
    cache = KVCache(cfg, max_t=max_t, kind=kind)
    k_side, v_side = ("bf16", kind[6:-1]) if kind.startswith("bf16k-") else (kind, kind)
    assert (cache.k_kind, cache.v_kind) == (k_side, v_side)
    assert cache.k_rotated == k_side.startswith(("turbo", "tq"))
    assert cache.v_rotated == v_side.startswith(("turbo", "tq"))
    for store, side in ((cache.k_store, k_side), (cache.v_store, v_side)):
        want = expected_layout(side, nkv, max_t, hd)
        assert set(store) == set(want)
        for name, (dt, shape) in want.items():
            assert store[name].dtype == dt and store[name].shape == shape, (side, name)
    assert cache.idx_keys.shape == (max_t, ihd) and cache.idx_keys.dtype == np.float32
    assert cache.blk_keys.shape == (max_t // R, ihd) and not cache.blk_keys.any()
    assert (
        cache.nbytes_per_token()
        == nkv * hd * (bits_per_value(k_side, hd) + bits_per_value(v_side, hd)) / 8
    )

    T = 9
    k = np.stack([outlier_keys(rng, nkv, hd) for _ in range(T)])  # [T, nkv, hd]
    v = (rng.standard_normal((T, nkv, hd)) * 2).astype(F32)
    v[:, 1, 7] = 40.0
    ik = rng.standard_normal((T, ihd)).astype(F32)
    assert len(cache) == 0
    for a, b in ((0, 3), (3, 8), (8, 9)):  # appends at offsets
        cache.append(k[a:b], v[a:b], index_k=ik[a:b])
        assert len(cache) == b
    keys, vals = cache.keys(), cache.values()
    assert keys.shape == vals.shape == (nkv, T, hd) and keys.dtype == vals.dtype == np.float32
    side_check(k_side, keys, k)
    side_check(v_side, vals, v)
    assert np.array_equal(cache.idx_keys[:T], ik) and not cache.idx_keys[T:].any()
    assert np.array_equal(cache.keys(4), keys[:, :4]) and cache.values(0).shape == (nkv, 0, hd)
    # one append of all rows stores the same bits (quantization is per token, head-major)
    one = KVCache(cfg, max_t=max_t, kind=kind)
    one.append(k, v, index_k=ik)
    for s1, s2 in ((cache.k_store, one.k_store), (cache.v_store, one.v_store)):
        for name in s1:
            assert np.array_equal(s1[name], s2[name])
    # unused slots stay zero
    for store in (cache.k_store, cache.v_store):
        assert all(not a[:, T:].any() for a in store.values())


def test_kvcache_copy_is_independent(rng, tiny_cfg):
    cache = KVCache(tiny_cfg, max_t=16, kind="q8")
    k = rng.standard_normal((2, 2, 64)).astype(F32)
    cache.append(k, k, index_k=np.ones((2, 32), F32))
    c2 = cache.copy()
    c2.append(k, k, index_k=np.ones((2, 32), F32))
    c2.blk_keys[0] = 1.0
    assert len(cache) == 2 and len(c2) == 4
    assert not cache.k_store["q"][:, 2:].any() and not cache.blk_keys.any()
    assert np.array_equal(c2.keys(2), cache.keys())


def test_kvcache_without_indexer(rng, tiny_cfg):
    cfg = tiny_cfg.replace(
        indexer_n_heads=0, indexer_head_dim=0, indexer_compress_ratio=0, indexer_budget=0
    )
    cache = KVCache(cfg, max_t=8, kind="turbo3")
    assert cache.idx_keys is None and cache.blk_keys is None
    k = rng.standard_normal((3, 2, 64)).astype(F32)
    cache.append(k, k)
    with pytest.raises(ValueError, match="index_k"):
        cache.append(k, k, index_k=np.zeros((3, 32), F32))


def test_kvcache_bad_inputs(tiny_cfg):
    cfg = tiny_cfg
    with pytest.raises(ValueError, match="kind"):
        KVCache(cfg, 8, kind="q4")
    with pytest.raises(ValueError, match="max_t"):
        KVCache(cfg, 0)
    with pytest.raises(TypeError, match="cfg"):
        KVCache({"head_dim": 64}, 8)
    with pytest.raises(ValueError, match="head_dim"):
        KVCache(cfg.replace(head_dim=48), 8, kind="q8")  # 48 % 32
    with pytest.raises(ValueError, match="head_dim"):
        KVCache(cfg.replace(head_dim=48), 8, kind="turbo4")  # not a power of two
    with pytest.raises(ValueError, match="head_dim"):
        KVCache(cfg.replace(head_dim=40), 8, kind="bf16k-turbo2v")
    KVCache(cfg.replace(head_dim=48), 8, kind="bf16")  # fine for unquantized kinds

    cache = KVCache(cfg, max_t=5, kind="turbo4")
    k = np.zeros((3, 2, 64), F32)
    ik = np.zeros((3, 32), F32)
    with pytest.raises(TypeError, match="k"):
        cache.append(k.astype(np.float64), k, index_k=ik)
    with pytest.raises(TypeError, match="v"):
        cache.append(k, k.astype(np.float16), index_k=ik)
    with pytest.raises(ValueError, match="k"):
        cache.append(k[:, :1], k[:, :1], index_k=ik)
    with pytest.raises(ValueError, match="v"):
        cache.append(k, k[:2], index_k=ik)
    with pytest.raises(ValueError, match="index_k"):
        cache.append(k, k)
    with pytest.raises(ValueError, match="index_k"):
        cache.append(k, k, index_k=ik[:2])
    with pytest.raises(TypeError, match="index_k"):
        cache.append(k, k, index_k=ik.astype(np.float64))
    cache.append(k, k, index_k=ik)
    with pytest.raises(ValueError, match="max_t"):
        cache.append(k, k, index_k=ik)  # 3 + 3 > 5
    assert len(cache) == 3  # a refused append changes nothing
    with pytest.raises(ValueError, match="t_len"):
        cache.keys(4)
    with pytest.raises(ValueError, match="t_len"):
        cache.values(-1)
